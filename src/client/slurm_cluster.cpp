// SlurmCluster: a scheduler process on this node, configured (through the same TOML file
// `herd scheduler --config` reads) with one or more Slurm pools.
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/util.hpp"
#include "common/roles.hpp"
#include "client/scheduler_process.hpp"
#include "common/process.hpp"
#include "herd/error.hpp"
#include "herd/shell.hpp"
#include "herd/slurm.hpp"
#include "jobqueue/pool_config.hpp"
#include "common/env.hpp"

namespace herd {

struct SlurmCluster::Impl {
  std::vector<SlurmOptions> pools;
  std::string listen = "tcp://0.0.0.0:*";
  std::map<std::string, std::string> env;
  detail::SchedulerProcess scheduler;
  std::string directory;  // private: config and scheduler log
  bool keep = false;      // keep_scheduler(): it outlives this object and this process
  std::string log;        // the scheduler's log

  jobqueue::SchedulerConfig config() const {
    jobqueue::SchedulerConfig c;
    c.listen = listen;
    for (auto o : pools) {
      if (o.worker_executable().empty()) o.worker_executable(process::self_executable());
      jobqueue::PoolConfig p;
      p.kind = "slurm";
      p.options = o;
      c.pools.push_back(p);
    }
    return c;
  }
};

SlurmCluster::SlurmCluster(SlurmOptions options) : impl_(std::make_unique<Impl>()) {
  detail::enter_role_if_requested();
  impl_->pools.push_back(std::move(options));
}
SlurmCluster::SlurmCluster(SlurmCluster&&) noexcept = default;
SlurmCluster& SlurmCluster::operator=(SlurmCluster&&) noexcept = default;
SlurmCluster::~SlurmCluster() {
  if (impl_) close();
}

SlurmCluster& SlurmCluster::add_pool(SlurmOptions options) & {
  for (const auto& p : impl_->pools) {
    if (p.pool() == options.pool()) throw std::invalid_argument("SlurmCluster: two pools named '" + p.pool() + "'");
  }
  impl_->pools.push_back(std::move(options));
  return *this;
}

SlurmCluster& SlurmCluster::listen(std::string endpoint) & {
  impl_->listen = std::move(endpoint);
  return *this;
}

SlurmCluster& SlurmCluster::keep_scheduler(bool keep) & {
  impl_->keep = keep;
  return *this;
}

SlurmCluster& SlurmCluster::scheduler_env(std::string name, std::string value) & {
  impl_->env[std::move(name)] = std::move(value);
  return *this;
}

std::string SlurmCluster::config_text() const { return jobqueue::to_toml(impl_->config()); }

std::string SlurmCluster::job_script(const std::string& pool) const {
  const std::string address = impl_->scheduler.address().empty() ? "tcp://SCHEDULER:PORT" : impl_->scheduler.address();
  for (const auto& p : impl_->pools) {
    if (pool.empty() || p.pool() == pool) {
      SlurmOptions o = p;
      if (o.worker_executable().empty()) o.worker_executable(process::self_executable());
      return herd::job_script(o, address);
    }
  }
  throw std::invalid_argument("SlurmCluster: no pool named '" + pool + "'");
}

std::string SlurmCluster::start() {
  Impl& m = *impl_;
  if (!m.scheduler.address().empty()) return m.scheduler.address();
  for (const auto& p : m.pools) (void)herd::job_script(p, "tcp://check:0");  // option errors, now
  std::string tmpl = "/tmp/herd-" + std::to_string(::getuid()) + "-cluster-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) throw ClusterError("SlurmCluster: cannot create " + tmpl);
  m.directory = tmpl;
  const std::string config = m.directory + "/cluster.toml";
  std::ofstream(config) << config_text();
  try {
    // The scheduler's log goes beside the workers' logs, where a Slurm user looks first.
    const std::string logs = m.pools.front().log_directory();
    if (const std::string why = util::make_private_directories(logs); !why.empty()) throw ClusterError(why);
    m.log = logs + "/herd-scheduler-" + std::to_string(::getpid()) + ".log";
    auto env = m.env;
    env[env::name(env::Var::jobs_file)] = m.directory + "/jobs";  // our record, in case the scheduler dies
    return m.scheduler.start({"--config=" + config}, env, m.log, std::chrono::seconds(60), !m.keep);
  } catch (const ClusterError& e) {
    throw ClusterError(std::string("SlurmCluster: ") + e.what());
  }
}

int SlurmCluster::scheduler_pid() const { return impl_->scheduler.pid(); }

void SlurmCluster::close() {
  if (impl_->keep && impl_->scheduler.pid() > 0) {
    // It runs on, with its jobs and its directory (its configuration and job record).
    std::fprintf(stderr,
                 "herd: the scheduler keeps running at %s (pid %d, log %s).\n"
                 "  reconnect: herd::Client client{\"%s\"}; client.campaign_futures<R>(\"NAME\")\n"
                 "  status:    herd status --scheduler %s\n"
                 "  stop it:   kill %d   (it cancels its jobs)\n",
                 impl_->scheduler.address().c_str(), static_cast<int>(impl_->scheduler.pid()), impl_->log.c_str(),
                 impl_->scheduler.address().c_str(), impl_->scheduler.address().c_str(),
                 static_cast<int>(impl_->scheduler.pid()));
    impl_->scheduler.detach();
    impl_->directory.clear();
    return;
  }
  // The scheduler cancels every job and waits until the queue has them gone.
  impl_->scheduler.stop(std::chrono::seconds(60));
  if (!impl_->directory.empty()) {
    // If it died (SIGKILL, OOM) it could not: cancel what it recorded. Finished ids are harmless.
    std::ifstream in(impl_->directory + "/jobs");
    std::vector<std::string> argv = {"scancel", "--quiet"};
    for (std::string id; std::getline(in, id);) {
      if (!id.empty()) argv.push_back(id);
    }
    if (argv.size() > 2) {
      ShellCommand c{argv};
      c.timeout_s = 30;
      (void)shell(c);
    }
    std::error_code ec;
    std::filesystem::remove_all(impl_->directory, ec);
    impl_->directory.clear();
  }
}

}  // namespace herd
