// Threads that run what would block an event loop: batch-system commands (sbatch, squeue,
// sacct, scancel, each with its own timeout) and file reads (job output). A piece of work runs
// on one of the threads and returns a continuation; drain() runs the continuations of finished
// work on the caller's thread (the event loop's), in the order the work finished. wake_fd() is
// readable while a continuation waits, so a loop can poll it beside its sockets, or a wake hook
// tells the loop instead (the scheduler's comes on its socket); it never waits for a command
// itself.
//
// Work must not touch the loop's state: it gets copies of what it needs and hands its result
// to the continuation, which alone may.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "herd/shell.hpp"

namespace herd::jobqueue {

class CommandRunner {
 public:
  using Continuation = std::function<void()>;
  using Work = std::function<Continuation()>;

  /// Starts `threads` threads (at least one).
  explicit CommandRunner(std::size_t threads = 4);
  /// Waits up to a few seconds for running work, then leaves it behind (its continuation is
  /// dropped; a command still running dies with this process, see herd::shell).
  ~CommandRunner();
  CommandRunner(const CommandRunner&) = delete;
  CommandRunner& operator=(const CommandRunner&) = delete;

  /// Queues `work`; its continuation runs in a later drain().
  void post(Work work);
  /// Queues a continuation directly (for an answer that needs no thread, e.g. a local job
  /// started at once): callers see one path, and nothing runs re-entrantly.
  void complete(Continuation done);
  /// Runs the continuations of finished work; returns how many ran. Clears wake_fd().
  std::size_t drain();
  /// Drains until no work is queued or running, or `timeout` passed (shutdown paths only:
  /// this blocks). True when idle.
  bool wait_idle(std::chrono::milliseconds timeout);
  /// Readable (eventfd) while continuations wait for drain(), unless a wake hook is set.
  int wake_fd() const;
  /// Calls `hook` instead of signalling wake_fd() (on whichever thread finished the work, under
  /// the runner's lock: it must be quick and take no lock the loop holds while it posts), until
  /// this runner is destroyed: for a loop that sleeps on something other than wake_fd(). Set it
  /// before any work is posted.
  void set_wake_hook(std::function<void()> hook);
  /// Work queued or running, not yet drained.
  std::size_t in_flight() const;

  /// Runs `argv` (PATH looked up) with a timeout, capturing up to 1 MiB of each stream. For
  /// use inside work.
  static ShellResult run(std::vector<std::string> argv, double timeout_s);

 private:
  struct Shared;
  static void thread_main(std::shared_ptr<Shared> s);
  std::shared_ptr<Shared> shared_;  // also held by the threads, which may outlive this object
};

}  // namespace herd::jobqueue
