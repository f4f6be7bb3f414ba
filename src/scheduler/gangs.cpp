// Gangs: N tasks placed together on N distinct workers, each member knowing its rank.
//
// Placement is all or nothing, and only on workers with a free slot and free resources now, so
// every member starts at once and no gang ever holds part of the cluster while it waits for the
// rest (two gangs cannot deadlock each other). A gang that could fit the current workers but
// not yet blocks the tasks queued behind it, so a stream of small tasks cannot starve it.
//
// A member's success is held back until every rank succeeded; the first failure (a raise, a
// worker lost, a member handed back) aborts the others' communicators (gang_abort), waits
// until every member has reported, then retries the whole gang or fails every member with
// the first error, which names the rank.
//
// The rendezvous: each member's communicator sends gang_join with its ring address (and rank
// 0 a ncclUniqueId); when all have joined, each gets everybody's (gang_ready).
#include <algorithm>
#include <random>

#include "common/logging.hpp"
#include "herd/collective.hpp"
#include "common/security.hpp"
#include "scheduler/scheduler.hpp"

namespace herd::scheduler {

using protocol::MessageType;

namespace {

bool fits(const std::map<std::string, double>& have, const std::map<std::string, double>& need) {
  for (const auto& [r, amount] : need) {
    auto it = have.find(r);
    if (it == have.end() || it->second + 1e-9 < amount) return false;
  }
  return true;
}

}  // namespace

void Scheduler::gang_member_added(const protocol::TaskSpec& spec) {
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
    g.retries_left = spec.retries;
  }
  if (bad.empty() && g.members[spec.gang_rank] != 0) bad = "rank " + std::to_string(spec.gang_rank) + " submitted twice";
  if (!bad.empty() || g.error) {
    // A malformed gang can never run: fail whatever arrived of it, now and later.
    if (!g.error) g.error = std::make_unique<protocol::ErrorInfo>(protocol::ErrorInfo{"std::invalid_argument", "malformed gang: " + bad, t->key, ""});
    graph_.fail(spec.id, *g.error, fx_);
    for (TaskId m : g.members) {
      if (m != 0) graph_.fail(m, *g.error, fx_);
    }
    return;
  }
  g.members[spec.gang_rank] = spec.id;
  ++g.registered;
}

std::map<std::string, double> Scheduler::free_resources(const WorkerRec& w) const {
  std::map<std::string, double> free = w.resources;
  for (TaskId id : w.processing) {
    auto it = graph_.tasks().find(id);
    if (it == graph_.tasks().end()) continue;
    for (const auto& [r, amount] : it->second.resources) free[r] -= amount;
  }
  return free;
}

Scheduler::GangPlacement Scheduler::place_gang(const Task& member) {
  auto it = gangs_.find(member.gang);
  if (it == gangs_.end()) {
    // The gang finished long ago and this member's result was lost with its worker: one rank
    // cannot be recomputed without the others.
    graph_.fail(member.id, {"herd::WorkerLostError",
                            "the result of gang member " + member.key +
                                " was lost with its worker; a gang member cannot be recomputed alone",
                            member.key, ""}, fx_);
    apply(fx_);
    return GangPlacement::skip;
  }
  Gang& g = it->second;
  if (g.running || g.registered < g.size) return GangPlacement::skip;  // the rest pushes it again
  for (TaskId m : g.members) {
    const Task* mt = graph_.find(m);
    if (mt != nullptr && mt->st() == TaskState::ready) continue;
    if (mt != nullptr && (mt->st() == TaskState::waiting)) return GangPlacement::skip;
    // A member failed before it could run (an input failed, or it was released): so does the gang.
    protocol::ErrorInfo e{"herd::CancelledError", "gang member " + std::to_string(m - g.id) + " cannot run", "", ""};
    if (mt != nullptr && mt->error) e = *mt->error;
    for (TaskId other : g.members) graph_.fail(other, e, fx_);
    gangs_.erase(it);
    apply(fx_);
    return GangPlacement::skip;
  }
  const std::int64_t now_unix = std::chrono::duration_cast<std::chrono::seconds>(
                                    std::chrono::system_clock::now().time_since_epoch()).count();
  std::vector<WorkerRec*> chosen;
  std::unordered_set<std::uint32_t> used;
  for (std::uint32_t rank = 0; rank < g.size; ++rank) {
    const Task& mt = *graph_.find(g.members[rank]);
    WorkerRec* best = nullptr;
    double best_score = 0;
    for (auto& [id, w] : workers_) {
      if (used.count(id) || w.retiring || w.processing.size() >= w.nthreads) continue;
      if (w.memory_limit > 0 && w.memory_rss > w.memory_limit / 10 * 9) continue;
      if (mt.duration_s > 0 && w.end_time > 0 && now_unix + mt.duration_s > w.end_time) continue;
      if (!fits(free_resources(w), mt.resources)) continue;
      const double score = static_cast<double>(w.processing.size()) / w.nthreads;
      if (best == nullptr || score < best_score) {
        best = &w;
        best_score = score;
      }
    }
    if (best == nullptr) {
      // Could the current workers hold it once they are idle? Then wait (and hold back what
      // is queued behind it); if not, set it aside until more workers come.
      std::uint32_t could = 0;
      for (const auto& [id, w] : workers_) could += !w.retiring && fits(w.resources, mt.resources);
      return (workers_.empty() || could >= g.size) ? GangPlacement::wait : GangPlacement::set_aside;
    }
    used.insert(best->id);
    chosen.push_back(best);
  }
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
    protocol::ExecuteTask e;
    e.gang = g.id;
    e.gang_rank = rank;
    e.gang_size = g.size;
    e.gang_attempt = g.attempt;
    dispatch(*graph_.find(g.members[rank]), *chosen[rank], std::move(e));
  }
  HERD_LOG(debug) << "gang " << graph_.find(g.id)->key << " (" << g.size << " ranks) placed, attempt " << g.attempt;
  return GangPlacement::placed;
}

bool Scheduler::gang_result(WorkerRec& w, protocol::TaskResult& r) {
  const Task* t = graph_.find(r.id);
  if (t == nullptr || t->gang == 0) return false;
  auto it = gangs_.find(t->gang);
  if (it == gangs_.end() || !it->second.running) return false;  // cancelled: the graph drops it
  Gang& g = it->second;
  const std::uint32_t rank = t->gang_rank;
  if (rank >= g.size || g.worker[rank] != w.id || g.reported[rank] || t->st() != TaskState::processing) {
    return false;  // not this attempt's: the graph frees it
  }
  g.reported[rank] = true;
  --g.outstanding;
  if (!r.handed_back && !r.missing_input) record_run(t, w, r);
  if (g.failing) {
    if (r.ok) w.free_out.push_back(r.id);  // the attempt failed: nobody wants this result
  } else if (r.ok) {
    g.done[rank] = std::make_unique<protocol::TaskResult>(std::move(r));
  } else if (r.handed_back || r.missing_input) {
    gang_failed(g, rank, {"herd::GangAborted", r.handed_back ? "its worker gave it back unstarted" : "an input could not be fetched", t->key, w.name}, false);
  } else {
    r.error.worker = w.name;
    gang_failed(g, rank, std::move(r.error), true);
  }
  gang_settle(g);
  return true;
}

void Scheduler::gang_failed(Gang& g, std::uint32_t rank, protocol::ErrorInfo error, bool uses_retry) {
  if (g.failing) return;  // the first failure is the cause; the rest are its echoes
  g.failing = true;
  g.requeue_free = !uses_retry;
  error.message = "rank " + std::to_string(rank) + " of " + std::to_string(g.size) + " failed: " + error.message;
  if (const Task* t = graph_.find(g.members[rank])) error.task = t->key;
  g.error = std::make_unique<protocol::ErrorInfo>(error);
  HERD_LOG(warning) << "gang " << error.task << ": " << error.type << ": " << error.message;
  for (std::uint32_t r = 0; r < g.size; ++r) {
    if (g.done[r]) {  // held-back successes are void
      if (auto w = workers_.find(g.worker[r]); w != workers_.end()) w->second.free_out.push_back(g.members[r]);
      g.done[r].reset();
    }
    if (g.reported[r]) continue;
    auto w = workers_.find(g.worker[r]);
    if (w == workers_.end()) continue;
    protocol::send(socket_, w->second.identity, MessageType::gang_abort,
                   protocol::encode(protocol::GangAbortEvent{g.id, g.attempt, error.type + ": " + error.message}));
  }
}

void Scheduler::gang_settle(Gang& g) {
  if (!g.running || g.outstanding > 0) return;
  g.running = false;
  const TaskId id = g.id;
  if (!g.failing) {
    for (std::uint32_t rank = 0; rank < g.size; ++rank) {
      protocol::TaskResult& r = *g.done[rank];
      auto w = workers_.find(g.worker[rank]);
      if (w == workers_.end()) continue;  // cannot happen: a lost holder fails the attempt
      graph_.finished(r.id, w->first, r.nbytes, fx_);
      if (const Task* t = graph_.find(r.id); t && t->in_memory()) {
        w->second.has.insert(r.id);
        if (!r.inline_data.empty() && t->wanted) inline_results_[r.id] = std::move(r.inline_data);
      }
    }
    gangs_.erase(id);
    return;
  }
  g.failing = false;
  if (g.requeue_free || g.retries_left > 0) {
    if (!g.requeue_free) --g.retries_left;
    HERD_LOG(info) << "gang " << g.error->task << ": retrying all " << g.size << " ranks ("
                   << g.retries_left << " retries left)";
    for (TaskId m : g.members) graph_.requeue(m, fx_);
    return;
  }
  const protocol::ErrorInfo error = *g.error;
  const std::vector<TaskId> members = g.members;
  gangs_.erase(id);  // g is gone from here on
  for (TaskId m : members) graph_.fail(m, error, fx_);
}

void Scheduler::gang_worker_lost(const WorkerRec& w, std::vector<TaskId>& processing) {
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
        gang_failed(g, rank, {"herd::WorkerLostError", "its worker " + w.name + " was lost with its result", "", w.name}, true);
      }
      if (std::find(touched.begin(), touched.end(), gid) == touched.end()) touched.push_back(gid);
    }
  }
  for (TaskId gid : touched) {
    if (auto it = gangs_.find(gid); it != gangs_.end()) gang_settle(it->second);
  }
}

void Scheduler::cancel_gang(TaskId gang, const std::string& why) {
  auto it = gangs_.find(gang);
  if (it == gangs_.end()) return;
  Gang g = std::move(it->second);
  gangs_.erase(it);
  for (std::uint32_t r = 0; r < g.size && g.running; ++r) {
    auto w = workers_.find(g.worker[r]);
    if (w == workers_.end()) continue;
    if (g.done[r]) w->second.free_out.push_back(g.members[r]);
    if (!g.reported[r]) {
      protocol::send(socket_, w->second.identity, MessageType::gang_abort,
                     protocol::encode(protocol::GangAbortEvent{g.id, g.attempt, why}));
    }
  }
  for (TaskId m : g.members) {
    if (m != 0) graph_.cancel(m, fx_);
  }
}

void Scheduler::gang_join(WorkerRec& w, const protocol::GangJoinRequest& req) {
  protocol::GangReadyEvent ready;
  ready.gang = req.gang;
  ready.attempt = req.attempt;
  auto it = gangs_.find(req.gang);
  Gang* g = it == gangs_.end() ? nullptr : &it->second;
  if (g == nullptr || !g->running || req.attempt != g->attempt || req.rank >= g->size ||
      g->worker[req.rank] != w.id) {
    ready.error = "gang attempt " + std::to_string(req.attempt) + " is not running (it was aborted, cancelled or retried)";
  } else if (g->failing) {
    ready.error = g->error->type + ": " + g->error->message;
  }
  if (!ready.error.empty()) {
    protocol::send(socket_, w.identity, MessageType::gang_ready, protocol::encode(ready));
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
  ready.token = security::random_hex(32);  // the ring's key comes from it: 256 bits from the kernel
  for (const auto& j : g->joins) ready.ring_addresses.push_back(j.ring_address);
  if (all_gpu) ready.nccl_id = g->joins[0].nccl_id;
  ready.error = refuse;
  for (std::uint32_t r = 0; r < g->size; ++r) {
    auto wr = workers_.find(g->worker[r]);
    if (wr != workers_.end()) protocol::send(socket_, wr->second.identity, MessageType::gang_ready, protocol::encode(ready));
  }
}

}  // namespace herd::scheduler
