// What a running task may know about itself (herd::this_task()): set by the worker's executor
// around each call, one per thread.
#pragma once

#include "herd/remote.hpp"

namespace herd::detail {

/// The TaskInfo of the task on this thread (set by the worker).
TaskInfo& current_task();

}  // namespace herd::detail
