// The `herd` subcommands implemented in this folder (the scheduler's and the worker's own
// entries live in their folders: scheduler/scheduler_main.hpp, worker/worker_main.hpp).
#pragma once
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace herd::detail {

/// "NAME=VALUE" split at its first '=' (an option's value, such as --env's); `what` names the
/// option in the error when there is no '=' or no name.
inline std::pair<std::string, std::string> split_pair(const std::string& s, const char* what) {
  const auto eq = s.find('=');
  if (eq == std::string::npos || eq == 0) throw std::invalid_argument(std::string(what) + ": expected NAME=VALUE, got '" + s + "'");
  return {s.substr(0, eq), s.substr(eq + 1)};
}


/// `herd jobscript ARGS...` (args exclude the program name); returns the exit code.
int jobscript_main(const std::vector<std::string>& args);
/// `herd sweep ARGS...` (src/cli/sweep.cpp)
int sweep_main(const std::vector<std::string>& args);
/// `herd status ARGS...` (src/cli/status.cpp)
int status_main(const std::vector<std::string>& args);
/// `herd explain KEY ARGS...` (src/cli/status.cpp)
int explain_main(const std::vector<std::string>& args);
/// `herd config ARGS...` (src/cli/config.cpp)
int config_main(const std::vector<std::string>& args);
/// `herd logs ARGS...` (src/cli/logs.cpp)
int logs_main(const std::vector<std::string>& args);
/// Scaling from the shell (src/cli/scale.cpp): `herd pools`, `herd scale POOL N`,
/// `herd adapt POOL --min A --max B`, `herd pool pause|resume POOL`, `herd worker retire NAME`.
int pools_main(const std::vector<std::string>& args);
int scale_main(const std::vector<std::string>& args);
int adapt_main(const std::vector<std::string>& args);
int pool_main(const std::vector<std::string>& args);
int worker_retire_main(const std::vector<std::string>& args);
/// `herd report ARGS...` (src/cli/report.cpp)
int report_main(const std::vector<std::string>& args);
/// `herd submit ARGS...`, `herd jobs ARGS...`, `herd job VERB ARGS...` (src/cli/jobs.cpp)
int submit_main(const std::vector<std::string>& args);
int jobs_main(const std::vector<std::string>& args);
int job_main(const std::vector<std::string>& args);

}  // namespace herd::detail
