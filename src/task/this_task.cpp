#include "task/this_task.hpp"

#include <atomic>
#include <chrono>

namespace herd {
namespace detail {
namespace {
std::atomic<bool> g_draining{false};
std::atomic<long long> g_end_unix_s{0};
}  // namespace

TaskInfo& current_task() {
  thread_local TaskInfo info;
  return info;
}

void set_worker_draining() { g_draining.store(true); }
void set_worker_end_time(long long end_unix_s) { g_end_unix_s.store(end_unix_s); }

}  // namespace detail

const TaskInfo& this_task() { return detail::current_task(); }

bool TaskInfo::draining() const { return detail::g_draining.load(); }

long TaskInfo::seconds_left() const {
  const long long end = detail::g_end_unix_s.load();
  if (end <= 0) return -1;
  const long long now = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch()).count();
  return static_cast<long>(end > now ? end - now : 0);
}

}  // namespace herd
