// The scheduler's run record (record/record.hpp) and the dashboard's history: what the core
// noted about ended runs, workers joining and leaving, their heartbeats' load, and the pools'
// jobs, turned into records each turn (encoded on the loop, written by the Recorder's thread);
// and reports built from the record off the loop (a CommandRunner thread, or the dashboard's).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "common/json.hpp"
#include "common/logging.hpp"
#include "common/security.hpp"
#include "record/report.hpp"
#include "scheduler/history.hpp"
#include "scheduler/scheduler.hpp"

namespace herd::scheduler {

using protocol::MessageType;

// ---- History -------------------------------------------------------------------------------

void History::worker(const std::string& name, std::int64_t t_ms, double cpu, std::uint64_t memory) {
  std::lock_guard lock(mu_);
  auto& points = workers_[name];
  if (!points.empty() && t_ms - points.back().t < kStepMs) return;
  points.push_back({t_ms, cpu, memory});
  trim(t_ms);
}

void History::pool(const std::string& name, std::int64_t t_ms, std::uint32_t target, std::uint32_t workers,
                   std::uint32_t running, std::uint32_t pending) {
  std::lock_guard lock(mu_);
  auto& points = pools_[name];
  if (!points.empty()) {
    const PoolPoint& last = points.back();
    const bool same = last.target == target && last.workers == workers && last.running == running && last.pending == pending;
    if (same && t_ms - last.t < kStepMs) return;
  }
  points.push_back({t_ms, target, workers, running, pending});
  trim(t_ms);
}

void History::trim(std::int64_t now_ms) {
  if (now_ms - last_trim_ < kStepMs) return;
  last_trim_ = now_ms;
  const std::int64_t oldest = now_ms - kSpanMs;
  for (auto it = workers_.begin(); it != workers_.end();) {
    while (!it->second.empty() && it->second.front().t < oldest) it->second.pop_front();
    it = it->second.empty() ? workers_.erase(it) : std::next(it);
  }
  for (auto it = pools_.begin(); it != pools_.end();) {
    while (it->second.size() > 1 && it->second.front().t < oldest) it->second.pop_front();
    it = std::next(it);
  }
}

std::string History::json(std::int64_t now_ms) const {
  json::Json out = json::Json::object();
  out["now_ms"] = now_ms;
  json::Json workers = json::Json::object(), pools = json::Json::object();
  std::lock_guard lock(mu_);
  for (const auto& [name, points] : workers_) {
    json::Json rows = json::Json::array();
    for (const auto& p : points) {
      if (p.t >= now_ms - kSpanMs) rows.push_back(json::Json::array({p.t, std::round(p.cpu * 10) / 10, p.memory}));
    }
    workers[name] = std::move(rows);
  }
  for (const auto& [name, points] : pools_) {
    json::Json rows = json::Json::array();
    for (const auto& p : points) rows.push_back(json::Json::array({std::max(p.t, now_ms - kSpanMs), p.target, p.workers, p.running, p.pending}));
    pools[name] = std::move(rows);
  }
  out["workers"] = std::move(workers);
  out["pools"] = std::move(pools);
  return json::dump(out);
}

// ---- the record ----------------------------------------------------------------------------

namespace {

constexpr auto kSampleEvery = std::chrono::seconds(5);  // a worker's load in the record

std::string default_record_path(const SchedulerOptions& o, bool* temporary) {
  *temporary = false;
  if (!o.record.empty()) return o.record;
  if (!o.journal.empty()) return o.journal + ".record";
  if (!o.log_dir.empty()) return o.log_dir + "/scheduler-" + std::to_string(::getpid()) + ".record";
  const std::string dir = "/tmp/herd-" + std::to_string(::getuid());
  security::private_directory(dir);
  *temporary = true;
  return dir + "/scheduler-" + std::to_string(::getpid()) + ".record";
}

}  // namespace

protocol::ReportReply make_report(record::Recorder* recorder, const protocol::ReportRequest& req) {
  protocol::ReportReply reply;
  reply.request_id = req.request_id;
  if (recorder == nullptr) {
    reply.error = "this scheduler records nothing (HERD_RECORD=0, or its record file could not be opened: see its log)";
    return reply;
  }
  if (req.format != "html" && req.format != "trace") {
    reply.error = "unknown report format '" + req.format + "' (known: html, trace)";
    return reply;
  }
  reply.record = recorder->path();
  try {
    recorder->flush();  // what the loop handed over so far is in the file
    record::Filter f;
    f.since_us = req.since_us;
    f.until_us = req.until_us;
    f.campaign = req.campaign;
    f.job = req.job;
    const record::Contents c = record::read_files(recorder->path(), f);
    reply.warnings = c.warnings;
    record::ReportOptions ro;
    if (!req.title.empty()) ro.title = req.title;
    ro.source = "scheduler record " + recorder->path();
    reply.document = req.format == "trace" ? record::trace_report(c, ro) : record::html_report(c, ro);
  } catch (const std::exception& e) {
    reply.error = e.what();
  }
  return reply;
}

void Scheduler::start_recording() {
  history_ = std::make_shared<History>();
  if (options_.config.record == 0) return;
  bool temporary = false;
  try {
    const std::string path = default_record_path(options_, &temporary);
    recorder_ = std::make_shared<record::Recorder>(record::Recorder::Options{path, options_.config.record_bytes});
    record_temporary_ = temporary;
    HERD_LOG(info) << "run record " << path << (temporary ? " (removed at exit: --record FILE keeps it)" : "");
  } catch (const std::exception& e) {
    HERD_LOG(warning) << "no run record: " << e.what();
  }
}

void Scheduler::stop_recording() {
  if (!recorder_) return;
  const std::string path = recorder_->path();
  recorder_.reset();  // writes what is buffered
  if (record_temporary_) {
    ::unlink(path.c_str());
    ::unlink((path + ".1").c_str());
  }
}

void Scheduler::record_turn() {
  std::vector<RunNote>& notes = state_.run_notes();
  if (!recorder_) {
    notes.clear();
    return;
  }
  record::Encoder& enc = recorder_->encoder();
  record::TaskRun& r = run_scratch_;  // its strings keep their storage from run to run
  for (const RunNote& n : notes) {
    r.task = n.id;
    r.key = n.key;
    r.function = state_.function_name(n.function);
    r.worker = state_.worker_name(n.worker);
    r.campaign = n.campaign;
    r.thread = n.thread;
    r.submitted_us = n.submitted_us != 0 ? n.submitted_us : n.placed_us;
    r.ready_us = std::max(r.submitted_us, n.ready_us);
    r.placed_us = std::max(r.ready_us, n.placed_us);
    r.received_us = std::max(r.placed_us, n.received_us);
    if (n.status == 2) {  // lost with its worker: from its placement to the loss
      r.start_us = r.placed_us;
      r.end_us = r.received_us;
    } else {
      r.end_us = std::max(r.placed_us, r.received_us - static_cast<std::int64_t>(n.return_us));
      r.start_us = std::max(r.placed_us, r.end_us - static_cast<std::int64_t>(n.run_us));
    }
    r.fetch_us = n.fetch_us;
    r.fetch_bytes = n.fetch_bytes;
    r.fetch_peers = n.fetch_peers;
    r.result_bytes = n.result_bytes;
    r.status = static_cast<record::RunStatus>(n.status);
    r.attempt = n.attempt;
    r.preemptions = n.preemptions;
    r.error_type = n.error_type;
    r.error = n.error;
    enc.task_run(r);
  }
  notes.clear();
  recorder_->end_turn();
}

void Scheduler::record_worker_joined(const protocol::HelloRequest& hello, const Now& now) {
  if (!recorder_) return;
  record::WorkerEvent e;
  e.time_us = now.unix_us;
  e.worker = hello.name;
  e.what = record::WorkerEvent::What::joined;
  e.host = hello.host;
  e.pool = hello.pool;
  e.job = hello.job_id;
  e.nthreads = hello.nthreads;
  recorder_->encoder().worker_event(e);
}

void Scheduler::record_departure(const Departure& d, const Now& now) {
  last_sample_.erase(d.id);
  if (!recorder_) return;
  record::WorkerEvent e;
  e.time_us = now.unix_us;
  e.worker = d.name;
  // On purpose (goodbye, retired, a restart): left; anything else (silence, a broken link, its
  // job ended under it): lost.
  const bool on_purpose = d.why.rfind("said goodbye", 0) == 0 || d.why == "retired" || d.retired_by_pool ||
                          d.why.find("restart") != std::string::npos;
  e.what = on_purpose ? record::WorkerEvent::What::left : record::WorkerEvent::What::lost;
  e.pool = d.pool;
  e.job = d.job_id;
  e.why = d.why;
  recorder_->encoder().worker_event(e);
}

void Scheduler::record_heartbeat(WorkerId id, const protocol::HeartbeatEvent& hb, const Now& now) {
  auto [it, added] = last_sample_.try_emplace(id, Clock::time_point{});
  if (!added && now.mono - it->second < kSampleEvery) return;
  it->second = now.mono;
  const WorkerRec* w = nullptr;
  if (auto found = state_.workers().find(id); found != state_.workers().end()) w = &found->second;
  if (w == nullptr) return;
  history_->worker(w->name, now.unix_ms, hb.cpu, hb.memory_rss);
  if (!recorder_) return;
  record::WorkerSample s;
  s.time_us = now.unix_us;
  s.worker = w->name;
  s.cpu = hb.cpu;
  s.memory = hb.memory_rss;
  s.memory_limit = w->memory_limit;
  s.spilled = hb.spilled_bytes;
  s.executing = hb.executing;
  s.nthreads = w->nthreads;
  recorder_->encoder().worker_sample(s);
}

void Scheduler::record_pool(Pool& pool, const PoolState::Ended& ended, const Now& now) {
  std::uint32_t connected = 0;
  for (const auto& [wid, w] : state_.workers()) connected += w.pool == pool.name();
  const protocol::PoolStatus st = pool.status(connected);
  history_->pool(pool.name(), now.unix_ms, st.target, st.workers, st.running, st.pending);
  PoolSeen& seen = pools_seen_[pool.name()];
  if (!recorder_) return;
  record::Encoder& enc = recorder_->encoder();
  auto event = [&](record::PoolEvent::What what, const std::string& job, const std::string& reason) {
    record::PoolEvent e;
    e.time_us = now.unix_us;
    e.pool = pool.name();
    e.what = what;
    e.job = job;
    e.reason = reason;
    e.target = st.target;
    e.workers = st.workers;
    e.running = st.running;
    e.pending = st.pending;
    enc.pool_event(e);
  };
  using What = record::PoolEvent::What;
  if (!seen.known || seen.target != st.target) {
    event(What::scaled, "", (st.adaptive ? "adapt: " : "scale: ") + std::to_string(st.target) + " workers wanted");
  }
  for (const auto& [id, job] : pool.jobs()) {
    auto was = seen.jobs.find(id);
    if (was == seen.jobs.end()) {
      event(job.state == jobqueue::JobState::running ? What::started : What::submitted, id, job.reason);
      seen.jobs[id] = job.state;
    } else if (was->second != job.state && job.state == jobqueue::JobState::running) {
      event(What::started, id, job.detail);
      was->second = job.state;
    }
  }
  for (const auto& [id, how] : ended) {
    bool failed = false;
    for (const auto& f : pool.failed_jobs()) failed = failed || f.info.id == id;
    event(failed ? What::failed : What::ended, id, how);
    seen.jobs.erase(id);
  }
  // Jobs gone without a poll's word (cancelled by the pool, a local process reaped).
  for (auto it = seen.jobs.begin(); it != seen.jobs.end();) {
    if (pool.jobs().count(it->first) == 0) {
      event(What::cancelled, it->first, "");
      it = seen.jobs.erase(it);
    } else {
      ++it;
    }
  }
  seen.known = true;
  seen.target = st.target;
}

void Scheduler::handle_report(ClientId c, const protocol::ReportRequest& req) {
  const std::string* identity = identity_of(Role::client, c);
  if (identity == nullptr) return;
  // Built off the loop (a night's record takes seconds to read): the reply comes with a later
  // turn, through the command runner's continuation.
  std::shared_ptr<record::Recorder> recorder = recorder_;
  if (recorder) recorder->end_turn();
  commands_.post([this, recorder, req, who = *identity]() -> jobqueue::CommandRunner::Continuation {
    auto reply = std::make_shared<protocol::ReportReply>(make_report(recorder.get(), req));
    return [this, reply, who] {
      if (peers_.count(who) == 0) return;  // the client left meanwhile
      protocol::send<MessageType::report_reply>(*channels_, who, *reply);
    };
  });
}

}  // namespace herd::scheduler
