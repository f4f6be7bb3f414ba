// The built-in shell task, through Boost.Process: stdout and stderr are read concurrently by
// asio (no deadlock on a full pipe) and only their tails are kept.
#include <utility>

#include <boost/asio.hpp>
#include <boost/process.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdlib>

#include "herd/shell.hpp"
#include "task/log_capture.hpp"

namespace bp = boost::process;

namespace herd {
namespace {

/// Keeps the last `limit` bytes of a stream read in chunks. Inside a task on a worker, the
/// lines also go to the task's captured output as they come (`herd logs TASK` while it runs).
class Tail {
 public:
  Tail(bp::async_pipe& pipe, std::size_t limit, std::uint8_t stream)
      : pipe_(pipe), limit_(limit), lines_(stream) {}
  void start() {
    pipe_.async_read_some(boost::asio::buffer(chunk_), [this](const boost::system::error_code& ec,
                                                              std::size_t n) {
      text_.append(chunk_.data(), n);
      lines_.add(chunk_.data(), n);
      if (text_.size() > 2 * limit_ + chunk_.size()) text_.erase(0, text_.size() - limit_);
      if (!ec) start();
    });
  }
  std::string take() {
    lines_.flush();
    if (text_.size() > limit_) text_.erase(0, text_.size() - limit_);
    return std::move(text_);
  }

 private:
  bp::async_pipe& pipe_;
  std::size_t limit_;
  std::array<char, 16384> chunk_{};
  std::string text_;
  task::TaskLineSplitter lines_;
};

/// PATH lookup (bp::search_path would pull in the compiled Boost.Filesystem library).
std::string search_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    const std::size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string candidate = (end > start ? dirs.substr(start, end - start) : ".") + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return {};
}

}  // namespace

ShellResult shell(ShellCommand command) {
  if (command.script.empty() && command.argv.empty()) {
    throw std::invalid_argument("herd::shell: empty command");
  }
  const auto start = std::chrono::steady_clock::now();
  boost::asio::io_context io;
  bp::async_pipe out(io), err(io);
  bp::environment env = boost::this_process::environment();
  env.erase("HERD_ROLE");
  env.erase("HERD_ROLE_ARGS");
  for (const auto& [k, v] : command.env) env[k] = v;
  std::vector<std::string> args = command.argv;
  std::string exe;
  if (!command.script.empty()) {
    exe = "/bin/sh";
    args = {"-c", command.script};
  } else {
    exe = command.argv[0];
    if (exe.find('/') == std::string::npos) exe = search_path(exe);
    if (exe.empty()) throw std::runtime_error("herd::shell: command not found: " + command.argv[0]);
    args.erase(args.begin());
  }
  const std::string cwd = command.cwd.empty() ? "." : command.cwd;
  // Its own process group, so a timeout also stops what the command started (sleep, srun...).
  bp::group group;
  bp::child child(exe, bp::args(args), bp::std_out > out, bp::std_err > err, bp::std_in.close(),
                  bp::start_dir(cwd), env, group);
  Tail out_tail(out, command.tail_bytes, task::kStreamStdout), err_tail(err, command.tail_bytes, task::kStreamStderr);
  out_tail.start();
  err_tail.start();
  ShellResult result;
  if (command.timeout_s > 0) {
    const auto deadline = start + std::chrono::duration<double>(command.timeout_s);
    while (!io.stopped() && std::chrono::steady_clock::now() < deadline) {
      io.run_for(std::chrono::milliseconds(50));
    }
    if (!io.stopped() && child.running()) {
      result.timed_out = true;
      group.terminate();
    }
    io.run();
  } else {
    io.run();
  }
  child.wait();
  const int native = child.native_exit_code();
  result.exit_code = WIFSIGNALED(native) ? 128 + WTERMSIG(native) : child.exit_code();
  result.stdout_tail = out_tail.take();
  result.stderr_tail = err_tail.take();
  result.wall_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace herd
