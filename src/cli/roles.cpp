// The roles a re-executed program can take (HERD_ROLE): registered with common/roles.hpp when
// the library loads, so that the client library can enter a role without including the
// scheduler or the worker.
#include <iostream>

#include "common/roles.hpp"
#include "scheduler/scheduler_main.hpp"
#include "worker/worker_main.hpp"

namespace herd::detail {
namespace {

int run_role(const std::string& role, const std::vector<std::string>& args) {
  if (role == "scheduler") return scheduler_main(args);
  if (role == "worker") return worker_main(args);
  std::cerr << "herd: unknown HERD_ROLE '" << role << "' (expected scheduler or worker)\n";
  return 2;
}

[[maybe_unused]] const bool registered = (set_role_entry(&run_role), true);

}  // namespace
}  // namespace herd::detail
