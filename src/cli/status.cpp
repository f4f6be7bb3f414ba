// `herd status`: connects to a running scheduler as a client and prints its snapshot: workers
// (host, job, pool, busy slots, memory, resources, time left), tasks by state and function,
// throughput, pools and their jobs with pending reasons. `--json` for scripts.
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>

#include "api/runtime.hpp"
#include "herd/client.hpp"
#include "herd/error.hpp"

namespace herd::detail {

int status_main(const std::vector<std::string>& args) {
  CLI::App app{"herd status: what a running scheduler sees"};
  app.name("herd status");
  std::string address;
  if (const char* env = std::getenv("HERD_SCHEDULER")) address = env;
  bool json = false;
  int events = 0;
  double timeout_s = 10;
  app.add_option("--scheduler,-s", address, "scheduler address, e.g. tcp://login1:8786 (default: $HERD_SCHEDULER)");
  app.add_flag("--json", json, "one JSON object instead of tables");
  app.add_option("--events", events, "include this many of the newest task runs (JSON only)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--timeout", timeout_s, "seconds to wait for the scheduler")->capture_default_str();
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (address.empty()) {
    std::cerr << "herd status: no scheduler address (--scheduler or $HERD_SCHEDULER)\n";
    return 2;
  }
  try {
    ClientOptions options;
    options.connect_timeout = std::chrono::milliseconds(static_cast<long>(timeout_s * 1000));
    options.name = "herd-status";
    Client client(address, options);
    const ClusterStatus status = client.status(events);
    std::cout << (json ? status.to_json() + "\n" : status.to_text()) << std::flush;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "herd status: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace herd::detail
