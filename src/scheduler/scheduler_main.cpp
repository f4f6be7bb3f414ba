// `herd scheduler`: parses options, binds, starts the local worker pool if asked, runs.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <iostream>

#include "api/runtime.hpp"
#include "common/logging.hpp"
#include "common/process.hpp"
#include "jobqueue/local_process_job_queue.hpp"
#include "scheduler/scheduler.hpp"

namespace herd::detail {

int scheduler_main(const std::vector<std::string>& args) {
  CLI::App app{"herd scheduler: places tasks on workers and sizes the worker pool"};
  app.name("herd scheduler");
  scheduler::SchedulerOptions options;
  int ready_fd = -1;
  int local_workers = 0;
  int nthreads = 1;
  std::string worker_exe;
  std::vector<std::string> worker_args;
  std::string log_dir;
  app.add_option("--listen", options.listen,
                 "ZeroMQ endpoint to bind, e.g. tcp://0.0.0.0:8786 (default: a free loopback port)")
      ->capture_default_str();
  app.add_option("--local-workers", local_workers, "start this many worker processes here")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--nthreads", nthreads, "task slots per local worker")->check(CLI::PositiveNumber);
  app.add_option("--worker-exe", worker_exe, "executable for local workers (default: herd itself)");
  app.add_option("--worker-arg", worker_args, "extra argument for every local worker (repeatable)")
      ->allow_extra_args(false);
  app.add_option("--log-dir", log_dir, "directory for local workers' log files");
  app.add_option("--max-deaths", options.max_deaths,
                 "a task present at this many worker losses fails")->capture_default_str();
  app.add_option("--ready-fd", ready_fd, "write the bound address to this fd (internal)");
  app.add_option("--parent-fd", options.parent_fd, "exit when this fd reaches EOF (internal)");
  app.footer("Environment:\n" + Config::describe());
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  log::set_process_name("scheduler");
  ::signal(SIGPIPE, SIG_IGN);
  struct sigaction sa {};
  sa.sa_handler = [](int) { scheduler::Scheduler::request_stop(); };
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  if (options.parent_fd >= 0) ::fcntl(options.parent_fd, F_SETFD, FD_CLOEXEC);  // not for workers

  try {
    scheduler::Scheduler sched(options);
    const std::string address = sched.bind();
    if (ready_fd >= 0) {
      const std::string line = address + "\n";
      (void)!::write(ready_fd, line.data(), line.size());
      ::close(ready_fd);
    } else {
      std::cout << "herd scheduler listening at " << address << std::endl;
    }
    if (local_workers > 0) {
      jobqueue::LocalProcessOptions lp;
      lp.executable = worker_exe.empty() ? process::self_executable() : worker_exe;
      lp.worker_args = {"--scheduler", address, "--nthreads", std::to_string(nthreads)};
      lp.worker_args.insert(lp.worker_args.end(), worker_args.begin(), worker_args.end());
      lp.log_directory = log_dir;
      sched.add_pool(std::make_unique<jobqueue::LocalProcessJobQueue>(lp),
                     static_cast<std::size_t>(local_workers));
    }
    return sched.run();
  } catch (const std::exception& e) {
    std::cerr << "herd scheduler: " << e.what() << std::endl;
    if (ready_fd >= 0) {
      const std::string line = std::string("error: ") + e.what() + "\n";
      (void)!::write(ready_fd, line.data(), line.size());
    }
    return 1;
  }
}

}  // namespace herd::detail
