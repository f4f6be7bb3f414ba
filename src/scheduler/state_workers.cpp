// SchedulerState and its workers: joining and being lost (their running tasks back to ready,
// the results only they held recomputed), what they tell the scheduler (heartbeats, results,
// secession, goodbye, retirement, journal reads, their jobs' ends), and retirements in
// progress.
#include <algorithm>

#include "common/logging.hpp"
#include "common/util.hpp"
#include "scheduler/state.hpp"
#include "scheduler/state_internal.hpp"

namespace herd::scheduler {

// ---- peers --------------------------------------------------------------------------------

WorkerId SchedulerState::add_worker(const protocol::HelloRequest& hello, const Now& now) {
  const WorkerId id = next_worker_id_++;
  WorkerRec& w = workers_[id];
  w.id = id;
  w.name = hello.name;
  w.host = hello.host;
  w.address = hello.data_address;
  w.job_id = hello.job_id;
  w.pool = hello.pool;
  w.nthreads = std::max<std::uint32_t>(1, hello.nthreads);
  w.end_time = hello.end_time;
  w.gpus = hello.gpus;
  w.memory_limit = hello.memory_limit;
  if (worker_names_.size() <= id) worker_names_.resize(id + 1u);
  worker_names_[id] = w.name;
  w.last_seen = now.mono;
  w.idle_since = now.mono;
  for (const auto& [name, amount] : hello.resources) {
    if (amount > 0) w.resources[name] = amount;
  }
  w.offered.assign(resource_index_.size(), 0.0);
  for (const auto& [name, amount] : w.resources) {
    if (auto it = resource_index_.find(name); it != resource_index_.end()) w.offered[it->second] = amount;
  }
  w.free = w.offered;
  w.free_pos.assign(shapes_.size(), -1);
  w.open_pos.assign(shapes_.size(), -1);
  for (auto& s : shapes_) {
    if (!offers(w, s)) continue;
    w.shapes.push_back(s.id);
    ++s.offered_by;
  }
  refresh(w);
  by_address_[w.address] = id;
  out_.cluster_changed = true;
  HERD_LOG(info) << "worker " << w.name << " (" << w.address << ", " << w.nthreads << " threads) registered as #" << id;
  // Scatters that waited for a first worker.
  auto backlog = std::move(scatter_backlog_);
  scatter_backlog_.clear();
  for (auto& waiting : backlog) dispatch_scatter(waiting.id, std::move(waiting.payload), std::move(waiting.source));
  // Tasks whose walltime fit no worker may fit this one; gangs that could not fit may now.
  for (TaskId tid : too_long_) {
    if (const Task* t = graph_.find(tid); t != nullptr && t->status == TaskStatus::ready) push_ready(*t);
  }
  too_long_.clear();
  for (auto& [gid, g] : gangs_) g.never.clear();
  check();
  return id;
}

void SchedulerState::heard_from_worker(WorkerId id, const Now& now) {
  if (WorkerRec* w = find_worker(id)) w->last_seen = now.mono;
}

void SchedulerState::worker_lost(WorkerId id, const std::string& why, bool count_deaths) {
  remove_worker(id, why, count_deaths);
  check();
}

void SchedulerState::remove_worker(WorkerId id, const std::string& why, bool count_deaths) {
  auto it = workers_.find(id);
  if (it == workers_.end()) return;
  WorkerRec& w = it->second;
  if (count_deaths) {
    HERD_LOG(warning) << "worker " << w.name << " lost (" << why << "); " << w.processing.size() << " tasks running, "
                      << w.has.size() << " results held";
  } else {
    HERD_LOG(info) << "worker " << w.name << " left (" << why << ")";
  }
  // Out of every index first.
  for (std::uint16_t sid : w.shapes) {
    Shape& s = shapes_[sid];
    list_set(s.free, w.free_pos, sid, w.id, false, workers_, &WorkerRec::free_pos);
    list_set(s.open, w.open_pos, sid, w.id, false, workers_, &WorkerRec::open_pos);
    if (!w.retiring) {
      --s.offered_by;
      if (s.offered_by == 0 && graph_.ready_of_shape(sid) > 0) s.unrunnable_dirty = true;
    }
  }
  overloaded_.erase(id);
  for (auto c = cuts_.begin(); c != cuts_.end();) {
    c = c->first.first == id || c->first.second == id ? cuts_.erase(c) : std::next(c);
  }
  w.overloaded = false;
  if (w.retiring) --retiring_;
  // The job goes too when the pool let the worker go or the worker died in it. A worker that
  // left on its own (drain signal, walltime, requeue) leaves its job alone: a requeued job's
  // next incarnation must not be cancelled for its predecessor.
  out_.departed.push_back(
      {id, w.name, w.pool, w.job_id, why, w.retired_by_pool || !w.retiring, !w.processing.empty() || !w.has.empty(),
       w.address, w.retired_by_pool});
  std::vector<TaskId> processing;
  processing.reserve(w.processing.size());
  for (const auto& [tid, shape] : w.processing) processing.push_back(tid);
  std::vector<TaskId> held(w.has.begin(), w.has.end());
  const std::string name = w.name;
  if (options_.record) {
    // Its runs end here, lost (they may run again elsewhere): the record shows where and when.
    for (TaskId tid : processing) {
      Task* t = graph_.find(tid);
      if (t == nullptr || t->scattered) continue;
      if (RunNote* n = note_run(*t, id, 2, clock_us_)) {
        n->error_type = "herd::WorkerLost";
        n->error = "worker " + name + " " + why;
      }
    }
  }
  // Big scatters it was fetching from their clients: another worker fetches them (a few times:
  // a value that kills every worker that takes it must not take them all).
  std::vector<std::pair<TaskId, std::string>> rescatter;
  if (!scatter_sources_.empty()) {
    std::erase_if(processing, [&](TaskId tid) {
      auto src = scatter_sources_.find(tid);
      if (src == scatter_sources_.end() || ++src->second.losses > options_.allowed_failures) return false;
      rescatter.emplace_back(tid, src->second.address);
      graph_.unstart(tid);
      return true;
    });
  }
  const WorkerRec gone = std::move(w);
  workers_.erase(it);
  if (auto a = by_address_.find(gone.address); a != by_address_.end() && a->second == id) by_address_.erase(a);
  gang_worker_lost(gone, processing);
  multinode_worker_lost(gone, why, processing);
  graph_.worker_lost(id, processing, held, options_.allowed_failures, fx_, count_deaths, name);
  for (auto& [tid, source] : rescatter) dispatch_scatter(tid, {}, std::move(source));
  if (!replications_.empty()) {  // copies it was making are made elsewhere
    std::vector<TaskId> ids;
    for (auto& [tid, r] : replications_) {
      if (std::erase(r.copying, id) > 0) ids.push_back(tid);
    }
    for (TaskId tid : ids) advance_replication(tid);
  }
  out_.workers.erase(id);  // nothing more to send it (a shutdown already queued is kept below)
  if (gone.reserved_gang != 0) release_gang_reservations(gone.reserved_gang);
  out_.cluster_changed = true;
  apply(fx_);
}

// ---- messages from workers ----------------------------------------------------------------

void SchedulerState::heartbeat(WorkerId id, const protocol::HeartbeatEvent& hb, const Now& now) {
  WorkerRec* w = find_worker(id);
  if (w == nullptr) return;
  w->last_seen = now.mono;
  w->memory_rss = hb.memory_rss;
  w->executing = hb.executing;
  w->spilled_bytes = hb.spilled_bytes;
  w->paused = hb.paused;
  refresh(*w);  // a worker near its memory limit stops taking work, and comes back under it
  check();
}

void SchedulerState::task_results(WorkerId id, protocol::TaskResultsEvent& ev, const Now& now) {
  WorkerRec* wp = find_worker(id);
  if (wp == nullptr) return;
  WorkerRec& w = *wp;
  w.last_seen = now.mono;
  for (auto& r : ev.results) {
    if (!r.handed_back) w.progressed = now.mono;  // its queue moved (not: tasks asked back)
    if (auto p = w.processing.find(r.id); p != w.processing.end()) {
      for (const auto& [res, amount] : shapes_[p->second].need_ids) w.free[res] += amount;
      if (shapes_[p->second].holds_cores) --w.core_tasks;
      w.processing.erase(p);
      if (!w.seceded.empty() && std::erase(w.seceded, r.id) > 0) {
        --w.nthreads;  // the thread it ran on ends with it
        out_.cluster_changed = true;
      }
    }
    if (w.suspect == r.id) w.suspect = 0;
    if (!multinode_runs_.empty()) multinode_result(w, r);
    if (gang_result(w, r, now)) continue;
    Task* t = graph_.find(r.id);
    if (!scatter_sources_.empty() && t != nullptr && t->scattered && t->worker == w.id) scatter_sources_.erase(r.id);
    if (!r.handed_back && !r.missing_input) record_run(t, w, r, now);
    if (r.ok) {
      if (t != nullptr && !t->scattered) {
        const double us = static_cast<double>(r.duration_us);
        avg_task_us_ = avg_task_us_ < 0 ? us : 0.9 * avg_task_us_ + 0.1 * us;
        if (t->function >= function_us_.size()) function_us_.resize(t->function + 1u, -1);
        double& fn = function_us_[t->function];
        fn = fn < 0 ? us : 0.9 * fn + 0.1 * us;
      }
      if (options_.full_results && t != nullptr && t->keyed && !t->scattered && t->status == TaskStatus::processing &&
          t->worker == w.id) {
        if (r.nbytes == r.inline_data.size()) {
          out_.journal.emplace_back(graph_.user_key(*t), r.inline_data);
        } else {
          // Over the message limit: it stays on its worker, never in this process; the journal
          // does not keep it, and a restarted scheduler computes it again.
          HERD_LOG(info) << "keyed result " << graph_.user_key(*t) << " (" << r.nbytes
                         << " bytes) is too big for the journal: it stays on " << w.name;
        }
      }
      graph_.finished(r.id, w.id, r.nbytes, fx_);
      if (!trouble_.empty()) trouble_.erase(r.id);
      if (t = graph_.find(r.id); t != nullptr && t->in_memory() &&
                                 std::find(t->who_has.begin(), t->who_has.end(), w.id) != t->who_has.end()) {
        w.has.insert(r.id);
        keep_inline(r.id, r.inline_data);
        if (!replications_.empty()) advance_replication(r.id);  // replicate() before it was done
      }
    } else if (r.handed_back) {
      graph_.requeue(r.id, fx_);  // unstarted task given back (retiring, stolen, cancelled)
    } else if (r.missing_input) {
      missing_input(w, r, now);
    } else if (t != nullptr && t->scattered && t->status == TaskStatus::processing && t->worker == w.id &&
               r.error.type == protocol::kScatterSourceUnreachable) {
      scatter_source_unreachable(*t, r.error.message);
    } else {
      r.error.worker = w.name;
      graph_.failed(r.id, std::move(r.error), fx_, r.preempted);
    }
  }
  if (w.processing.empty()) w.idle_since = now.mono;
  for (TaskId tid : ev.acquired) {
    graph_.add_holder(tid, w.id);
    if (const Task* t = graph_.find(tid); t != nullptr && t->in_memory()) {
      w.has.insert(tid);
      if (!relocations_.empty()) relocated(tid, w.id);
    } else {
      out(w.id).free.push_back(tid);
    }
    if (auto r = replications_.find(tid); r != replications_.end()) {  // the next round
      std::erase(r->second.copying, w.id);
      advance_replication(tid);
    }
  }
  for (const auto& loc : ev.acquire_failed) {
    if (relocations_.count(loc.id)) relocation_failed(loc.id, "worker " + w.name + " could not copy it either");
    if (auto r = replications_.find(loc.id); r != replications_.end()) {
      std::erase(r->second.copying, w.id);
      ++r->second.failures;
      advance_replication(loc.id);
    }
  }
  refresh(w);
  apply(fx_);
  check();
}

void SchedulerState::task_seceded(WorkerId id, const protocol::SecedeEvent& ev, const Now& now) {
  WorkerRec* wp = find_worker(id);
  if (wp == nullptr) return;
  WorkerRec& w = *wp;
  w.last_seen = now.mono;
  for (TaskId tid : ev.seceded) {
    // Only a task still processing there (one that ended meanwhile gave nothing back).
    if (!w.processing.count(tid) || std::find(w.seceded.begin(), w.seceded.end(), tid) != w.seceded.end()) continue;
    w.seceded.push_back(tid);
    ++w.nthreads;
    out_.cluster_changed = true;
  }
  for (TaskId tid : ev.rejoined) {
    if (std::erase(w.seceded, tid) == 0) continue;
    --w.nthreads;
    out_.cluster_changed = true;
  }
  refresh(w);
  check();
}

void SchedulerState::goodbye(WorkerId id, const std::string& reason) {
  WorkerRec* w = find_worker(id);
  if (w == nullptr) return;
  const bool count_deaths = !w->retiring;  // a draining worker leaves on purpose
  remove_worker(id, "said goodbye: " + reason, count_deaths);
  // Acknowledged, so the worker knows everything it sent before arrived (it leaves with
  // _exit, which flushes nothing).
  out(id).shutdown = "goodbye received";
  check();
}

void SchedulerState::retire_request(WorkerId id, const std::string& reason, const Now& now) {
  retire(id, reason, false, now);
}

void SchedulerState::retire(WorkerId id, const std::string& why, bool by_pool, const Now& now) {
  WorkerRec* w = find_worker(id);
  if (w == nullptr) return;
  if (!w->retiring) {
    HERD_LOG(info) << "retiring worker " << w->name << ": " << why;
    w->retiring = true;
    ++retiring_;
    w->retire_since = now.mono;
    // Tasks it has not started come back; running ones finish.
    for (const auto& [tid, shape] : w->processing) out(id).cancel.push_back(tid);
    for (std::uint16_t sid : w->shapes) {
      Shape& s = shapes_[sid];
      --s.offered_by;
      if (s.offered_by == 0 && graph_.ready_of_shape(sid) > 0) s.unrunnable_dirty = true;
    }
    if (w->reserved_gang != 0) {
      const TaskId g = w->reserved_gang;
      w->reserved_gang = 0;
      release_gang_reservations(g);
    }
    refresh(*w);
    out_.cluster_changed = true;
    if (by_pool) {
      // The worker did not ask, so it does not know: its running tasks learn it
      // (this_task().draining()) with the time progress_retirements() leaves them, so that a
      // checkpointable one saves and gives up before it is handed back. A worker that asked
      // (a drain signal, its walltime) set its own deadline and is not told again.
      std::int64_t seconds = options_.retire_grace_s;
      if (w->end_time > 0) seconds = std::min(seconds, std::max<std::int64_t>(0, w->end_time - 5 - now.unix_s()));
      out(id).retiring = protocol::RetiringEvent{why, static_cast<std::uint32_t>(seconds)};
    }
  }
  if (by_pool) w->retired_by_pool = true;
  check();
}

bool SchedulerState::await_journal(TaskId id) {
  const Task* t = graph_.find(id);
  if (t == nullptr || !(t->status == TaskStatus::ready || t->status == TaskStatus::waiting)) return false;
  held_.insert(id);
  return true;
}

void SchedulerState::journal_read(TaskId id, herd::detail::PayloadPtr bytes) {
  if (held_.erase(id) == 0) return;
  const Task* t = graph_.find(id);
  if (t == nullptr) return;
  if (bytes != nullptr) {
    dispatch_scatter(id, std::move(bytes));
  } else if (t->scattered) {  // a restored campaign result, with no recipe to run instead
    graph_.fail(id, {"herd::LostInRestart", "the journal could not read the result of " + graph_.key_of(*t), graph_.key_of(*t), ""}, fx_);
    apply(fx_);
  } else if (t->status == TaskStatus::ready) {
    push_ready(*t);
  }
  check();
}

void SchedulerState::set_job_suspended(WorkerId id, bool suspended) {
  if (WorkerRec* w = find_worker(id)) w->job_suspended = suspended;
}

void SchedulerState::job_ended(const std::string& pool, const std::string& job_id, const std::string& how) {
  for (const auto& [id, w] : workers_) {
    if (w.pool == pool && w.job_id == job_id) {
      const bool deaths = !w.retiring;
      remove_worker(id, "its job " + job_id + " ended: " + how, deaths);
      break;
    }
  }
  check();
}

std::uint32_t SchedulerState::unique_results(WorkerId id, std::uint64_t* bytes) const {
  std::uint32_t n = 0;
  std::uint64_t size = 0;
  if (const WorkerRec* w = worker(id)) {
    for (TaskId key : w->has) {
      const Task* t = graph_.find(key);
      if (t == nullptr || !t->in_memory() || t->who_has.size() != 1 || !(t->wanted || t->waiters > 0)) continue;
      if (t->safe_elsewhere()) continue;
      ++n;
      size += t->nbytes;
    }
  }
  if (bytes != nullptr) *bytes = size;
  return n;
}

void SchedulerState::set_kept_for_data(const std::string& pool, const std::vector<WorkerId>& kept) {
  for (auto& [id, w] : workers_) {
    if (w.pool != pool) continue;
    const bool now_kept = std::find(kept.begin(), kept.end(), id) != kept.end();
    if (now_kept != w.kept_for_data) {
      w.kept_for_data = now_kept;
      if (now_kept) HERD_LOG(info) << "pool " << pool << " keeps worker " << w.name << " for data: " << kept_for_data_text(w);
      out_.cluster_changed = true;
    }
  }
}

std::string SchedulerState::kept_for_data_text(const WorkerRec& w) const {
  constexpr std::size_t kKeysNamed = 5;
  std::uint32_t n = 0;
  std::uint64_t size = 0;
  std::string keys;
  for (TaskId key : w.has) {
    const Task* t = graph_.find(key);
    if (t == nullptr || !t->in_memory() || t->who_has.size() != 1 || !(t->wanted || t->waiters > 0)) continue;
    if (t->safe_elsewhere()) continue;
    if (n < kKeysNamed) keys += (keys.empty() ? "" : ", ") + graph_.key_of(*t);
    ++n;
    size += t->nbytes;
  }
  if (n > kKeysNamed) keys += ", ...";
  return std::to_string(n) + " result(s) only it has (" + util::format_bytes(size) + ")" + (keys.empty() ? "" : ": " + keys);
}

void SchedulerState::progress_retirements(const Now& now) {
  if (retiring_ == 0) return;  // the common case: no walk over every worker each tick
  std::vector<WorkerId> done;
  for (auto& [id, w] : workers_) {
    if (!w.retiring) continue;
    // Running tasks may finish; past the grace they are handed back (not counted as failures).
    // The grace never runs past a few seconds before the job's own end.
    const bool grace_over = now.mono - w.retire_since > std::chrono::seconds(options_.retire_grace_s) ||
                            (w.end_time > 0 && now.unix_s() + 5 >= w.end_time);
    if (!w.processing.empty() && !grace_over) continue;
    // Results only this worker holds, that someone still needs, go to another worker first.
    std::map<WorkerId, std::vector<protocol::DepLocation>> copies;
    std::size_t unique = 0;
    // They go to the staying worker that holds least (found once: it holds no more until the
    // copies are made, so it would be the same one for every result).
    WorkerRec* to = nullptr;
    if (!w.acquire_sent) {
      for (auto& [oid, other] : workers_) {
        if (oid == id || other.retiring) continue;
        if (to == nullptr || other.has.size() < to->has.size()) to = &other;
      }
    }
    for (TaskId key : w.has) {
      const Task* t = graph_.find(key);
      if (t == nullptr || !t->in_memory() || t->who_has.size() != 1 || !(t->wanted || t->waiters > 0)) continue;
      // Copied even when its client holds the value (cheap, and a later task that takes it as
      // input then costs no recompute); but a worker is never kept for such a one: with no
      // worker to take it, it is left (Task::safe_elsewhere, TaskGraph::worker_lost).
      ++unique;
      if (w.acquire_sent) continue;
      if (to != nullptr) copies[to->id].push_back({key, {w.address}});
    }
    if (!w.acquire_sent) {
      w.acquire_sent = true;
      if (!copies.empty()) {
        for (auto& [target, keys] : copies) {
          auto& acquire = out(target).acquire;
          acquire.insert(acquire.end(), keys.begin(), keys.end());
        }
        continue;  // leave once the copies are confirmed (or the grace is over)
      }
      // Nowhere to copy to: what it holds is recomputed from lineage if needed again.
    } else if (unique > 0 && !grace_over) {
      continue;
    }
    done.push_back(id);
  }
  for (WorkerId id : done) {
    remove_worker(id, "retired", /*count_deaths=*/false);
    out(id).shutdown = "retired";
  }
}

}  // namespace herd::scheduler
