// Running one task in a fork()ed child of the worker (TaskOptions::isolated): the child can be
// killed (a time limit, cancel(force), the worker leaving), and its crash or memory blow-up
// takes only that task.
//
// The executor thread that runs the task forks; the child runs the function on the arguments
// the parent already decoded (its copy of them), writes the outcome into a pipe and _exits
// (no atexit handler, no static destructor, none of the worker's threads: they do not exist
// in the child). The parent thread waits on the pipe and on the child's exit (a pidfd where
// the kernel has them, 5.3+; else the pipe with a once-a-second look at the child) and always
// reaps the child. What crosses the pipe, in the machine's byte order (both ends are one
// program on one host):
//
//   'R' <u64 n> <n bytes>                       the msgpack result
//   'E' <u64 n> <u32 t> <t bytes> <n-4-t bytes>  an exception: its type name, then its what()
//
// Anything else (nothing, or a message cut short) is a child that died without a result.
//
// In the child: PR_SET_PDEATHSIG = SIGKILL (and getppid() checked after it, in case the
// worker died first), a process group of its own (so a kill takes what it started too),
// oom_score_adj 1000 (the kernel's out-of-memory killer takes it before the worker), the
// worker's signal handlers back to their defaults (the log capture's crash handler must not
// run there), and RLIMIT_AS = what it inherited + the cap, when there is a cap.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include <msgpack.hpp>

#include "net/data_port.hpp"

namespace herd::worker {

struct IsolatedOutcome;

/// One child being run. Made before the run and shared with whoever may stop it (the I/O
/// thread at a deadline or a cancel(force)); kill() is safe from any thread at any time: before
/// the fork (the child is killed as soon as it exists), while it runs, or after it was reaped
/// (then it does nothing: the pid may belong to someone else by then).
class IsolatedChild {
 public:
  /// SIGKILL to the child and its process group. Idempotent.
  void kill();
  /// The same, saying why (IsolatedOutcome::kill_reason): the task fails with that reason
  /// instead of being abandoned by its worker.
  void kill(std::string reason);
  /// True once kill() was called.
  bool kill_requested() const;
  /// The child's pid (0 before the fork).
  pid_t pid() const;

 private:
  friend IsolatedOutcome run_isolated(const std::function<void(msgpack::sbuffer&)>& body, std::uint64_t memory_cap,
                                      IsolatedChild& child);
  void kill_locked();
  mutable std::mutex mu_;
  pid_t pid_ = 0;
  bool reaped_ = false;
  bool kill_requested_ = false;
  std::string kill_reason_;
};

struct IsolatedOutcome {
  enum class Kind : std::uint8_t {
    result,     // `result` holds the function's msgpack result
    exception,  // the function threw: `type`, `message`
    died,       // the child ended without a (complete) result: `signal` or `exit_code`
    not_run,    // no child could be made (pipe, fork): `message`
  };
  Kind kind = Kind::not_run;
  std::unique_ptr<net::Buffer> result;
  std::string type, message;
  int signal = 0;          // died: the signal that ended it (0 = it exited)
  bool core_dumped = false;
  int exit_code = 0;       // died by exiting (without a result)
  bool killed = false;     // IsolatedChild::kill was called (a time limit, cancel(force), leaving)
  std::string kill_reason; // what kill(reason) said (the worker's memory limit)
  pid_t pid = 0;           // the child's
  std::uint64_t duration_us = 0;

  /// "was killed by signal 11 (SIGSEGV)", "exited with code 3 without a result", ...
  std::string death() const;
};

/// What runs in the child: fills `out` with the msgpack result, or throws.
using IsolatedBody = std::function<void(msgpack::sbuffer& out)>;

/// Runs `body` in a child process and waits for it (the calling thread blocks; no polling
/// loop). `memory_cap`: bytes of address space the child may map beyond what it inherits
/// (RLIMIT_AS; 0 = no cap). The child is always reaped before this returns.
IsolatedOutcome run_isolated(const IsolatedBody& body, std::uint64_t memory_cap, IsolatedChild& child);

/// Kills every isolated child still running in this process (the worker is leaving).
void kill_isolated_children();

/// The running child with the most resident memory (counting what it started) is killed with
/// reason(its bytes); its pid, or 0 when none runs. For a worker over its memory limit: that
/// child's task fails, instead of the worker leaving with all of its tasks.
pid_t kill_largest_isolated_child(const std::function<std::string(std::uint64_t rss)>& reason);

/// "SIGSEGV" for 11; "signal 40" for one without a name here.
std::string signal_name(int sig);

}  // namespace herd::worker
