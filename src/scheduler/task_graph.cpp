#include "scheduler/task_graph.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "common/logging.hpp"

namespace herd::scheduler {

const char* to_string(TaskStatus s) {
  switch (s) {
    case TaskStatus::waiting: return "waiting";
    case TaskStatus::ready: return "ready";
    case TaskStatus::processing: return "processing";
    case TaskStatus::memory: return "memory";
    case TaskStatus::erred: return "erred";
    case TaskStatus::cancelled: return "cancelled";
    case TaskStatus::released: return "released";
  }
  return "unknown";
}

protocol::TaskState wire_state(TaskStatus s) {
  switch (s) {
    case TaskStatus::waiting: return protocol::TaskState::waiting;
    case TaskStatus::ready: return protocol::TaskState::ready;
    case TaskStatus::processing: return protocol::TaskState::processing;
    case TaskStatus::memory: return protocol::TaskState::memory;
    case TaskStatus::erred: return protocol::TaskState::erred;
    case TaskStatus::cancelled: return protocol::TaskState::cancelled;
    case TaskStatus::released: return protocol::TaskState::waiting;
  }
  return protocol::TaskState::waiting;
}

std::string TaskGraph::display_key(const std::string& function, TaskId id) {
  // "<function>-<id in lowercase hex>", as the client writes it (snprintf "%llx" costs more
  // than the rest of a task's dispatch): the string made at its size, then written in place.
  int digits = 1;
  while (digits < 16 && (id >> (4 * digits)) != 0) ++digits;
  std::string out(function.size() + 1 + static_cast<std::size_t>(digits), '-');
  char* p = out.data();
  std::memcpy(p, function.data(), function.size());
  p += function.size() + 1;
  for (int i = digits - 1; i >= 0; --i) {
    p[i] = "0123456789abcdef"[id & 0xf];
    id >>= 4;
  }
  return out;
}

std::string TaskGraph::key_of(const Task& t) const {
  return t.named ? keys_.at(t.id) : display_key(functions_[t.function], t.id);
}

const std::string& TaskGraph::user_key(const Task& t) const {
  static const std::string none;
  return t.named ? keys_.at(t.id) : none;
}

std::uint32_t TaskGraph::intern_function(const std::string& name) {
  // Submissions come in runs of one function: the last one found is checked first.
  if (last_function_ < functions_.size() && functions_[last_function_] == name) return last_function_;
  auto [it, added] = function_index_.try_emplace(name, static_cast<std::uint32_t>(functions_.size()));
  if (added) functions_.push_back(name);
  last_function_ = it->second;
  return it->second;
}

void TaskGraph::illegal(const Task& t, TaskStatus to) {
  ++illegal_;
  const std::string what = "illegal task transition " + std::string(to_string(t.status)) + " -> " + to_string(to) +
                           " for " + key_of(t);
  if (strict_) throw std::logic_error(what);
  HERD_LOG(error) << what << " (a scheduler bug; please report it)";
}

void TaskGraph::set(Task& t, TaskStatus to) {
  const TaskStatus from = t.status;
  if (!kLegal[static_cast<int>(from)][static_cast<int>(to)]) [[unlikely]] illegal(t, to);
  --counts_[static_cast<int>(from)];
  ++counts_[static_cast<int>(to)];
  auto placed = [](TaskStatus s) { return s == TaskStatus::ready || s == TaskStatus::processing; };
  if (placed(from) || placed(to)) {
    if (t.shape >= by_shape_.size()) [[unlikely]] by_shape_.resize(t.shape + 1u);
    ShapeCounts& c = by_shape_[t.shape];
    if (from == TaskStatus::ready) --c.ready;
    else if (from == TaskStatus::processing) --c.processing;
    if (to == TaskStatus::ready) ++c.ready;
    else if (to == TaskStatus::processing) ++c.processing;
  }
  t.status = to;
}

void TaskGraph::count_in(const Task& t, int delta) {
  counts_[static_cast<int>(t.status)] += static_cast<std::size_t>(delta);
  if (t.status != TaskStatus::ready && t.status != TaskStatus::processing) return;
  if (t.shape >= by_shape_.size()) [[unlikely]] by_shape_.resize(t.shape + 1u);
  auto& c = t.status == TaskStatus::ready ? by_shape_[t.shape].ready : by_shape_[t.shape].processing;
  c += static_cast<std::size_t>(delta);
}

std::uint64_t TaskGraph::isolated_memory(const Task& t) const {
  if (!t.isolated) return 0;
  const auto it = isolated_memory_.find(t.id);
  return it == isolated_memory_.end() ? 0 : it->second;
}

void TaskGraph::erase(Task& t) {
  if (t.deaths > 0) death_workers_.erase(t.id);
  if (t.named) keys_.erase(t.id);
  if (t.isolated) isolated_memory_.erase(t.id);
  if (!budgets_.empty()) budgets_.erase(t.id);
  count_in(t, -1);
  tasks_.erase(t.id);
}

void TaskGraph::add(const protocol::TaskSpec& spec, std::uint32_t client, std::uint16_t shape, Effects& fx) {
  auto [added, fresh] = tasks_.emplace(spec.id);
  if (!fresh) return;  // a resend; the first copy stands
  Task& t = *added;
  t.shape = shape;  // before the first count
  count_in(t, +1);
  t.id = spec.id;
  t.client = client;
  t.wanted = spec.want_result;
  t.function = intern_function(spec.function);
  t.keyed = !spec.key.empty();
  if (t.keyed) {
    keys_[t.id] = spec.key;
    t.named = true;
  }
  t.args.assign(spec.args.begin(), spec.args.end());
  t.refs.assign(spec.refs.begin(), spec.refs.end());
  t.priority = spec.priority;
  t.retries_left = spec.gang != 0 ? 0 : spec.retries;
  t.gang = spec.gang;
  t.gang_rank = spec.gang_rank;
  t.duration_s = spec.duration_s;
  t.timeout_ms = spec.timeout_ms;
  t.isolated = spec.isolated;
  if (spec.isolated && spec.isolated_memory > 0) isolated_memory_[t.id] = spec.isolated_memory;
  if (spec.preemptions > 0 && spec.gang == 0) {
    budgets_[t.id] = {spec.preemptions, spec.preemptions, 0, spec.retries, 0};
  }
  t.seq = next_seq_++;
  for (const auto& r : spec.refs) {
    if (std::find(t.deps.begin(), t.deps.end(), r.id) == t.deps.end()) t.deps.push_back(r.id);
  }
  // Check every input before linking any, so a failed add leaves no dangling edge.
  for (TaskId d : t.deps) {
    Task* dep = find(d);
    if (dep == nullptr || dep->id == t.id) {
      t.deps.clear();
      fail_with(t, {"herd::MissingInput",
                    "input task " + display_key("", d).substr(1) +
                        " is unknown to the scheduler (its future was released, or it was "
                        "submitted by another client)",
                    key_of(t), ""},
                TaskStatus::erred, fx);
      return;
    }
  }
  const protocol::ErrorInfo* upstream_error = nullptr;
  for (TaskId d : t.deps) {
    Task& dep = *tasks_.find(d);
    dep.dependents.push_back(t.id);
    ++dep.waiters;
    if (dep.error && (dep.status == TaskStatus::erred || dep.status == TaskStatus::cancelled)) {
      upstream_error = dep.error.get();
    }
  }
  if (upstream_error != nullptr) {
    protocol::ErrorInfo e = *upstream_error;
    fail_with(t, e, TaskStatus::erred, fx);
    return;
  }
  for (TaskId d : t.deps) ensure_data(*tasks_.find(d), fx);
  make_runnable(t, fx);
}

void TaskGraph::add_scattered(TaskId id, std::string key, std::uint32_t client) {
  auto [added, fresh] = tasks_.emplace(id);
  if (!fresh) return;
  Task& t = *added;
  count_in(t, +1);
  t.id = id;
  t.client = client;
  t.wanted = true;
  t.scattered = true;
  t.function = intern_function("scatter");
  if (!key.empty()) {
    keys_[id] = std::move(key);
    t.named = true;
  }
  t.seq = next_seq_++;
  // waiting until it is sent to a worker (started()), then processing until the worker says
  // it holds it (finished()).
}

void TaskGraph::make_runnable(Task& t, Effects& fx) {
  std::uint32_t missing = 0;
  for (TaskId d : t.deps) {
    const Task* dep = find(d);
    if (dep == nullptr || !dep->in_memory() || dep->who_has.empty()) ++missing;
  }
  t.waiting_on = missing;
  t.worker = kNoWorker;
  t.stealing = false;
  if (missing == 0) {
    set(t, TaskStatus::ready);
    fx.ready.push_back(t.id);
  } else {
    set(t, TaskStatus::waiting);
  }
}

void TaskGraph::ensure_data(Task& t, Effects& fx) {
  // Iterative: a long chain whose data was all released must not recurse deeply.
  std::vector<TaskId>& stack = ensure_stack_;
  stack.assign(1, t.id);
  while (!stack.empty()) {
    Task* cur = find(stack.back());
    stack.pop_back();
    if (cur == nullptr) continue;
    const bool lost = cur->status == TaskStatus::memory && cur->who_has.empty();
    if (!(cur->status == TaskStatus::released || lost)) continue;
    if (cur->scattered) {
      set(*cur, TaskStatus::waiting);  // unfinished, so that it can fail
      fail_with(*cur, {"herd::ScatteredDataLost",
                       "the worker holding scattered data " + key_of(*cur) +
                           " was lost; scattered data has no recipe to recompute it",
                       key_of(*cur), ""},
                TaskStatus::erred, fx);
      continue;
    }
    for (TaskId d : cur->deps) {
      Task* dep = find(d);
      if (dep == nullptr) continue;
      ++dep->waiters;  // cur is unfinished again and needs its inputs
      stack.push_back(d);
    }
    cur->who_has.clear();
    make_runnable(*cur, fx);
  }
}

void TaskGraph::started(TaskId id, std::uint32_t worker) {
  if (Task* t = find(id)) {
    set(*t, TaskStatus::processing);
    t->worker = worker;
    t->stealing = false;
  }
}

void TaskGraph::finished(TaskId id, std::uint32_t worker, std::uint64_t nbytes, Effects& fx) {
  Task* t = find(id);
  if (t == nullptr || t->status != TaskStatus::processing || t->worker != worker) {
    // Late, duplicate or unknown: a task never yields two results. The copy is dropped.
    if (t != nullptr && t->in_memory() &&
        std::find(t->who_has.begin(), t->who_has.end(), worker) == t->who_has.end()) {
      t->who_has.push_back(worker);  // a valid extra copy of a result we already hold
    } else {
      fx.free.emplace_back(worker, id);
    }
    return;
  }
  t->worker = kNoWorker;
  t->stealing = false;
  if (t->forget_when_done) {
    fx.free.emplace_back(worker, id);
    set(*t, TaskStatus::released);
    // It no longer waits on its inputs (as became_memory says for a kept result): a
    // fire-and-forget task that had inputs leaves their counts right.
    for (TaskId d : t->deps) {
      if (Task* dep = find(d); dep != nullptr && dep->waiters > 0) --dep->waiters;
    }
    maybe_forget(*t, fx);
    return;
  }
  set(*t, TaskStatus::memory);
  t->who_has.assign(1, worker);
  t->nbytes = nbytes;
  became_memory(*t, fx);
}

void TaskGraph::became_memory(Task& t, Effects& fx) {
  if (t.wanted) fx.notify.push_back(t.id);
  for (TaskId d : t.dependents) {
    Task* dt = find(d);
    if (dt != nullptr && dt->status == TaskStatus::waiting && dt->waiting_on > 0 && --dt->waiting_on == 0) {
      set(*dt, TaskStatus::ready);
      fx.ready.push_back(d);
    }
  }
  // t no longer needs its inputs' data. (Forgetting an input never touches t: t is still its
  // dependent.)
  for (std::size_t i = 0; i < t.deps.size(); ++i) {
    if (Task* dep = find(t.deps[i])) {
      if (dep->waiters > 0) --dep->waiters;
      maybe_forget(*dep, fx);
    }
  }
  if (!t.wanted && t.waiters == 0) maybe_forget(t, fx);
}

bool TaskGraph::failed(TaskId id, protocol::ErrorInfo error, Effects& fx, bool preempted) {
  Task* t = find(id);
  if (t == nullptr || t->status != TaskStatus::processing) return false;
  if (auto b = budgets_.empty() ? budgets_.end() : budgets_.find(id); b != budgets_.end()) {
    // A checkpointable task: preemptions and failures each spend their own budget.
    Budget& g = b->second;
    const auto times = [](std::uint32_t n) { return std::to_string(n) + (n == 1 ? " time" : " times"); };
    if (preempted) {
      ++g.preempted;
      if (g.preemptions_left > 0) {
        --g.preemptions_left;
        make_runnable(*t, fx);
        return true;
      }
      error.message += " [preempted " + times(g.preempted) + ": its preemption budget, checkpointable(" +
                       std::to_string(g.preemptions) + "), is spent]";
    } else {
      ++g.failures;
      if (t->retries_left > 0) {
        --t->retries_left;
        make_runnable(*t, fx);
        return true;
      }
      error.message += " [failed " + times(g.failures) + ": its retries, retries(" + std::to_string(g.retries) +
                       "), are spent; preemptions (checkpointable(" + std::to_string(g.preemptions) +
                       ")) do not count failures]";
    }
    fail_with(*t, error, TaskStatus::erred, fx);
    return false;
  }
  if (t->retries_left > 0) {
    --t->retries_left;
    make_runnable(*t, fx);
    return true;
  }
  fail_with(*t, error, TaskStatus::erred, fx);
  return false;
}

void TaskGraph::fail_with(Task& root, const protocol::ErrorInfo& error, TaskStatus status, Effects& fx) {
  std::vector<std::pair<TaskId, TaskStatus>> work{{root.id, status}};
  std::vector<TaskId> touched{root.id};
  while (!work.empty()) {
    auto [id, st] = work.back();
    work.pop_back();
    Task* t = find(id);
    if (t == nullptr || !t->unfinished()) continue;
    if (t->status == TaskStatus::processing && t->worker != kNoWorker) fx.cancel.emplace_back(t->worker, t->id);
    set(*t, st);
    t->worker = kNoWorker;
    t->error = std::make_unique<protocol::ErrorInfo>(error);
    if (t->wanted) fx.notify.push_back(t->id);
    for (TaskId d : t->deps) {
      if (Task* dep = find(d); dep != nullptr && dep->waiters > 0) --dep->waiters;
      touched.push_back(d);
    }
    for (TaskId d : t->dependents) {
      work.emplace_back(d, TaskStatus::erred);
      touched.push_back(d);
    }
  }
  // Inputs that nobody needs any more are freed; failed tasks nobody wants are forgotten.
  for (TaskId id : touched) {
    if (Task* t = find(id)) maybe_forget(*t, fx);
  }
}

void TaskGraph::input_missing(TaskId id, Effects& fx) {
  Task* t = find(id);
  if (t == nullptr || t->status != TaskStatus::processing) return;
  for (TaskId d : t->deps) {
    if (Task* dep = find(d)) ensure_data(*dep, fx);
  }
  if (t->status == TaskStatus::processing) make_runnable(*t, fx);
}

void TaskGraph::fail(TaskId id, const protocol::ErrorInfo& error, Effects& fx) {
  Task* t = find(id);
  if (t == nullptr || !t->unfinished()) return;
  fail_with(*t, error, TaskStatus::erred, fx);
}

void TaskGraph::requeue(TaskId id, Effects& fx) {
  Task* t = find(id);
  if (t == nullptr || t->status != TaskStatus::processing) return;
  make_runnable(*t, fx);
}

void TaskGraph::unstart(TaskId id) {
  Task* t = find(id);
  if (t == nullptr || t->status != TaskStatus::processing) return;
  set(*t, TaskStatus::waiting);
  t->worker = kNoWorker;
  t->stealing = false;
}

void TaskGraph::add_holder(TaskId id, std::uint32_t worker) {
  Task* t = find(id);
  if (t == nullptr || !t->in_memory()) return;
  if (std::find(t->who_has.begin(), t->who_has.end(), worker) == t->who_has.end()) t->who_has.push_back(worker);
}

void TaskGraph::remove_holder(TaskId id, std::uint32_t worker, Effects& fx) {
  Task* t = find(id);
  if (t == nullptr || !t->in_memory()) return;
  worker_lost(worker, {}, {id}, 0, fx, false);
}

void TaskGraph::release(TaskId id, Effects& fx) {
  Task* t = find(id);
  if (t == nullptr) return;
  t->wanted = false;
  maybe_forget(*t, fx);
}

void TaskGraph::cancel(TaskId id, Effects& fx) {
  Task* t = find(id);
  if (t == nullptr || !t->unfinished()) return;
  fail_with(*t, {"herd::CancelledError", "task " + key_of(*t) + " was cancelled", key_of(*t), ""},
            TaskStatus::cancelled, fx);
}

void TaskGraph::worker_lost(std::uint32_t worker, const std::vector<TaskId>& processing,
                            const std::vector<TaskId>& held, std::uint32_t allowed_failures, Effects& fx,
                            bool count_deaths, const std::string& worker_name) {
  const std::string who = worker_name.empty() ? std::to_string(worker) : worker_name;
  for (TaskId id : held) {
    Task* t = find(id);
    if (t == nullptr) continue;
    auto& w = t->who_has;
    w.erase(std::remove(w.begin(), w.end(), worker), w.end());
    if (!t->in_memory() || !w.empty()) continue;
    if (t->wanted && t->safe_elsewhere()) {
      // Its client holds the value: nothing to recompute now. Released, it is computed again
      // from its recipe only when a new task takes it as input (ensure_data).
      set(*t, TaskStatus::released);
    } else if (t->wanted || t->waiters > 0) {
      // Dependents that were ready must wait for the recomputed value.
      for (TaskId d : t->dependents) {
        Task* dt = find(d);
        if (dt != nullptr && dt->status == TaskStatus::ready) make_runnable(*dt, fx);
        else if (dt != nullptr && dt->status == TaskStatus::waiting) ++dt->waiting_on;
      }
      ensure_data(*t, fx);
    } else {
      set(*t, TaskStatus::released);
      maybe_forget(*t, fx);
    }
  }
  for (TaskId id : processing) {
    Task* t = find(id);
    if (t == nullptr || t->status != TaskStatus::processing || t->worker != worker) continue;
    if (t->scattered) {
      fail_with(*t, {"herd::ScatteredDataLost", "the worker receiving scattered data " + key_of(*t) + " was lost",
                     key_of(*t), ""},
                TaskStatus::erred, fx);
      continue;
    }
    if (count_deaths) death_workers_[t->id] += (t->deaths > 0 ? ", " : "") + who;
    if (count_deaths && ++t->deaths > allowed_failures) {
      fail_with(*t, {"herd::KilledWorker",
                     "task " + key_of(*t) + " was running on " + std::to_string(t->deaths) +
                         " workers that died (allowed: " + std::to_string(allowed_failures) +
                         "); giving up on it. Workers: " + death_workers_[t->id],
                     key_of(*t), ""},
                TaskStatus::erred, fx);
      continue;
    }
    for (TaskId d : t->deps) {
      if (Task* dep = find(d)) ensure_data(*dep, fx);
    }
    make_runnable(*t, fx);
  }
}

void TaskGraph::free_data(Task& t, Effects& fx) {
  for (std::uint32_t w : t.who_has) fx.free.emplace_back(w, t.id);
  t.who_has.clear();
  set(t, TaskStatus::released);
}

void TaskGraph::maybe_forget(Task& start, Effects& fx) {
  if (start.wanted) return;
  std::vector<TaskId>& work = forget_work_;  // empty between calls; no allocation per call
  auto visit = [&](Task& t) {
    if (t.wanted) return;
    if (t.waiters == 0 && t.in_memory()) free_data(t, fx);
    if (!t.dependents.empty()) return;  // a dependent may need the recipe
    if (t.status == TaskStatus::processing || (t.fire_and_forget && t.unfinished())) {
      t.forget_when_done = true;
      return;
    }
    if (t.waiters > 0) return;
    const bool was_unfinished = t.unfinished();
    for (TaskId d : t.deps) {
      Task* dep = find(d);
      if (dep == nullptr) continue;
      auto& ds = dep->dependents;
      ds.erase(std::remove(ds.begin(), ds.end(), t.id), ds.end());
      if (was_unfinished && dep->waiters > 0) --dep->waiters;
      work.push_back(d);
    }
    if (t.in_memory()) free_data(t, fx);
    erase(t);
  };
  visit(start);
  while (!work.empty()) {
    Task* t = find(work.back());
    work.pop_back();
    if (t != nullptr) visit(*t);
  }
}

std::string TaskGraph::validate() const {
  std::size_t counts[kTaskStatusCount] = {};
  std::size_t named = 0, seen = 0;
  for (const auto& [id, t] : tasks_) {
    if (find(id) != &t) return "task " + display_key(functions_[t.function], id) + " is not where its index says";
    ++seen;
    if (t.named && keys_.count(id) == 0) return "task " + display_key(functions_[t.function], id) + " has lost its key";
    named += t.named;
    const std::string k = key_of(t);
    if (t.id != id) return "task " + k + " is filed under another id";
    ++counts[static_cast<int>(t.status)];
    if ((t.status == TaskStatus::processing) != (t.worker != kNoWorker)) {
      return "task " + k + " is " + to_string(t.status) + " with worker " +
             (t.worker == kNoWorker ? "none" : std::to_string(t.worker));
    }
    if (t.status == TaskStatus::memory && t.who_has.empty()) return "task " + k + " is in memory with no holder";
    if (t.status != TaskStatus::memory && !t.who_has.empty()) {
      return "task " + k + " is " + to_string(t.status) + " but has holders";
    }
    std::uint32_t not_in_memory = 0, unfinished_dependents = 0;
    for (TaskId d : t.deps) {
      const Task* dep = find(d);
      if (dep == nullptr) return "task " + k + " depends on a task that is gone";
      if (std::find(dep->dependents.begin(), dep->dependents.end(), t.id) == dep->dependents.end()) {
        return "task " + k + " depends on " + key_of(*dep) + ", which does not list it as a dependent";
      }
      not_in_memory += !(dep->in_memory() && !dep->who_has.empty());
    }
    for (TaskId d : t.dependents) {
      const Task* dt = find(d);
      if (dt == nullptr) return "task " + k + " lists a dependent that is gone";
      if (std::find(dt->deps.begin(), dt->deps.end(), t.id) == dt->deps.end()) {
        return "task " + k + " lists " + key_of(*dt) + " as a dependent, but it does not depend on it";
      }
      unfinished_dependents += dt->unfinished();
    }
    if (t.status == TaskStatus::waiting && t.waiting_on != not_in_memory) {
      return "task " + k + " waits on " + std::to_string(t.waiting_on) + " inputs, but " +
             std::to_string(not_in_memory) + " are not in memory";
    }
    if (t.status == TaskStatus::waiting && not_in_memory == 0 && !t.scattered) {
      return "task " + k + " waits with every input in memory";
    }
    if (t.status == TaskStatus::ready && not_in_memory != 0) return "task " + k + " is ready with an input missing";
    if (t.waiters != unfinished_dependents) {
      return "task " + k + " has " + std::to_string(t.waiters) + " waiters, but " +
             std::to_string(unfinished_dependents) + " unfinished dependents";
    }
  }
  if (named != keys_.size()) return "the key table holds keys of tasks that are gone";
  if (seen != tasks_.size()) return "the task index lists tasks that are not stored";
  std::vector<ShapeCounts> by_shape(by_shape_.size());
  for (const auto& [id, t] : tasks_) {
    if (t.status != TaskStatus::ready && t.status != TaskStatus::processing) continue;
    if (t.shape >= by_shape.size()) return "task " + key_of(t) + " has a shape the counters never saw";
    ++(t.status == TaskStatus::ready ? by_shape[t.shape].ready : by_shape[t.shape].processing);
  }
  for (std::size_t i = 0; i < by_shape.size(); ++i) {
    if (by_shape[i].ready != by_shape_[i].ready || by_shape[i].processing != by_shape_[i].processing) {
      return "the ready/processing counts of shape " + std::to_string(i) + " are off";
    }
  }
  for (int s = 0; s < kTaskStatusCount; ++s) {
    if (counts[s] != counts_[s]) {
      return std::string("the count of ") + to_string(static_cast<TaskStatus>(s)) + " tasks is " +
             std::to_string(counts_[s]) + ", but " + std::to_string(counts[s]) + " are";
    }
  }
  return {};
}

void TaskGraph::clear() {
  std::vector<TaskId> ids;
  ids.reserve(tasks_.size());
  for (const auto& [id, t] : tasks_) ids.push_back(id);
  for (TaskId id : ids) tasks_.erase(id);
  for (auto& n : counts_) n = 0;
  for (auto& c : by_shape_) c = {};
  death_workers_.clear();
  keys_.clear();
  isolated_memory_.clear();
  budgets_.clear();
  forget_work_.clear();
  ensure_stack_.clear();
}

}  // namespace herd::scheduler
