#include "task/this_task.hpp"

namespace herd {
namespace detail {

TaskInfo& current_task() {
  thread_local TaskInfo info;
  return info;
}

}  // namespace detail

const TaskInfo& this_task() { return detail::current_task(); }

}  // namespace herd
