// The scheduler's observability: the status snapshot (`herd status`, Client::status(), the
// dashboard), the counters behind it, and the dashboard thread's lifecycle. All of it runs on
// the event loop's thread; the HTTP thread only ever sees a published copy.
#include <algorithm>
#include <chrono>

#include "common/util.hpp"
#include "common/logging.hpp"
#include "scheduler/history.hpp"
#include "scheduler/http_server.hpp"
#include "scheduler/scheduler.hpp"

namespace herd::scheduler {

namespace {
constexpr std::uint32_t kDashboardEvents = 300;  // task runs the dashboard gets

std::int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

protocol::StatusReply Scheduler::status_snapshot(std::uint32_t max_events) const {
  protocol::StatusReply s;
  s.scheduler_id = scheduler_id_;
  s.address = address_;
  s.dashboard = dashboard_url_;
  s.auth_off = !auth_.keys.has_value();
  s.now_ms = unix_ms();
  s.uptime_s = std::chrono::duration<double>(Clock::now() - started_).count();
  s.clients = static_cast<std::uint32_t>(state_.clients().size());
  s.campaigns = state_.campaigns();
  const auto now = Clock::now();
  for (const auto& [id, w] : state_.workers()) {
    protocol::WorkerStatus ws;
    ws.id = id;
    ws.name = w.name;
    ws.host = w.host;
    ws.address = w.address;
    ws.job_id = w.job_id;
    ws.pool = w.pool;
    ws.nthreads = w.nthreads;
    ws.processing = static_cast<std::uint32_t>(w.processing.size());
    // The heartbeat's count lags; what the scheduler assigned bounds it from above.
    ws.executing = std::min<std::uint32_t>(w.executing, std::min<std::uint32_t>(ws.processing, w.nthreads));
    if (ws.executing == 0 && ws.processing > 0) ws.executing = std::min(ws.processing, w.nthreads);
    ws.stored = w.has.size();
    ws.memory_rss = w.memory_rss;
    ws.memory_limit = w.memory_limit;
    ws.resources = w.resources;
    ws.end_time = w.end_time;
    ws.gpus = w.gpus;
    ws.retiring = w.retiring;
    ws.spilled_bytes = w.spilled_bytes;
    ws.paused = w.paused;
    if (w.kept_for_data) ws.kept_for_data = state_.kept_for_data_text(w);
    ws.last_seen_s = std::chrono::duration<double>(now - w.last_seen).count();
    if (auto identity = worker_identity_.find(id); identity != worker_identity_.end()) ws.link = channels_->on_link(identity->second);
    s.workers.push_back(std::move(ws));
  }
  std::sort(s.workers.begin(), s.workers.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  const TaskGraph& graph = state_.graph();
  for (const auto& [id, t] : graph.tasks()) {
    if (t.scattered) continue;
    const char* state = to_string(t.status);
    ++s.tasks[state];
    ++s.functions[graph.function_name(t)][state];
  }
  // Ready tasks that no connected worker can run, by reason (TaskState::no_worker).
  for (const auto& [why, n] : state_.unrunnable()) s.no_worker[why] = n;
  const auto& counters = state_.counters();
  for (const auto& [fn, runs] : counters.runs_by_function) {
    s.functions[fn]["finished_total"] = runs.first;
    s.functions[fn]["failed_total"] = runs.second;
  }
  s.finished_total = counters.finished_total;
  s.failed_total = counters.failed_total;
  const std::int64_t second = s.now_ms / 1000;
  std::uint64_t recent = 0;
  for (const auto& [sec, n] : counters.finishes_per_second) {
    if (sec > second - SchedulerState::kThroughputWindow) recent += n;
  }
  s.throughput = static_cast<double>(recent) / std::clamp(s.uptime_s, 1.0, static_cast<double>(SchedulerState::kThroughputWindow));
  for (const auto& p : pools_) {
    std::map<std::string, std::string> by_job;
    for (const auto& [id, w] : state_.workers()) {
      if (w.pool != p->name()) continue;
      if (!w.job_id.empty()) {  // several workers per job: "12_0.0, 12_0.1"
        std::string& names = by_job[w.job_id];
        names += (names.empty() ? "" : ", ") + w.name;
      }
    }
    s.pools.push_back(pool_status(*p));
    for (const auto& [job_id, info] : p->jobs()) {
      protocol::JobStatus j;
      j.pool = p->name();
      j.id = job_id;
      j.state = info.state == jobqueue::JobState::pending   ? "pending"
                : info.state == jobqueue::JobState::running ? "running"
                                                            : "ended";
      j.detail = info.detail;
      j.reason = info.reason;
      if (auto it = by_job.find(job_id); it != by_job.end()) j.worker = it->second;
      s.jobs.push_back(std::move(j));
    }
    // Jobs that failed recently, with the end of their output (src/scheduler/pool_logs.cpp).
    for (const auto& f : p->failed_jobs()) {
      protocol::JobStatus j;
      j.pool = p->name();
      j.id = f.info.id;
      j.state = "ended";
      j.detail = f.info.detail;
      j.reason = f.info.reason + (f.had_worker ? "" : std::string(f.info.reason.empty() ? "" : ", ") + "before its worker connected");
      for (const auto& file : f.files) j.output += (j.output.empty() ? "" : ", ") + file;
      j.output_tail = f.tail;
      s.jobs.push_back(std::move(j));
    }
  }
  if (recorder_) s.record = recorder_->path();
  if (journal_) {
    s.journal = journal_->status();
    s.journal_failing = journal_->failing();
    s.journal_behind = journal_->behind_records();
  }
  const auto& events = counters.events;
  const std::size_t n = std::min<std::size_t>(max_events, events.size());
  s.events.assign(events.end() - static_cast<std::ptrdiff_t>(n), events.end());
  return s;
}

void Scheduler::start_dashboard() {
  if (options_.dashboard.empty()) return;
  try {
    HttpOptions http;
    http.address = options_.dashboard;
    http.metrics_open = options_.metrics_open;
    http.history = [history = history_] {
      return history->json(std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch()).count());
    };
    http.report = [recorder = recorder_](const protocol::ReportRequest& req) { return make_report(recorder.get(), req); };
    http_ = std::make_unique<HttpServer>(http);
    dashboard_url_ = http_->url();
    publish_dashboard();
    // Not the token: log files may be read by others (herd status and the printed URL have it).
    HERD_LOG(info) << "dashboard at " << dashboard_url_.substr(0, dashboard_url_.find('?'))
                   << " (JSON: api/status, Prometheus: metrics" << (options_.metrics_open ? ", open to all" : "")
                   << "; every page needs the token herd status shows)";
  } catch (const std::exception& e) {
    HERD_LOG(warning) << "no dashboard: " << e.what();
    http_.reset();
  }
}

void Scheduler::publish_dashboard() {
  if (http_) http_->publish(status_snapshot(kDashboardEvents));
}

}  // namespace herd::scheduler

namespace herd::scheduler {

protocol::TaskExplanation Scheduler::explain(const protocol::StatusRequest& req) const {
  const Now at = now();
  const Task* t = nullptr;
  if (req.explain_id != 0) t = state_.graph().find(req.explain_id);
  if (t == nullptr && !req.explain_key.empty()) t = state_.find_by_key(req.explain_key);
  if (t == nullptr || t->scattered) {
    protocol::TaskExplanation e;
    e.summary = "no task " + (req.explain_key.empty() ? "with this id" : "'" + req.explain_key + "'") +
                " in the scheduler (finished and released, never submitted, or a typo)";
    return e;
  }
  protocol::TaskExplanation e = state_.explain(*t, at);
  if (t->status != TaskStatus::ready) return e;
  // Each pool: could a worker it brings run the task, and what its jobs are doing.
  bool some_pool = false;
  std::string waiting_pool;
  for (const auto& p : pools_) {
    const PoolPolicy& policy = p->policy();
    std::string line = "pool " + p->name() + ": ";
    std::string missing;
    for (const auto& [r, amount] : e.resources) {
      auto it = policy.resources.find(r);
      if (it == policy.resources.end() || it->second + 1e-9 < amount) {
        missing += (missing.empty() ? "" : ", ") + r + " " + util::format_double(amount) + " (its workers offer " +
                   util::format_double(it == policy.resources.end() ? 0 : it->second) + ")";
      }
    }
    const std::int64_t usable = static_cast<std::int64_t>(policy.walltime_s) - policy.retire_before_s;
    if (!missing.empty()) {
      e.pools.push_back(line + "cannot run it: the task needs " + missing);
      continue;
    }
    if (policy.walltime_s > 0 && e.duration_s > 0 && static_cast<std::int64_t>(e.duration_s) > usable) {
      e.pools.push_back(line + "cannot run it: its jobs' walltime (" + std::to_string(policy.walltime_s) +
                        " s) less the retirement margin (" + std::to_string(policy.retire_before_s) +
                        " s) is shorter than the task's duration (" + std::to_string(e.duration_s) + " s)");
      continue;
    }
    some_pool = true;
    std::uint32_t connected = 0;
    for (const auto& [id, w] : state_.workers()) connected += w.pool == p->name();
    const protocol::PoolStatus ps = pool_status(*p);
    line += "its workers can run it; " + std::to_string(connected) + " connected, " + std::to_string(ps.target) +
            " wanted" + (ps.adaptive ? " (adaptive " + std::to_string(ps.minimum) + "-" + std::to_string(ps.maximum) + ")" : "");
    if (ps.running > 0) line += ", " + std::to_string(ps.running) + " job(s) running";
    if (ps.pending > 0) {
      line += ", " + std::to_string(ps.pending) + " job(s) pending";
      std::string reasons;
      for (const auto& [why, n] : ps.pending_reasons) reasons += (reasons.empty() ? "" : ", ") + why + ": " + std::to_string(n);
      if (!reasons.empty()) line += " (Slurm's reasons: " + reasons + ")";
    }
    if (!ps.paused.empty()) line += "; PAUSED: " + ps.paused;
    if (!ps.batch_error.empty()) line += "; the batch system does not answer: " + ps.batch_error;
    if (ps.target == 0 && !ps.adaptive) line += "; scaled to 0: scale() or adapt() brings workers";
    if (waiting_pool.empty() && (ps.pending > 0 || !ps.paused.empty())) waiting_pool = line;
    e.pools.push_back(std::move(line));
  }
  if (e.never && !some_pool) {
    e.summary += pools_.empty() ? "; no pool could bring a worker that can" : "; and no pool's workers could either";
  } else if (e.never) {
    e.never = false;
    e.summary += waiting_pool.empty() ? "; a pool's workers could (see pools)" : "; " + waiting_pool;
  }
  return e;
}

protocol::PoolStatus Scheduler::pool_status(const Pool& pool) const {
  std::uint32_t connected = 0;
  std::vector<std::string> kept;
  for (const auto& [id, w] : state_.workers()) {
    if (w.pool != pool.name()) continue;
    ++connected;
    if (w.kept_for_data) kept.push_back(w.name + ": holds " + state_.kept_for_data_text(w));
  }
  protocol::PoolStatus s = pool.status(connected);
  s.kept_for_data = std::move(kept);
  return s;
}

}  // namespace herd::scheduler
