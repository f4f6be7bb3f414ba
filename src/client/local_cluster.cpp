// LocalCluster: this program started again as a scheduler, which starts the workers as its
// own children (a pool named "local").
#include <chrono>
#include <cstdlib>
#include <string_view>

#include "common/util.hpp"
#include "common/roles.hpp"
#include "client/scheduler_process.hpp"
#include "common/process.hpp"
#include "gpu/gpu.hpp"
#include "herd/cluster.hpp"
#include "herd/error.hpp"
#include "jobqueue/local_process_job_queue.hpp"
#include "common/env.hpp"

namespace herd {
namespace {
// "0,1;2,3": this process's GPUs in groups of `per_worker`, for LocalProcessJobQueue; "none"
// when not even one group fits (the workers then get no GPU rather than a shared one). A
// CUDA_VISIBLE_DEVICES given with LocalCluster::env() is the supply, else this process's.
std::string gpu_slices(int per_worker, const std::map<std::string, std::string>& env) {
  const auto visible = env.find("CUDA_VISIBLE_DEVICES");
  const auto devices = visible == env.end() ? gpu::discover() : gpu::discover([&](const char* name) {
    return std::string_view(name) == "CUDA_VISIBLE_DEVICES" ? visible->second.c_str() : env::get(name);
  });
  std::string out;
  const std::size_t n = static_cast<std::size_t>(per_worker);
  for (std::size_t first = 0; first + n <= devices.size(); first += n) {
    if (!out.empty()) out += ';';
    for (std::size_t i = first; i < first + n; ++i) out += (i == first ? "" : ",") + devices[i].id;
  }
  return out.empty() ? "none" : out;
}
}  // namespace

struct LocalCluster::Impl {
  int n_workers = 2;
  int threads = 1;
  std::string worker_exe;
  std::vector<std::string> worker_args;
  std::map<std::string, std::string> env;
  std::chrono::milliseconds start_timeout{30000};
  std::string log_dir;
  int gpus_per_worker = 0;
  detail::SchedulerProcess scheduler;
};

LocalCluster::LocalCluster(int n_workers, int threads_per_worker) : impl_(std::make_unique<Impl>()) {
  detail::enter_role_if_requested();
  workers(n_workers);
  this->threads_per_worker(threads_per_worker);
}
LocalCluster::LocalCluster(LocalCluster&&) noexcept = default;
LocalCluster& LocalCluster::operator=(LocalCluster&&) noexcept = default;
LocalCluster::~LocalCluster() {
  if (impl_) close();
}

LocalCluster& LocalCluster::workers(int n) & {
  if (n < 0) throw std::invalid_argument("LocalCluster: workers must be >= 0, got " + std::to_string(n));
  impl_->n_workers = n;
  return *this;
}
LocalCluster& LocalCluster::threads_per_worker(int n) & {
  if (n < 1) throw std::invalid_argument("LocalCluster: threads_per_worker must be >= 1, got " + std::to_string(n));
  impl_->threads = n;
  return *this;
}
LocalCluster& LocalCluster::worker_executable(std::string path) & {
  impl_->worker_exe = std::move(path);
  return *this;
}
LocalCluster& LocalCluster::worker_args(std::vector<std::string> args) & {
  impl_->worker_args = std::move(args);
  return *this;
}
LocalCluster& LocalCluster::env(std::string name, std::string value) & {
  impl_->env[std::move(name)] = std::move(value);
  return *this;
}
LocalCluster& LocalCluster::gpus_per_worker(int n) & {
  if (n < 0) throw std::invalid_argument("LocalCluster: gpus_per_worker must be >= 0, got " + std::to_string(n));
  impl_->gpus_per_worker = n;
  return *this;
}
LocalCluster& LocalCluster::start_timeout(std::chrono::milliseconds t) & {
  impl_->start_timeout = t;
  return *this;
}
LocalCluster& LocalCluster::log_directory(std::string path) & {
  impl_->log_dir = std::move(path);
  return *this;
}
int LocalCluster::expected_workers() const { return impl_->n_workers; }
int LocalCluster::scheduler_pid() const { return impl_->scheduler.pid(); }

std::string LocalCluster::start() {
  Impl& m = *impl_;
  std::vector<std::string> args = {"--local-workers=" + std::to_string(m.n_workers),
                                   "--nthreads=" + std::to_string(m.threads)};
  args.push_back("--worker-exe=" + (m.worker_exe.empty() ? process::self_executable() : m.worker_exe));
  for (const auto& a : m.worker_args) args.push_back("--worker-arg=" + a);
  if (!m.log_dir.empty()) {
    // Made when missing (the scheduler's own log goes there first), this user's alone.
    if (const std::string why = util::make_private_directories(m.log_dir); !why.empty()) {
      throw ClusterError("LocalCluster: log_directory: " + why);
    }
    args.push_back("--log-dir=" + m.log_dir);
  }
  std::map<std::string, std::string> env = m.env;
  if (m.gpus_per_worker > 0) env[jobqueue::kGpuSlicesEnv] = gpu_slices(m.gpus_per_worker, m.env);
  try {
    return m.scheduler.start(args, env, m.log_dir.empty() ? "" : m.log_dir + "/scheduler.log", m.start_timeout);
  } catch (const ClusterError& e) {
    throw ClusterError(std::string("LocalCluster: ") + e.what());
  }
}

void LocalCluster::close() { impl_->scheduler.stop(std::chrono::seconds(10)); }

}  // namespace herd
