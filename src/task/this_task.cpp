#include "task/this_task.hpp"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <system_error>

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
std::shared_ptr<std::atomic<bool>>& current_abandoned() {
  thread_local std::shared_ptr<std::atomic<bool>> flag;
  return flag;
}

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

std::string TaskInfo::checkpoint_path(const std::string& dir) const {
  std::string base = dir;
  if (base.empty()) {
    const char* env = std::getenv("HERD_CHECKPOINT_DIR");
    if (env == nullptr || *env == '\0') {
      throw std::runtime_error("this_task().checkpoint_path(): give a directory on the shared filesystem, or set "
                               "HERD_CHECKPOINT_DIR in the workers' environment (a pool's env)");
    }
    base = env;
  }
  if (key.empty()) throw std::runtime_error("this_task().checkpoint_path() outside a task");
  std::error_code ec;
  std::filesystem::create_directories(base, ec);
  if (ec) throw std::runtime_error("cannot create the checkpoint directory " + base + ": " + ec.message());
  // The key as a file name: anything but letters, digits, '-', '_' and '.' becomes '_'.
  std::string name = key;
  for (char& c : name) {
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                      c == '_' || c == '.';
    if (!keep) c = '_';
  }
  if (name.empty() || name[0] == '.') name = "_" + name;
  return base + "/" + name + ".ckpt";
}

}  // namespace herd
