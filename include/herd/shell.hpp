#pragma once
/// @file shell.hpp
/// @brief Shell commands as tasks: for sweeps over existing programs.
///
/// @code
/// auto f = client.submit(herd::shell, herd::ShellCommand{"echo hello; exit 3"});
/// herd::ShellResult r = f.result();   // r.exit_code == 3, r.stdout_tail == "hello\n"
/// @endcode

#include <map>
#include <string>
#include <vector>

#include <msgpack.hpp>

namespace herd {

/// @brief A command to run on a worker.
struct ShellCommand {
  ShellCommand() = default;
  /// Runs `command` with /bin/sh -c.
  ShellCommand(std::string command) : script(std::move(command)) {}  // NOLINT: implicit on purpose
  ShellCommand(const char* command) : script(command) {}              // NOLINT
  /// Runs argv[0] with these arguments, no shell involved.
  explicit ShellCommand(std::vector<std::string> args) : argv(std::move(args)) {}

  std::string script;                      ///< shell script ("" when argv is used)
  std::vector<std::string> argv;           ///< program and arguments
  std::string cwd;                         ///< working directory ("" = the worker's)
  std::map<std::string, std::string> env;  ///< extra environment variables
  double timeout_s = 0;                    ///< kill after this many seconds (0 = never)
  std::size_t tail_bytes = 64 * 1024;      ///< how much of stdout/stderr to keep (the end)
  MSGPACK_DEFINE_MAP(script, argv, cwd, env, timeout_s, tail_bytes);
};

/// @brief What a shell task returns.
struct ShellResult {
  int exit_code = 0;        ///< exit status; 128+N when killed by signal N
  std::string stdout_tail;  ///< last tail_bytes of stdout
  std::string stderr_tail;  ///< last tail_bytes of stderr
  double wall_time_s = 0;   ///< wall time of the command
  bool timed_out = false;   ///< killed because timeout_s passed
  bool ok() const { return exit_code == 0 && !timed_out; }
  MSGPACK_DEFINE_MAP(exit_code, stdout_tail, stderr_tail, wall_time_s, timed_out);
};

/// @brief The built-in task (registered as "herd::shell"); runs through Boost.Process.
ShellResult shell(ShellCommand command);

}  // namespace herd
