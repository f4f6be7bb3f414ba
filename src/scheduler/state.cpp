// SchedulerState (see state.hpp): its outbox, its registries' lookups, the effects of the task
// graph's transitions (apply), the counters behind `herd status`, what each pool could run, the
// passing of time (tick) and the invariants (validate). The events and decisions are in the
// files beside it, one concern each:
//   state_workers.cpp    workers joining and lost, their messages (heartbeats, results,
//                        secession, goodbye, retirement, journal reads, jobs), retirements
//   state_clients.cpp    clients joining and lost, their messages (submit, release, replicate,
//                        cancel, scatter)
//   state_placement.cpp  resource shapes and their free lists, placement, suspects, stealing
//   state_reach.cpp      results out of reach: avoided holders, missing inputs, failed fetches,
//                        relocations
//   state_gangs.cpp, state_campaigns.cpp, state_explain.cpp, state_restart.cpp
#include "scheduler/state.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "scheduler/state_internal.hpp"

namespace herd::scheduler {

namespace {
constexpr std::size_t kMaxEvents = 1000;        // task runs kept for the task stream
}  // namespace

void WorkerOut::reset() {
  // A list grown by a burst goes; a round trip's few entries keep their memory. Every field is
  // named here (a field added to WorkerOut must be too): assigning a fresh WorkerOut and
  // swapping the lists back, which would need no such list, costs the scheduler more
  // instructions on every round trip.
  auto empty = [](auto& list) {
    if (list.capacity() > 1024) std::decay_t<decltype(list)>().swap(list);
    else list.clear();
  };
  empty(free);
  empty(put);
  empty(put_from);
  empty(acquire);
  empty(execute);
  empty(cancel);
  empty(abandon);
  retiring.reset();
  empty(gang_ready);
  empty(gang_abort);
  heartbeat = false;
  shutdown.reset();
}

WorkerOut& Outbox::worker(WorkerId id) {
  if (auto it = workers.find(id); it != workers.end()) return it->second;
  if (spare_.empty()) return workers[id];
  auto node = std::move(spare_.back());
  spare_.pop_back();
  node.key() = id;
  return workers.insert(std::move(node)).position->second;
}

void Outbox::clear() {
  // Each worker's entry (a map node and its lists) is kept for a later turn, up to a few: a
  // round trip's turns reach one worker each, and would allocate and free them every time.
  while (!workers.empty() && spare_.size() < 8) {
    auto node = workers.extract(workers.begin());
    node.mapped().reset();
    spare_.push_back(std::move(node));
  }
  workers.clear();
  // A client's entry stays, emptied, with its update list's capacity: a busy client gets tens
  // of thousands of updates a turn, and growing that list anew each turn (176-byte updates
  // moved at every doubling) cost more than making the updates. A list much bigger than this
  // turn's needed goes (after a burst).
  for (auto it = clients.begin(); it != clients.end();) {
    ClientOut& c = it->second;
    const std::size_t cap = c.updates.updates.capacity();
    if (cap > 4096 && cap > 4 * c.updates.updates.size()) {
      it = clients.erase(it);
      continue;
    }
    c.updates.updates.clear();
    c.updates.addresses.clear();
    c.address_index.clear();
    c.heartbeat = false;
    c.shutdown.reset();
    ++it;
  }
  journal.clear();
  departed.clear();
  clients_departed.clear();
  cluster_changed = false;
}

SchedulerState::SchedulerState(StateOptions options) : options_(options) {
  graph_.set_strict(options_.validate);
  shape_of({});  // shape 0: no resources
}

void SchedulerState::check() const {
  if (!options_.validate) return;
  // Every event while the state is small; on a big one, one event in size/16, so the checks
  // cost a bounded multiple of the events themselves (a full check is O(tasks + workers x
  // shapes)) and a scheduler under test still answers heartbeats.
  const std::size_t every = std::max<std::size_t>(1, (graph_.size() + workers_.size()) / 16);
  if (++checks_ % every != 0) return;
  const std::string broken = validate();
  if (!broken.empty()) throw std::logic_error("scheduler state is inconsistent: " + broken);
}

WorkerRec* SchedulerState::find_worker(WorkerId id) {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : &it->second;
}

const WorkerRec* SchedulerState::worker(WorkerId id) const {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : &it->second;
}

ClientRec* SchedulerState::find_client(ClientId id) {
  auto it = clients_.find(id);
  return it == clients_.end() ? nullptr : &it->second;
}

const std::map<std::string, double>& SchedulerState::resources_of(const Task& t) const { return shapes_[t.shape].need; }

std::size_t SchedulerState::shape_count() const { return shapes_.size(); }

std::size_t SchedulerState::ready_count() const { return graph_.count(TaskStatus::ready); }

// ---- effects ------------------------------------------------------------------------------

void SchedulerState::keep_inline(TaskId id, std::vector<char>& data) {
  // Only for the notice graph_.finished() just queued (the client wants the result): apply()
  // puts it into that notice's update.
  if (data.empty() || fx_.notify.empty() || fx_.notify.back() != id) return;
  // The whole value goes to the client with the notice: no worker needs to keep it for the
  // client's sake (retirement and scale-down: Task::safe_elsewhere).
  if (Task* t = graph_.find(id); t != nullptr && t->nbytes == data.size() && clients_.count(t->client)) t->client_has = true;
  inline_results_.emplace_back(fx_.notify.size() - 1, std::move(data));
}

void SchedulerState::apply(Effects& fx) {
  for (TaskId id : fx.ready) {
    Task* t = graph_.find(id);
    if (t == nullptr || t->status != TaskStatus::ready) continue;
    t->ready_us = clock_us_;
    if (t->deaths > 0 && t->gang == 0 && !multinode(id)) suspects_.push_back(id);
    else push_ready(*t);
  }
  std::size_t next_inline = 0;  // inline_results_ is in the order of the notices it belongs to
  ClientId last_client = 0;
  ClientOut* last_out = nullptr;
  for (std::size_t i = 0; i < fx.notify.size(); ++i) {
    const TaskId id = fx.notify[i];
    while (next_inline < inline_results_.size() && inline_results_[next_inline].first < i) ++next_inline;
    const Task* t = graph_.find(id);
    if (t == nullptr) continue;
    if (t->job) {  // its job keeps the outcome (below)
      jobs_finished_.push_back(id);
      continue;
    }
    if (t->campaign && t->status == TaskStatus::erred && options_.full_results && !restoring_) journal_campaign_error(*t);
    if (last_out == nullptr || t->client != last_client) {
      if (clients_.count(t->client) == 0) continue;
      last_client = t->client;
      last_out = &out_.clients[t->client];
    }
    ClientOut& c = *last_out;
    protocol::TaskUpdate& u = c.updates.updates.emplace_back();  // in place: no 176-byte move
    u.id = id;
    u.state = static_cast<std::uint8_t>(wire_state(t->status));
    u.nbytes = t->nbytes;
    if (t->in_memory() && !t->who_has.empty()) {
      const WorkerId holder = t->who_has.front();
      auto found = c.address_index.find(holder);
      if (found == c.address_index.end()) {
        const WorkerRec* hw = worker(holder);
        found = c.address_index.emplace(holder, static_cast<std::int32_t>(c.updates.addresses.size())).first;
        c.updates.addresses.push_back(hw != nullptr ? hw->address : std::string());
      }
      u.location = found->second;
      if (next_inline < inline_results_.size() && inline_results_[next_inline].first == i) {
        u.inline_data = std::move(inline_results_[next_inline].second);
      }
    }
    if (t->error) u.error = *t->error;
  }
  if (!jobs_finished_.empty()) job_tasks_finished(fx);
  WorkerId last_worker = 0;
  WorkerRec* last_rec = nullptr;
  std::vector<TaskId>* last_free = nullptr;
  for (auto [wid, id] : fx.free) {
    if (last_rec == nullptr || wid != last_worker) {  // runs of one worker's results
      last_worker = wid;
      last_rec = find_worker(wid);
      last_free = last_rec != nullptr ? &out(wid).free : nullptr;
    }
    if (last_rec != nullptr) {
      last_rec->has.erase(id);
      last_free->push_back(id);
    }
  }
  for (auto [wid, id] : fx.cancel) {
    if (workers_.count(wid)) out(wid).cancel.push_back(id);
  }
  inline_results_.clear();
  fx.clear();
}

// ---- counters ---------------------------------------------------------------------------

RunNote* SchedulerState::note_run(Task& t, WorkerId w, std::uint8_t status, std::int64_t received_us) {
  if (!options_.record) return nullptr;
  RunNote& n = run_notes_.emplace_back();
  n.id = t.id;
  n.function = t.function;
  n.worker = w;
  n.submitted_us = t.submitted_us;
  n.ready_us = t.ready_us;
  n.placed_us = t.placed_us;
  n.received_us = received_us;
  n.status = status;
  n.attempt = t.runs_ended++;
  n.preemptions = t.deaths;
  if (t.named) n.key = graph_.user_key(t);
  if (t.campaign) {
    if (auto c = campaign_of_.find(t.id); c != campaign_of_.end()) n.campaign = c->second;
  }
  return &n;
}

void SchedulerState::record_run(const Task* t, const WorkerRec& w, const protocol::TaskResult& r, const Now& now) {
  if (t == nullptr || t->scattered) return;
  // The state's own task (results hand it in as const): its run count moves on.
  if (RunNote* n = note_run(const_cast<Task&>(*t), w.id, r.ok ? 0 : 1, now.unix_us != 0 ? now.unix_us : now.unix_ms * 1000)) {
    n->thread = r.thread;
    n->run_us = r.duration_us;
    n->return_us = r.return_us;
    n->fetch_us = r.fetch_us;
    n->fetch_bytes = r.fetch_bytes;
    n->fetch_peers = r.fetch_peers;
    n->result_bytes = r.nbytes;
    if (!r.ok) {
      n->error_type = r.error.type;
      n->error = r.error.message.substr(0, 1024);
    }
  }
  auto& c = counters_;
  (r.ok ? c.finished_total : c.failed_total) += 1;
  if (t->function >= runs_by_function_.size()) runs_by_function_.resize(t->function + 1u);
  auto& runs = runs_by_function_[t->function];
  (r.ok ? runs.first : runs.second) += 1;
  if (r.ok) {
    const std::int64_t second = now.unix_s();
    if (c.finishes_per_second.empty() || c.finishes_per_second.back().first != second) {
      c.finishes_per_second.emplace_back(second, 0);
      while (c.finishes_per_second.front().first <= second - kThroughputWindow) c.finishes_per_second.pop_front();
    }
    ++c.finishes_per_second.back().second;
  }
  RunRecord* e;
  if (runs_.size() < kMaxEvents) {
    e = &runs_.emplace_back();
  } else {
    e = &runs_[runs_next_];
    runs_next_ = (runs_next_ + 1) % kMaxEvents;
  }
  e->id = t->id;
  e->function = t->function;
  e->worker = w.id;
  e->end_ms = now.unix_ms;
  e->start_ms = now.unix_ms - static_cast<std::int64_t>(r.duration_us / 1000);
  e->ok = r.ok;
  if (t->named) e->key = graph_.user_key(*t);
  else e->key.clear();
}

const SchedulerState::Counters& SchedulerState::counters() const {
  auto& c = counters_;
  c.runs_by_function.clear();
  for (std::size_t f = 0; f < runs_by_function_.size(); ++f) {
    const auto& runs = runs_by_function_[f];
    if (runs.first + runs.second > 0) c.runs_by_function[graph_.function_name(static_cast<std::uint32_t>(f))] = runs;
  }
  c.events.clear();
  const std::size_t n = runs_.size();
  const std::size_t first = n < kMaxEvents ? 0 : runs_next_;  // the oldest
  for (std::size_t i = 0; i < n; ++i) {
    const RunRecord& r = runs_[(first + i) % n];
    protocol::TaskEvent e;
    const std::string& function = graph_.function_name(r.function);
    e.key = r.key.empty() ? TaskGraph::display_key(function, r.id) : r.key;
    e.function = function;
    e.worker = r.worker < worker_names_.size() ? worker_names_[r.worker] : "#" + std::to_string(r.worker);
    e.start_ms = r.start_ms;
    e.end_ms = r.end_ms;
    e.ok = r.ok;
    c.events.push_back(std::move(e));
  }
  return c;
}

// ---- pools --------------------------------------------------------------------------------

std::size_t SchedulerState::backlog(const std::map<std::string, double>& offers_map) const {
  std::size_t n = 0;
  for (const auto& s : shapes_) {
    bool fits = true;
    for (const auto& [r, amount] : s.need) {
      auto have = offers_map.find(r);
      if (have == offers_map.end() || have->second + kEps < amount) fits = false;
    }
    if (fits) n += graph_.active_of_shape(s.id);
  }
  return n;
}

std::vector<PoolWorkerView> SchedulerState::pool_workers(const std::string& pool, std::uint32_t replace_lead_s,
                                                         const Now& now) const {
  std::vector<PoolWorkerView> view;
  for (const auto& [id, w] : workers_) {
    if (w.pool != pool) continue;
    PoolWorkerView pw;
    pw.id = id;
    pw.job_id = w.job_id;
    pw.idle = w.processing.empty() && w.held_by == 0;  // a node held for a multi-node task works
    pw.idle_since = w.idle_since;
    // Replace a worker ahead of its walltime: near its end it no longer counts as capacity.
    const bool expiring = w.end_time > 0 && now.unix_s() + replace_lead_s >= w.end_time;
    pw.leaving = w.retiring || expiring;
    pw.ending = w.retiring && !w.retired_by_pool && !expiring;
    view.push_back(pw);
  }
  return view;
}

// ---- time ---------------------------------------------------------------------------------

void SchedulerState::tick(const Now& now) {
  if (now.mono - last_heartbeat_ >= std::chrono::milliseconds(options_.heartbeat_ms)) {
    last_heartbeat_ = now.mono;
    const auto timeout = std::chrono::milliseconds(options_.timeout_ms);
    std::vector<WorkerId> silent_workers;
    std::vector<ClientId> silent_clients;
    for (auto& [id, w] : workers_) {
      if (now.mono - w.last_seen > timeout) silent_workers.push_back(id);
      else out(id).heartbeat = true;
    }
    for (auto& [id, c] : clients_) {
      if (now.mono - c.last_seen > timeout) silent_clients.push_back(id);
      else out_.clients[id].heartbeat = true;
    }
    const std::string why = "no heartbeat for " + std::to_string(options_.timeout_ms) + " ms";
    for (WorkerId id : silent_workers) {
      // The worker of a suspended job is frozen, not dead: its tasks go elsewhere without a death.
      const WorkerRec& w = workers_.at(id);
      if (w.job_suspended) {
        remove_worker(id, "its job " + w.job_id + " is suspended (silent for " + std::to_string(options_.timeout_ms) + " ms)",
                      false);
      } else {
        remove_worker(id, why, true);
      }
    }
    for (ClientId id : silent_clients) client_lost(id, why);
  }
  // Keep about queue_horizon_us of expected work queued beyond the free slots, so a worker never
  // idles between batches, yet a slow worker does not hoard what others could run.
  std::size_t extra = 1;
  if (avg_task_us_ >= 0) {
    const double n = options_.queue_horizon_us / std::max(avg_task_us_, 1.0);
    extra = static_cast<std::size_t>(std::clamp(n, 1.0, static_cast<double>(options_.max_queue_per_slot)));
  }
  // Refiled only on a change of more than an eighth (any change while it is below 8): a run
  // time that wanders must not refile every worker every turn (O(workers)).
  const std::size_t slack = extra_per_slot_ / 8;
  if (extra > extra_per_slot_ + slack || extra + slack < extra_per_slot_) {
    extra_per_slot_ = extra;
    refresh_all();
  }
  progress_retirements(now);
  for (auto it = trouble_.begin(); it != trouble_.end();) {
    const Task* t = graph_.find(it->first);
    it = t == nullptr || !t->unfinished() ? trouble_.erase(it) : std::next(it);
  }
  for (auto it = relocations_.begin(); it != relocations_.end();) {
    const Task* t = graph_.find(it->first);
    it = t == nullptr || !t->in_memory() ? relocations_.erase(it) : std::next(it);
  }
  for (auto it = unreachable_holders_.begin(); it != unreachable_holders_.end();) {
    const Task* t = graph_.find(it->first.first);
    it = t == nullptr || !t->in_memory() ? unreachable_holders_.erase(it) : std::next(it);
  }
  for (auto it = cuts_.begin(); it != cuts_.end();) {
    it = now.mono - it->second > std::chrono::milliseconds(3ULL * options_.timeout_ms) ? cuts_.erase(it) : std::next(it);
  }
  check();
}

// ---- invariants ---------------------------------------------------------------------------

std::string SchedulerState::validate() const {
  if (std::string broken = graph_.validate(); !broken.empty()) return broken;
  if (std::string broken = validate_campaigns(); !broken.empty()) return broken;
  if (std::string broken = validate_jobs(); !broken.empty()) return broken;
  // Tasks processing on a worker are in its processing map, and the other way round for tasks
  // that are still processing.
  for (const auto& [id, t] : graph_.tasks()) {
    if (t.status == TaskStatus::processing) {
      if (t.gang != 0) {
        // A gang member that reported stays processing until the whole gang has.
        auto g = gangs_.find(t.gang);
        if (g != gangs_.end() && g->second.running && t.gang_rank < g->second.size && g->second.reported[t.gang_rank]) continue;
      }
      const WorkerRec* w = worker(t.worker);
      if (w == nullptr) return "task " + graph_.key_of(t) + " is processing on worker " + std::to_string(t.worker) + ", which is gone";
      auto p = w->processing.find(id);
      if (p == w->processing.end()) return "task " + graph_.key_of(t) + " is processing on " + w->name + ", which does not list it";
      if (p->second != t.shape && !t.scattered) return "task " + graph_.key_of(t) + " is held on " + w->name + " under another shape";
    }
    if (t.in_memory()) {
      for (WorkerId h : t.who_has) {
        const WorkerRec* w = worker(h);
        if (w == nullptr) return "task " + graph_.key_of(t) + " is held by worker " + std::to_string(h) + ", which is gone";
        if (!w->has.count(id)) return "task " + graph_.key_of(t) + " is held by " + w->name + ", which does not list it";
      }
    }
  }
  std::unordered_set<TaskId> queued;
  for (const auto& s : shapes_) {
    s.ready.for_each([&](const ReadyItem& item) { queued.insert(item.id); });
  }
  for (TaskId id : suspects_) queued.insert(id);
  for (TaskId id : too_long_) queued.insert(id);
  for (TaskId id : held_) queued.insert(id);
  for (TaskId id : multinode_waiting_) queued.insert(id);
  for (const auto& [id, t] : graph_.tasks()) {
    if (t.status != TaskStatus::ready || t.gang != 0 || queued.count(id)) continue;
    return "ready task " + graph_.key_of(t) + " is in no queue";
  }
  std::vector<std::uint32_t> offered_by(shapes_.size(), 0);
  std::size_t retiring = 0;
  for (const auto& [id, w] : workers_) retiring += w.retiring;
  if (retiring != retiring_) return "the count of retiring workers is off";
  for (const auto& [id, w] : workers_) {
    for (TaskId h : w.has) {
      const Task* t = graph_.find(h);
      if (t == nullptr || !t->in_memory() || std::find(t->who_has.begin(), t->who_has.end(), id) == t->who_has.end()) {
        return "worker " + w.name + " lists a result it does not hold";
      }
    }
    for (TaskId s : w.seceded) {
      if (!w.processing.count(s)) return "worker " + w.name + " counts a slot for a seceded task it no longer runs";
    }
    if (w.seceded.size() >= w.nthreads) return "worker " + w.name + " has no thread slot of its own left";
    std::vector<double> expect = w.offered;
    std::uint32_t core_tasks = 0;
    for (const auto& [tid, shape] : w.processing) {
      for (const auto& [r, amount] : shapes_[shape].need_ids) expect[r] -= amount;
      core_tasks += shapes_[shape].holds_cores;
    }
    if (core_tasks != w.core_tasks) return "worker " + w.name + " counts its tasks holding cores wrong";
    for (std::size_t r = 0; r < expect.size(); ++r) {
      if (std::abs(expect[r] - w.free[r]) > 1e-6) return "worker " + w.name + "'s free resources are off";
    }
    if (w.free_pos.size() != shapes_.size() || w.open_pos.size() != shapes_.size()) {
      return "worker " + w.name + " does not know every shape";
    }
    for (const auto& s : shapes_) {
      const bool does = offers(w, s);
      const bool listed = std::find(w.shapes.begin(), w.shapes.end(), s.id) != w.shapes.end();
      if (does != listed) return "worker " + w.name + "'s offered shapes are off";
      if (does && !w.retiring) ++offered_by[s.id];
      const bool take = does && can_take(w, s);
      const bool open = take && (slot_tasks(w) < w.nthreads || s.holds_cores);
      const std::int32_t fp = w.free_pos[s.id], op = w.open_pos[s.id];
      if (take != (fp >= 0) || open != (op >= 0)) {
        return "worker " + w.name + " is misfiled in the free lists of shape " + std::to_string(s.id);
      }
      if (fp >= 0 && (static_cast<std::size_t>(fp) >= s.free.size() || s.free[static_cast<std::size_t>(fp)] != id)) {
        return "worker " + w.name + "'s position in a free list is wrong";
      }
      if (op >= 0 && (static_cast<std::size_t>(op) >= s.open.size() || s.open[static_cast<std::size_t>(op)] != id)) {
        return "worker " + w.name + "'s position in an open list is wrong";
      }
    }
    if ((slot_tasks(w) > w.nthreads) != (overloaded_.count(id) > 0) || w.overloaded != (overloaded_.count(id) > 0)) {
      return "worker " + w.name + " is misfiled as overloaded";
    }
  }
  for (const auto& s : shapes_) {
    if (s.offered_by != offered_by[s.id]) return "shape " + std::to_string(s.id) + " is offered by a wrong count";
    for (WorkerId id : s.free) {
      if (!workers_.count(id)) return "a free list holds a worker that is gone";
    }
  }
  for (const auto& [tid, run] : multinode_runs_) {
    for (WorkerId wid : run.workers) {
      const WorkerRec* w = worker(wid);
      if (w == nullptr || w->held_by != tid) return "a node of a running multi-node task is not held for it";
    }
  }
  for (const auto& [id, w] : workers_) {
    if (w.held_by != 0 && !multinode_runs_.count(w.held_by) &&
        std::find(multinode_waiting_.begin(), multinode_waiting_.end(), w.held_by) == multinode_waiting_.end()) {
      return "worker " + w.name + " is held for a multi-node task that neither runs nor waits";
    }
  }
  for (const auto& [gid, g] : gangs_) {
    if (!g.running) continue;
    for (std::uint32_t r = 0; r < g.size; ++r) {
      if (g.reported[r]) continue;
      const WorkerRec* w = worker(g.worker[r]);
      if (w == nullptr || !w->processing.count(g.members[r])) return "a running gang member is not on its worker";
    }
  }
  return {};
}

}  // namespace herd::scheduler
