// SchedulerState's placement (see state.hpp's paragraph): resource shapes and each shape's
// lists of the workers that can take one more task now, the turn's placement of ready tasks
// (schedule, pick_worker, dispatch), suspects placed alone, shapes no worker offers, and stealing.
#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "scheduler/state.hpp"
#include "scheduler/state_internal.hpp"

namespace herd::scheduler {

namespace {
// A worker with queued tasks and no result for this long is stuck (behind a long task, or
// starved): its tiny tasks may be stolen too. Dask's work-stealing interval.
constexpr auto kStalled = std::chrono::milliseconds(100);

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
  s.holds_cores = need.count("cpus") != 0;
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
  if (w.retiring || w.suspect != 0 || w.reserved_for != 0 || w.reserved_gang != 0 || w.held_by != 0) return false;
  // Near its memory limit a worker takes nothing new until it is back under.
  // A paused worker (memory, as Dask's) likewise.
  return !(w.memory_limit > 0 && w.memory_rss > w.memory_limit / 10 * 9) && w.paused.empty();
}

std::size_t SchedulerState::capacity(const WorkerRec& w) const { return w.nthreads * (1 + extra_per_slot_); }

bool SchedulerState::can_take(const WorkerRec& w, const Shape& s) const {
  // A task that holds cores is capped by the worker's free cores (below), not its slots.
  if (!available(w) || (!s.holds_cores && slot_tasks(w) >= capacity(w))) return false;
  for (const auto& [r, amount] : s.need_ids) {
    if (w.free[r] + kEps < amount) return false;
  }
  return true;
}

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

void SchedulerState::refresh(WorkerRec& w) {
  const bool idle_thread = slot_tasks(w) < w.nthreads;
  for (std::uint16_t sid : w.shapes) {
    Shape& s = shapes_[sid];
    const bool take = can_take(w, s);
    list_set(s.free, w.free_pos, sid, w.id, take, workers_, &WorkerRec::free_pos);
    list_set(s.open, w.open_pos, sid, w.id, take && (idle_thread || s.holds_cores), workers_, &WorkerRec::open_pos);
  }
  const bool overloaded = slot_tasks(w) > w.nthreads;
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
  if (multinode(t.id)) {  // placed whole nodes at a time (state_multinode.cpp)
    if (std::find(multinode_waiting_.begin(), multinode_waiting_.end(), t.id) == multinode_waiting_.end()) {
      multinode_waiting_.push_back(t.id);
    }
    return;
  }
  Shape& s = shapes_[t.shape];
  s.ready.push({t.priority, t.seq, t.id});
  if (s.offered_by == 0) s.unrunnable_dirty = true;
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
  jobs_tick(now);
  if (!suspects_.empty()) place_suspects(now);
  if (!gangs_waiting_.empty()) place_gangs(now);
  if (!multinode_waiting_.empty()) place_multinode(now);
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
  t.placed_us = clock_us_;
  if (w.processing.empty()) w.progressed = last_now_;  // its queue starts moving now
  w.nothing_to_steal = false;                          // steal() looks at its queue again
  w.processing.emplace(t.id, t.shape);
  if (shapes_[t.shape].holds_cores) ++w.core_tasks;
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
  if (multinode(t.id)) return why_multinode_waits(t);
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
  for (const auto& [tid, why] : multinode_never_) ++out[why];
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
    std::size_t excess = slot_tasks(v) - v.nthreads;
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
    std::size_t want = thief->nthreads - std::min<std::size_t>(thief->nthreads, slot_tasks(*thief));
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

}  // namespace herd::scheduler
