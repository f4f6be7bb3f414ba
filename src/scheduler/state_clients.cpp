// SchedulerState and its clients: joining and leaving (their tasks released, detached ones
// kept), and what they ask: submit, release, replicate, fire and forget, cancel, scatter.
#include <algorithm>

#include "common/logging.hpp"
#include "scheduler/state.hpp"
#include "net/buffer.hpp"

namespace herd::scheduler {

ClientId SchedulerState::add_client(const protocol::HelloRequest& hello, const Now& now) {
  const ClientId id = next_client_index_++;
  ClientRec& c = clients_[id];
  c.index = id;
  c.name = hello.name;
  c.last_seen = now.mono;
  out_.cluster_changed = true;
  HERD_LOG(info) << "client " << c.name << " connected as #" << id;
  return id;
}

void SchedulerState::heard_from_client(ClientId id, const Now& now) {
  if (ClientRec* c = find_client(id)) c->last_seen = now.mono;
}

void SchedulerState::client_lost(ClientId id, const std::string& why) {
  auto it = clients_.find(id);
  if (it == clients_.end()) return;
  HERD_LOG(info) << "client #" << id << " gone (" << why << "); releasing its tasks";
  clients_.erase(it);
  out_.clients.erase(id);
  out_.clients_departed.push_back(id);
  std::vector<TaskId> owned, detached;
  for (const auto& [tid, t] : graph_.tasks()) {
    if (t.client != id) continue;
    if (t.campaign) detached.push_back(tid);  // kept for a client that attaches later
    else if (t.wanted) owned.push_back(tid);
  }
  for (TaskId tid : detached) graph_.find(tid)->client = 0;
  for (TaskId tid : owned) graph_.release(tid, fx_);
  out_.cluster_changed = true;
  apply(fx_);
  check();
}

// ---- messages from clients ----------------------------------------------------------------

bool SchedulerState::submit(ClientId id, const protocol::TaskSpec& spec, const std::vector<char>* journaled,
                            std::string& error) {
  if ((spec.id >> 40) != id) {
    error = "task id " + std::to_string(spec.id) + " does not belong to this client";
    return false;
  }
  const std::uint16_t shape = shape_of(spec.resources, spec.workers, spec.pool, spec.allow_other_workers);
  const protocol::TaskSpec* added = &spec;
  protocol::TaskSpec keyed;
  if (!spec.campaign.empty() && spec.key.empty() && graph_.find(spec.id) == nullptr) {
    // A campaign's task gets a key, "<campaign>/<index>": the journal keeps keyed results, so a
    // restarted scheduler can give them back to a client that attaches.
    keyed = spec;
    keyed.key = spec.campaign + "/" + std::to_string(campaign_size(spec.campaign));
    added = &keyed;
  }
  graph_.add(*added, id, shape, fx_);
  if (Task* t = graph_.find(spec.id)) t->submitted_us = clock_us_;
  if (spec.gang != 0) gang_member_added(spec);
  if (spec.nodes != 0) multinode_added(spec);
  if (!spec.campaign.empty()) campaign_task_added(spec.campaign, spec.id, id, added);
  // Finished before a restart: put the journaled result on a worker instead of running the
  // task again (its recipe stays, for lineage).
  if (journaled != nullptr) {
    const Task* t = graph_.find(spec.id);
    if (t != nullptr && (t->status == TaskStatus::ready || t->status == TaskStatus::waiting)) {
      dispatch_scatter(spec.id, net::copy_payload(journaled->data(), journaled->size()));
    }
  }
  apply(fx_);
  check();
  return true;
}

void SchedulerState::release(ClientId id, const std::vector<TaskId>& ids) {
  for (TaskId tid : ids) {
    const Task* t = graph_.find(tid);
    // A campaign's tasks stay until the campaign is released (release_campaign).
    if (t != nullptr && t->client == id && !t->campaign) graph_.release(tid, fx_);
    if (graph_.find(tid) == nullptr) {
      if (!scatter_inline_wanted_.empty()) scatter_inline_wanted_.erase(tid);
      if (!scatter_sources_.empty()) scatter_sources_.erase(tid);
    }
  }
  apply(fx_);
  check();
}

void SchedulerState::replicate(ClientId id, const std::vector<TaskId>& ids, std::uint32_t n) {
  for (TaskId tid : ids) {
    const Task* t = graph_.find(tid);
    if (t == nullptr || t->client != id) continue;
    Replication& r = replications_[tid];
    r.n = n;
    r.failures = 0;
    advance_replication(tid);
  }
  apply(fx_);
  check();
}

void SchedulerState::advance_replication(TaskId id) {
  auto it = replications_.find(id);
  if (it == replications_.end()) return;
  Replication& r = it->second;
  const Task* t = graph_.find(id);
  if (t == nullptr) {  // released
    replications_.erase(it);
    return;
  }
  if (!t->in_memory() || t->who_has.empty()) return;  // not computed yet (or again): later
  std::vector<WorkerRec*> targets;  // may take a copy: not retiring, not holding, not copying
  std::size_t eligible = 0;
  for (auto& [wid, w] : workers_) {
    if (w.retiring) continue;
    ++eligible;
    if (std::find(t->who_has.begin(), t->who_has.end(), wid) != t->who_has.end()) continue;
    if (std::find(r.copying.begin(), r.copying.end(), wid) != r.copying.end()) continue;
    targets.push_back(&w);
  }
  const std::size_t want = r.n == 0 ? eligible : std::min<std::size_t>(r.n, eligible);
  const std::size_t have = t->who_has.size();
  // Gives up on a result no worker manages to copy (each copy may fail once per holder).
  if (r.failures > 2 * (want + have)) {
    HERD_LOG(warning) << "replicate " << graph_.key_of(*t) << ": giving up after " << r.failures << " failed copies";
    replications_.erase(it);
    return;
  }
  if (have + r.copying.size() >= want || targets.empty()) {
    if (r.copying.empty()) replications_.erase(it);
    return;
  }
  // Each holder serves one copy at a time: the holders double each round, as a tree.
  const std::size_t busy = std::min(have, r.copying.size());
  const std::size_t count = std::min(have - busy, want - have - r.copying.size());
  // Least loaded first (fewest results held), then by id, so that the choice is reproducible.
  std::sort(targets.begin(), targets.end(), [](const WorkerRec* a, const WorkerRec* b) {
    return a->has.size() != b->has.size() ? a->has.size() < b->has.size() : a->id < b->id;
  });
  for (std::size_t i = 0; i < count && i < targets.size(); ++i) {
    protocol::DepLocation loc;
    loc.id = id;
    // Its own source first, the other holders after it as fallbacks.
    const std::size_t first = r.next_holder++ % have;
    for (std::size_t k = 0; k < have; ++k) {
      if (const WorkerRec* h = worker(t->who_has[(first + k) % have])) loc.holders.push_back(h->address);
    }
    out(targets[i]->id).acquire.push_back(std::move(loc));
    r.copying.push_back(targets[i]->id);
  }
}

void SchedulerState::fire_and_forget(ClientId id, const std::vector<TaskId>& ids) {
  for (TaskId tid : ids) {
    Task* t = graph_.find(tid);
    if (t != nullptr && t->client == id) t->fire_and_forget = true;
  }
  check();
}

void SchedulerState::force_cancel(ClientId id, const std::vector<TaskId>& ids) {
  std::vector<std::pair<WorkerId, TaskId>> running;
  for (TaskId tid : ids) {
    const Task* t = graph_.find(tid);
    if (t == nullptr || t->client != id || t->gang != 0) continue;
    if (t->status == TaskStatus::processing && t->worker != kNoWorker) running.emplace_back(t->worker, tid);
  }
  cancel(id, ids);
  // The worker's failure report for each frees its slot here, as any result does.
  for (auto [wid, tid] : running) {
    if (workers_.count(wid)) out(wid).abandon.push_back(tid);
  }
  check();
}

void SchedulerState::cancel(ClientId id, const std::vector<TaskId>& ids) {
  for (TaskId tid : ids) {
    const Task* t = graph_.find(tid);
    if (t == nullptr || t->client != id) continue;
    if (t->gang != 0) cancel_gang(t->gang, "gang member " + graph_.key_of(*t) + " was cancelled");
    else graph_.cancel(tid, fx_);
  }
  apply(fx_);
  check();
}

bool SchedulerState::scatter(ClientId id, const protocol::ScatterRequest& req, herd::detail::PayloadPtr payload,
                             std::string& error) {
  if ((req.id >> 40) != id) {
    error = "scatter id does not belong to this client";
    return false;
  }
  if (graph_.find(req.id) != nullptr) {
    // The bytes of a scatter whose worker could not reach the client's data port; else a resend.
    if (req.source.empty() && scatter_inline_wanted_.erase(req.id) > 0) dispatch_scatter(req.id, std::move(payload));
    check();
    return true;
  }
  graph_.add_scattered(req.id, req.key, id);
  dispatch_scatter(req.id, std::move(payload), req.source);
  check();
  return true;
}

void SchedulerState::dispatch_scatter(TaskId id, herd::detail::PayloadPtr payload, std::string source) {
  Task* t = graph_.find(id);
  if (t == nullptr || !(t->status == TaskStatus::waiting || t->status == TaskStatus::ready)) return;
  WorkerRec* best = nullptr;
  for (auto& [wid, w] : workers_) {
    if (w.retiring) continue;
    if (best == nullptr || w.has.size() < best->has.size()) best = &w;
  }
  if (best == nullptr) {
    scatter_backlog_.push_back({id, std::move(payload), std::move(source)});
    return;
  }
  graph_.started(id, best->id);
  best->processing.emplace(id, 0);  // so that losing the worker fails the scatter, not hangs it
  if (source.empty()) {
    out(best->id).put.emplace_back(id, std::move(payload));
  } else {
    scatter_sources_[id].address = source;
    out(best->id).put_from.push_back({id, std::move(source)});
  }
  refresh(*best);
}

void SchedulerState::scatter_source_unreachable(Task& t, const std::string& why) {
  // The worker could not fetch the value from the client's data port (a firewall, another
  // network): the client sends it through here instead. Nothing is lost; it costs a hop.
  graph_.unstart(t.id);
  scatter_sources_.erase(t.id);
  scatter_inline_wanted_.insert(t.id);
  if (clients_.count(t.client) == 0) return;
  protocol::ScatterInlineEvent& ev = out_.clients[t.client].scatter_inline;
  ev.ids.push_back(t.id);
  ev.reason = why;
}

}  // namespace herd::scheduler
