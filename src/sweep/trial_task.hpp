// The task a sweep trial runs on a worker ("herd::sweep::run_trial", built into libherd so that
// every worker has it): a command through herd::shell, or a registered C++ function called by
// name, plus what the results file wants to know about where it ran. Metrics are read here, on
// the worker, so that only they (and short tails of the output) travel back, however much
// the program prints.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <msgpack.hpp>

#include "herd/shell.hpp"

namespace herd::sweep {

struct TrialRequest {
  std::string function;                       // registered function to call ("" = run command)
  std::map<std::string, std::string> params;  // the function's argument (with the budget)
  ShellCommand command;                       // the filled-in command (when function is "")
  std::string objective;                      // name of a function's plain-number result
  MSGPACK_DEFINE_MAP(function, params, command, objective);
};

struct TrialOutput {
  int exit_code = 0;                                   // command's exit code (0 for functions)
  bool timed_out = false;                              // killed at the command's timeout
  double wall_time_s = 0;
  std::map<std::string, double> metrics;               // final values
  std::map<std::string, std::vector<double>> history;  // intermediate values, in order
  std::string error;                                   // why the run failed ("" = it did not)
  std::string stdout_tail;                             // the last few lines, for the record
  std::string stderr_tail;
  std::string worker;                                  // herd::this_task().worker
  std::string job_id;                                  // HERD_JOB_ID, else SLURM_JOB_ID
  std::string host;
  MSGPACK_DEFINE_MAP(exit_code, timed_out, wall_time_s, metrics, history, error, stdout_tail,
                     stderr_tail, worker, job_id, host);
};

/// Registered as "herd::sweep::run_trial".
TrialOutput run_trial(TrialRequest request);
inline constexpr const char* kRunTrialTask = "herd::sweep::run_trial";

/// The last `bytes` of `text`, cut at a line start where there is one.
std::string last_lines(const std::string& text, std::size_t bytes);

}  // namespace herd::sweep
