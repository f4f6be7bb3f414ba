// The scheduler's task graph: task states and their transitions, with no sockets in sight.
// Every transition reports what the outside world must hear in an Effects record, which the
// scheduler turns into messages; unit tests read the same record.
//
// States (protocol::TaskState), as in Dask:
//   waiting    an input is not in memory              -> ready when all are
//   ready      inputs in memory, no worker has it     -> processing when placed
//   processing sent to a worker                       -> memory | erred | ready (worker lost)
//   memory     result held on >= 1 worker             -> released (nobody needs the data) |
//                                                        waiting/ready (all holders lost: lineage)
//   erred      failed (or an input failed)            -> forgotten when released
//   cancelled  cancelled by the client
//   released   (internal) data freed, recipe kept because a dependent may need it recomputed
//
// Who needs a task: the client (it holds a future: `wanted`), unfinished dependents
// (`waiters`, they need its data) and any dependent still in the graph (`dependents`, they may
// need its recipe). A task nobody needs is forgotten.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "protocol/messages.hpp"

namespace herd::scheduler {

using protocol::TaskId;
using protocol::TaskState;
inline constexpr std::uint32_t kNoWorker = 0xffffffffu;
inline constexpr std::uint8_t kReleased = 100;  // internal state, see above

struct Task {
  TaskId id = 0;
  std::uint8_t state = static_cast<std::uint8_t>(TaskState::waiting);
  bool wanted = false;          // the client holds a future
  bool scattered = false;       // data without a recipe
  bool keyed = false;           // the client named it (TaskOptions::key): journaled
  bool forget_when_done = false;  // nobody needs it any more, but a worker is computing it
  std::uint32_t client = 0;     // owning client index
  std::uint32_t worker = kNoWorker;  // processing on
  std::uint32_t waiting_on = 0;  // inputs not in memory
  std::uint32_t waiters = 0;     // dependents not finished
  std::uint32_t retries_left = 0;
  std::uint32_t deaths = 0;      // workers lost while it was processing
  std::string death_workers;     // their ids, for the error ("3, 5, ")
  std::int32_t priority = 0;
  std::uint32_t duration_s = 0;  // declared run time (placement near walltime)
  std::uint64_t seq = 0;         // submission order
  TaskId gang = 0;               // gang id (0 = not a gang member); the gang keeps the retries
  std::uint32_t gang_rank = 0;
  std::uint64_t nbytes = 0;
  std::string function;
  std::string key;               // display key
  std::vector<char> args;
  std::vector<protocol::ArgRef> refs;
  std::vector<TaskId> deps;        // distinct inputs
  std::vector<TaskId> dependents;  // tasks in the graph that take this one as input
  std::vector<std::uint32_t> who_has;
  std::map<std::string, double> resources;
  std::unique_ptr<protocol::ErrorInfo> error;

  TaskState st() const { return static_cast<TaskState>(state); }
  bool in_memory() const { return state == static_cast<std::uint8_t>(TaskState::memory); }
};

struct Effects {
  std::vector<TaskId> ready;      // became ready: place them
  std::vector<TaskId> notify;     // reached memory/erred/cancelled and the client wants to know
  std::vector<std::pair<std::uint32_t, TaskId>> free;    // (worker, task): drop the data
  std::vector<std::pair<std::uint32_t, TaskId>> cancel;  // (worker, task): stop if not started
  void clear() {
    ready.clear();
    notify.clear();
    free.clear();
    cancel.clear();
  }
};

class TaskGraph {
 public:
  /// Adds a task. Unknown inputs fail it at once (the client released them, or never sent).
  void add(const protocol::TaskSpec& spec, std::uint32_t client, Effects& fx);
  /// A scattered value on its way to a worker: `processing` until the worker confirms it
  /// holds it (finished()), so tasks submitted right after the scatter can depend on it.
  void add_scattered(TaskId id, std::string key, std::uint32_t client);

  void started(TaskId id, std::uint32_t worker);
  void finished(TaskId id, std::uint32_t worker, std::uint64_t nbytes, Effects& fx);
  /// The task raised; retries it if it has retries left (returns true), else fails it and
  /// everything downstream.
  bool failed(TaskId id, protocol::ErrorInfo error, Effects& fx);
  /// The worker could not get an input: back to ready / waiting, inputs recomputed if lost.
  void input_missing(TaskId id, Effects& fx);
  /// `worker` now also holds `id` (it fetched it for a task).
  void add_holder(TaskId id, std::uint32_t worker);
  /// The client dropped its last future.
  void release(TaskId id, Effects& fx);
  void cancel(TaskId id, Effects& fx);
  /// The worker is gone: its tasks go back to ready, its results are recomputed if needed.
  /// A task present at more than `allowed_failures` losses fails instead (KilledWorker).
  /// `count_deaths` is false for a worker that was retired on purpose (its tasks did nothing
  /// wrong).
  void worker_lost(std::uint32_t worker, const std::vector<TaskId>& processing,
                   const std::vector<TaskId>& held, std::uint32_t allowed_failures, Effects& fx,
                   bool count_deaths = true, const std::string& worker_name = "");
  /// Fails an unfinished task (any state) and everything downstream, retries or not.
  void fail(TaskId id, const protocol::ErrorInfo& error, Effects& fx);
  /// Back to ready after being handed back by a worker (not a failure).
  void requeue(TaskId id, Effects& fx);

  Task* find(TaskId id) {
    auto it = tasks_.find(id);
    return it == tasks_.end() ? nullptr : &it->second;
  }
  std::size_t size() const { return tasks_.size(); }
  std::size_t count(TaskState s) const;
  const std::unordered_map<TaskId, Task>& tasks() const { return tasks_; }

  static std::string display_key(const std::string& function, TaskId id);

 private:
  void fail_with(Task& t, const protocol::ErrorInfo& error, TaskState state, Effects& fx);
  void became_memory(Task& t, Effects& fx);
  void make_runnable(Task& t, Effects& fx);  // waiting or ready depending on inputs
  void ensure_data(Task& t, Effects& fx);    // lineage: bring a released/lost input back
  void maybe_forget(Task& t, Effects& fx);
  void free_data(Task& t, Effects& fx);

  std::unordered_map<TaskId, Task> tasks_;
  std::uint64_t next_seq_ = 0;
};

}  // namespace herd::scheduler
