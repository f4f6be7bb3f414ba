// Multi-node tasks (TaskOptions::nodes(n), TaskSpec::nodes): one task that holds whole nodes,
// for an MPI program that starts its own ranks (mpirun, srun) on them, as HyperQueue's
// multi-node tasks do.
//
// Placement is all or nothing, as a gang's: the task starts only when n workers on n distinct
// hosts of ONE allocation (the same job id: the workers of one multi-node Slurm job, so that
// the launcher works inside it; workers with no job id form one group) are idle at once. It
// holds them for itself (WorkerRec::held_by): none takes another task while it runs. It runs
// once, on the first of them (its ExecuteTask names the hosts, that worker's first); the others
// stay idle beside it. A multi-node task that cannot start now waits without holding back other
// tasks, and the oldest such task reserves the nodes it will use (they finish what they run and
// take nothing new), so a stream of small tasks cannot starve it; only one reserves at a time,
// so two cannot deadlock each other. A task no connected allocation could hold (too few hosts)
// is reported as such (no_worker), and reconsidered at every turn.
//
// A held worker that is lost fails the run with herd::WorkerLostError naming its host: the
// first one's task fails at once, another's has the first told to stop (abandon_tasks) and the
// failure it reports takes the loss as its error. retries() then run it again, on healthy
// nodes. Whatever the outcome, the nodes are let go when the first reports.
#include <algorithm>
#include <map>
#include <set>

#include "common/logging.hpp"
#include "scheduler/state.hpp"

namespace herd::scheduler {

namespace {
constexpr std::uint32_t kMaxNodes = 4096;
}  // namespace

void SchedulerState::multinode_added(const protocol::TaskSpec& spec) {
  if (spec.nodes == 0) return;
  Task* t = graph_.find(spec.id);
  if (t == nullptr || !t->unfinished()) return;
  std::string bad;
  if (spec.gang != 0) bad = "a gang member cannot take whole nodes (TaskOptions::nodes)";
  else if (spec.nodes > kMaxNodes) bad = "nodes(" + std::to_string(spec.nodes) + ") is over " + std::to_string(kMaxNodes);
  if (!bad.empty()) {
    graph_.fail(spec.id, {"std::invalid_argument", bad, graph_.key_of(*t), ""}, fx_);
    return;
  }
  nodes_of_[spec.id] = spec.nodes;
}

void SchedulerState::release_nodes(TaskId id) {
  for (auto& [wid, w] : workers_) {
    if (w.held_by != id) continue;
    w.held_by = 0;
    refresh(w);
  }
}

void SchedulerState::place_multinode(const Now& now) {
  // Highest priority first, then the oldest.
  std::vector<std::pair<ReadyItem, TaskId>> order;
  std::vector<TaskId> keep;
  for (TaskId id : multinode_waiting_) {
    const Task* t = graph_.find(id);
    if (t == nullptr) {
      nodes_of_.erase(id);
      multinode_never_.erase(id);
      release_nodes(id);
      continue;
    }
    if (t->status != TaskStatus::ready) {  // placed, failed, cancelled, or waiting for inputs again
      multinode_never_.erase(id);
      if (!multinode_runs_.count(id)) release_nodes(id);
      continue;
    }
    if (std::find_if(order.begin(), order.end(), [&](const auto& o) { return o.second == id; }) != order.end()) continue;
    order.push_back({ReadyItem{t->priority, t->seq, id}, id});
  }
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return b.first < a.first; });
  bool reserved = false;  // only the first task that must wait reserves nodes
  for (const auto& [item, id] : order) {
    Task& t = *graph_.find(id);
    if (!held_.empty() && held_.count(id)) {
      keep.push_back(id);
      continue;
    }
    const std::uint32_t n = nodes_of_.at(id);
    const Shape& s = shapes_[t.shape];
    auto fits_time = [&](const WorkerRec& w) {
      return t.duration_s == 0 || w.end_time == 0 || now.unix_s() + static_cast<std::int64_t>(t.duration_s) <= w.end_time;
    };
    // Takes nothing of another's: no suspect, no gang's or other multi-node task's hold.
    auto ours = [&](const WorkerRec& w) {
      return w.suspect == 0 && w.reserved_for == 0 && w.reserved_gang == 0 && (w.held_by == 0 || w.held_by == id);
    };
    auto idle_now = [&](const WorkerRec& w) {
      return ours(w) && w.processing.empty() && w.paused.empty() &&
             !(w.memory_limit > 0 && w.memory_rss > w.memory_limit / 10 * 9);
    };
    // Allocations (job ids) -> host -> a worker there (ours first: it drained for this task).
    struct Allocation {
      std::map<std::string, WorkerRec*> idle;     // idle now, one per host
      std::map<std::string, WorkerRec*> holdable; // could be held, one per host (the least busy)
      std::set<std::string> hosts;                // every host with a worker offering the task
    };
    std::map<std::string, Allocation> allocations;
    for (auto& [wid, w] : workers_) {
      if (w.retiring || !offers(w, s) || !fits_time(w)) continue;
      Allocation& a = allocations[w.job_id];
      a.hosts.insert(w.host);
      auto better = [&](WorkerRec* current) {
        if (current == nullptr) return true;
        if ((w.held_by == id) != (current->held_by == id)) return w.held_by == id;
        if (w.processing.size() != current->processing.size()) return w.processing.size() < current->processing.size();
        return w.id < current->id;
      };
      if (idle_now(w) && better(a.idle[w.host])) a.idle[w.host] = &w;
      if (ours(w) && better(a.holdable[w.host])) a.holdable[w.host] = &w;
    }
    for (auto& [job, a] : allocations) {
      std::erase_if(a.idle, [](const auto& e) { return e.second == nullptr; });
      std::erase_if(a.holdable, [](const auto& e) { return e.second == nullptr; });
    }
    // The allocation to use: the one with most of its nodes held for it already, then the one
    // with most idle hosts.
    auto held_count = [&](const std::map<std::string, WorkerRec*>& m) {
      return std::count_if(m.begin(), m.end(), [&](const auto& e) { return e.second->held_by == id; });
    };
    Allocation* start = nullptr;
    for (auto& [job, a] : allocations) {
      if (a.idle.size() < n) continue;
      if (start == nullptr || held_count(a.idle) > held_count(start->idle)) start = &a;
    }
    if (start != nullptr) {
      std::vector<WorkerRec*> chosen;
      for (auto& [host, w] : start->idle) chosen.push_back(w);
      // Those held for it first, then by host name: the first one runs it.
      std::stable_sort(chosen.begin(), chosen.end(), [&](const WorkerRec* a, const WorkerRec* b) {
        return (a->held_by == id) > (b->held_by == id);
      });
      chosen.resize(n);
      std::sort(chosen.begin(), chosen.end(), [](const WorkerRec* a, const WorkerRec* b) { return a->host < b->host; });
      release_nodes(id);  // a reservation elsewhere is not needed any more
      multinode_never_.erase(id);
      MultiNodeRun& run = multinode_runs_[id];
      run = {};
      for (WorkerRec* w : chosen) {
        run.workers.push_back(w->id);
        run.hosts.push_back(w->host);
      }
      protocol::ExecuteTask& e = dispatch(t, *chosen.front());
      e.nodes = run.hosts;
      for (WorkerRec* w : chosen) {
        w->held_by = id;
        refresh(*w);
      }
      HERD_LOG(info) << "multi-node task " << graph_.key_of(t) << " placed on " << n << " node(s) of allocation '"
                     << chosen.front()->job_id << "', first " << chosen.front()->name;
      continue;
    }
    keep.push_back(id);
    // Could one allocation connected now ever hold it?
    std::size_t most = 0;
    for (const auto& [job, a] : allocations) most = std::max(most, a.hosts.size());
    if (most < n) {
      std::string why = "it takes " + std::to_string(n) + " whole node(s) (TaskOptions::nodes): workers on " +
                        std::to_string(n) + " distinct hosts of one allocation (one Slurm job: a pool with nodes = " +
                        std::to_string(n) + " or more) offering " + describe_shape(s) + "; ";
      why += most == 0 ? "no connected worker offers that"
                       : "the largest connected allocation has " + std::to_string(most) + " such host(s)";
      multinode_never_[id] = why;
      release_nodes(id);
      if (!t.no_worker_noted) {
        t.no_worker_noted = true;
        if (clients_.count(t.client)) {
          protocol::TaskUpdate u;
          u.id = t.id;
          u.state = static_cast<std::uint8_t>(protocol::TaskState::no_worker);
          u.error = {"herd::NoWorker", why, graph_.key_of(t), ""};
          out_.clients[t.client].updates.updates.push_back(std::move(u));
        }
      }
      continue;
    }
    multinode_never_.erase(id);
    if (reserved) {
      release_nodes(id);
      continue;
    }
    // Reserve n hosts of the allocation that has most of them idle or held for it already:
    // their workers finish what they run, take nothing new, and the task starts once all of
    // them are idle.
    Allocation* best = nullptr;
    for (auto& [job, a] : allocations) {
      if (a.holdable.size() < n) continue;
      auto score = [&](const Allocation& x) { return std::make_pair(held_count(x.holdable), x.idle.size()); };
      if (best == nullptr || score(a) > score(*best)) best = &a;
    }
    if (best == nullptr) continue;  // too many of its hosts are held by others: wait
    reserved = true;
    std::vector<WorkerRec*> chosen;
    for (auto& [host, w] : best->holdable) chosen.push_back(w);
    std::stable_sort(chosen.begin(), chosen.end(), [&](const WorkerRec* a, const WorkerRec* b) {
      if ((a->held_by == id) != (b->held_by == id)) return a->held_by == id;
      return a->processing.size() < b->processing.size();
    });
    chosen.resize(n);
    for (auto& [wid, w] : workers_) {  // held elsewhere before: let go
      if (w.held_by == id && std::find(chosen.begin(), chosen.end(), &w) == chosen.end()) {
        w.held_by = 0;
        refresh(w);
      }
    }
    for (WorkerRec* w : chosen) {
      if (w->held_by == id) continue;
      w->held_by = id;
      refresh(*w);
    }
  }
  multinode_waiting_.swap(keep);
}

void SchedulerState::multinode_result(WorkerRec& w, protocol::TaskResult& r) {
  auto it = multinode_runs_.find(r.id);
  if (it == multinode_runs_.end() || it->second.workers.empty() || it->second.workers.front() != w.id) return;
  const std::string lost = std::move(it->second.lost);
  multinode_runs_.erase(it);
  release_nodes(r.id);
  if (!r.ok && !r.handed_back && !lost.empty()) {
    // It stopped (or failed by itself) because a node went: that is the cause.
    r.missing_input = false;
    r.error.type = "herd::WorkerLostError";
    r.error.message = lost;
  }
  if (const Task* t = graph_.find(r.id); t == nullptr || !t->unfinished() || r.ok) {
    // Done with for good (a retry is ready again and keeps its entry).
    if (t == nullptr || r.ok) nodes_of_.erase(r.id);
  }
}

void SchedulerState::multinode_worker_lost(const WorkerRec& gone, const std::string& why,
                                           std::vector<TaskId>& processing) {
  if (gone.held_by == 0) return;
  const TaskId id = gone.held_by;
  auto it = multinode_runs_.find(id);
  if (it == multinode_runs_.end()) {  // only reserved: another host is found at the next turn
    release_nodes(id);
    return;
  }
  MultiNodeRun& run = it->second;
  Task* t = graph_.find(id);
  const std::string key = t != nullptr ? graph_.key_of(*t) : std::to_string(id);
  const std::string text = "node " + gone.host + " (worker " + gone.name + ") of multi-node task " + key +
                           " was lost: " + why;
  HERD_LOG(warning) << text;
  if (run.workers.front() == gone.id) {
    // The one running it: the task fails now, and a retry runs it again on healthy nodes.
    std::erase(processing, id);
    multinode_runs_.erase(it);
    release_nodes(id);
    if (t != nullptr && t->status == TaskStatus::processing && t->worker == gone.id) {
      t->worker = kNoWorker;  // nothing to cancel on a worker that is gone
      graph_.failed(id, {"herd::WorkerLostError", text, key, gone.name}, fx_);
      if (graph_.find(id) == nullptr || !graph_.find(id)->unfinished()) nodes_of_.erase(id);
    }
    return;
  }
  // Another node: the first stops it (a shell command is killed), and its failure takes this
  // loss as its error.
  if (run.lost.empty()) run.lost = text;
  std::erase(run.workers, gone.id);
  if (workers_.count(run.workers.front())) out(run.workers.front()).abandon.push_back(id);
}

std::string SchedulerState::why_multinode_waits(const Task& t) const {
  if (auto it = multinode_never_.find(t.id); it != multinode_never_.end()) return it->second;
  return {};
}

}  // namespace herd::scheduler
