// `herd scheduler`: parses options and the configuration file, binds, creates the worker
// pools, runs.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>

#include "scheduler/scheduler_main.hpp"
#include "common/logging.hpp"
#include "common/process.hpp"
#include "common/security.hpp"
#include "common/util.hpp"
#include "jobqueue/local_process_job_queue.hpp"
#include "jobqueue/pool_config.hpp"
#include "jobqueue/slurm_job_queue.hpp"
#include "scheduler/scheduler.hpp"
#include "common/env.hpp"
#include "common/allocation.hpp"

namespace herd::detail {
namespace {

/// "tcp://127.0.0.1:*" -> "127.0.0.1" (what a local worker binds when the scheduler says where).
std::string host_of(const std::string& endpoint) {
  std::string rest = endpoint.substr(endpoint.find("://") == std::string::npos ? 0 : endpoint.find("://") + 3);
  return rest.substr(0, rest.rfind(':'));
}

std::unique_ptr<scheduler::Pool> make_pool(const jobqueue::PoolConfig& pc, const std::string& address,
                                           const std::string& log_dir, const Config& config,
                                           const std::string& listen_host) {
  const SlurmOptions& o = pc.options;
  scheduler::PoolPolicy policy;
  policy.name = o.pool();
  policy.target = static_cast<std::uint32_t>(std::max(0, o.jobs()));
  if (pc.kind == "local" && o.workers_per_job() != 1) {
    throw std::runtime_error("pool '" + o.pool() + "' is local: processes and nodes are for Slurm pools "
                             "(a local pool's jobs are one worker each)");
  }
  policy.slots_per_worker = static_cast<std::uint32_t>(
      o.nthreads() > 0 ? o.nthreads() : std::max(1, o.cores() / std::max(1, o.processes())));
  policy.workers_per_job = static_cast<std::uint32_t>(std::max(1, o.workers_per_job()));
  policy.cores_per_job = static_cast<std::uint32_t>(std::max(1, o.cores() * std::max(1, o.nodes())));
  if (!o.memory().empty()) {
    try {
      policy.memory_per_job = memory_bytes(o.memory()) * std::max(1, o.nodes());
    } catch (const std::invalid_argument&) {
      // Slurm's to judge; scale(memory=) then says the pool's memory is unknown.
    }
  }
  policy.resources = o.resources();
  // Cores and memory: what each of its workers offers on its own (herd worker reads its
  // allocation), so that tasks asking for cpus or memory count on the pool before any worker
  // is up. A local pool's workers see this machine.
  if (pc.kind == "local") {
    const allocation::Allocation here = allocation::discover_allocation();
    policy.resources.try_emplace(allocation::kCpus, here.cpus);
    if (here.memory > 0) policy.resources.try_emplace(allocation::kMemory, allocation::memory_resource(here.memory));
  } else {
    policy.resources.try_emplace(allocation::kCpus, std::max(1, o.cores() / std::max(1, o.processes())));
    if (policy.memory_per_job > 0) {
      policy.resources.try_emplace(allocation::kMemory,
                                   allocation::memory_resource(policy.memory_per_job / std::max(1, o.nodes()) /
                                                               static_cast<std::uint64_t>(std::max(1, o.processes()))));
    }
  }
  // gpus() is per node, shared out among its processes() workers (the job script checks that
  // it divides).
  if (o.gpus() > 0) policy.resources["gpu"] = o.gpus() / std::max(1, o.processes());
  policy.retire_before_s = static_cast<std::uint32_t>(std::max(0, o.retire_before()));
  if (pc.kind == "slurm") policy.walltime_s = static_cast<std::uint32_t>(walltime_seconds(o.walltime()));
  if (pc.adapt_minimum >= 0) {
    policy.adaptive = true;
    policy.minimum = static_cast<std::uint32_t>(pc.adapt_minimum);
    policy.maximum = static_cast<std::uint32_t>(pc.adapt_maximum);
  }
  policy.idle_timeout = std::chrono::seconds(pc.idle_timeout_s);
  policy.crash_limit = std::max<std::uint32_t>(1, config.pool_crash_limit);
  policy.crash_backoff = std::chrono::seconds(config.pool_crash_backoff_s);
  policy.stalled_timeout = std::chrono::seconds(config.pool_stalled_s);
  if (pc.kind == "local") policy.poll_interval = std::chrono::milliseconds(200);  // waitpid: free
  if (const char* ms = env::get(env::Var::slurm_poll_ms); ms && pc.kind == "slurm") {
    policy.poll_interval = std::chrono::milliseconds(std::atoi(ms));
  }
  std::unique_ptr<jobqueue::JobQueue> queue;
  if (pc.kind == "local") {
    jobqueue::LocalProcessOptions lp;
    lp.env = o.env();
    // Without authentication a worker binds only where it is told: where its scheduler does.
    if (security::auth_off() && lp.env.count(env::name(env::Var::listen_host)) == 0) lp.env[env::name(env::Var::listen_host)] = listen_host;
    lp.executable = o.worker_executable().empty() ? process::self_executable() : o.worker_executable();
    lp.worker_args = {"--scheduler", address, "--nthreads", std::to_string(policy.slots_per_worker)};
    std::string resources;
    for (const auto& [r, amount] : policy.resources) {
      // Cores and memory each worker reads on its own (--cpus in its extra arguments wins).
      if ((r == allocation::kCpus || r == allocation::kMemory) && o.resources().count(r) == 0) continue;
      resources += (resources.empty() ? "" : ",") + r + "=" + std::to_string(amount);
    }
    if (!resources.empty()) lp.worker_args.insert(lp.worker_args.end(), {"--resources", resources});
    lp.worker_args.insert(lp.worker_args.end(), o.worker_extra_args().begin(), o.worker_extra_args().end());
    lp.env[env::name(env::Var::pool)] = o.pool();
    lp.log_directory = log_dir;
    queue = std::make_unique<jobqueue::LocalProcessJobQueue>(lp);
  } else {
    if (security::auth_off() && o.env().count("HERD_LISTEN_HOST") == 0 &&
        std::find(o.worker_extra_args().begin(), o.worker_extra_args().end(), "--listen-host") ==
            o.worker_extra_args().end()) {
      throw std::runtime_error("HERD_AUTH=off: the workers of pool '" + o.pool() +
                               "' need an explicit listen address for their data ports: add env "
                               "HERD_LISTEN_HOST=<address> (e.g. 0.0.0.0 on a closed network) to the pool");
    }
    jobqueue::SlurmQueueOptions so;
    so.options = o;
    so.scheduler_address = address;
    so.command_timeout_s = config.command_timeout_s;
    if (const char* jf = env::get(env::Var::jobs_file)) so.jobs_file = jf;
    queue = std::make_unique<jobqueue::SlurmJobQueue>(so);
  }
  return std::make_unique<scheduler::Pool>(policy, std::move(queue));
}

/// Writes the dashboard's URL (it holds the token) to a file of this user's alone in the private
/// runtime directory /tmp/herd-<uid>; its path.
std::string write_private_url(const std::string& url) {
  const std::string dir = "/tmp/herd-" + std::to_string(::getuid());
  security::private_directory(dir);
  const std::string path = dir + "/dashboard-" + std::to_string(::getpid()) + ".url";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
  const std::string line = url + "\n";
  const bool ok = ::fchmod(fd, 0600) == 0 && ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  ::close(fd);
  if (!ok) throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
  return path;
}

}  // namespace

int scheduler_main(const std::vector<std::string>& args) {
  CLI::App app{"herd scheduler: places tasks on workers and sizes the worker pools"};
  app.name("herd scheduler");
  scheduler::SchedulerOptions options;
  int ready_fd = -1;
  int local_workers = -1;
  int nthreads = 1;
  std::string worker_exe, config_path, listen;
  std::vector<std::string> worker_args;
  std::string log_dir;
  app.add_option("--config", config_path, "TOML file with [scheduler] and [pool.NAME] sections")
      ->check(CLI::ExistingFile);
  if (const char* l = env::get(env::Var::listen)) listen = l;
  app.add_option("--listen", listen,
                 "ZeroMQ endpoint to bind, e.g. tcp://0.0.0.0:8786 (default: $HERD_LISTEN, else a free "
                 "loopback port, or every interface when a Slurm pool is configured; required with "
                 "HERD_AUTH=off)");
  app.add_option("--local-workers", local_workers, "a pool 'local' of this many worker processes here")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--nthreads", nthreads, "task slots per local worker")->check(CLI::PositiveNumber);
  app.add_option("--worker-exe", worker_exe, "executable for local workers (default: herd itself)");
  app.add_option("--worker-arg", worker_args, "extra argument for every local worker (repeatable)")
      ->allow_extra_args(false);
  app.add_option("--log-dir", log_dir, "directory for local workers' log files");
  app.add_option("--allowed-failures", options.config.allowed_failures,
                 "worker deaths a task may be present at before it fails")->capture_default_str();
  app.add_option("--retire-grace", options.retire_grace_s,
                 "seconds a retiring worker's running tasks may take")->capture_default_str();
  if (const char* j = env::get(env::Var::journal)) options.journal = j;
  app.add_option("--journal", options.journal,
                 "record finished keyed tasks here; a scheduler restarted with it does not recompute them "
                 "(default: $HERD_JOURNAL)");
  if (const char* r = env::get(env::Var::record_file)) options.record = r;
  app.add_option("--record", options.record,
                 "the run record `herd report` reads: every task run, pool event and worker sample (default: "
                 "$HERD_RECORD_FILE, else JOURNAL.record beside --journal, else in --log-dir, else a file in "
                 "/tmp/herd-UID removed at exit; HERD_RECORD=0 records nothing)");
  if (const char* d = env::get(env::Var::dashboard_address)) options.dashboard = d;
  bool no_dashboard = false;
  app.add_option("--dashboard-address", options.dashboard,
                 "HTTP dashboard, /api/status and /metrics on HOST:PORT (port 0 = a free one; a busy "
                 "port falls back to a free one; default: $HERD_DASHBOARD_ADDRESS or 127.0.0.1:8787)")
      ->capture_default_str();
  app.add_flag("--no-dashboard", no_dashboard, "serve no dashboard");
  app.add_flag("--metrics-open", options.metrics_open,
               "serve /metrics without the dashboard's token, e.g. to Prometheus (it then shows task "
               "counts, worker names and pool names to everyone who can reach the port)");
  app.add_option("--ready-fd", ready_fd, "write the bound address to this fd (internal)");
  app.add_option("--parent-fd", options.parent_fd, "exit when this fd reaches EOF (internal)");
  bool detached = false;
  app.add_flag("--detached", detached,
               "keep running when the login session ends (SIGHUP ignored), e.g. a SlurmCluster with "
               "keep_scheduler(): stop it with SIGTERM");
  app.footer("Environment:\n" + Config::describe());
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return util::usage_exit(app.exit(e));
  }
  if (no_dashboard) options.dashboard.clear();
  log::set_process_name("scheduler");
  ::signal(SIGPIPE, SIG_IGN);
  struct sigaction sa {};
  sa.sa_handler = [](int) { scheduler::Scheduler::request_stop(); };
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  if (detached) ::signal(SIGHUP, SIG_IGN);   // outlives the session that started it
  else ::sigaction(SIGHUP, &sa, nullptr);  // the login session ended
  if (options.parent_fd >= 0) ::fcntl(options.parent_fd, F_SETFD, FD_CLOEXEC);  // not for workers

  std::string url_file;
  auto fail = [&](const std::string& what) {
    std::cerr << "herd scheduler: " << what << std::endl;
    if (ready_fd >= 0) {
      const std::string line = "error: " + what + "\n";
      (void)!::write(ready_fd, line.data(), line.size());
    }
    return 1;
  };
  try {
    // Made when missing, as Slurm users expect of a log directory, readable by this user alone.
    if (const std::string why = util::make_private_directories(log_dir); !why.empty()) return fail("--log-dir: " + why);
    jobqueue::SchedulerConfig config;
    if (!config_path.empty()) config = jobqueue::load_config(config_path);
    if (local_workers >= 0) {
      jobqueue::PoolConfig local;
      local.kind = "local";
      local.options.pool("local").jobs(local_workers).nthreads(nthreads).worker_executable(worker_exe);
      local.options.worker_extra_args(worker_args);
      config.pools.insert(config.pools.begin(), local);
    }
    bool any_slurm = false;
    for (const auto& p : config.pools) any_slurm = any_slurm || p.kind == "slurm";
    const std::string explicit_listen = !listen.empty() ? listen : config.listen;
    security::check_auth_off("herd scheduler", explicit_listen,
                             "herd scheduler --listen tcp://HOST:PORT, $HERD_LISTEN or listen in [scheduler]");
    options.listen = !explicit_listen.empty() ? explicit_listen : any_slurm ? "tcp://0.0.0.0:*" : options.listen;
    options.metrics_open = options.metrics_open || config.metrics_open;
    options.log_dir = log_dir;
    scheduler::Scheduler sched(options);
    const std::string address = sched.bind();
    std::vector<std::unique_ptr<scheduler::Pool>> pools;
    for (const auto& pc : config.pools) pools.push_back(make_pool(pc, address, log_dir, options.config, host_of(options.listen)));
    if (ready_fd >= 0) {
      const std::string line = address + "\n";
      (void)!::write(ready_fd, line.data(), line.size());
      ::close(ready_fd);
      ready_fd = -1;
    } else {
      std::cout << "herd scheduler listening at " << address << std::endl;
      if (!sched.dashboard_url().empty()) {
        if (::isatty(STDOUT_FILENO) != 0) {
          std::cout << "herd dashboard at " << sched.dashboard_url() << std::endl;
        } else {
          // A log file others may read, or a job's output: the token stays out of it.
          url_file = write_private_url(sched.dashboard_url());
          std::cout << "herd dashboard: its address with the token is in " << url_file
                    << " (not printed: stdout is not a terminal; `herd status` shows it too)" << std::endl;
        }
      }
    }
    for (auto& p : pools) sched.add_pool(std::move(p));
    const int rc = sched.run();
    if (!url_file.empty()) ::unlink(url_file.c_str());
    return rc;
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}

}  // namespace herd::detail
