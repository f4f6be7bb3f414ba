// The `herd` command: `herd scheduler ...`, `herd worker ...`.
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "protocol/messages.hpp"
#include "scheduler/scheduler_main.hpp"
#include "worker/worker_main.hpp"
#include "herd/herd.hpp"

namespace {
const char* kUsage =
    "usage: herd <command> [options]\n"
    "\n"
    "commands:\n"
    "  scheduler   run a scheduler (herd scheduler --help)\n"
    "  worker      run a worker    (herd worker --help)\n"
    "  jobscript   print the batch script a configuration's pools submit\n"
    "              (herd jobscript --config cluster.toml [--pool NAME] [--scheduler ADDR])\n"
    "  sweep       run a command or task over a parameter grid or random sample\n"
    "              (herd sweep --grid lr=0.1,0.01 --metric loss -- python train.py --lr {lr})\n"
    "  submit      run a command, or an array of it, as a job (herd submit --array 1-100 -- ./sim.sh;\n"
    "              --each-line FILE, --file job.toml, --cpus, --time-limit, --after JOB, --wait; herd submit --help)\n"
    "  jobs        list the jobs (and the detached campaigns of C++ clients)\n"
    "  job         herd job info|wait|progress|cancel|output|resubmit ID (herd job --help)\n"
    "  status      show a running scheduler's workers, tasks, pools and jobs\n"
    "              (herd status --scheduler tcp://host:port [--json])\n"
    "  explain     why a task is not running (herd explain KEY --scheduler tcp://host:port)\n"
    "  logs        a worker's log, a job's output file or a task's output\n"
    "              (herd logs [WORKER|JOB|TASK] --scheduler tcp://host:port [-n LINES])\n"
    "  pools       a running scheduler's pools: size, workers, jobs, paused, kept for data\n"
    "              (herd pools --scheduler tcp://host:port)\n"
    "  scale       size a pool: herd scale POOL N | herd scale POOL --cores C | --memory M | --jobs J\n"
    "  adapt       let a pool follow the backlog: herd adapt POOL --min A --max B [--idle-timeout S]\n"
    "  pool        herd pool pause POOL (no job submitted; its workers stay) | herd pool resume POOL\n"
    "  worker retire\n"
    "              herd worker retire NAME: the worker drains its tasks, hands on its results, leaves\n"
    "  report      a whole run on one page, or as a Chrome trace, from the scheduler's run record\n"
    "              (herd report --scheduler tcp://host:port [--since 2h] -o run.html [--format trace])\n"
    "  config      every HERD_* variable, its value here and where it came from\n"
    "              (herd config [--internal] [--markdown])\n"
    "  version     print herd's version and the wire protocol version it speaks (also --version)\n";
}

#ifndef HERD_VERSION
#error "HERD_VERSION (the project's version) is set by CMakeLists.txt"
#endif

int main(int argc, char** argv) {
  herd::init(argc, argv);  // the CLI can be a LocalCluster's worker executable too
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "scheduler") return herd::detail::scheduler_main(args);
  if (command == "worker" && !args.empty() && args.front() == "retire") {
    return herd::detail::worker_retire_main(std::vector<std::string>(args.begin() + 1, args.end()));
  }
  if (command == "worker") return herd::detail::worker_main(args);
  if (command == "pools") return herd::detail::pools_main(args);
  if (command == "scale") return herd::detail::scale_main(args);
  if (command == "adapt") return herd::detail::adapt_main(args);
  if (command == "pool") return herd::detail::pool_main(args);
  if (command == "jobscript") return herd::detail::jobscript_main(args);
  if (command == "sweep") return herd::detail::sweep_main(args);
  if (command == "status") return herd::detail::status_main(args);
  if (command == "submit") return herd::detail::submit_main(args);
  if (command == "jobs") return herd::detail::jobs_main(args);
  if (command == "job") return herd::detail::job_main(args);
  if (command == "logs") return herd::detail::logs_main(args);
  if (command == "report") return herd::detail::report_main(args);
  if (command == "explain") return herd::detail::explain_main(args);
  if (command == "config") return herd::detail::config_main(args);
  if (command == "version" || command == "--version") {
    // Clients, schedulers and workers talk only when their wire protocol versions match.
    std::cout << "herd " << HERD_VERSION << " (wire protocol " << static_cast<int>(herd::protocol::kProtocolVersion)
              << ")\n";
    return 0;
  }
  std::cerr << "herd: unknown command '" << command << "'\n" << kUsage;
  return 2;
}
