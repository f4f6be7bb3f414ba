#include "jobqueue/command_runner.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <system_error>

#include "common/logging.hpp"

namespace herd::jobqueue {

struct CommandRunner::Shared {
  std::mutex mu;
  std::condition_variable work_cv, idle_cv;
  std::deque<Work> queue;
  std::deque<Continuation> done;
  std::size_t running = 0;
  bool stop = false;
  int efd = -1;
  std::function<void()> hook;  // set_wake_hook; cleared when the runner goes
  std::atomic<bool> hooked{false};  // a hook was set: it, not efd, carries the wake-ups
  ~Shared() {
    if (efd >= 0) ::close(efd);
  }
  void wake() {  // mu held
    if (hooked.load()) {
      if (hook) hook();
      return;
    }
    const std::uint64_t one = 1;
    (void)!::write(efd, &one, sizeof one);
  }
};

CommandRunner::CommandRunner(std::size_t threads) : shared_(std::make_shared<Shared>()) {
  shared_->efd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (shared_->efd < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
  for (std::size_t i = 0; i < std::max<std::size_t>(1, threads); ++i) {
    std::thread([s = shared_] { thread_main(s); }).detach();
  }
}

CommandRunner::~CommandRunner() {
  std::unique_lock lock(shared_->mu);
  shared_->stop = true;
  shared_->hook = nullptr;  // its target goes with the loop that owns this runner
  shared_->queue.clear();  // not started: dropped
  shared_->work_cv.notify_all();
  // Running work gets a moment to finish; a command that hangs longer is left to its own
  // timeout on a thread that no longer reports to anyone.
  if (!shared_->idle_cv.wait_for(lock, std::chrono::seconds(3), [&] { return shared_->running == 0; })) {
    HERD_LOG(warning) << shared_->running << " batch-system command(s) still running at shutdown; not waiting for them";
  }
}

void CommandRunner::post(Work work) {
  {
    std::lock_guard lock(shared_->mu);
    shared_->queue.push_back(std::move(work));
  }
  shared_->work_cv.notify_one();
}

void CommandRunner::complete(Continuation done) {
  std::lock_guard lock(shared_->mu);
  shared_->done.push_back(std::move(done));
  shared_->wake();
}

std::size_t CommandRunner::drain() {
  std::uint64_t n;
  while (!shared_->hooked.load() && ::read(shared_->efd, &n, sizeof n) > 0) {
  }
  std::deque<Continuation> ready;
  {
    std::lock_guard lock(shared_->mu);
    ready.swap(shared_->done);
  }
  for (auto& c : ready) {
    if (c) c();
  }
  if (!ready.empty()) shared_->idle_cv.notify_all();
  return ready.size();
}

bool CommandRunner::wait_idle(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    drain();
    std::unique_lock lock(shared_->mu);
    if (shared_->queue.empty() && shared_->running == 0 && shared_->done.empty()) return true;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    shared_->idle_cv.wait_for(lock, std::min<std::chrono::steady_clock::duration>(deadline - now, std::chrono::milliseconds(50)),
                              [&] { return !shared_->done.empty(); });
  }
}

int CommandRunner::wake_fd() const { return shared_->efd; }

void CommandRunner::set_wake_hook(std::function<void()> hook) {
  std::lock_guard lock(shared_->mu);
  shared_->hook = std::move(hook);
  shared_->hooked.store(true);
}

std::size_t CommandRunner::in_flight() const {
  std::lock_guard lock(shared_->mu);
  return shared_->queue.size() + shared_->running + shared_->done.size();
}

ShellResult CommandRunner::run(std::vector<std::string> argv, double timeout_s) {
  ShellCommand c{std::move(argv)};
  c.timeout_s = timeout_s;
  c.tail_bytes = 1 << 20;
  try {
    return shell(std::move(c));
  } catch (const std::exception& e) {
    // Not found on PATH, cannot fork: the same shape as a command that failed.
    ShellResult r;
    r.exit_code = 127;
    r.stderr_tail = e.what();
    return r;
  }
}

void CommandRunner::thread_main(std::shared_ptr<Shared> s) {
  std::unique_lock lock(s->mu);
  while (true) {
    s->work_cv.wait(lock, [&] { return s->stop || !s->queue.empty(); });
    if (s->queue.empty()) return;  // stopping
    Work work = std::move(s->queue.front());
    s->queue.pop_front();
    ++s->running;
    lock.unlock();
    Continuation done;
    try {
      done = work();
    } catch (const std::exception& e) {
      HERD_LOG(warning) << "background work failed: " << e.what();
    }
    lock.lock();
    --s->running;
    if (!s->stop && done) {
      s->done.push_back(std::move(done));
      s->wake();
    }
    s->idle_cv.notify_all();
  }
}

}  // namespace herd::jobqueue
