#pragma once
/// @file error.hpp
/// @brief Exceptions thrown by the herd API. Everything derives from herd::Error.

#include <stdexcept>
#include <string>

namespace herd {

/// @brief Base of every exception herd throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// @brief A task raised an exception on a worker (or an input of it did).
///
/// @code
/// try { f.result(); } catch (const herd::TaskError& e) { std::cerr << e.type() << ": " << e.message(); }
/// @endcode
class TaskError : public Error {
 public:
  TaskError(std::string type, std::string message, std::string task, std::string worker,
            std::string root_task = {})
      : Error(format(type, message, task, worker, root_task)),
        type_(std::move(type)), message_(std::move(message)), task_(std::move(task)),
        worker_(std::move(worker)), root_task_(std::move(root_task)) {}
  /// Demangled C++ type of the remote exception, e.g. "std::invalid_argument".
  const std::string& type() const noexcept { return type_; }
  /// The remote exception's what().
  const std::string& message() const noexcept { return message_; }
  /// Key of the task whose future this is.
  const std::string& task() const noexcept { return task_; }
  /// Worker the failing task ran on.
  const std::string& worker() const noexcept { return worker_; }
  /// Key of the task that actually raised (differs from task() for a failed dependency).
  const std::string& root_task() const noexcept { return root_task_.empty() ? task_ : root_task_; }

 private:
  static std::string format(const std::string& type, const std::string& message,
                            const std::string& task, const std::string& worker,
                            const std::string& root) {
    std::string s = "task " + task;
    // root: an input it depended on, or another rank of its gang
    if (!root.empty() && root != task) s += " failed because task " + root + " failed";
    s += ": " + type + ": " + message;
    if (!worker.empty()) s += " (on worker " + worker + ")";
    return s;
  }
  std::string type_, message_, task_, worker_, root_task_;
};

/// @brief A task run in a child process of its worker (TaskOptions::isolated) died without a
/// result: killed by a signal (a segfault, std::abort, the out-of-memory killer) or exited
/// without writing one. what() names the task, the signal (name and number) or the exit code,
/// and the worker; the worker itself went on. A TaskError of type() "herd::TaskCrashed", so a
/// `catch (const herd::TaskError&)` sees it too.
///
/// @code
/// try { f.get(); } catch (const herd::TaskCrashed& e) { std::cerr << e.message(); }  // "... SIGSEGV ..."
/// @endcode
class TaskCrashed : public TaskError {
 public:
  using TaskError::TaskError;
};

/// @brief Thrown on the worker when a task goes past its memory (TaskOptions::memory): a shell
/// command killed at its limit. The client sees a TaskError of type() "herd::MemoryLimitExceeded"
/// whose message names the limit.
class MemoryLimitExceeded : public Error {
 public:
  using Error::Error;
};

/// @brief The function was never registered with HERD_TASK (in this process or on the worker).
class FunctionNotFound : public Error {
 public:
  using Error::Error;
};

/// @brief The scheduler could not be reached, or was lost.
class ConnectionError : public Error {
 public:
  using Error::Error;
};

/// @brief A result did not arrive within the timeout given to result()/wait().
class TimeoutError : public Error {
 public:
  using Error::Error;
};

/// @brief The task was cancelled before it finished.
class CancelledError : public Error {
 public:
  using Error::Error;
};

/// @brief The worker holding or running a task was lost and the result cannot be had.
class WorkerLostError : public Error {
 public:
  using Error::Error;
};

/// @brief A collective operation of a gang could not complete: another rank failed, its
/// worker died, or the gang was cancelled. what() says which.
class GangAborted : public Error {
 public:
  using Error::Error;
};

/// @brief A cluster (local processes or a batch system) could not be started or sized.
class ClusterError : public Error {
 public:
  using Error::Error;
};

/// @brief The batch system refused a request (sbatch, scancel...); what() carries its words.
class JobQueueError : public ClusterError {
 public:
  using ClusterError::ClusterError;
};

}  // namespace herd
