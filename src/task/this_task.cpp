#include "task/this_task.hpp"

namespace herd {
namespace detail {

TaskInfo& current_task() {
  thread_local TaskInfo info;
  return info;
}

std::shared_ptr<std::atomic<bool>>& current_abandoned() {
  thread_local std::shared_ptr<std::atomic<bool>> flag;
  return flag;
}

}  // namespace detail

const TaskInfo& this_task() { return detail::current_task(); }

}  // namespace herd
