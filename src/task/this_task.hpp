// What a running task may know about itself (herd::this_task()): set by the worker's executor
// around each call, one per thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "herd/remote.hpp"

namespace herd::detail {

/// The TaskInfo of the task on this thread (set by the worker).
TaskInfo& current_task();

/// The worker starts draining (TaskInfo::draining); `end_unix_s` is when its job ends (0 =
/// unknown). Safe from a signal handler.
void set_worker_draining();
void set_worker_end_time(long long end_unix_s);
/// Set by the worker when it stops waiting for the task on this thread (a time limit,
/// cancel(force)); null outside a task. herd::shell polls it and kills its command.
std::shared_ptr<std::atomic<bool>>& current_abandoned();
/// The id of the task on this thread (0 outside a task), set by the worker's executor.
std::uint64_t& current_task_id();

/// In the child process of an isolated task (TaskOptions::isolated): set there once, after the
/// fork. herd::secede(), rejoin() and get_client() then throw herd::Error: they would act on
/// the child's copy of the worker, which has no thread of its own left to act.
void set_in_isolated_child();
bool in_isolated_child();
/// Throws herd::Error naming `what` in an isolated task's child process.
void check_not_isolated(const char* what);

/// What a task may ask of the worker process it runs in (herd::secede, rejoin, get_client).
/// Set once by the worker before its executors start; absent in other processes.
struct WorkerHooks {
  std::string scheduler;                           // the worker's scheduler address
  std::function<void(std::uint64_t task)> secede;  // give the task's thread slot back
  std::function<void(std::uint64_t task)> rejoin;  // take one again (waits for a free one)
};
void set_worker_hooks(std::shared_ptr<const WorkerHooks> hooks);
/// The hooks, or null outside a worker process.
std::shared_ptr<const WorkerHooks> worker_hooks();

}  // namespace herd::detail
