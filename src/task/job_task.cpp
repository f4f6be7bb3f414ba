// "herd::job_task": one task of a job of shell commands (job_task.hpp).
#include "task/job_task.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "common/util.hpp"
#include "herd/remote.hpp"
#include "task/this_task.hpp"

namespace herd {

/// A job's command failed: "exit code N" (or why it has none), then the last lines of stderr.
class CommandFailed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
namespace {

constexpr char kStreamMagic[] = "HERDSTREAM1\n";
constexpr std::size_t kStreamMagicSize = sizeof kStreamMagic - 1;
constexpr std::size_t kFrameHeader = 4 + 8 + 8 + 1;
constexpr std::size_t kErrorTailBytes = 2048;  // of stderr, in a failed task's error
constexpr int kErrorTailLines = 10;

void put_u32(char* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
void put_u64(char* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
std::uint32_t get_u32(const char* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
std::uint64_t get_u64(const char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

/// This process's stream files, one per directory, shared by its tasks.
class StreamFiles {
 public:
  static StreamFiles& get() {
    static StreamFiles* files = new StreamFiles;  // never destroyed: executors may write late
    return *files;
  }
  /// Appends one frame (one write(2), under the lock: frames never interleave).
  void write(const std::string& dir, std::uint64_t job, std::uint64_t task, std::uint8_t kind, const char* data,
             std::size_t size) {
    std::vector<char> frame(kFrameHeader + size);
    put_u32(frame.data(), static_cast<std::uint32_t>(size));
    put_u64(frame.data() + 4, job);
    put_u64(frame.data() + 12, task);
    frame[20] = static_cast<char>(kind);
    if (size > 0) std::memcpy(frame.data() + kFrameHeader, data, size);
    std::lock_guard lock(mu_);
    const int fd = open(dir);
    const char* p = frame.data();
    std::size_t left = frame.size();
    while (left > 0) {
      const ssize_t n = ::write(fd, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw std::runtime_error(errno_text("writing the stream file in " + dir));
      p += n;
      left -= static_cast<std::size_t>(n);
    }
  }

 private:
  int open(const std::string& dir) {
    auto it = fds_.find(dir);
    if (it != fds_.end()) return it->second;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    const std::string path = dir + "/" + util::hostname() + "-" + std::to_string(::getpid()) + ".hstream";
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) throw std::runtime_error(errno_text("cannot open the stream file " + path));
    struct stat st {};
    if (::fstat(fd, &st) == 0 && st.st_size == 0) {
      if (::write(fd, kStreamMagic, kStreamMagicSize) != static_cast<ssize_t>(kStreamMagicSize)) {
        ::close(fd);
        throw std::runtime_error(errno_text("writing the stream file " + path));
      }
    }
    fds_.emplace(dir, fd);
    return fd;
  }
  std::mutex mu_;
  std::map<std::string, int> fds_;
};

/// An output file of one task (created with its directories, truncated).
class OutFile {
 public:
  explicit OutFile(const std::string& path) {
    const std::filesystem::path p(path);
    if (p.has_parent_path()) {
      std::error_code ec;
      std::filesystem::create_directories(p.parent_path(), ec);
    }
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw CommandFailed("exit code -1: " + errno_text("cannot open the output file " + path));
  }
  ~OutFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  OutFile(const OutFile&) = delete;
  OutFile& operator=(const OutFile&) = delete;
  void write(const char* data, std::size_t size) {
    while (size > 0) {
      const ssize_t n = ::write(fd_, data, size);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // a full disk: the task's result still says how it ended
      data += n;
      size -= static_cast<std::size_t>(n);
    }
  }

 private:
  int fd_ = -1;
};

/// The last `lines` lines of `text`, at most `bytes` of it.
std::string last_lines(const std::string& text, int lines, std::size_t bytes) {
  std::size_t end = text.size();
  while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == '\r')) --end;
  std::size_t from = end;
  int seen = 0;
  while (from > 0 && end - from < bytes) {
    if (text[from - 1] == '\n' && ++seen == lines) break;
    --from;
  }
  return text.substr(from, end - from);
}

/// One word with nothing a shell would interpret: run as a program, not through /bin/sh.
bool plain_word(const std::string& s) {
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == '/' || c == '+' ||
          c == ',' || c == ':' || c == '=' || c == '@' || c == '%')) {
      return false;
    }
  }
  return !s.empty();
}

}  // namespace

std::string fill_job_placeholders(const std::string& pattern, std::uint64_t job, std::uint64_t task,
                                  const std::string& cwd, const std::string& submit_dir) {
  std::string out;
  out.reserve(pattern.size() + 16);
  for (std::size_t i = 0; i < pattern.size();) {
    if (pattern.compare(i, 2, "%{") == 0) {
      const std::size_t end = pattern.find('}', i);
      if (end != std::string::npos) {
        const std::string name = pattern.substr(i + 2, end - i - 2);
        if (name == "JOB_ID") out += std::to_string(job);
        else if (name == "TASK_ID") out += std::to_string(task);
        else if (name == "CWD") out += cwd;
        else if (name == "SUBMIT_DIR") out += submit_dir;
        else out += pattern.substr(i, end - i + 1);  // unknown: left as it is (the CLI refuses it)
        i = end + 1;
        continue;
      }
    }
    out += pattern[i++];
  }
  return out;
}

std::string job_task_cwd(const std::string& cwd, const std::string& submit_dir) {
  if (cwd.empty()) return submit_dir;
  if (cwd[0] == '/' || submit_dir.empty()) return cwd;
  return submit_dir + "/" + cwd;
}

std::string job_output_path(const std::string& pattern, std::uint64_t job, std::uint64_t task, const std::string& cwd,
                            const std::string& submit_dir) {
  const std::string p = fill_job_placeholders(pattern, job, task, cwd, submit_dir);
  if (p.empty() || p[0] == '/' || cwd.empty()) return p;
  return cwd + "/" + p;
}

int exit_code_of(const std::string& message) {
  constexpr const char* kPrefix = "exit code ";
  if (message.rfind(kPrefix, 0) != 0) return -1;
  try {
    return std::stoi(message.substr(std::strlen(kPrefix)));
  } catch (const std::exception&) {
    return -1;
  }
}

int job_task(protocol::JobTaskRun run) {
  const protocol::JobTaskDef& def = run.def;
  const std::string cwd = job_task_cwd(def.cwd, run.submit_dir);
  ShellCommand command;
  if (!def.script.empty()) {
    command.script = def.script;
  } else if (def.argv.size() == 1 && !plain_word(def.argv[0])) {
    command.script = def.argv[0];  // one word with spaces or shell syntax: a script, as herd sweep takes it
  } else {
    command.argv = def.argv;
  }
  command.cwd = cwd;
  command.env = def.env;
  command.env["HERD_JOB_ID"] = std::to_string(run.job);
  command.env["HERD_TASK_ID"] = std::to_string(run.task);
  if (run.has_entry) command.env["HERD_ENTRY"] = run.entry;
  command.timeout_s = def.time_limit_ms / 1000.0;
  command.tail_bytes = 8192;

  std::unique_ptr<OutFile> out_file, err_file;
  bool same_file = false;
  ShellSink sink;
  if (!run.stream_dir.empty()) {
    const std::string dir = job_output_path(run.stream_dir, run.job, run.task, cwd, run.submit_dir);
    const auto now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    char stamp[8];
    put_u64(stamp, static_cast<std::uint64_t>(now_ns));
    StreamFiles::get().write(dir, run.job, run.task, 0, stamp, sizeof stamp);
    sink = [dir, job = run.job, task = run.task](std::uint8_t stream, const char* data, std::size_t size) {
      StreamFiles::get().write(dir, job, task, stream, data, size);
    };
  } else if (!run.stdout_path.empty() || !run.stderr_path.empty()) {
    const std::string out_path =
        run.stdout_path.empty() ? "" : job_output_path(run.stdout_path, run.job, run.task, cwd, run.submit_dir);
    const std::string err_path =
        run.stderr_path.empty() ? "" : job_output_path(run.stderr_path, run.job, run.task, cwd, run.submit_dir);
    if (!out_path.empty()) out_file = std::make_unique<OutFile>(out_path);
    same_file = !err_path.empty() && err_path == out_path;
    if (!err_path.empty() && !same_file) err_file = std::make_unique<OutFile>(err_path);
    sink = [&out_file, &err_file, same_file](std::uint8_t stream, const char* data, std::size_t size) {
      OutFile* f = stream == 2 && !same_file ? err_file.get() : out_file.get();
      if (f != nullptr) f->write(data, size);
    };
  }
  ShellResult r;
  try {
    r = shell_to(std::move(command), sink);
  } catch (const std::exception& e) {
    throw CommandFailed(std::string("exit code 127: ") + e.what());  // e.g. command not found
  }
  if (r.timed_out) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "exit code -1: time limit of %g s exceeded", def.time_limit_ms / 1000.0);
    const std::string tail = last_lines(r.stderr_tail, kErrorTailLines, kErrorTailBytes);
    throw CommandFailed(buf + (tail.empty() ? std::string() : "\n" + tail));
  }
  if (r.exit_code != 0) {
    const std::string tail = last_lines(r.stderr_tail, kErrorTailLines, kErrorTailBytes);
    throw CommandFailed("exit code " + std::to_string(r.exit_code) + (tail.empty() ? "" : "\n" + tail));
  }
  return 0;
}

std::map<std::uint64_t, StreamedOutput> read_stream_outputs(const std::string& dir, std::uint64_t job,
                                                            const std::uint64_t* task) {
  std::map<std::uint64_t, StreamedOutput> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().extension() != ".hstream") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (data.compare(0, kStreamMagicSize, kStreamMagic) != 0) continue;
    std::map<std::uint64_t, bool> current;  // task -> this file's run of it is the newest so far
    std::size_t pos = kStreamMagicSize;
    while (pos + kFrameHeader <= data.size()) {
      const std::uint32_t len = get_u32(data.data() + pos);
      if (pos + kFrameHeader + len > data.size()) break;  // a torn last frame
      const std::uint64_t fjob = get_u64(data.data() + pos + 4), ftask = get_u64(data.data() + pos + 12);
      const auto kind = static_cast<std::uint8_t>(data[pos + 20]);
      const char* payload = data.data() + pos + kFrameHeader;
      pos += kFrameHeader + len;
      if (fjob != job || (task != nullptr && ftask != *task)) continue;
      if (kind == 0) {
        const std::uint64_t stamp = len >= 8 ? get_u64(payload) : 0;
        auto it = found.find(ftask);
        const bool newest = it == found.end() || stamp >= it->second.stamp;
        current[ftask] = newest;
        if (newest) found[ftask] = StreamedOutput{{}, {}, stamp};
      } else if (current[ftask]) {
        StreamedOutput& o = found[ftask];
        (kind == 2 ? o.err : o.out).append(payload, len);
      }
    }
  }
  return found;
}

}  // namespace detail
}  // namespace herd

HERD_TASK_NAMED(herd::detail::job_task, "herd::job_task");
