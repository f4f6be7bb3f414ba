// The task a job of shell commands runs on a worker (`herd submit`): "herd::job_task", built
// into libherd so that every worker has it. It fills in the job's placeholders, runs the
// command through herd::shell (which dies with the worker) and sends its output where the job
// said: a file per task, or frames in one stream file per worker (below), or nowhere. A
// command that fails makes the task fail with herd::CommandFailed, whose message starts with
// "exit code N" and ends with the last lines of its stderr: that is all the scheduler keeps.
//
// Stream files (HyperQueue's "streaming": a million small files hurt a parallel file system):
// `<stream_dir>/<host>-<pid>.hstream`, written by one worker process, appended to only:
//   "HERDSTREAM1\n", then frames [u32 LE length of payload][u64 LE job][u64 LE task]
//   [u8 kind][payload]; kind 0 starts a run of the task (payload: u64 LE unix nanoseconds),
//   1 and 2 are stdout and stderr bytes. A task run again (a retry, a restart) starts again:
//   readers keep the newest run.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "herd/shell.hpp"
#include "protocol/messages.hpp"

namespace herd {
namespace detail {

/// Called with each chunk of a command's output as it comes (stream 1 = stdout, 2 = stderr).
using ShellSink = std::function<void(std::uint8_t stream, const char* data, std::size_t size)>;
/// herd::shell, with every chunk of output also handed to `sink` (when set).
ShellResult shell_to(ShellCommand command, const ShellSink& sink);

/// Registered as "herd::job_task": returns 0, or throws herd::CommandFailed.
int job_task(protocol::JobTaskRun run);
inline constexpr const char* kJobTaskFunction = "herd::job_task";

/// `pattern` with %{JOB_ID}, %{TASK_ID}, %{CWD} and %{SUBMIT_DIR} filled in.
std::string fill_job_placeholders(const std::string& pattern, std::uint64_t job, std::uint64_t task,
                                  const std::string& cwd, const std::string& submit_dir);
/// A task's working directory: `cwd` ("" = the submit directory; relative = under it).
std::string job_task_cwd(const std::string& cwd, const std::string& submit_dir);
/// A task's output file from its pattern: relative to its working directory.
std::string job_output_path(const std::string& pattern, std::uint64_t job, std::uint64_t task, const std::string& cwd,
                            const std::string& submit_dir);

/// A task's output as the stream files hold it (its newest run).
struct StreamedOutput {
  std::string out, err;
  std::uint64_t stamp = 0;  // when that run started (unix nanoseconds)
};
/// What the stream files of `dir` hold of job `job`: every task's output, or only task `*task`'s.
/// One pass over each file, whatever the number of tasks.
std::map<std::uint64_t, StreamedOutput> read_stream_outputs(const std::string& dir, std::uint64_t job,
                                                            const std::uint64_t* task = nullptr);
/// The first line of the message of a failed job task: its exit code, or -1 when it has none.
int exit_code_of(const std::string& message);

}  // namespace detail
}  // namespace herd
