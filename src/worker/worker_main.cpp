// `herd worker`: parses options and runs a worker until the scheduler lets it go.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>

#include "worker/worker_main.hpp"
#include "common/util.hpp"
#include "common/logging.hpp"
#include "common/security.hpp"
#include "task/log_capture.hpp"
#include "worker/worker.hpp"
#include "common/env.hpp"

namespace herd::detail {

int worker_main(const std::vector<std::string>& args) {
  CLI::App app{"herd worker: runs tasks for a herd scheduler"};
  app.name("herd worker");
  worker::WorkerOptions options;
  std::vector<std::string> resources;
  app.add_option("--scheduler", options.scheduler, "scheduler address, e.g. tcp://login1:8786")
      ->required();
  app.add_option("--nthreads", options.nthreads, "task slots (threads)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--cpus", options.cpus,
                 "cores it offers (the resource cpus; default: its allocation: Slurm's cores and cgroup "
                 "cpuset on this node, else its affinity mask); tasks that ask for cpus are pinned to "
                 "cores of its mask")
      ->check(CLI::PositiveNumber);
  app.add_option("--name", options.name, "worker name (default: host:pid)");
  app.add_option("--resources", resources, "custom resources it offers, e.g. gpu=2 (repeatable)")
      ->delimiter(',');
  app.add_option("--load", options.load, "task library to load (repeatable)")->check(CLI::ExistingFile);
  std::string memory_limit;
  app.add_option("--memory-limit", memory_limit,
                 "resident memory at which the running task fails and the worker leaves, e.g. 4G "
                 "(default: 95% of Slurm's job memory, else none), and the memory it offers (the resource "
                 "memory, in MiB; default: its allocation's: Slurm's, the cgroup's memory.max, the machine's); results spill to disk past "
                 "HERD_MEMORY_TARGET_PERCENT / HERD_MEMORY_SPILL_PERCENT of it, new tasks pause past "
                 "HERD_MEMORY_PAUSE_PERCENT");
  if (const char* d = env::get(env::Var::local_directory)) options.local_directory = d;
  app.add_option("--local-directory", options.local_directory,
                 "where results spill to disk, in a private directory removed when the worker leaves "
                 "(default: $HERD_LOCAL_DIRECTORY, else $SLURM_TMPDIR, else $TMPDIR or /tmp)");
  if (const char* h = env::get(env::Var::listen_host)) options.listen_host = h;
  app.add_option("--listen-host", options.listen_host,
                 "address (or interface name) its listeners bind and advertise (default: "
                 "$HERD_LISTEN_HOST, else the address of the interface that routes to the scheduler; "
                 "required with HERD_AUTH=off)");
  app.add_option("--interface", options.interface,
                 "network interface its listeners (data port, gang ring, NCCL) bind, e.g. ib0 or eth0");
  app.footer("Environment:\n" + Config::describe());
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
    for (const auto& r : resources) {
      const auto eq = r.find('=');
      if (eq == std::string::npos || eq == 0) throw CLI::ValidationError("--resources", "expected NAME=AMOUNT, got '" + r + "'");
      try {
        options.resources[r.substr(0, eq)] = std::stod(r.substr(eq + 1));
      } catch (const std::exception&) {
        throw CLI::ValidationError("--resources", "amount in '" + r + "' is not a number");
      }
    }
    if (!memory_limit.empty()) {
      std::size_t used = 0;
      double v = 0;
      try {
        v = std::stod(memory_limit, &used);
      } catch (const std::exception&) {
        throw CLI::ValidationError("--memory-limit", "'" + memory_limit + "' is not a size like 4G or 512M");
      }
      const std::string unit = memory_limit.substr(used);
      const double scale = unit.empty() || unit == "B" ? 1 : unit == "K" ? 1024.0 : unit == "M" ? 1048576.0
                           : unit == "G" ? 1073741824.0 : unit == "T" ? 1099511627776.0 : -1;
      if (scale < 0 || v <= 0) throw CLI::ValidationError("--memory-limit", "'" + memory_limit + "' is not a size like 4G or 512M");
      options.memory_limit = static_cast<std::uint64_t>(v * scale);
    }
  } catch (const CLI::ParseError& e) {
    return util::usage_exit(app.exit(e));
  }
  log::set_process_name("worker " + (options.name.empty() ? std::string("?") : options.name));
  // Keep recent output in memory for `herd logs` (it still goes to stderr / the job's files),
  // herd's info lines included even when stderr shows only warnings.
  {
    task::LogLimits limits;
    limits.worker_bytes = options.config.worker_log_bytes;
    limits.task_bytes = options.config.task_output_bytes;
    limits.tasks = options.config.task_output_tasks;
    task::LogBook::instance().start_capture(limits);
    if (task::LogBook::instance().capturing()) {
      log::set_sink([](const std::string& line) { task::LogBook::instance().log_line(line); }, log::Level::info);
      std::atexit([] { task::LogBook::instance().stop_capture(); });
    }
  }
  ::signal(SIGPIPE, SIG_IGN);
  // TERM (scancel, preemption, end of walltime), INT and USR2 (a common --signal choice)
  // start a drain; a second one makes the worker leave at once. USR1 is left to NCCL.
  struct sigaction sa {};
  sa.sa_handler = [](int) { worker::Worker::request_drain(); };
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGUSR2, &sa, nullptr);
  try {
    security::check_auth_off("herd worker", options.listen_host,
                             "herd worker --listen-host ADDRESS, or HERD_LISTEN_HOST in the worker's environment");
    return worker::run_worker(std::move(options));
  } catch (const std::exception& e) {
    task::LogBook::instance().stop_capture();
    std::cerr << "herd worker: " << e.what() << std::endl;
    return 1;
  }
}

}  // namespace herd::detail
