// `herd status`: connects to a running scheduler as a client and prints its snapshot: workers
// (host, job, pool, busy slots, memory, resources, time left), tasks by state and function,
// throughput, pools and their jobs with pending reasons. `--json` for scripts.
#include <iostream>

#include "cli/commands.hpp"
#include "cli/connect.hpp"
#include "herd/client.hpp"
#include "herd/error.hpp"

namespace herd::detail {

int status_main(const std::vector<std::string>& args) {
  CLI::App app{"herd status: what a running scheduler sees"};
  app.name("herd status");
  SchedulerArgs scheduler(app);
  bool json = false;
  int events = 0;
  app.add_flag("--json", json, "one JSON object instead of tables");
  app.add_option("--events", events, "include this many of the newest task runs (JSON only)")
      ->check(CLI::NonNegativeNumber);
  if (const int rc = scheduler.parse(app, args); rc >= 0) return rc;
  try {
    Client client = scheduler.connect("herd-status");
    const ClusterStatus status = client.status(events);
    std::cout << (json ? status.to_json() + "\n" : status.to_text()) << std::flush;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "herd status: " << e.what() << "\n";
    return 1;
  }
}

int explain_main(const std::vector<std::string>& args) {
  CLI::App app{"herd explain: why a task is not running (its inputs, each worker's and each pool's reason)"};
  app.name("herd explain");
  SchedulerArgs scheduler(app);
  std::string key;
  app.add_option("key", key, "the task's key (TaskOptions::key, or the key its future shows)")->required();
  if (const int rc = scheduler.parse(app, args); rc >= 0) return rc;
  try {
    Client client = scheduler.connect("herd-explain");
    const TaskExplanation e = client.explain(key);
    std::cout << e.to_text() << std::flush;
    return e.found ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "herd explain: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace herd::detail
