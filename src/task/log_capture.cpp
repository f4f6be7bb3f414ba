#include "task/log_capture.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#if defined(__GLIBCXX__)
#include <ext/stdio_sync_filebuf.h>
#endif

namespace herd::task {

using protocol::LogLine;
using protocol::LogSource;
using protocol::TaskId;

namespace {

thread_local TaskId t_current = 0;

std::int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

/// Newest lines, bounded by bytes (each line counts its text plus a small overhead).
struct Ring {
  // Made with the first line: an empty std::deque allocates two blocks, and most tasks print
  // nothing (a record per task, on the round trip's path).
  std::unique_ptr<std::deque<LogLine>> lines;
  std::size_t bytes = 0;
  std::size_t cap = 0;
  std::uint64_t dropped = 0;
  bool empty() const { return !lines || lines->empty(); }
  void push(LogLine line) {
    if (!lines) lines = std::make_unique<std::deque<LogLine>>();
    bytes += line.text.size() + 16;
    lines->push_back(std::move(line));
    while (bytes > cap && !lines->empty()) {
      bytes -= lines->front().text.size() + 16;
      lines->pop_front();
      ++dropped;
    }
  }
  void tail(std::size_t n, LogSource& out) const {
    out.lines.clear();
    out.dropped = dropped;
    if (!lines) return;
    const std::size_t k = std::min(n, lines->size());
    out.lines.assign(lines->end() - static_cast<std::ptrdiff_t>(k), lines->end());
    out.dropped += lines->size() - k;
  }
};

struct TaskRec {
  TaskId id = 0;
  std::string key;
  Ring out;
  bool running = false;
  bool shared = false;    // another task ran on this worker at the same time
  std::uint32_t runs = 0; // times it started here (a retry runs again)
};

// For the crash handler, which may only touch plain ints: original fds and pipe read ends.
int g_saved[3] = {-1, -1, -1};
int g_read[3] = {-1, -1, -1};
// Set by the reader thread from the read() of a pipe until those bytes are in the original
// stream: the crash handler waits for it (bounded), or the last lines before a crash (read,
// not yet written) would be lost with the process.
std::atomic<int> g_copying{0};
static_assert(std::atomic<int>::is_always_lock_free, "the crash handler reads it");
struct sigaction g_old[32];
constexpr int kFatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};

void write_all(int fd, const char* data, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;  // the original stream is gone (closed terminal): keep capturing regardless
    }
    data += w;
    n -= static_cast<std::size_t>(w);
  }
}

/// What a task printed through std::cout and stdio, out to the pipes. std::cout writes into
/// stdout's buffer while it is synchronised with stdio (the default): then fflush(stdout) is
/// its flush too, and one flush of it is saved after every task.
void flush_std_streams() {
#if defined(__GLIBCXX__)
  const bool cout_in_stdout = dynamic_cast<__gnu_cxx::stdio_sync_filebuf<char>*>(std::cout.rdbuf()) != nullptr;
#else
  const bool cout_in_stdout = false;
#endif
  if (!cout_in_stdout) std::cout.flush();
  std::fflush(stdout);
  std::fflush(stderr);
}

void on_fatal(int sig) {
  // Async-signal-safe only: put the descriptors back, copy what the reader has not yet read.
  for (int s = 1; s <= 2; ++s) {
    if (g_saved[s] >= 0) ::dup2(g_saved[s], s);
  }
  // The reader may hold bytes it read and has not written yet: let it finish (at most 200 ms).
  const timespec ms{0, 1000000};
  for (int i = 0; i < 200 && g_copying.load() != 0; ++i) ::nanosleep(&ms, nullptr);
  char buf[4096];
  for (int s = 1; s <= 2; ++s) {
    if (g_read[s] < 0 || g_saved[s] < 0) continue;
    for (int i = 0; i < 256; ++i) {
      const ssize_t n = ::read(g_read[s], buf, sizeof buf);
      if (n <= 0) break;
      write_all(g_saved[s], buf, static_cast<std::size_t>(n));
    }
  }
  ::sigaction(sig, &g_old[sig], nullptr);
  ::raise(sig);
}

}  // namespace

struct LogBook::Impl {
  mutable std::mutex mu;
  std::condition_variable cv;
  LogLimits limits;
  Ring worker{{}, 0, 4u << 20, 0};
  std::vector<TaskId> running;                   // few; kept, not reallocated per task
  std::unordered_map<TaskId, TaskRec> tasks;     // running, and finished with output
  decltype(tasks)::node_type spare;              // a quiet task's entry, for the next task
  std::deque<TaskId> finished;                   // tasks with output, oldest first
  std::deque<std::pair<TaskId, std::string>> quiet;  // finished without output (bounded)
  bool started = false, stopped = false;
  bool reader_busy = false, reader_done = false;
  std::string partial[3];

  void add_worker(std::uint8_t stream, std::string text) {
    if (text.size() > limits.line_bytes) text.resize(limits.line_bytes);
    worker.push({unix_ms(), stream, std::move(text)});
  }
  /// A line read from fd 1 or 2: the worker log, and the task if it is the only one running.
  void captured_line(std::uint8_t stream, std::string text) {
    if (text.size() > limits.line_bytes) text.resize(limits.line_bytes);
    if (!text.empty() && text.back() == '\r') text.pop_back();
    const bool herd_line = text.rfind("[herd ", 0) == 0;
    if (!herd_line && running.size() == 1) {
      auto it = tasks.find(running.front());
      if (it != tasks.end()) it->second.out.push({unix_ms(), stream, text});
    }
    worker.push({unix_ms(), herd_line ? kStreamLog : stream, std::move(text)});
  }
  bool pipes_empty() const {
    // One poll(2) for both pipes (after every task: one system call, not one per pipe).
    pollfd fds[2];
    nfds_t n = 0;
    for (int s = 1; s <= 2; ++s) {
      if (g_read[s] >= 0) fds[n++] = {g_read[s], POLLIN, 0};
    }
    if (n == 0) return true;
    if (::poll(fds, n, 0) <= 0) return true;
    for (nfds_t i = 0; i < n; ++i) {
      if (fds[i].revents & POLLIN) return false;
    }
    return true;
  }
  void reader_loop() {
    std::vector<char> buf(65536);
    bool open[3] = {false, g_read[1] >= 0, g_read[2] >= 0};
    while (open[1] || open[2]) {
      pollfd fds[2];
      std::uint8_t which[2];
      nfds_t n = 0;
      for (std::uint8_t s = 1; s <= 2; ++s) {
        if (open[s]) {
          fds[n] = {g_read[s], POLLIN, 0};
          which[n++] = s;
        }
      }
      if (::poll(fds, n, -1) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      for (nfds_t i = 0; i < n; ++i) {
        if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        const std::uint8_t s = which[i];
        {
          std::lock_guard lock(mu);
          reader_busy = true;
        }
        g_copying.store(1);
        const ssize_t got = ::read(g_read[s], buf.data(), buf.size());
        if (got > 0) write_all(g_saved[s], buf.data(), static_cast<std::size_t>(got));
        g_copying.store(0);
        if (got > 0) {
          LogBook::instance().on_captured(s, buf.data(), static_cast<std::size_t>(got));
        } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
          open[s] = false;  // every writer closed it: stop_capture()
        }
        std::lock_guard lock(mu);
        reader_busy = false;
        cv.notify_all();
      }
    }
    std::lock_guard lock(mu);
    reader_done = true;
    cv.notify_all();
  }
};

LogBook& LogBook::instance() {
  // Never destroyed: the reader thread and late log lines may outlive static destruction.
  static LogBook* book = new LogBook();
  return *book;
}

LogBook::Impl& LogBook::impl() const {
  static Impl* impl = new Impl();
  return *impl;
}

bool LogBook::capturing() const {
  Impl& m = impl();
  std::lock_guard lock(m.mu);
  return m.started && !m.stopped;
}

void LogBook::start_capture(const LogLimits& limits) {
  Impl& m = impl();
  {
    std::lock_guard lock(m.mu);
    if (m.started) return;
    m.limits = limits;
    m.worker.cap = limits.worker_bytes;
    if (limits.worker_bytes == 0) return;
    m.started = true;
  }
  // Line-buffered stdout, so that a task's lines reach the ring (and the Slurm file) as they
  // are printed rather than when a 4 KiB buffer fills.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::fflush(stderr);
  for (int s = 1; s <= 2; ++s) {
    int p[2];
    const int saved = ::fcntl(s, F_DUPFD_CLOEXEC, 3);
    if (saved < 0 || ::pipe2(p, O_CLOEXEC) != 0) {
      if (saved >= 0) ::close(saved);
      continue;  // no such stream (closed by the parent): nothing to capture
    }
    ::fcntl(p[0], F_SETFL, ::fcntl(p[0], F_GETFL) | O_NONBLOCK);
    ::dup2(p[1], s);  // fd s is the pipe now (dup2 clears CLOEXEC: children inherit it)
    ::close(p[1]);
    g_saved[s] = saved;
    g_read[s] = p[0];
  }
  if (g_read[1] < 0 && g_read[2] < 0) return;
  for (int sig : kFatal) {
    struct sigaction sa {};
    sa.sa_handler = on_fatal;
    sa.sa_flags = SA_NODEFER;
    ::sigemptyset(&sa.sa_mask);
    ::sigaction(sig, &sa, &g_old[sig]);
  }
  std::thread([&m] { m.reader_loop(); }).detach();
}

void LogBook::stop_capture() {
  Impl& m = impl();
  {
    std::lock_guard lock(m.mu);
    if (!m.started || m.stopped) return;
    m.stopped = true;
  }
  std::cout.flush();
  std::cerr.flush();
  std::fflush(stdout);
  std::fflush(stderr);
  for (int sig : kFatal) ::sigaction(sig, &g_old[sig], nullptr);
  // The pipes' write ends were only fd 1 and 2: putting the originals back closes them, and the
  // reader copies what is left, sees end of file and stops. A child that inherited them and
  // still runs keeps them open; hence the bound.
  for (int s = 1; s <= 2; ++s) {
    if (g_saved[s] >= 0) ::dup2(g_saved[s], s);
  }
  std::unique_lock lock(m.mu);
  m.cv.wait_for(lock, std::chrono::seconds(1), [&] { return m.reader_done; });
}

TaskId LogBook::current_task() { return t_current; }

void LogBook::task_returned() { t_current = 0; }

void LogBook::task_started(TaskId id, const std::string& key) {
  Impl& m = impl();
  t_current = id;
  std::lock_guard lock(m.mu);
  if (std::find(m.running.begin(), m.running.end(), id) == m.running.end()) m.running.push_back(id);
  auto found = m.tasks.find(id);
  if (found == m.tasks.end() && !m.spare.empty()) {
    // The entry a quiet task left, reused: no allocation per task on the round trip's path.
    m.spare.key() = id;
    m.spare.mapped() = TaskRec{};
    found = m.tasks.insert(std::move(m.spare)).position;
  }
  TaskRec& rec = found != m.tasks.end() ? found->second : m.tasks[id];
  if (rec.runs == 0) {
    rec.id = id;
    rec.key = key;
    rec.out.cap = m.limits.task_bytes;
  } else {
    // Started here again (a retry): one record, the runs told apart by a marker line.
    m.finished.erase(std::remove(m.finished.begin(), m.finished.end(), id), m.finished.end());
    rec.out.push({unix_ms(), kStreamLog, "--- run " + std::to_string(rec.runs + 1) + " on this worker ---"});
  }
  ++rec.runs;
  rec.running = true;
  if (m.running.size() > 1) {
    for (TaskId rid : m.running) {
      if (auto it = m.tasks.find(rid); it != m.tasks.end()) it->second.shared = true;
    }
  }
}

void LogBook::task_finished(TaskId id) {
  Impl& m = impl();
  t_current = 0;
  std::unique_lock lock(m.mu);
  if (m.started && !m.stopped) {
    // What the task printed must be read (and credited to it) before it counts as finished.
    lock.unlock();
    flush_std_streams();
    lock.lock();
    m.cv.wait_for(lock, std::chrono::milliseconds(200), [&] { return !m.reader_busy && m.pipes_empty(); });
    if (m.running.size() == 1) {
      for (std::uint8_t s = 1; s <= 2; ++s) {
        if (!m.partial[s].empty()) m.captured_line(s, std::exchange(m.partial[s], std::string()));
      }
    }
  }
  m.running.erase(std::remove(m.running.begin(), m.running.end(), id), m.running.end());
  auto it = m.tasks.find(id);
  if (it == m.tasks.end()) return;
  it->second.running = false;
  if (it->second.out.empty() && it->second.out.dropped == 0) {
    m.quiet.emplace_back(id, std::move(it->second.key));
    if (m.spare.empty()) m.spare = m.tasks.extract(it);
    else m.tasks.erase(it);
    if (m.quiet.size() > 16 * m.limits.tasks) m.quiet.pop_front();
    return;
  }
  m.finished.push_back(id);
  while (m.finished.size() > m.limits.tasks) {
    m.tasks.erase(m.finished.front());
    m.finished.pop_front();
  }
}

void LogBook::task_line(std::uint8_t stream, std::string_view text, bool echo) {
  Impl& m = impl();
  std::string key;
  {
    std::lock_guard lock(m.mu);
    std::string line(text.substr(0, m.limits.line_bytes));
    if (auto it = m.tasks.find(t_current); t_current != 0 && it != m.tasks.end()) {
      key = it->second.key;
      it->second.out.push({unix_ms(), stream, line});
    }
    if (echo && m.started) m.add_worker(stream, std::move(line));
  }
  if (echo) {
    // Straight to the original stderr (the Slurm .err file), past the capture pipe, so the
    // line is not read back and counted twice.
    const std::string out = (key.empty() ? std::string() : "[task " + key + "] ") + std::string(text) + "\n";
    write_all(g_saved[2] >= 0 ? g_saved[2] : 2, out.data(), out.size());
  }
}

void LogBook::log_line(std::string_view text) {
  Impl& m = impl();
  std::lock_guard lock(m.mu);
  if (m.started) m.add_worker(kStreamLog, std::string(text));
}

void LogBook::on_captured(std::uint8_t stream, const char* data, std::size_t n) {
  Impl& m = impl();
  std::lock_guard lock(m.mu);
  std::string& partial = m.partial[stream];
  partial.append(data, n);
  std::size_t start = 0;
  for (std::size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    m.captured_line(stream, partial.substr(start, nl - start));
  }
  partial.erase(0, start);
  if (partial.size() > m.limits.line_bytes) m.captured_line(stream, std::exchange(partial, std::string()));
}

LogSource LogBook::worker_log(const std::string& worker_name, std::size_t lines) const {
  Impl& m = impl();
  std::lock_guard lock(m.mu);
  LogSource out;
  out.kind = "worker";
  out.name = worker_name;
  out.worker = worker_name;
  m.worker.tail(lines, out);
  if (!m.started) out.note = "this worker does not capture its output (HERD_WORKER_LOG_BYTES=0)";
  return out;
}

bool LogBook::task_output(TaskId id, const std::string& key, std::size_t lines, const std::string& worker_name,
                          LogSource& out) const {
  Impl& m = impl();
  std::lock_guard lock(m.mu);
  out.kind = "task";
  out.worker = worker_name;
  const TaskRec* rec = nullptr;
  if (auto it = m.tasks.find(id); id != 0 && it != m.tasks.end()) rec = &it->second;
  for (auto it = m.tasks.begin(); rec == nullptr && id == 0 && it != m.tasks.end(); ++it) {
    if (it->second.key == key) rec = &it->second;
  }
  if (rec == nullptr) {
    for (const auto& [qid, qkey] : m.quiet) {
      if ((id != 0 && qid == id) || (id == 0 && qkey == key)) {
        out.name = qkey;
        out.note = "ran on this worker and printed nothing";
        return true;
      }
    }
    return false;
  }
  out.name = rec->key;
  rec->out.tail(lines, out);
  std::string note;
  if (rec->running) note = "still running";
  if (rec->shared) {
    note += std::string(note.empty() ? "" : "; ") +
            "other tasks ran on this worker at the same time: what was printed to stdout/stderr "
            "meanwhile cannot be told apart and is only in the worker log (herd::task_log() lines "
            "are always attributed)";
  }
  if (rec->out.dropped > 0) {
    note += std::string(note.empty() ? "" : "; ") + "only the last " + std::to_string(m.limits.task_bytes) +
            " bytes are kept (HERD_TASK_OUTPUT_BYTES)";
  }
  if (!m.started) {
    note += std::string(note.empty() ? "" : "; ") + "stdout/stderr are not captured on this worker";
  }
  out.note = std::move(note);
  return true;
}

void TaskLineSplitter::add(const char* data, std::size_t n) {
  if (LogBook::current_task() == 0 || n == 0) return;
  partial_.append(data, n);
  std::size_t start = 0;
  for (std::size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1) {
    LogBook::instance().task_line(stream_, std::string_view(partial_).substr(start, nl - start), false);
  }
  partial_.erase(0, start);
  if (partial_.size() > 4096) flush();
}

void TaskLineSplitter::flush() {
  if (partial_.empty() || LogBook::current_task() == 0) return;
  LogBook::instance().task_line(stream_, partial_, false);
  partial_.clear();
}

}  // namespace herd::task
