#include "task/this_task.hpp"
#include "common/env.hpp"

#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <new>
#include <stdexcept>
#include <system_error>

#include "herd/error.hpp"

namespace herd {
namespace detail {
namespace {
// Whether the worker drains, and when its job ends: in memory shared with the worker's
// isolated children (fork), so that a task running in one sees draining() turn true when the
// worker starts draining after the child started, as a task on a thread does.
struct DrainState {
  std::atomic<bool> draining{false};
  std::atomic<long long> end_unix_s{0};
};
static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<long long>::is_always_lock_free,
              "shared between processes: the atomics must not hide a lock");

DrainState& make_drain_state() {
  void* p = ::mmap(nullptr, sizeof(DrainState), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  // Without a shared page (cannot happen short of running out of mappings) children see the
  // state of their fork.
  if (p == MAP_FAILED) return *new DrainState();
  return *new (p) DrainState();
}
// Made when the library loads, before any fork.
DrainState& g_drain = make_drain_state();
}  // namespace

TaskInfo& current_task() {
  thread_local TaskInfo info;
  return info;
}

void set_worker_draining() { g_drain.draining.store(true); }
void set_worker_end_time(long long end_unix_s) { g_drain.end_unix_s.store(end_unix_s); }
std::shared_ptr<std::atomic<bool>>& current_abandoned() {
  thread_local std::shared_ptr<std::atomic<bool>> flag;
  return flag;
}

std::uint64_t& current_task_id() {
  thread_local std::uint64_t id = 0;
  return id;
}

namespace {
bool g_in_isolated_child = false;  // written once, in the child, before the task runs
}  // namespace

void set_in_isolated_child() { g_in_isolated_child = true; }
bool in_isolated_child() { return g_in_isolated_child; }

void check_not_isolated(const char* what) {
  if (!g_in_isolated_child) return;
  throw Error(std::string(what) +
              " is not supported in an isolated task (TaskOptions::isolated): the task runs in a child process "
              "of the worker, with a copy of it that cannot act");
}

namespace {
std::mutex g_hooks_mu;
std::shared_ptr<const WorkerHooks> g_hooks;

/// The hooks and the task on this thread, or a std::logic_error naming `what` when called
/// anywhere but inside a task on a worker.
std::pair<std::shared_ptr<const WorkerHooks>, std::uint64_t> in_task(const char* what) {
  check_not_isolated(what);
  auto hooks = worker_hooks();
  const std::uint64_t id = current_task_id();
  if (hooks == nullptr || id == 0) {
    throw std::logic_error(std::string(what) +
                           " called outside a task: it is for a task running on a worker (one that waits on "
                           "tasks it submitted)");
  }
  return {std::move(hooks), id};
}
}  // namespace

void set_worker_hooks(std::shared_ptr<const WorkerHooks> hooks) {
  std::lock_guard lock(g_hooks_mu);
  g_hooks = std::move(hooks);
}

std::shared_ptr<const WorkerHooks> worker_hooks() {
  std::lock_guard lock(g_hooks_mu);
  return g_hooks;
}

}  // namespace detail

void secede() {
  auto [hooks, id] = detail::in_task("herd::secede()");
  hooks->secede(id);
}

void rejoin() {
  auto [hooks, id] = detail::in_task("herd::rejoin()");
  hooks->rejoin(id);
}

const TaskInfo& this_task() { return detail::current_task(); }

bool TaskInfo::draining() const { return detail::g_drain.draining.load(); }

long TaskInfo::seconds_left() const {
  const long long end = detail::g_drain.end_unix_s.load();
  if (end <= 0) return -1;
  const long long now = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch()).count();
  return static_cast<long>(end > now ? end - now : 0);
}

std::string TaskInfo::checkpoint_path(const std::string& dir) const {
  std::string base = dir;
  if (base.empty()) {
    const char* env = env::get(env::Var::checkpoint_dir);
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
