// What a running task may know about itself (herd::this_task()): set by the worker's executor
// around each call, one per thread.
#pragma once

#include <atomic>
#include <memory>

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

}  // namespace herd::detail
