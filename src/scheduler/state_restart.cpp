// SchedulerState::restart(): Client::restart() in the core (Dask's Client.restart). Waiting for
// the replacement workers is the server's (scheduler.cpp), as scale's wait for sbatch is.
#include <utility>
#include <vector>

#include "common/logging.hpp"
#include "scheduler/state.hpp"

namespace herd::scheduler {

SchedulerState::Restarted SchedulerState::restart(const std::string& why) {
  Restarted done;
  // Every future of every client fails with the reason: the updates go out with this turn
  // (after any earlier update of the turn, so the cancellation is what the client keeps).
  for (const auto& [id, t] : graph_.tasks()) {
    if (!t.wanted || clients_.count(t.client) == 0) continue;
    protocol::TaskUpdate& u = out_.clients[t.client].updates.updates.emplace_back();
    u.id = id;
    u.state = static_cast<std::uint8_t>(protocol::TaskState::cancelled);
    u.error.type = "herd::CancelledError";
    u.error.message = why;
    ++done.cancelled;
  }
  // The task state goes, whole: no effect of a task is left to act on. Jobs of shell commands
  // stay (no client holds them): their tasks run again.
  jobs_restarted();
  graph_.clear();
  fx_.clear();
  inline_results_.clear();
  gangs_.clear();
  gangs_waiting_.clear();
  suspects_.clear();
  nodes_of_.clear();
  multinode_waiting_.clear();
  multinode_runs_.clear();
  multinode_never_.clear();
  too_long_.clear();
  held_.clear();  // a journal read that completes later finds no task and is dropped
  scatter_backlog_.clear();
  scatter_inline_wanted_.clear();
  scatter_sources_.clear();
  trouble_.clear();
  unreachable_holders_.clear();
  relocations_.clear();
  replications_.clear();
  campaigns_.clear();  // their tasks were cancelled with the rest
  campaign_of_.clear();
  out_.journal.clear();  // this turn's records must not outlive the restart in the journal
  for (Shape& s : shapes_) {
    s.ready = ReadyQueue{};
    s.unrunnable_dirty = false;
  }
  // Every worker stops and leaves the state now: nothing of it is waited for (a task stuck in
  // an endless C++ function cannot hold the restart). Its job is released to its pool, which
  // cancels it (scancel, or SIGTERM then SIGKILL for a local process that does not leave) and
  // starts a replacement; a worker connected by hand has no pool and is not replaced.
  std::vector<WorkerId> ids;
  ids.reserve(workers_.size());
  for (const auto& [id, w] : workers_) ids.push_back(id);
  for (WorkerId id : ids) {
    WorkerRec& w = workers_.at(id);
    for (const auto& [tid, shape] : w.processing) {
      for (const auto& [res, amount] : shapes_[shape].need_ids) w.free[res] += amount;
    }
    w.processing.clear();
    w.core_tasks = 0;
    w.seceded.clear();  // its tasks are gone (the worker leaves below)
    w.has.clear();
    w.order.clear();
    w.suspect = 0;
    w.reserved_for = 0;
    w.reserved_gang = 0;
    w.held_by = 0;
    w.retired_by_pool = true;  // its job goes with it, whatever it was doing
    remove_worker(id, why, /*count_deaths=*/false);
    // Its job ends because we asked: never a crash for the pool (which counts a job whose
    // worker did no work and ended as one, and backs off).
    out_.departed.back().worked = true;
    out(id).shutdown = why;  // after remove_worker, which forgets what was queued for it
    ++done.stopped;
  }
  out_.cluster_changed = true;
  HERD_LOG(warning) << "restart: " << why << "; " << done.stopped << " worker(s) stopped, " << done.cancelled
                    << " task(s) cancelled";
  check();
  return done;
}

}  // namespace herd::scheduler
