// SchedulerState: registries, placement, stealing, retirement, liveness (see state.hpp).
// Gangs are in state_gangs.cpp.
#include "scheduler/state.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "common/logging.hpp"

namespace herd::scheduler {

namespace {
constexpr std::size_t kMaxEvents = 1000;        // task runs kept for the task stream
constexpr std::int64_t kThroughputWindow = 10;  // seconds
// A worker with queued tasks and no result for this long is stuck (behind a long task, or
// starved): its tiny tasks may be stolen too. Dask's work-stealing interval.
constexpr auto kStalled = std::chrono::milliseconds(100);
constexpr double kEps = 1e-9;

std::string describe(const std::map<std::string, double>& r) {
  if (r.empty()) return "nothing";
  std::ostringstream s;
  s << '{';
  bool first = true;
  for (const auto& [name, amount] : r) {
    s << (first ? "" : ", ") << name << ": " << amount;
    first = false;
  }
  s << '}';
  return s.str();
}
}  // namespace

void WorkerOut::reset() {
  // A list grown by a burst goes; a round trip's few entries keep their memory. Every field is
  // named here (a field added to WorkerOut must be too): assigning a fresh WorkerOut and
  // swapping the lists back, which would need no such list, costs the scheduler ~480 more
  // instructions a round trip (callgrind, 3 runs each).
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

// ---- shapes and the free lists ------------------------------------------------------------

std::uint16_t SchedulerState::shape_of(const std::map<std::string, double>& resources, std::vector<std::string> only,
                                       const std::string& pool, bool loose) {
  // Most tasks: no map to build and look up.
  if (resources.empty() && only.empty() && pool.empty() && !shapes_.empty()) return 0;
  std::map<std::string, double> need;
  for (const auto& [name, amount] : resources) {
    if (amount > 0) need[name] = amount;  // asking for none of a resource is asking for nothing
  }
  std::sort(only.begin(), only.end());
  only.erase(std::unique(only.begin(), only.end()), only.end());
  if (only.empty()) loose = false;
  auto key = std::make_tuple(need, only, pool, loose);
  if (auto it = shape_index_.find(key); it != shape_index_.end()) return it->second;
  if (shapes_.size() >= 0xffff) throw std::runtime_error("too many distinct resource requests (65535)");
  Shape s;
  s.id = static_cast<std::uint16_t>(shapes_.size());
  s.need = need;
  s.only = only;
  s.pool = pool;
  s.loose = loose;
  for (const auto& [name, amount] : need) {
    auto [it, added] = resource_index_.try_emplace(name, static_cast<std::uint16_t>(resource_index_.size()));
    if (added) {
      // No task needed it before, so what a worker offers of it is all free.
      for (auto& [id, w] : workers_) {
        auto have = w.resources.find(name);
        const double offered = have == w.resources.end() ? 0.0 : have->second;
        w.offered.push_back(offered);
        w.free.push_back(offered);
      }
    }
    s.need_ids.emplace_back(it->second, amount);
  }
  shape_index_.emplace(std::move(key), s.id);
  shapes_.push_back(std::move(s));
  Shape& added = shapes_.back();
  for (auto& [id, w] : workers_) {
    w.free_pos.push_back(-1);
    w.open_pos.push_back(-1);
    if (offers(w, added)) {
      w.shapes.push_back(added.id);
      if (!w.retiring) ++added.offered_by;
      refresh(w);
    }
  }
  return added.id;
}

bool SchedulerState::named(const WorkerRec& w, const Shape& s) {
  for (const std::string& n : s.only) {
    if (n == w.name || n == w.host || n == w.address) return true;
  }
  return false;
}

std::string SchedulerState::describe_shape(const Shape& s) {
  std::string out = s.need.empty() && (!s.pool.empty() || (!s.only.empty() && !s.loose)) ? "a slot" : describe(s.need);
  if (!s.only.empty() && !s.loose) {
    out += " among the workers {";
    for (std::size_t i = 0; i < s.only.size(); ++i) out += (i ? ", " : "") + s.only[i];
    out += "}";
  }
  if (!s.pool.empty()) out += " in pool '" + s.pool + "'";
  return out;
}

bool SchedulerState::offers(const WorkerRec& w, const Shape& s) const {
  if (!s.pool.empty() && w.pool != s.pool) return false;
  if (!s.only.empty() && !s.loose && !named(w, s)) return false;
  for (const auto& [r, amount] : s.need_ids) {
    if (r >= w.offered.size() || w.offered[r] + kEps < amount) return false;
  }
  return true;
}

bool SchedulerState::available(const WorkerRec& w) const {
  if (w.retiring || w.suspect != 0 || w.reserved_for != 0 || w.reserved_gang != 0) return false;
  // Near its memory limit a worker takes nothing new until it is back under.
  // A paused worker (memory, as Dask's) likewise.
  return !(w.memory_limit > 0 && w.memory_rss > w.memory_limit / 10 * 9) && w.paused.empty();
}

std::size_t SchedulerState::capacity(const WorkerRec& w) const { return w.nthreads * (1 + extra_per_slot_); }

bool SchedulerState::can_take(const WorkerRec& w, const Shape& s) const {
  if (!available(w) || w.processing.size() >= capacity(w)) return false;
  for (const auto& [r, amount] : s.need_ids) {
    if (w.free[r] + kEps < amount) return false;
  }
  return true;
}

namespace {
void list_set(std::vector<WorkerId>& list, std::vector<std::int32_t>& pos, std::uint16_t shape, WorkerId id,
              bool want, std::unordered_map<WorkerId, WorkerRec>& workers,
              std::vector<std::int32_t> WorkerRec::*member) {
  std::int32_t& p = pos[shape];
  if (want && p < 0) {
    p = static_cast<std::int32_t>(list.size());
    list.push_back(id);
  } else if (!want && p >= 0) {
    const WorkerId last = list.back();
    list[static_cast<std::size_t>(p)] = last;
    if (last != id) (workers.at(last).*member)[shape] = p;
    list.pop_back();
    p = -1;
  }
}
}  // namespace

void SchedulerState::refresh(WorkerRec& w) {
  const bool idle_thread = w.processing.size() < w.nthreads;
  for (std::uint16_t sid : w.shapes) {
    Shape& s = shapes_[sid];
    const bool take = can_take(w, s);
    list_set(s.free, w.free_pos, sid, w.id, take, workers_, &WorkerRec::free_pos);
    list_set(s.open, w.open_pos, sid, w.id, take && idle_thread, workers_, &WorkerRec::open_pos);
  }
  const bool overloaded = w.processing.size() > w.nthreads;
  if (overloaded != w.overloaded) {
    w.overloaded = overloaded;
    if (overloaded) overloaded_.insert(w.id);
    else overloaded_.erase(w.id);
  }
}

void SchedulerState::refresh_all() {
  for (auto& [id, w] : workers_) refresh(w);
}

void SchedulerState::push_ready(const Task& t) {
  Shape& s = shapes_[t.shape];
  s.ready.push({t.priority, t.seq, t.id});
  if (s.offered_by == 0) s.unrunnable_dirty = true;
}

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

void SchedulerState::heard_from_worker(WorkerId id, const Now& now) {
  if (WorkerRec* w = find_worker(id)) w->last_seen = now.mono;
}

void SchedulerState::heard_from_client(ClientId id, const Now& now) {
  if (ClientRec* c = find_client(id)) c->last_seen = now.mono;
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
      w.processing.erase(p);
      if (!w.seceded.empty() && std::erase(w.seceded, r.id) > 0) {
        --w.nthreads;  // the thread it ran on ends with it
        out_.cluster_changed = true;
      }
    }
    if (w.suspect == r.id) w.suspect = 0;
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
      graph_.failed(r.id, std::move(r.error), fx_);
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

void SchedulerState::journal_read(TaskId id, zmq::message_t* bytes) {
  if (held_.erase(id) == 0) return;
  const Task* t = graph_.find(id);
  if (t == nullptr) return;
  if (bytes != nullptr) {
    dispatch_scatter(id, std::move(*bytes));
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
  if (spec.gang != 0) gang_member_added(spec);
  if (!spec.campaign.empty()) campaign_task_added(spec.campaign, spec.id, id, added);
  // Finished before a restart: put the journaled result on a worker instead of running the
  // task again (its recipe stays, for lineage).
  if (journaled != nullptr) {
    const Task* t = graph_.find(spec.id);
    if (t != nullptr && (t->status == TaskStatus::ready || t->status == TaskStatus::waiting)) {
      dispatch_scatter(spec.id, zmq::message_t(journaled->data(), journaled->size()));
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

bool SchedulerState::scatter(ClientId id, const protocol::ScatterRequest& req, zmq::message_t payload,
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

void SchedulerState::dispatch_scatter(TaskId id, zmq::message_t payload, std::string source) {
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

// ---- effects ------------------------------------------------------------------------------

void SchedulerState::keep_inline(TaskId id, std::vector<char>& data) {
  // Only for the notice graph_.finished() just queued (the client wants the result): apply()
  // puts it into that notice's update.
  if (data.empty() || fx_.notify.empty() || fx_.notify.back() != id) return;
  inline_results_.emplace_back(fx_.notify.size() - 1, std::move(data));
}

void SchedulerState::apply(Effects& fx) {
  for (TaskId id : fx.ready) {
    const Task* t = graph_.find(id);
    if (t == nullptr || t->status != TaskStatus::ready) continue;
    if (t->deaths > 0 && t->gang == 0) suspects_.push_back(id);
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

// ---- placement ----------------------------------------------------------------------------

bool SchedulerState::live_head(Shape& s) {
  // Drop stale heads: tasks cancelled, placed, or pushed twice since.
  while (!s.ready.empty()) {
    const Task* t = graph_.find(s.ready.top().id);
    if (t != nullptr && t->status == TaskStatus::ready && t->shape == s.id && (held_.empty() || !held_.count(t->id))) {
      return true;
    }
    s.ready.pop();
  }
  return false;
}

void SchedulerState::schedule(const Now& now) {
  last_now_ = now.mono;
  if (!suspects_.empty()) place_suspects(now);
  if (!gangs_waiting_.empty()) place_gangs(now);
  // Tasks whose duration fits a worker that is busy now, not the free ones: they wait, and
  // the tasks behind them go on (a shape stops being looked at after many such in one call,
  // so a flood of them costs a bounded amount per turn).
  constexpr std::size_t kMaxDeferrals = 64;
  std::vector<TaskId>& deferred = deferred_;  // kept between calls: no allocation per turn
  deferred.clear();
  std::vector<std::size_t>& deferrals = deferrals_;
  deferrals.assign(shapes_.size(), 0);
  while (true) {
    // The shape whose best ready task ranks highest among those with a free worker, and the
    // runner-up's head (a batch below stops where it would overtake it).
    Shape* best = nullptr;
    const ReadyItem* rival = nullptr;
    for (auto& s : shapes_) {
      if (deferrals[s.id] >= kMaxDeferrals) continue;
      if (!live_head(s)) continue;
      if (s.unrunnable_dirty) note_unrunnable(s);
      if (s.free.empty()) continue;
      if (best == nullptr || best->ready.top() < s.ready.top()) {
        if (best != nullptr) rival = &best->ready.top();
        best = &s;
      } else if (rival == nullptr || *rival < s.ready.top()) {
        rival = &s.ready.top();
      }
    }
    if (best == nullptr) break;
    const ReadyItem bound = rival != nullptr ? *rival : ReadyItem{INT32_MIN, UINT64_MAX, 0};
    const TaskId id = best->ready.top().id;
    best->ready.pop();
    Task& t = *graph_.find(id);
    if (t.gang != 0) {
      // Once its last member is ready, the gang starts or reserves its workers before any
      // task that came after it can take them.
      gang_member_ready(t);
      if (!gangs_waiting_.empty()) place_gangs(now);
      continue;
    }
    const std::vector<WorkerId>* from = nullptr;
    WorkerRec* w = pick_worker(*best, t, now, &from);
    if (w == nullptr) {
      // Its duration fits no free worker's remaining walltime: wait for a busy one that has
      // time enough, or (none has) for a worker to come.
      bool someone = false;
      for (const auto& [wid, wr] : workers_) {
        someone = someone || (!wr.retiring && offers(wr, *best) &&
                              (wr.end_time == 0 || now.unix_s() + static_cast<std::int64_t>(t.duration_s) <= wr.end_time));
      }
      if (someone) {
        deferred.push_back(id);
        ++deferrals[best->id];
      } else {
        too_long_.push_back(id);
      }
      continue;
    }
    // The worker takes its share of this shape's ready tasks in one visit, as round robin one
    // at a time would give it over the rounds (ready tasks / workers in its list, within its
    // room), so that consecutive placements touch one worker's records, not a thousand's.
    std::size_t share = 1;
    const std::size_t ready = graph_.ready_of_shape(best->id);  // t included: at most these go now
    if (from != nullptr && !from->empty()) share = (ready + from->size() - 1) / from->size();
    const bool open_list = from == &best->open;
    // Tiny tasks (known to take less than batch_us each) go batch_us of them at a time, even
    // to a worker whose thread is busy while others idle: one message and one wake-up of the
    // worker per batch_us of work, not per task (an idle worker gets the next batch).
    double batch = from != nullptr && t.deps.empty() && tiny(t) ? 0 : -1;  // < 0: by share only
    if ((share > 1 || batch >= 0) && t.deps.empty()) {
      // No regrowth of its message list within the batch, and no more room than the ready
      // tasks can fill (a lone tiny task would otherwise reserve a batch_us's worth: ~1,000
      // entries, a large block to allocate and free on a round trip's path).
      const std::size_t room = capacity(*w) - std::min(capacity(*w), w->processing.size());
      const std::size_t want = batch >= 0 ? static_cast<std::size_t>(options_.batch_us / std::max(expected_us(t), 1.0)) + 1 : 0;
      auto& execute = out(w->id).execute;
      execute.reserve(execute.size() + std::min({std::max(share, want), room, std::max<std::size_t>(ready, 1)}));
    }
    dispatch(t, *w);
    if (batch >= 0) batch += std::max(expected_us(t), 1.0);
    for (std::size_t n = 1;; ++n) {
      const bool by_time = batch >= 0 && batch < options_.batch_us;
      if (n >= share && !by_time) break;
      if ((open_list && !by_time ? w->open_pos : w->free_pos)[best->id] < 0) break;  // it is full
      if (!live_head(*best) || best->ready.top() < bound) break;                      // another shape's turn
      Task& next = *graph_.find(best->ready.top().id);
      if (next.gang != 0 || !next.deps.empty()) break;  // gangs and locality: the full path
      if (next.duration_s != 0 && w->end_time != 0 && now.unix_s() + static_cast<std::int64_t>(next.duration_s) > w->end_time) break;
      if (by_time && !tiny(next)) break;  // the rest by the usual path
      best->ready.pop();
      dispatch(next, *w);
      if (batch >= 0) batch += std::max(expected_us(next), 1.0);
    }
  }
  for (TaskId id : deferred) push_ready(*graph_.find(id));
  if (!gangs_waiting_.empty()) place_gangs(now);  // members popped just now
  if (!overloaded_.empty()) steal(now);
  check();
}

WorkerRec* SchedulerState::pick_worker(Shape& s, const Task& t, const Now& now, const std::vector<WorkerId>** from) {
  auto fits_time = [&](const WorkerRec& w) {
    return t.duration_s == 0 || w.end_time == 0 || now.unix_s() + static_cast<std::int64_t>(t.duration_s) <= w.end_time;
  };
  // Locality: the free worker that holds most of its input bytes.
  if (!t.deps.empty()) {
    WorkerRec* best = nullptr;
    std::uint64_t best_bytes = 0;
    for (TaskId d : t.deps) {
      const Task* dep = graph_.find(d);
      if (dep == nullptr) continue;
      for (WorkerId h : dep->who_has) {
        WorkerRec* w = find_worker(h);
        if (w == nullptr || w->free_pos[s.id] < 0 || !fits_time(*w) || avoided(t, h)) continue;
        std::uint64_t bytes = 0;
        for (TaskId d2 : t.deps) {
          if (const Task* x = graph_.find(d2); x != nullptr && w->has.count(d2)) bytes += x->nbytes + 1;
        }
        if (best == nullptr || bytes > best_bytes) {
          best = w;
          best_bytes = bytes;
        }
      }
    }
    if (best != nullptr) return best;
  }
  // allow_other_workers: one of the named workers when one can take it now, else any.
  if (s.loose) {
    for (std::vector<WorkerId>* list : {&s.open, &s.free}) {
      for (WorkerId id : *list) {
        WorkerRec& w = workers_.at(id);
        if (named(w, s) && fits_time(w) && !avoided(t, id)) {
          *from = nullptr;  // one at a time: the others of the shape may go anywhere
          return &w;
        }
      }
    }
  }
  // A worker with an idle thread first, else one with room in its queue: round robin.
  WorkerRec* fallback = nullptr;  // an avoided one, if nothing else is free
  const std::vector<WorkerId>* fallback_from = nullptr;
  for (std::vector<WorkerId>* list : {&s.open, &s.free}) {
    std::size_t& cursor = list == &s.open ? s.open_cursor : s.cursor;
    for (std::size_t n = 0; n < list->size(); ++n) {
      if (cursor >= list->size()) cursor = 0;
      WorkerRec& w = workers_.at((*list)[cursor++]);
      if (!fits_time(w)) continue;
      if (!avoided(t, w.id)) {
        *from = list;
        return &w;
      }
      if (fallback == nullptr) {
        fallback = &w;
        fallback_from = list;
      }
    }
  }
  // Only workers that could not fetch its inputs are free: one tries again (the task fails
  // after allowed_failures such reports, so this cannot loop).
  if (fallback != nullptr) *from = fallback_from;
  return fallback;
}

protocol::ExecuteTask& SchedulerState::dispatch(Task& t, WorkerRec& w) {
  graph_.started(t.id, w.id);
  if (w.processing.empty()) w.progressed = last_now_;  // its queue starts moving now
  w.nothing_to_steal = false;                          // steal() looks at its queue again
  w.processing.emplace(t.id, t.shape);
  w.order.push_back(t.id);
  if (w.order.size() > 4 * capacity(w) + 64) {
    // Forget answered ids, so the order stays about as long as the queue.
    std::deque<TaskId> kept;
    for (TaskId id : w.order) {
      if (w.processing.count(id)) kept.push_back(id);
    }
    w.order.swap(kept);
  }
  for (const auto& [r, amount] : shapes_[t.shape].need_ids) w.free[r] -= amount;
  w.idle_since = Clock::time_point::max();
  // Made in place in the outbox (a 224-byte message: no moving it there).
  protocol::ExecuteTask& e = out(w.id).execute.emplace_back();
  e.id = t.id;
  e.function = graph_.function_name(t);
  e.args.assign(t.args.begin(), t.args.end());
  e.refs.assign(t.refs.begin(), t.refs.end());
  e.key = graph_.key_of(t);
  if (t.shape != 0) e.resources = shapes_[t.shape].need;
  e.full_result = options_.full_results && t.keyed;
  e.timeout_ms = t.timeout_ms;
  e.isolated = t.isolated;
  e.isolated_memory = graph_.isolated_memory(t);
  e.inputs.reserve(t.deps.size());
  for (TaskId d : t.deps) {
    protocol::DepLocation& loc = e.inputs.emplace_back();
    loc.id = d;
    if (const Task* dep = graph_.find(d)) {
      loc.holders.reserve(dep->who_has.size());
      for (WorkerId h : dep->who_has) {
        if (const WorkerRec* hw = worker(h)) loc.holders.push_back(hw->address);
      }
    }
  }
  refresh(w);
  if (t.no_worker_noted) {
    // It was reported as waiting for a worker: it is running now.
    t.no_worker_noted = false;
    if (clients_.count(t.client)) {
      protocol::TaskUpdate u;
      u.id = t.id;
      u.state = static_cast<std::uint8_t>(protocol::TaskState::processing);
      out_.clients[t.client].updates.updates.push_back(std::move(u));
    }
  }
  return e;
}

void SchedulerState::place_suspects(const Now& now) {
  std::vector<TaskId> still;
  for (TaskId id : suspects_) {
    Task* t = graph_.find(id);
    if (t == nullptr || t->status != TaskStatus::ready) continue;
    const Shape& s = shapes_[t->shape];
    WorkerRec* reserved = nullptr;
    for (auto& [wid, w] : workers_) {
      if (w.reserved_for == id) reserved = &w;
    }
    if (reserved != nullptr && reserved->processing.empty() && !reserved->retiring) {
      // It drained: run the suspect alone.
      reserved->reserved_for = 0;
      reserved->suspect = id;
      dispatch(*t, *reserved);
      continue;
    }
    if (reserved == nullptr) {
      WorkerRec* idle = nullptr;
      WorkerRec* least = nullptr;
      for (auto& [wid, w] : workers_) {
        if (!available(w) || !offers(w, s)) continue;
        if (t->duration_s > 0 && w.end_time > 0 && now.unix_s() + t->duration_s > w.end_time) continue;
        if (w.processing.empty()) idle = &w;
        if (least == nullptr || w.processing.size() < least->processing.size()) least = &w;
      }
      if (idle != nullptr) {
        idle->suspect = id;
        dispatch(*t, *idle);
        continue;
      }
      if (least != nullptr) {
        // A suspect runs alone: this worker finishes what it has, takes nothing new, then runs it.
        least->reserved_for = id;
        refresh(*least);
      }
    }
    still.push_back(id);
  }
  suspects_.swap(still);
}

void SchedulerState::note_unrunnable(Shape& s) {
  s.unrunnable_dirty = false;
  if (s.offered_by > 0) return;
  const std::string why = "no connected worker offers " + describe_shape(s);
  s.ready.for_each([&](const ReadyItem& item) {
    Task* t = graph_.find(item.id);
    if (t == nullptr || t->status != TaskStatus::ready || t->no_worker_noted) return;
    t->no_worker_noted = true;
    if (clients_.count(t->client) == 0) return;
    protocol::TaskUpdate u;
    u.id = t->id;
    u.state = static_cast<std::uint8_t>(protocol::TaskState::no_worker);
    u.error = {"herd::NoWorker", why, graph_.key_of(*t), ""};
    out_.clients[t->client].updates.updates.push_back(std::move(u));
  });
}

std::string SchedulerState::why_no_worker(const Task& t) const {
  if (t.status != TaskStatus::ready) return {};
  const Shape& s = shapes_[t.shape];
  if (t.gang != 0) {
    if (auto g = gangs_.find(t.gang); g != gangs_.end() && !g->second.never.empty()) return g->second.never;
  }
  if (s.offered_by == 0) {
    std::string offered;
    std::size_t retiring = 0;
    for (const auto& [id, w] : workers_) {
      if (offers(w, s)) ++retiring;
    }
    std::string why = "no connected worker offers " + describe_shape(s);
    if (retiring > 0) why += " (" + std::to_string(retiring) + " that did are retiring)";
    return why;
  }
  if (std::find(too_long_.begin(), too_long_.end(), t.id) != too_long_.end()) {
    return "it needs " + std::to_string(t.duration_s) + " s (TaskOptions::duration) and no worker that offers " +
           describe(s.need) + " has that much walltime left";
  }
  return {};
}

std::map<std::string, std::uint64_t> SchedulerState::unrunnable() const {
  std::map<std::string, std::uint64_t> out;
  for (const auto& s : shapes_) {
    const std::size_t n = graph_.ready_of_shape(s.id);
    if (n > 0 && s.offered_by == 0) out["no connected worker offers " + describe_shape(s)] += n;
  }
  for (TaskId id : too_long_) {
    const Task* t = graph_.find(id);
    if (t != nullptr && t->status == TaskStatus::ready) ++out[why_no_worker(*t)];
  }
  for (const auto& [gid, g] : gangs_) {
    if (!g.never.empty()) out[g.never] += g.size;
  }
  return out;
}

void SchedulerState::steal(const Now& now) {
  // Idle threads whose shapes have nothing ready, while other workers queue tasks beyond their
  // threads: take queued (unstarted) tasks back from them, so they run on the idle threads.
  // The victim hands back only what it has not started; a task that started meanwhile just
  // finishes where it is.
  std::vector<WorkerRec*> thieves;
  FlatSet<WorkerId> seen;
  for (auto& s : shapes_) {
    if (s.open.empty() || live_head(s)) continue;
    for (WorkerId id : s.open) {
      if (seen.insert(id).second) thieves.push_back(&workers_.at(id));
    }
  }
  if (thieves.empty()) return;
  // What the victims can give, by shape: each victim's newest tasks beyond its threads (those
  // already asked back counted against it), victim after victim. Each victim's queue is read
  // once per call, and a thief looks only at the shapes it can run: no thieves x victims walk.
  std::vector<std::vector<Task*>> offer(shapes_.size());
  std::vector<std::size_t> next(shapes_.size(), 0);
  bool any = false;
  // A queue of tiny tasks that keeps moving is left alone: asking one back and sending it
  // again costs more than running it where it is (Dask does not steal tasks under 5 ms either).
  // One that has not moved for kStalled is stuck behind something long.
  for (WorkerId vid : overloaded_) {
    WorkerRec& v = workers_.at(vid);
    if (v.suspect != 0) continue;
    const bool stalled = now.mono - v.progressed > kStalled;
    if (!stalled && v.nothing_to_steal) continue;  // no new task since it offered nothing
    bool offered = false;
    std::size_t excess = v.processing.size() - v.nthreads;
    for (auto it = v.order.rbegin(); it != v.order.rend() && excess > 0; ++it) {
      if (!v.processing.count(*it)) continue;
      Task* t = graph_.find(*it);
      if (t == nullptr || t->status != TaskStatus::processing || t->worker != vid || t->gang != 0 || t->scattered) {
        continue;
      }
      --excess;
      if (t->stealing || (!stalled && tiny(*t))) continue;
      offer[t->shape].push_back(t);
      any = offered = true;
    }
    // A queue of tiny tasks is not read again every turn while thieves wait (thousands of
    // entries on each of hundreds of workers): only after its next new task, or once stalled.
    v.nothing_to_steal = !offered && !stalled;
  }
  if (!any) return;
  for (WorkerRec* thief : thieves) {
    std::size_t want = thief->nthreads - std::min<std::size_t>(thief->nthreads, thief->processing.size());
    for (std::uint16_t sid : thief->shapes) {
      if (want == 0) break;
      if (thief->free_pos[sid] < 0) continue;  // it cannot take this shape now
      auto& pool = offer[sid];
      for (std::size_t& i = next[sid]; i < pool.size() && want > 0; ++i) {
        Task* t = pool[i];  // on an overloaded worker: never the thief's own
        // A task whose duration the thief's walltime cannot hold would only come back to where
        // it was, turn after turn.
        if (t->duration_s > 0 && thief->end_time > 0 &&
            now.unix_s() + static_cast<std::int64_t>(t->duration_s) > thief->end_time) {
          continue;
        }
        t->stealing = true;
        out(t->worker).cancel.push_back(t->id);
        --want;
      }
    }
  }
}

void SchedulerState::record_run(const Task* t, const WorkerRec& w, const protocol::TaskResult& r, const Now& now) {
  if (t == nullptr || t->scattered) return;
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

// ---- results out of reach ----------------------------------------------------------------

bool SchedulerState::avoided(const Task& t, WorkerId w) const {
  if (trouble_.empty() && cuts_.empty()) return false;
  auto it = trouble_.find(t.id);
  if (it != trouble_.end() && std::find(it->second.avoid.begin(), it->second.avoid.end(), w) != it->second.avoid.end()) {
    return true;
  }
  if (cuts_.empty()) return false;
  // An input whose every holder this worker could not reach lately (and not its own copy).
  const auto horizon = std::chrono::milliseconds(3ULL * options_.timeout_ms);
  for (TaskId d : t.deps) {
    const Task* dep = graph_.find(d);
    if (dep == nullptr || dep->who_has.empty()) continue;
    bool all_cut = true;
    for (WorkerId h : dep->who_has) {
      auto c = cuts_.find({w, h});
      all_cut = all_cut && h != w && c != cuts_.end() && last_now_ - c->second <= horizon;
    }
    if (all_cut) return true;
  }
  return false;
}

std::string SchedulerState::holder_text(const std::string& address) const {
  auto h = by_address_.find(address);
  const WorkerRec* w = h == by_address_.end() ? nullptr : worker(h->second);
  if (w == nullptr) return address;
  return "worker " + w->name + " on " + w->host + " (" + address + ")";
}

void SchedulerState::drop_holder(TaskId id, WorkerId holder) {
  WorkerRec* h = find_worker(holder);
  if (h == nullptr || !h->has.count(id)) return;
  h->has.erase(id);
  out(holder).free.push_back(id);
  graph_.remove_holder(id, holder, fx_);  // the last copy gone: computed again from its recipe
}

void SchedulerState::missing_input(WorkerRec& w, protocol::TaskResult& r, const Now& now) {
  last_now_ = now.mono;
  Task* t = graph_.find(r.id);
  if (t == nullptr || t->status != TaskStatus::processing || t->worker != w.id) return;
  // Holders that said they no longer have it are holders no more.
  for (const auto& loc : r.not_held) {
    for (const auto& address : loc.holders) {
      if (auto h = by_address_.find(address); h != by_address_.end()) drop_holder(loc.id, h->second);
    }
  }
  if (!r.unreachable.empty()) {
    // Holders this worker could not reach (alive, as far as the scheduler hears): the task runs
    // elsewhere; a copy that two workers could not reach is given up on and computed again
    // where it can be fetched; after allowed_failures reports the task fails, naming them.
    FetchTrouble& tr = trouble_[r.id];
    ++tr.reports;
    if (std::find(tr.avoid.begin(), tr.avoid.end(), w.id) == tr.avoid.end()) tr.avoid.push_back(w.id);
    std::string holders;
    for (const auto& loc : r.unreachable) {
      for (const auto& address : loc.holders) holders += (holders.empty() ? "" : ", ") + holder_text(address);
    }
    const std::string tried = "on " + w.name + " (" + w.host + "), which could not reach " + holders;
    auto seen = std::find_if(tr.log.begin(), tr.log.end(), [&](const auto& l) { return l.first == tried; });
    if (seen == tr.log.end()) tr.log.push_back({tried, {1, r.error.message}});
    else ++seen->second.first;
    for (const auto& loc : r.unreachable) {
      for (const auto& address : loc.holders) {
        auto h = by_address_.find(address);
        if (h == by_address_.end()) continue;  // gone: the graph knows already
        cuts_[{w.id, h->second}] = now.mono;
        auto& who = unreachable_holders_[{loc.id, h->second}];
        if (std::find(who.begin(), who.end(), w.id) == who.end()) who.push_back(w.id);
        if (who.size() >= 2) {
          HERD_LOG(warning) << "input " << loc.id << " on " << address << " is out of reach of " << who.size()
                            << " workers: computing it again elsewhere";
          unreachable_holders_.erase({loc.id, h->second});
          drop_holder(loc.id, h->second);
        }
      }
    }
    if (tr.reports > options_.allowed_failures) {
      const std::string key = graph_.key_of(*t);
      std::string log;
      for (const auto& [line, said] : tr.log) {
        log += (log.empty() ? "" : "; ") + line + (said.first > 1 ? " (" + std::to_string(said.first) + " times)" : "") +
               ": " + said.second;
      }
      const std::uint32_t reports = tr.reports;
      trouble_.erase(r.id);
      graph_.fail(r.id, {"herd::MissingInput",
                         "task " + key + " could not fetch its inputs in " + std::to_string(reports) + " tries: " + log, key,
                         w.name},
                  fx_);
      return;
    }
  }
  graph_.input_missing(r.id, fx_);
}

void SchedulerState::tell_client(ClientId c, const Task& t, WorkerId holder) {
  const WorkerRec* hw = worker(holder);
  if (hw == nullptr || clients_.count(c) == 0) return;
  ClientOut& co = out_.clients[c];
  auto found = co.address_index.find(holder);
  if (found == co.address_index.end()) {
    found = co.address_index.emplace(holder, static_cast<std::int32_t>(co.updates.addresses.size())).first;
    co.updates.addresses.push_back(hw->address);
  }
  protocol::TaskUpdate u;
  u.id = t.id;
  u.state = static_cast<std::uint8_t>(protocol::TaskState::memory);
  u.nbytes = t.nbytes;
  u.location = found->second;
  co.updates.updates.push_back(std::move(u));
}

void SchedulerState::client_fetch_failed(ClientId c, const protocol::FetchFailedEvent& ev) {
  const auto bad = by_address_.find(ev.address);
  const WorkerId bad_id = bad == by_address_.end() ? kNoWorker : bad->second;
  for (TaskId id : ev.ids) {
    const Task* t = graph_.find(id);
    if (t == nullptr || t->client != c || !t->in_memory()) continue;  // it hears when it is back
    // Another holder: try there.
    WorkerId other = kNoWorker;
    for (WorkerId h : t->who_has) {
      if (h != bad_id) other = h;
    }
    if (other != kNoWorker) {
      tell_client(c, *t, other);
      continue;
    }
    Relocation& rel = relocations_[id];
    if (std::find(rel.clients.begin(), rel.clients.end(), c) == rel.clients.end()) rel.clients.push_back(c);
    rel.address = ev.address;
    rel.why = ev.why;
    if (++rel.attempts > 2) {
      relocation_failed(id, "it could not be copied to another worker the client reaches");
      continue;
    }
    // Another worker copies it; the client is pointed there once it has it.
    WorkerRec* via = nullptr;
    for (auto& [wid, w] : workers_) {
      if (wid == bad_id || w.retiring) continue;
      if (via == nullptr || w.has.size() < via->has.size()) via = &w;
    }
    if (via == nullptr) {
      relocation_failed(id, "no other worker is connected to copy it");
      continue;
    }
    out(via->id).acquire.push_back({id, {ev.address}});
  }
  apply(fx_);
  check();
}

void SchedulerState::relocated(TaskId id, WorkerId holder) {
  auto it = relocations_.find(id);
  if (it == relocations_.end()) return;
  const Task* t = graph_.find(id);
  if (t != nullptr) {
    for (ClientId c : it->second.clients) tell_client(c, *t, holder);
  }
  relocations_.erase(it);
}

void SchedulerState::relocation_failed(TaskId id, const std::string& why) {
  auto it = relocations_.find(id);
  if (it == relocations_.end()) return;
  const Relocation rel = std::move(it->second);
  relocations_.erase(it);
  const Task* t = graph_.find(id);
  if (t == nullptr) return;
  const WorkerRec* holder = nullptr;
  if (auto h = by_address_.find(rel.address); h != by_address_.end()) holder = worker(h->second);
  const std::string where = rel.address + (holder != nullptr ? " (worker " + holder->name + " on " + holder->host + ")" : "");
  for (ClientId c : rel.clients) {
    if (clients_.count(c) == 0) continue;
    protocol::TaskUpdate u;
    u.id = id;
    u.state = static_cast<std::uint8_t>(protocol::TaskState::erred);
    u.error = {"herd::ConnectionError", "the result of " + graph_.key_of(*t) + " could not be fetched from " + where + ": " +
                                            rel.why + "; " + why,
               graph_.key_of(*t), holder != nullptr ? holder->name : ""};
    out_.clients[c].updates.updates.push_back(std::move(u));
  }
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
    pw.idle = w.processing.empty();
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

// ---- invariants ---------------------------------------------------------------------------

std::string SchedulerState::validate() const {
  if (std::string broken = graph_.validate(); !broken.empty()) return broken;
  if (std::string broken = validate_campaigns(); !broken.empty()) return broken;
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
    for (const auto& [tid, shape] : w.processing) {
      for (const auto& [r, amount] : shapes_[shape].need_ids) expect[r] -= amount;
    }
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
      const bool open = take && w.processing.size() < w.nthreads;
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
    if ((w.processing.size() > w.nthreads) != (overloaded_.count(id) > 0) || w.overloaded != (overloaded_.count(id) > 0)) {
      return "worker " + w.name + " is misfiled as overloaded";
    }
  }
  for (const auto& s : shapes_) {
    if (s.offered_by != offered_by[s.id]) return "shape " + std::to_string(s.id) + " is offered by a wrong count";
    for (WorkerId id : s.free) {
      if (!workers_.count(id)) return "a free list holds a worker that is gone";
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
