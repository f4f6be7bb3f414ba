// What a worker keeps of its output, for `herd logs` and Client::worker_logs / task_output.
//
// The worker log: everything the process writes to fd 1 and 2 (herd's own warnings, the
// task's std::cout / printf, what child processes print) still goes where it went (the
// terminal, the local log file, the Slurm job's --output/--error files), but passes through a
// pipe whose reader thread also keeps the newest lines in a bounded ring. herd's info lines,
// which stderr does not show at the default level, go to the ring only.
//
// Task output, per task and bounded, from three sources:
//   - herd::task_log() lines: always attributed (the executor thread knows its task);
//   - herd::shell tasks: the command's stdout and stderr, read from its own pipes;
//   - the process's fd 1/2 while the task runs: attributed only while it is the only task
//     running on the worker. A file descriptor is shared by every thread, so when several
//     tasks run at once nobody can tell whose line it is; such lines stay in the worker log,
//     and the task's output says so (LogSource::note).
// At the end of a task its stdio buffers are flushed and the reader catches up before the
// task counts as finished, so a short task's last line is not credited to nobody.
//
// A crash (SIGSEGV, SIGABRT from std::terminate, ...) puts the descriptors back and copies
// what is still in the pipes before the signal takes its course, so the last words reach the
// Slurm output file.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/messages.hpp"

namespace herd::task {

/// LogLine::stream values.
inline constexpr std::uint8_t kStreamLog = 0, kStreamStdout = 1, kStreamStderr = 2, kStreamTaskLog = 3;

struct LogLimits {
  std::size_t worker_bytes = 4u << 20;  // the worker ring (0 = no capture at all)
  std::size_t task_bytes = 64u << 10;   // each task's output (its end is kept)
  std::size_t tasks = 256;              // tasks with output kept
  std::size_t line_bytes = 4096;        // longer lines are cut
};

/// The process-wide log book (one worker per process). Thread-safe.
class LogBook {
 public:
  static LogBook& instance();

  /// Redirects fd 1 and 2 through pipes (tee) and starts the reader thread. Once per process.
  void start_capture(const LogLimits& limits);
  /// Copies what is left in the pipes to the original descriptors, puts them back, stops the
  /// reader (bounded wait). Call before _exit; safe to call twice or without start_capture.
  void stop_capture();
  bool capturing() const;

  /// Executor hooks: a task starts / ends on this thread.
  void task_started(protocol::TaskId id, const std::string& key);
  void task_finished(protocol::TaskId id);
  /// The task's function has returned on this thread: what the thread logs from now on is not
  /// the task's. Its captured output is still credited to it until task_finished, which may
  /// come later (the worker's I/O thread calls it once the task's result is sent).
  static void task_returned();
  /// The task running on this thread (0 = none).
  static protocol::TaskId current_task();

  /// One attributed line for the task running on this thread (herd::task_log, shell output).
  /// `echo`: also write it to the original stderr and the worker ring (task_log does).
  void task_line(std::uint8_t stream, std::string_view text, bool echo);
  /// A herd log line that stderr does not print (logging sink).
  void log_line(std::string_view text);

  /// The newest `lines` of the worker log.
  protocol::LogSource worker_log(const std::string& worker_name, std::size_t lines) const;
  /// Output of the task with this id (or, when id is 0, this key) if it ran here.
  bool task_output(protocol::TaskId id, const std::string& key, std::size_t lines,
                   const std::string& worker_name, protocol::LogSource& out) const;

  /// Called by the reader thread (and tests): bytes read from fd 1 (stream 1) or 2 (stream 2).
  void on_captured(std::uint8_t stream, const char* data, std::size_t n);

 private:
  LogBook() = default;
  struct Impl;
  Impl& impl() const;
};

/// Splits a byte stream into lines for LogBook::task_line (herd::shell's pipes).
class TaskLineSplitter {
 public:
  explicit TaskLineSplitter(std::uint8_t stream) : stream_(stream) {}
  void add(const char* data, std::size_t n);
  void flush();

 private:
  std::uint8_t stream_;
  std::string partial_;
};

}  // namespace herd::task
