#include "api/runtime.hpp"

#include <cstdlib>
#include <iostream>

#include "herd/cluster.hpp"

namespace herd {
namespace detail {

TaskInfo& current_task() {
  thread_local TaskInfo info;
  return info;
}

std::string join_role_args(const std::vector<std::string>& args) {
  std::string s;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (i) s += kRoleArgSeparator;
    s += args[i];
  }
  return s;
}

void enter_role_if_requested() {
  const char* role = std::getenv(kRoleEnv);
  if (role == nullptr || *role == '\0') return;
  const std::string r = role;
  std::vector<std::string> args;
  if (const char* a = std::getenv(kRoleArgsEnv); a != nullptr && *a != '\0') {
    // Separated by the unit separator when herd wrote them, by spaces in a job script.
    const std::string s = a;
    const char sep = s.find(kRoleArgSeparator) != std::string::npos ? kRoleArgSeparator : ' ';
    std::string cur;
    for (char c : s) {
      if (c == sep) {
        if (!cur.empty() || sep == kRoleArgSeparator) args.push_back(cur);
        cur.clear();
      } else {
        cur += c;
      }
    }
    if (!cur.empty() || sep == kRoleArgSeparator) args.push_back(cur);
  }
  // Not inherited by what the role starts (shell tasks, nested herd programs).
  ::unsetenv(kRoleEnv);
  ::unsetenv(kRoleArgsEnv);
  int rc = 2;
  if (r == "scheduler") {
    rc = scheduler_main(args);
  } else if (r == "worker") {
    rc = worker_main(args);
  } else {
    std::cerr << "herd: unknown HERD_ROLE '" << r << "' (expected scheduler or worker)\n";
  }
  std::fflush(stdout);
  std::exit(rc);
}

}  // namespace detail

const TaskInfo& this_task() { return detail::current_task(); }

void init(int, char**) { detail::enter_role_if_requested(); }

}  // namespace herd
