#pragma once
/// @file logs.hpp
/// @brief Logs: each worker's recent log, each task's captured output, each batch job's
/// output file, from the client (Client::worker_logs, task_output, logs) and `herd logs`.
///
/// A worker keeps, in memory and bounded, what it writes to stdout/stderr (herd's own lines
/// included; they still go to its terminal or Slurm output file) and, per task, what the task
/// printed. Lines a task writes with herd::task_log() are always credited to it; lines it
/// writes to std::cout / printf are credited to it only while no other task runs on the same
/// worker (a file descriptor is shared by every thread), otherwise they are in the worker log
/// only. A herd::shell task's stdout and stderr are always its own.
///
/// @code
/// int train(int epochs) {
///   for (int e = 0; e < epochs; ++e) herd::task_log("epoch ", e, " loss ", 1.0 / (e + 1));
///   return epochs;
/// }
/// auto f = client.submit(train, 3);
/// f.wait();
/// std::cout << client.task_output(f).text();       // "epoch 0 loss 1\n..."
/// for (const auto& w : client.worker_logs()) std::cout << w.to_text();
/// @endcode

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "herd/error.hpp"

namespace herd {

/// @brief No worker, job or task of that name, or the task never ran (what() says which).
class LogsNotFound : public Error {
 public:
  using Error::Error;
};

/// @brief One captured line.
struct LogEntry {
  std::int64_t time_ms = 0;  ///< unix milliseconds when it was captured (0 = unknown)
  std::string stream;        ///< "log" (herd's own), "stdout", "stderr" or "task_log"
  std::string text;          ///< the line, without its newline
};

/// @brief Lines from one source: a worker's log, a task's output or a job's output file.
struct Logs {
  std::string kind;     ///< "worker", "task" or "job"
  std::string name;     ///< worker name, task key or job id
  std::string worker;   ///< the worker it came from ("" for a job file read by the scheduler)
  std::string path;     ///< job: the output file(s) read
  std::vector<LogEntry> lines;  ///< oldest first
  std::uint64_t dropped = 0;    ///< older lines not shown (not kept, or beyond what was asked)
  std::string note;     ///< e.g. "still running", or why some output is not attributed

  /// @brief The lines, each followed by a newline.
  std::string text() const;
  /// @brief A header naming the source, then the lines (what `herd logs` prints).
  std::string to_text() const;
};

namespace detail {
void task_log_line(const std::string& line);
}

/// @brief Writes a line to the running task's output (always attributed to it, whatever
/// else runs on the worker), to the worker's log, and to its stderr (the Slurm .err file).
/// Outside a task it writes to stderr only. The parts are joined with operator<<.
template <typename... A>
void task_log(const A&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  detail::task_log_line(out.str());
}

}  // namespace herd
