#include "scheduler/task_graph.hpp"

#include <algorithm>
#include <cstdio>

namespace herd::scheduler {
namespace {

constexpr auto u8(TaskState s) { return static_cast<std::uint8_t>(s); }

bool unfinished(const Task& t) {
  return t.state == u8(TaskState::waiting) || t.state == u8(TaskState::ready) ||
         t.state == u8(TaskState::processing);
}

}  // namespace

std::string TaskGraph::display_key(const std::string& function, TaskId id) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "-%llx", static_cast<unsigned long long>(id));
  return function + buf;
}

std::size_t TaskGraph::count(TaskState s) const {
  return static_cast<std::size_t>(std::count_if(
      tasks_.begin(), tasks_.end(), [s](const auto& kv) { return kv.second.state == u8(s); }));
}

void TaskGraph::add(const protocol::TaskSpec& spec, std::uint32_t client, Effects& fx) {
  if (tasks_.count(spec.id) != 0) return;  // a resend; the first copy stands
  Task& t = tasks_[spec.id];
  t.id = spec.id;
  t.client = client;
  t.wanted = spec.want_result;
  t.function = spec.function;
  t.key = spec.key.empty() ? display_key(spec.function, spec.id) : spec.key;
  t.keyed = !spec.key.empty();
  t.args = spec.args;
  t.refs = spec.refs;
  t.priority = spec.priority;
  t.retries_left = spec.gang != 0 ? 0 : spec.retries;
  t.gang = spec.gang;
  t.gang_rank = spec.gang_rank;
  t.duration_s = spec.duration_s;
  t.resources = spec.resources;
  t.seq = next_seq_++;
  for (const auto& r : spec.refs) {
    if (std::find(t.deps.begin(), t.deps.end(), r.id) == t.deps.end()) t.deps.push_back(r.id);
  }
  // Check every input before linking any, so a failed add leaves no dangling edge.
  for (TaskId d : t.deps) {
    Task* dep = find(d);
    if (dep == nullptr || dep->id == t.id) {
      std::vector<TaskId> none;
      t.deps.swap(none);
      fail_with(t, {"herd::MissingInput",
                    "input task " + display_key("", d).substr(1) +
                        " is unknown to the scheduler (its future was released, or it was "
                        "submitted by another client)",
                    t.key, ""},
                TaskState::erred, fx);
      return;
    }
  }
  t.state = u8(TaskState::waiting);
  const protocol::ErrorInfo* upstream_error = nullptr;
  for (TaskId d : t.deps) {
    Task& dep = tasks_.at(d);
    dep.dependents.push_back(t.id);
    ++dep.waiters;
    if (dep.error && (dep.st() == TaskState::erred || dep.st() == TaskState::cancelled)) {
      upstream_error = dep.error.get();
    }
  }
  if (upstream_error != nullptr) {
    protocol::ErrorInfo e = *upstream_error;
    fail_with(t, e, TaskState::erred, fx);
    return;
  }
  for (TaskId d : t.deps) ensure_data(tasks_.at(d), fx);
  make_runnable(t, fx);
}

void TaskGraph::add_scattered(TaskId id, std::string key, std::uint32_t client) {
  if (tasks_.count(id) != 0) return;
  Task& t = tasks_[id];
  t.id = id;
  t.client = client;
  t.wanted = true;
  t.scattered = true;
  t.function = "scatter";
  t.key = key.empty() ? display_key("scatter", id) : std::move(key);
  t.seq = next_seq_++;
  t.state = u8(TaskState::processing);
}

void TaskGraph::make_runnable(Task& t, Effects& fx) {
  std::uint32_t missing = 0;
  for (TaskId d : t.deps) {
    const Task* dep = find(d);
    if (dep == nullptr || !dep->in_memory() || dep->who_has.empty()) ++missing;
  }
  t.waiting_on = missing;
  t.worker = kNoWorker;
  if (missing == 0) {
    t.state = u8(TaskState::ready);
    fx.ready.push_back(t.id);
  } else {
    t.state = u8(TaskState::waiting);
  }
}

void TaskGraph::ensure_data(Task& t, Effects& fx) {
  // Iterative: a long chain whose data was all released must not recurse deeply.
  std::vector<TaskId> stack{t.id};
  while (!stack.empty()) {
    Task* cur = find(stack.back());
    stack.pop_back();
    if (cur == nullptr) continue;
    const bool lost = cur->st() == TaskState::memory && cur->who_has.empty();
    if (!(cur->state == kReleased || lost)) continue;
    if (cur->scattered) {
      cur->state = u8(TaskState::waiting);  // unfinished, so that it can fail
      fail_with(*cur, {"herd::ScatteredDataLost",
                       "the worker holding scattered data " + cur->key +
                           " was lost; scattered data has no recipe to recompute it",
                       cur->key, ""},
                TaskState::erred, fx);
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
    t->state = u8(TaskState::processing);
    t->worker = worker;
  }
}

void TaskGraph::finished(TaskId id, std::uint32_t worker, std::uint64_t nbytes, Effects& fx) {
  Task* t = find(id);
  if (t == nullptr || t->st() != TaskState::processing || t->worker != worker) {
    // Late, duplicate or unknown: a task never yields two results. The copy is dropped.
    if (t != nullptr && t->in_memory() &&
        std::find(t->who_has.begin(), t->who_has.end(), worker) == t->who_has.end()) {
      t->who_has.push_back(worker);  // a valid extra copy of a result we already hold
    } else {
      fx.free.emplace_back(worker, id);
    }
    return;
  }
  if (t->forget_when_done) {
    fx.free.emplace_back(worker, id);
    t->state = kReleased;
    t->worker = kNoWorker;
    maybe_forget(*t, fx);
    return;
  }
  t->state = u8(TaskState::memory);
  t->worker = kNoWorker;
  t->who_has.assign(1, worker);
  t->nbytes = nbytes;
  became_memory(*t, fx);
}

void TaskGraph::became_memory(Task& t, Effects& fx) {
  if (t.wanted) fx.notify.push_back(t.id);
  for (TaskId d : t.dependents) {
    Task* dt = find(d);
    if (dt != nullptr && dt->st() == TaskState::waiting && dt->waiting_on > 0 &&
        --dt->waiting_on == 0) {
      dt->state = u8(TaskState::ready);
      fx.ready.push_back(d);
    }
  }
  // t no longer needs its inputs' data.
  const std::vector<TaskId> deps = t.deps;
  for (TaskId d : deps) {
    if (Task* dep = find(d)) {
      if (dep->waiters > 0) --dep->waiters;
      maybe_forget(*dep, fx);
    }
  }
  if (!t.wanted && t.waiters == 0) maybe_forget(t, fx);
}

bool TaskGraph::failed(TaskId id, protocol::ErrorInfo error, Effects& fx) {
  Task* t = find(id);
  if (t == nullptr || t->st() != TaskState::processing) return false;
  if (t->retries_left > 0) {
    --t->retries_left;
    make_runnable(*t, fx);
    return true;
  }
  fail_with(*t, error, TaskState::erred, fx);
  return false;
}

void TaskGraph::fail_with(Task& root, const protocol::ErrorInfo& error, TaskState state,
                          Effects& fx) {
  std::vector<std::pair<TaskId, TaskState>> work{{root.id, state}};
  std::vector<TaskId> touched{root.id};
  while (!work.empty()) {
    auto [id, st] = work.back();
    work.pop_back();
    Task* t = find(id);
    if (t == nullptr || !unfinished(*t)) continue;
    if (t->st() == TaskState::processing && t->worker != kNoWorker) {
      fx.cancel.emplace_back(t->worker, t->id);
    }
    t->state = u8(st);
    t->worker = kNoWorker;
    t->error = std::make_unique<protocol::ErrorInfo>(error);
    if (t->wanted) fx.notify.push_back(t->id);
    for (TaskId d : t->deps) {
      if (Task* dep = find(d); dep != nullptr && dep->waiters > 0) --dep->waiters;
      touched.push_back(d);
    }
    for (TaskId d : t->dependents) {
      work.emplace_back(d, TaskState::erred);
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
  if (t == nullptr || t->st() != TaskState::processing) return;
  for (TaskId d : t->deps) {
    if (Task* dep = find(d)) ensure_data(*dep, fx);
  }
  if (t->st() == TaskState::processing) make_runnable(*t, fx);
}

void TaskGraph::fail(TaskId id, const protocol::ErrorInfo& error, Effects& fx) {
  Task* t = find(id);
  if (t == nullptr || !unfinished(*t)) return;
  fail_with(*t, error, TaskState::erred, fx);
}

void TaskGraph::requeue(TaskId id, Effects& fx) {
  Task* t = find(id);
  if (t == nullptr || t->st() != TaskState::processing) return;
  make_runnable(*t, fx);
}

void TaskGraph::add_holder(TaskId id, std::uint32_t worker) {
  Task* t = find(id);
  if (t == nullptr || !t->in_memory()) return;
  if (std::find(t->who_has.begin(), t->who_has.end(), worker) == t->who_has.end()) {
    t->who_has.push_back(worker);
  }
}

void TaskGraph::release(TaskId id, Effects& fx) {
  Task* t = find(id);
  if (t == nullptr) return;
  t->wanted = false;
  maybe_forget(*t, fx);
}

void TaskGraph::cancel(TaskId id, Effects& fx) {
  Task* t = find(id);
  if (t == nullptr || !unfinished(*t)) return;
  fail_with(*t, {"herd::CancelledError", "task " + t->key + " was cancelled", t->key, ""},
            TaskState::cancelled, fx);
}

void TaskGraph::worker_lost(std::uint32_t worker, const std::vector<TaskId>& processing,
                            const std::vector<TaskId>& held, std::uint32_t allowed_failures,
                            Effects& fx, bool count_deaths, const std::string& worker_name) {
  const std::string who = worker_name.empty() ? std::to_string(worker) : worker_name;
  for (TaskId id : held) {
    Task* t = find(id);
    if (t == nullptr) continue;
    auto& w = t->who_has;
    w.erase(std::remove(w.begin(), w.end(), worker), w.end());
    if (!t->in_memory() || !w.empty()) continue;
    if (t->wanted || t->waiters > 0) {
      // Dependents that were ready must wait for the recomputed value.
      for (TaskId d : t->dependents) {
        Task* dt = find(d);
        if (dt != nullptr && dt->st() == TaskState::ready) make_runnable(*dt, fx);
        else if (dt != nullptr && dt->st() == TaskState::waiting) ++dt->waiting_on;
      }
      ensure_data(*t, fx);
    } else {
      t->state = kReleased;
      maybe_forget(*t, fx);
    }
  }
  for (TaskId id : processing) {
    Task* t = find(id);
    if (t == nullptr || t->st() != TaskState::processing || t->worker != worker) continue;
    if (t->scattered) {
      fail_with(*t, {"herd::ScatteredDataLost",
                     "the worker receiving scattered data " + t->key + " was lost", t->key, ""},
                TaskState::erred, fx);
      continue;
    }
    if (count_deaths && ++t->deaths > allowed_failures) {
      fail_with(*t, {"herd::KilledWorker",
                     "task " + t->key + " was running on " + std::to_string(t->deaths) +
                         " workers that died (allowed: " + std::to_string(allowed_failures) +
                         "); giving up on it. Workers: " + t->death_workers + who,
                     t->key, ""},
                TaskState::erred, fx);
      continue;
    }
    if (count_deaths) t->death_workers += who + ", ";
    for (TaskId d : t->deps) {
      if (Task* dep = find(d)) ensure_data(*dep, fx);
    }
    make_runnable(*t, fx);
  }
}

void TaskGraph::free_data(Task& t, Effects& fx) {
  for (std::uint32_t w : t.who_has) fx.free.emplace_back(w, t.id);
  t.who_has.clear();
  t.state = kReleased;
}

void TaskGraph::maybe_forget(Task& start, Effects& fx) {
  std::vector<TaskId> work{start.id};
  while (!work.empty()) {
    Task* t = find(work.back());
    work.pop_back();
    if (t == nullptr || t->wanted) continue;
    if (t->waiters == 0 && t->in_memory()) free_data(*t, fx);
    if (!t->dependents.empty()) continue;  // a dependent may need the recipe
    if (t->st() == TaskState::processing) {
      t->forget_when_done = true;
      continue;
    }
    if (t->waiters > 0) continue;
    const bool was_unfinished = unfinished(*t);
    for (TaskId d : t->deps) {
      Task* dep = find(d);
      if (dep == nullptr) continue;
      auto& ds = dep->dependents;
      ds.erase(std::remove(ds.begin(), ds.end(), t->id), ds.end());
      if (was_unfinished && dep->waiters > 0) --dep->waiters;
      work.push_back(d);
    }
    if (t->in_memory()) free_data(*t, fx);
    tasks_.erase(t->id);
  }
}

}  // namespace herd::scheduler
