// herd::Client's own methods: connecting (a cluster started first when given one), workers,
// scale and adapt, restart, status and explain, campaigns, run, and get_client(). Each request
// that waits for the scheduler's answer goes through ClientCore::ask (the state's one request
// table); futures are future.cpp's, the socket and threads client_io.cpp's.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "client/client_io.hpp"
#include "client/logs.hpp"
#include "common/logging.hpp"
#include "common/roles.hpp"
#include "common/status_view.hpp"
#include "common/util.hpp"
#include "herd/client.hpp"
#include "herd/slurm.hpp"
#include "task/this_task.hpp"

namespace herd {

Client::Client() : Client(std::unique_ptr<Cluster>(new LocalCluster()), ClientOptions{}) {}

Client::Client(const std::string& scheduler_address, ClientOptions options) {
  detail::enter_role_if_requested();
  core_ = detail::make_core(scheduler_address, options);
}

Client::Client(std::unique_ptr<Cluster> cluster, ClientOptions options) : cluster_(std::move(cluster)) {
  detail::enter_role_if_requested();
  const std::string address = cluster_->start();
  core_ = detail::make_core(address, options);
  if (cluster_->expected_workers() > 0) wait_for_workers(cluster_->expected_workers(), options.workers_timeout);
}

Client::~Client() { close(); }
Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;

namespace {
/// A pool that cannot get workers: every pool has a submission error and no worker.
std::string pool_failure(const std::vector<protocol::PoolStatus>& pools) {
  std::string why;
  for (const auto& p : pools) {
    if (p.last_error.empty() || p.workers > 0 || p.running > 0) return {};
    why += (why.empty() ? "" : "; ") + p.last_error;
  }
  return why;
}
}  // namespace

void Client::wait_for_workers(int n, std::chrono::milliseconds timeout) {
  std::unique_lock lock(core_->mu_);
  const client::ClientState& state = core_->state_;
  const bool ok = core_->cv_.wait_for(lock, timeout, [&] {
    return state.n_workers() >= n || state.lost() || !pool_failure(state.pools()).empty();
  });
  if (state.lost()) throw ConnectionError(state.lost_reason());
  if (state.n_workers() < n) {
    if (const std::string why = pool_failure(state.pools()); !why.empty()) throw JobQueueError(why);
  }
  if (!ok) {
    std::string failures;  // jobs that ended before their workers came: why, in their own words
    for (const auto& p : state.pools()) {
      if (p.workers == 0 && !p.last_failure.empty()) failures += "; pool " + p.name + ": " + p.last_failure;
    }
    throw TimeoutError("only " + std::to_string(state.n_workers()) + " of " + std::to_string(n) +
                       " workers connected to " + core_->address_ + " within " +
                       std::to_string(timeout.count()) + " ms" + failures);
  }
}

namespace {
PoolChange scale_request(detail::ClientCore& core, protocol::ScalePoolRequest req) {
  std::unique_lock lock(core.mu_);
  // sbatch answers within seconds; the scheduler replies after its first submission attempt.
  const client::Pending p = core.ask(lock, std::move(req), std::chrono::seconds(120),
                                     "the scheduler did not answer a scale request within 120 s");
  const auto& reply = std::get<protocol::ScalePoolReply>(p.reply);
  if (!reply.ok) throw JobQueueError(reply.error);
  return detail::to_pool_change(reply);
}

/// A request the caller waits for (up to 30 s) the reply to: `herd status`, `herd logs` and
/// the campaigns' ask this way.
template <typename Reply, typename Request>
Reply ask_scheduler(detail::ClientCore& core, std::unique_lock<std::mutex>& lock, Request req, const char* what) {
  client::Pending p = core.ask(lock, std::move(req), std::chrono::seconds(30),
                               std::string("the scheduler did not answer a ") + what + " request within 30 s");
  return std::get<Reply>(std::move(p.reply));
}
}  // namespace

PoolChange Client::scale(int n, const std::string& pool) {
  if (n < 0) throw std::invalid_argument("scale: n must be >= 0, got " + std::to_string(n));
  protocol::ScalePoolRequest req;
  req.pool = pool;
  req.target = static_cast<std::uint32_t>(n);
  return scale_request(*core_, req);
}

PoolChange Client::scale(const ScaleTo& to, const std::string& pool) {
  if (to.jobs() < -1 || to.workers() < -1 || to.cores() < -1) {
    throw std::invalid_argument("scale: jobs, workers and cores must be >= 0");
  }
  if (to.jobs() < 0 && to.workers() < 0 && to.cores() < 0 && to.memory().empty()) {
    throw std::invalid_argument("scale: give jobs, workers, cores or memory");
  }
  protocol::ScalePoolRequest req;
  req.pool = pool;
  if (to.workers() >= 0) {
    req.target = static_cast<std::uint32_t>(to.workers());
    if (to.jobs() >= 0 || to.cores() >= 0 || !to.memory().empty()) {
      throw std::invalid_argument("scale: give workers alone, or jobs, cores and memory");
    }
  }
  req.jobs = to.jobs();
  req.cores = to.cores();
  if (!to.memory().empty()) req.memory = memory_bytes(to.memory());
  return scale_request(*core_, req);
}

PoolChange Client::adapt(int minimum, int maximum, const std::string& pool, std::chrono::seconds idle_timeout) {
  if (minimum < 0 || maximum < minimum) {
    throw std::invalid_argument("adapt: need 0 <= minimum <= maximum, got " + std::to_string(minimum) +
                                ", " + std::to_string(maximum));
  }
  protocol::ScalePoolRequest req;
  req.pool = pool;
  req.adaptive = true;
  req.minimum = static_cast<std::uint32_t>(minimum);
  req.maximum = static_cast<std::uint32_t>(maximum);
  req.idle_timeout_s = static_cast<std::uint32_t>(idle_timeout.count());
  return scale_request(*core_, req);
}

PoolChange Client::adapt(const AdaptOptions& o, const std::string& pool) {
  if (o.minimum() < 0 || o.maximum() < o.minimum()) {
    throw std::invalid_argument("adapt: need 0 <= minimum <= maximum, got " + std::to_string(o.minimum()) + ", " +
                                std::to_string(o.maximum()));
  }
  if (o.idle_timeout().count() < 0 || o.target_duration().count() < 0 || o.wait_count() < 0 ||
      o.interval().count() < -1) {
    throw std::invalid_argument("adapt: idle_timeout, interval, target_duration and wait_count must not be negative");
  }
  protocol::ScalePoolRequest req;
  req.pool = pool;
  req.adaptive = true;
  req.minimum = static_cast<std::uint32_t>(o.minimum());
  req.maximum = static_cast<std::uint32_t>(o.maximum());
  req.idle_timeout_s = static_cast<std::uint32_t>(o.idle_timeout().count());
  req.interval_ms = o.interval().count();
  req.target_duration_ms = o.target_duration().count();
  req.wait_count = static_cast<std::uint32_t>(o.wait_count());
  return scale_request(*core_, req);
}

PoolChange Client::pause_pool(const std::string& pool) {
  protocol::ScalePoolRequest req;
  req.pool = pool;
  req.action = "pause";
  return scale_request(*core_, req);
}

PoolChange Client::resume_pool(const std::string& pool) {
  protocol::ScalePoolRequest req;
  req.pool = pool;
  req.action = "resume";
  return scale_request(*core_, req);
}

PoolChange Client::retire_worker(const std::string& name) {
  if (name.empty()) throw std::invalid_argument("retire_worker: give a worker's name");
  protocol::ScalePoolRequest req;
  req.action = "retire";
  req.worker = name;
  return scale_request(*core_, req);
}

void Client::restart(std::chrono::milliseconds timeout) {
  auto& core = *core_;
  std::unique_lock lock(core.mu_);
  if (core.state_.lost()) throw ConnectionError(core.state_.lost_reason());
  if (timeout.count() < 0) throw std::invalid_argument("restart: the timeout must be >= 0");
  // Every future this client made so far is cancelled by it (the scheduler says so for each
  // task it knew; this covers those whose update it has not sent yet, and made just now).
  const std::uint64_t boundary = core.state_.next_seq();
  protocol::RestartRequest req;
  req.timeout_ms = static_cast<std::uint32_t>(std::min<std::int64_t>(timeout.count(), UINT32_MAX));
  // The scheduler answers at its deadline at the latest; a margin for the round trip.
  const client::Pending p =
      core.ask(lock, req, timeout + std::chrono::seconds(30),
               "restart: the scheduler did not answer within " + std::to_string(timeout.count() / 1000 + 30) + " s");
  core.state_.cancel_restarted(boundary);
  core.settle_locked();
  const auto& reply = std::get<protocol::RestartReply>(p.reply);
  if (!reply.ok) throw TimeoutError(reply.error);
}

std::vector<std::string> Client::run_targets(const RunOn& on) const {
  const ClusterStatus st = status();
  std::vector<std::string> connected;
  for (const auto& w : st.workers) connected.push_back(w.name);
  if (on.names().empty()) {
    if (connected.empty()) throw Error("run: no worker is connected");
    return connected;
  }
  std::vector<std::string> names;
  for (const std::string& name : on.names()) {
    if (std::find(connected.begin(), connected.end(), name) == connected.end()) {
      throw Error("run: no connected worker is named '" + name + "' (connected: " + util::join(connected, ", ") + ")");
    }
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  return names;
}

TaskOptions Client::run_options(const std::string& worker) {
  // Pinned to its worker, first in its queue, and never run twice.
  return TaskOptions{}.workers({worker}).allow_other_workers(false).priority(INT32_MAX).retries(0);
}

void Client::run_wait(const std::vector<detail::FutureState*>& states, const std::vector<std::string>& names) const {
  // A call whose worker left would wait for it forever (it may run on that worker only): while
  // calls are pending, the scheduler is asked every second which workers are connected.
  while (!detail::core_wait_all(*core_, states, 1000)) {
    const ClusterStatus st = status();
    for (std::size_t i = 0; i < states.size(); ++i) {
      if (detail::future_done(*states[i])) continue;
      const bool there = std::any_of(st.workers.begin(), st.workers.end(), [&](const WorkerInfo& w) {
        return w.name == names[i];
      });
      if (there) continue;
      detail::core_cancel(*core_, states);
      throw WorkerLostError("run: worker " + names[i] + " left before its call " + detail::future_key(*states[i]) +
                            " finished");
    }
  }
}

std::vector<PoolInfo> Client::pools() const {
  {
    std::lock_guard lock(core_->mu_);
    if (!core_->state_.pools().empty()) {
      std::vector<PoolInfo> out;
      for (const auto& p : core_->state_.pools()) out.push_back(detail::to_pool_info(p));
      return out;
    }
  }
  // No report yet (a client just connected): ask, so that a pool the scheduler has is never
  // missing from the answer.
  return status(0).pools;
}

ClusterStatus Client::status(int max_events) const {
  std::unique_lock lock(core_->mu_);
  protocol::StatusRequest req;
  req.max_events = static_cast<std::uint32_t>(std::max(0, max_events));
  return detail::to_cluster_status(ask_scheduler<protocol::StatusReply>(*core_, lock, req, "status"));
}

TaskExplanation Client::explain(const std::string& key) const {
  std::unique_lock lock(core_->mu_);
  protocol::StatusRequest req;
  req.explain = true;
  req.explain_key = key;
  return detail::to_task_explanation(ask_scheduler<protocol::StatusReply>(*core_, lock, req, "explain").explanation);
}

std::string Client::report(const ReportRequestOptions& options) const {
  protocol::ReportRequest req;
  req.format = options.format;
  using std::chrono::duration_cast;
  using std::chrono::microseconds;
  req.since_us = duration_cast<microseconds>(options.since.time_since_epoch()).count();
  req.until_us = duration_cast<microseconds>(options.until.time_since_epoch()).count();
  req.campaign = options.campaign;
  req.job = options.job;
  req.title = options.title;
  std::unique_lock lock(core_->mu_);
  // A night's record takes the scheduler a while to read: more than the usual 30 s.
  client::Pending p = core_->ask(lock, std::move(req), std::chrono::minutes(5),
                                 "the scheduler did not answer a report request within 5 minutes");
  auto reply = std::get<protocol::ReportReply>(std::move(p.reply));
  if (!reply.error.empty()) throw Error("report: " + reply.error);
  for (const auto& w : reply.warnings) HERD_LOG(warning) << "report: " << w;
  return std::move(reply.document);
}

PerformanceReport Client::performance_report(std::string path, std::string format) {
  if (format != "html" && format != "trace") {
    throw std::invalid_argument("performance_report: format '" + format + "' is not html or trace");
  }
  return PerformanceReport(*this, std::move(path), std::move(format));
}

PerformanceReport::PerformanceReport(const Client& client, std::string path, std::string format)
    : client_(&client), path_(std::move(path)), format_(std::move(format)), since_(std::chrono::system_clock::now()) {}

PerformanceReport::PerformanceReport(PerformanceReport&& other) noexcept
    : client_(other.client_), path_(std::move(other.path_)), format_(std::move(other.format_)),
      since_(other.since_), done_(other.done_) {
  other.done_ = true;
}

PerformanceReport::~PerformanceReport() {
  if (done_) return;
  try {
    write();
  } catch (const std::exception& e) {
    HERD_LOG(error) << "performance_report " << path_ << ": " << e.what();
  }
}

void PerformanceReport::write() {
  if (done_) return;
  done_ = true;
  ReportRequestOptions o;
  o.format = format_;
  o.since = since_;
  o.title = "herd performance report";
  const std::string doc = client_->report(o);
  std::ofstream out(path_, std::ios::binary | std::ios::trunc);
  if (!out) throw Error("performance_report: cannot write " + path_ + ": " + std::strerror(errno));
  out.write(doc.data(), static_cast<std::streamsize>(doc.size()));
  out.close();
  if (!out) throw Error("performance_report: cannot write " + path_ + ": " + std::strerror(errno));
}

namespace {
protocol::CampaignRequest campaign_request(protocol::CampaignOp op, const std::string& name) {
  protocol::CampaignRequest req;
  req.op = static_cast<std::uint8_t>(op);
  req.name = name;
  return req;
}
}  // namespace

std::vector<CampaignInfo> Client::campaigns() const {
  std::unique_lock lock(core_->mu_);
  const auto reply = ask_scheduler<protocol::CampaignReply>(*core_, lock,
                                                            campaign_request(protocol::CampaignOp::list, ""), "campaign");
  std::vector<CampaignInfo> out;
  for (const auto& c : reply.campaigns) out.push_back(detail::to_campaign_info(c));
  return out;
}

void Client::release_campaign(const std::string& name) {
  std::unique_lock lock(core_->mu_);
  const auto reply = ask_scheduler<protocol::CampaignReply>(
      *core_, lock, campaign_request(protocol::CampaignOp::release, name), "campaign");
  if (!reply.ok) throw Error("release_campaign: " + reply.error);
}

namespace detail {
std::vector<std::shared_ptr<FutureState>> core_attach_campaign(ClientCore& core, const std::string& name) {
  std::unique_lock lock(core.mu_);
  client::Pending p = core.ask(lock, campaign_request(protocol::CampaignOp::attach, name), std::chrono::seconds(30),
                               "the scheduler did not answer a campaign request within 30 s");
  const auto& reply = std::get<protocol::CampaignReply>(p.reply);
  if (!reply.ok) throw Error("campaign_futures: " + reply.error);  // it made no futures
  return std::move(p.futures);
}
}  // namespace detail

int Client::n_workers() const {
  std::lock_guard lock(core_->mu_);
  return core_->state_.n_workers();
}

const std::string& Client::scheduler_address() const { return core_->address_; }

void Client::close() {
  if (core_) core_->close("client closed");
  if (cluster_) cluster_->close();
}

namespace detail {
// Client::worker_logs / task_output / logs (client/logs.cpp) ask through this.
protocol::LogsReply logs_request(ClientCore& core, protocol::LogsRequest req) {
  std::unique_lock lock(core.mu_);
  // The scheduler answers within its own bound on silent workers (a few seconds).
  return ask_scheduler<protocol::LogsReply>(core, lock, std::move(req), "logs");
}
}  // namespace detail

Client& get_client() {
  detail::check_not_isolated("herd::get_client()");
  const auto hooks = detail::worker_hooks();
  if (hooks == nullptr || detail::current_task_id() == 0) {
    throw std::logic_error("herd::get_client() called outside a task: inside a program, make a herd::Client; "
                           "get_client() is for a task running on a worker");
  }
  // Made by the first task that asks, closed (goodbye said) when the worker process exits.
  static std::mutex mu;
  static std::unique_ptr<Client> client;
  std::lock_guard lock(mu);
  if (!client) {
    ClientOptions options;
    options.name = "tasks of worker " + this_task().worker;
    client = std::make_unique<Client>(hooks->scheduler, options);
  }
  return *client;
}

}  // namespace herd
