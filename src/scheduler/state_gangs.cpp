// Gangs: N tasks placed together on N distinct workers, each member knowing its rank.
//
// Placement is all or nothing, and only on workers with an idle thread and free resources now,
// so every member starts at once and no gang holds part of the cluster while it waits for the
// rest. A gang that cannot be placed now waits without holding back other tasks; the oldest
// such gang reserves the workers it will use (they finish what they run and take nothing new),
// so a stream of small tasks cannot starve it, and only one gang reserves at a time, so two
// gangs cannot deadlock each other. A gang the connected workers could never hold (too few
// offer its resources) is reported as such, and reconsidered when a worker joins.
//
// A member's success is held back until every rank succeeded; the first failure (a raise, a
// worker lost, a member handed back) aborts the others' communicators (gang_abort), waits
// until every member has reported, then retries the whole gang or fails every member with the
// first error, which names the rank.
//
// The rendezvous: each member's communicator sends gang_join with its ring address (and rank 0
// a ncclUniqueId); when all have joined, each gets everybody's (gang_ready).
#include <algorithm>

#include "common/logging.hpp"
#include "common/security.hpp"
#include "herd/collective.hpp"
#include "scheduler/state.hpp"

namespace herd::scheduler {

namespace {

/// The gang attempt's secret: the ring derives its key from it (256 bits from the kernel).
std::string random_token() { return security::random_hex(32); }

}  // namespace

void SchedulerState::gang_member_added(const protocol::TaskSpec& spec) {
  Task* t = graph_.find(spec.id);
  if (t == nullptr || t->gang != spec.gang) return;  // a resend
  Gang& g = gangs_[spec.gang];
  std::string bad;
  if (spec.gang_size == 0 || spec.gang_size > 65536) {
    bad = "gang size " + std::to_string(spec.gang_size) + " is out of range (1..65536)";
  } else if (spec.gang_rank >= spec.gang_size) {
    bad = "rank " + std::to_string(spec.gang_rank) + " is not below the gang size " + std::to_string(spec.gang_size);
  } else if (spec.id != spec.gang + spec.gang_rank) {
    bad = "a gang member's task id must be the gang id plus its rank";
  } else if (g.size != 0 && g.size != spec.gang_size) {
    bad = "members disagree on the gang size (" + std::to_string(g.size) + " vs " + std::to_string(spec.gang_size) + ")";
  }
  if (bad.empty() && g.size == 0) {
    g.id = spec.gang;
    g.size = spec.gang_size;
    g.members.assign(g.size, 0);
    g.worker.assign(g.size, kNoWorker);
    g.reported.assign(g.size, false);
    g.done.resize(g.size);
    g.joins.resize(g.size);
    g.retries_left = spec.retries + spec.preemptions;  // a gang keeps one budget for both
  }
  if (bad.empty() && g.members[spec.gang_rank] != 0) bad = "rank " + std::to_string(spec.gang_rank) + " submitted twice";
  if (!bad.empty() || g.error) {
    // A malformed gang can never run: fail whatever arrived of it, now and later.
    if (!g.error) {
      g.error = std::make_unique<protocol::ErrorInfo>(
          protocol::ErrorInfo{"std::invalid_argument", "malformed gang: " + bad, graph_.key_of(*t), ""});
    }
    graph_.fail(spec.id, *g.error, fx_);
    for (TaskId m : g.members) {
      if (m != 0) graph_.fail(m, *g.error, fx_);
    }
    return;
  }
  g.members[spec.gang_rank] = spec.id;
  ++g.registered;
}

void SchedulerState::gang_member_ready(const Task& member) {
  auto it = gangs_.find(member.gang);
  if (it == gangs_.end()) {
    // The gang finished long ago and this member's result was lost with its worker: one rank
    // cannot be recomputed without the others.
    graph_.fail(member.id, {"herd::WorkerLostError",
                            "the result of gang member " + graph_.key_of(member) +
                                " was lost with its worker; a gang member cannot be recomputed alone",
                            graph_.key_of(member), ""},
                fx_);
    apply(fx_);
    return;
  }
  Gang& g = it->second;
  if (g.running || g.waiting || g.registered < g.size) return;  // the last member to come enqueues it
  for (TaskId m : g.members) {
    const Task* mt = graph_.find(m);
    if (mt != nullptr && mt->status == TaskStatus::ready) continue;
    if (mt != nullptr && mt->status == TaskStatus::waiting) return;  // it comes back when ready
    // A member failed before it could run (an input failed, or it was released): so does the gang.
    protocol::ErrorInfo e{"herd::CancelledError", "gang member " + std::to_string(m - g.id) + " cannot run", "", ""};
    if (mt != nullptr && mt->error) e = *mt->error;
    const std::vector<TaskId> members = g.members;
    release_gang_reservations(g.id);
    gangs_.erase(it);
    for (TaskId other : members) graph_.fail(other, e, fx_);
    apply(fx_);
    return;
  }
  g.waiting = true;
  gangs_waiting_.push_back(g.id);
}

void SchedulerState::release_gang_reservations(TaskId gang) {
  for (auto& [id, w] : workers_) {
    if (w.reserved_gang != gang) continue;
    w.reserved_gang = 0;
    refresh(w);
  }
}

void SchedulerState::place_gangs(const Now& now) {
  bool reserved = false;  // only the oldest gang that must wait reserves workers
  for (auto it = gangs_waiting_.begin(); it != gangs_waiting_.end();) {
    auto g = gangs_.find(*it);
    if (g == gangs_.end() || !g->second.waiting) {
      it = gangs_waiting_.erase(it);
      continue;
    }
    Gang& gang = g->second;
    if (!gang.never.empty()) {
      ++it;
      continue;
    }
    const GangPlacement p = place_gang(gang, now, /*may_reserve=*/!reserved);
    if (p == GangPlacement::placed) {
      gang.waiting = false;
      it = gangs_waiting_.erase(it);
      continue;
    }
    if (p == GangPlacement::wait) reserved = true;
    ++it;
  }
}

SchedulerState::GangPlacement SchedulerState::place_gang(Gang& g, const Now& now, bool may_reserve) {
  const Task& first = *graph_.find(g.members[0]);
  const Shape& s = shapes_[first.shape];
  auto fits_time = [&](const WorkerRec& w, const Task& t) {
    return t.duration_s == 0 || w.end_time == 0 || now.unix_s() + static_cast<std::int64_t>(t.duration_s) <= w.end_time;
  };
  auto startable = [&](const WorkerRec& w) {
    if (w.retiring || w.suspect != 0 || w.reserved_for != 0 || w.held_by != 0) return false;
    if (w.reserved_gang != 0 && w.reserved_gang != g.id) return false;
    if (w.memory_limit > 0 && w.memory_rss > w.memory_limit / 10 * 9) return false;
    if ((!s.holds_cores && slot_tasks(w) >= w.nthreads) || !fits_time(w, first)) return false;
    for (const auto& [r, amount] : s.need_ids) {
      if (w.free[r] + 1e-9 < amount) return false;
    }
    return true;
  };
  // Members share the gang's options: one shape, one duration.
  std::vector<WorkerRec*> chosen;
  for (auto& [id, w] : workers_) {
    if (offers(w, s) && startable(w)) chosen.push_back(&w);
  }
  if (chosen.size() >= g.size) {
    // Reserved ones first (they drained for it), then the least loaded.
    std::sort(chosen.begin(), chosen.end(), [&](const WorkerRec* a, const WorkerRec* b) {
      if ((a->reserved_gang == g.id) != (b->reserved_gang == g.id)) return a->reserved_gang == g.id;
      return a->processing.size() * b->nthreads < b->processing.size() * a->nthreads;
    });
    chosen.resize(g.size);
    release_gang_reservations(g.id);
    g.attempt = g.next_attempt++;
    g.running = true;
    g.failing = false;
    g.requeue_free = false;
    g.outstanding = g.size;
    g.error.reset();
    g.joined = 0;
    for (std::uint32_t rank = 0; rank < g.size; ++rank) {
      g.worker[rank] = chosen[rank]->id;
      g.reported[rank] = false;
      g.done[rank].reset();
      g.joins[rank] = {};
      protocol::ExecuteTask& e = dispatch(*graph_.find(g.members[rank]), *chosen[rank]);
      e.gang = g.id;
      e.gang_rank = rank;
      e.gang_size = g.size;
      e.gang_attempt = g.attempt;
    }
    HERD_LOG(debug) << "gang " << graph_.key_of(first) << " (" << g.size << " ranks) placed, attempt " << g.attempt;
    return GangPlacement::placed;
  }
  // Could the connected workers hold it once they are idle?
  std::vector<WorkerRec*> could;
  for (auto& [id, w] : workers_) {
    if (!w.retiring && offers(w, s) && fits_time(w, first)) could.push_back(&w);
  }
  if (could.size() < g.size) {
    g.never = "gang " + graph_.key_of(first) + " needs " + std::to_string(g.size) + " workers offering its resources at once; " +
              std::to_string(could.size()) + " connected worker(s) do";
    release_gang_reservations(g.id);
    return GangPlacement::never;
  }
  if (!may_reserve) {
    release_gang_reservations(g.id);
    return GangPlacement::wait;
  }
  // Reserve the least loaded of them: they finish what they run, take nothing new, and the
  // gang starts once enough of them have an idle thread.
  std::sort(could.begin(), could.end(), [&](const WorkerRec* a, const WorkerRec* b) {
    if ((a->reserved_gang == g.id) != (b->reserved_gang == g.id)) return a->reserved_gang == g.id;
    return a->processing.size() * b->nthreads < b->processing.size() * a->nthreads;
  });
  std::uint32_t reserved = 0;
  for (WorkerRec* w : could) {
    if (reserved == g.size) break;
    if (w->reserved_gang != 0 && w->reserved_gang != g.id) continue;
    if (w->suspect != 0 || w->reserved_for != 0 || w->held_by != 0) continue;
    if (w->reserved_gang != g.id) {
      w->reserved_gang = g.id;
      refresh(*w);
    }
    ++reserved;
  }
  return GangPlacement::wait;
}

bool SchedulerState::gang_result(WorkerRec& w, protocol::TaskResult& r, const Now& now) {
  const Task* t = graph_.find(r.id);
  if (t == nullptr || t->gang == 0) return false;
  auto it = gangs_.find(t->gang);
  if (it == gangs_.end() || !it->second.running) return false;  // cancelled: the graph drops it
  Gang& g = it->second;
  const std::uint32_t rank = t->gang_rank;
  if (rank >= g.size || g.worker[rank] != w.id || g.reported[rank] || t->status != TaskStatus::processing) {
    return false;  // not this attempt's: the graph frees it
  }
  g.reported[rank] = true;
  --g.outstanding;
  if (!r.handed_back && !r.missing_input) record_run(t, w, r, now);
  if (g.failing) {
    if (r.ok) out(w.id).free.push_back(r.id);  // the attempt failed: nobody wants this result
  } else if (r.ok) {
    g.done[rank] = std::make_unique<protocol::TaskResult>(std::move(r));
  } else if (r.handed_back || r.missing_input) {
    gang_failed(g, rank,
                {"herd::GangAborted", r.handed_back ? "its worker gave it back unstarted" : "an input could not be fetched",
                 graph_.key_of(*t), w.name},
                false);
  } else {
    r.error.worker = w.name;
    gang_failed(g, rank, std::move(r.error), true);
  }
  gang_settle(g);
  return true;
}

void SchedulerState::gang_failed(Gang& g, std::uint32_t rank, protocol::ErrorInfo error, bool uses_retry) {
  if (g.failing) return;  // the first failure is the cause; the rest are its echoes
  g.failing = true;
  g.requeue_free = !uses_retry;
  error.message = "rank " + std::to_string(rank) + " of " + std::to_string(g.size) + " failed: " + error.message;
  if (const Task* t = graph_.find(g.members[rank])) error.task = graph_.key_of(*t);
  g.error = std::make_unique<protocol::ErrorInfo>(error);
  HERD_LOG(warning) << "gang " << error.task << ": " << error.type << ": " << error.message;
  for (std::uint32_t r = 0; r < g.size; ++r) {
    if (g.done[r]) {  // held-back successes are void
      if (workers_.count(g.worker[r])) out(g.worker[r]).free.push_back(g.members[r]);
      g.done[r].reset();
    }
    if (g.reported[r] || !workers_.count(g.worker[r])) continue;
    out(g.worker[r]).gang_abort.push_back({g.id, g.attempt, error.type + ": " + error.message});
  }
}

void SchedulerState::gang_settle(Gang& g) {
  if (!g.running || g.outstanding > 0) return;
  g.running = false;
  const TaskId id = g.id;
  if (!g.failing) {
    for (std::uint32_t rank = 0; rank < g.size; ++rank) {
      protocol::TaskResult& r = *g.done[rank];
      WorkerRec* w = find_worker(g.worker[rank]);
      if (w == nullptr) continue;  // cannot happen: a lost holder fails the attempt
      graph_.finished(r.id, w->id, r.nbytes, fx_);
      if (const Task* t = graph_.find(r.id); t != nullptr && t->in_memory()) {
        w->has.insert(r.id);
        keep_inline(r.id, r.inline_data);
      }
    }
    gangs_.erase(id);
    return;
  }
  g.failing = false;
  if (g.requeue_free || g.retries_left > 0) {
    if (!g.requeue_free) --g.retries_left;
    HERD_LOG(info) << "gang " << g.error->task << ": retrying all " << g.size << " ranks (" << g.retries_left
                   << " retries left)";
    for (TaskId m : g.members) graph_.requeue(m, fx_);
    return;
  }
  const protocol::ErrorInfo error = *g.error;
  const std::vector<TaskId> members = g.members;
  gangs_.erase(id);  // g is gone from here on
  for (TaskId m : members) graph_.fail(m, error, fx_);
}

void SchedulerState::gang_worker_lost(const WorkerRec& w, std::vector<TaskId>& processing) {
  std::vector<TaskId> touched;
  for (auto& [gid, g] : gangs_) {
    if (!g.running) continue;
    for (std::uint32_t rank = 0; rank < g.size; ++rank) {
      if (g.worker[rank] != w.id) continue;
      if (!g.reported[rank]) {
        processing.erase(std::remove(processing.begin(), processing.end(), g.members[rank]), processing.end());
        g.reported[rank] = true;
        --g.outstanding;
        gang_failed(g, rank, {"herd::WorkerLostError", "its worker " + w.name + " was lost", "", w.name}, true);
      } else if (g.done[rank]) {
        gang_failed(g, rank, {"herd::WorkerLostError", "its worker " + w.name + " was lost with its result", "", w.name},
                    true);
      }
      if (std::find(touched.begin(), touched.end(), gid) == touched.end()) touched.push_back(gid);
    }
  }
  for (TaskId gid : touched) {
    if (auto it = gangs_.find(gid); it != gangs_.end()) gang_settle(it->second);
  }
}

void SchedulerState::cancel_gang(TaskId gang, const std::string& why) {
  auto it = gangs_.find(gang);
  if (it == gangs_.end()) return;
  Gang g = std::move(it->second);
  gangs_.erase(it);
  release_gang_reservations(gang);
  for (std::uint32_t r = 0; r < g.size && g.running; ++r) {
    if (!workers_.count(g.worker[r])) continue;
    if (g.done[r]) out(g.worker[r]).free.push_back(g.members[r]);
    if (!g.reported[r]) out(g.worker[r]).gang_abort.push_back({g.id, g.attempt, why});
  }
  for (TaskId m : g.members) {
    if (m != 0) graph_.cancel(m, fx_);
  }
}

void SchedulerState::gang_join(WorkerId id, const protocol::GangJoinRequest& req) {
  WorkerRec* wp = find_worker(id);
  if (wp == nullptr) return;
  protocol::GangReadyEvent ready;
  ready.gang = req.gang;
  ready.attempt = req.attempt;
  auto it = gangs_.find(req.gang);
  Gang* g = it == gangs_.end() ? nullptr : &it->second;
  if (g == nullptr || !g->running || req.attempt != g->attempt || req.rank >= g->size || g->worker[req.rank] != id) {
    ready.error = "gang attempt " + std::to_string(req.attempt) + " is not running (it was aborted, cancelled or retried)";
  } else if (g->failing) {
    ready.error = g->error->type + ": " + g->error->message;
  }
  if (!ready.error.empty()) {
    out(id).gang_ready.push_back(std::move(ready));
    return;
  }
  if (g->joins[req.rank].ring_address.empty()) ++g->joined;
  g->joins[req.rank] = req;
  if (g->joined < g->size) return;
  // Everybody is here: choose the backend once, for all ranks.
  bool all_gpu = !g->joins[0].nccl_id.empty();
  std::string refuse;
  for (std::uint32_t r = 0; r < g->size; ++r) {
    const auto& j = g->joins[r];
    all_gpu = all_gpu && j.has_gpu && j.wanted != static_cast<std::uint8_t>(CollectiveBackend::cpu_ring);
  }
  for (std::uint32_t r = 0; r < g->size && !all_gpu; ++r) {
    if (g->joins[r].wanted == static_cast<std::uint8_t>(CollectiveBackend::nccl)) {
      refuse = "rank " + std::to_string(r) + " asked for the NCCL backend, but not every rank holds a GPU "
               "in a herd built with NCCL (give the gang TaskOptions::gpus(1))";
    }
  }
  ready.backend = static_cast<std::uint8_t>(all_gpu ? CollectiveBackend::nccl : CollectiveBackend::cpu_ring);
  ready.token = random_token();
  for (const auto& j : g->joins) ready.ring_addresses.push_back(j.ring_address);
  if (all_gpu) ready.nccl_id = g->joins[0].nccl_id;
  ready.error = refuse;
  for (std::uint32_t r = 0; r < g->size; ++r) {
    if (workers_.count(g->worker[r])) out(g->worker[r]).gang_ready.push_back(ready);
  }
}

}  // namespace herd::scheduler
