#include "worker/isolated.hpp"

#include <cxxabi.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio_ext.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <set>
#include <typeinfo>

#include "common/process.hpp"
#include "common/util.hpp"
#include "task/this_task.hpp"

namespace herd::worker {

namespace {

// Exit codes of a child that never ran the function (it has no other way to say so).
constexpr int kParentGone = 121;  // the worker died before the child could arm PR_SET_PDEATHSIG

constexpr char kResult = 'R', kException = 'E';
constexpr std::size_t kHeaderBytes = 1 + sizeof(std::uint64_t);
constexpr std::size_t kMaxErrorBytes = 64u << 10;  // an exception's type + message, at most

std::mutex g_children_mu;
std::set<IsolatedChild*> g_children;  // running now (kill_isolated_children)

bool write_all(int fd, const void* data, std::size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = ::write(fd, p, n);
    if (k < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

bool write_header(int fd, char kind, std::uint64_t n) {
  char h[kHeaderBytes];
  h[0] = kind;
  std::memcpy(h + 1, &n, sizeof n);
  return write_all(fd, h, sizeof h);
}

void write_exception(int fd, const char* type, std::size_t type_len, const char* what, std::size_t what_len) {
  type_len = std::min(type_len, kMaxErrorBytes / 2);
  what_len = std::min(what_len, kMaxErrorBytes / 2);
  const auto t = static_cast<std::uint32_t>(type_len);
  if (write_header(fd, kException, sizeof t + type_len + what_len) && write_all(fd, &t, sizeof t) &&
      write_all(fd, type, type_len)) {
    (void)write_all(fd, what, what_len);
  }
}

void flush_stdio() {
  try {
    std::cout.flush();
    std::cerr.flush();
  } catch (...) {
  }
  std::fflush(nullptr);
}

// A task that calls exit() in the child: its output is flushed, then _exit with its status,
// before any of the worker's atexit handlers or static destructors could run.
void exit_in_child(int status, void*) {
  flush_stdio();
  ::_exit(status);
}

/// Bytes of address space mapped now (/proc/self/statm's first figure), read with plain
/// syscalls; 0 if unknown.
std::uint64_t mapped_bytes() {
  const int fd = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[128];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  return std::strtoull(buf, nullptr, 10) * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

[[noreturn]] void child_main(int out_fd, pid_t parent, const IsolatedBody& body, std::uint64_t memory_cap) {
  // Dies with the worker (the signal comes when the forking thread ends, which waits for us).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(kParentGone);
  ::setpgid(0, 0);  // a group of its own: a kill takes what the task started too
  // The worker's handlers are not ours: its crash handler (the log capture) would restore and
  // drain the worker's descriptors; its SIGTERM handler would only set a flag in this copy.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  ::sigemptyset(&dfl.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS, SIGQUIT, SIGTERM, SIGINT, SIGHUP,
                  SIGUSR1, SIGUSR2, SIGXCPU, SIGXFSZ}) {
    ::sigaction(sig, &dfl, nullptr);
  }
  sigset_t none;
  ::sigemptyset(&none);
  ::pthread_sigmask(SIG_SETMASK, &none, nullptr);
  // The out-of-memory killer takes this child first (failure is fine: then it is as before).
  if (const int fd = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC); fd >= 0) {
    (void)write_all(fd, "1000", 4);
    ::close(fd);
  }
  if (memory_cap > 0) {
    // Beyond what the child inherits (the worker's mapped memory, its threads' stacks): a
    // bare cap under that would leave the task no room for its first allocation.
    rlimit lim{};
    ::getrlimit(RLIMIT_AS, &lim);
    rlim_t want = static_cast<rlim_t>(mapped_bytes() + memory_cap);
    if (lim.rlim_max != RLIM_INFINITY && want > lim.rlim_max) want = lim.rlim_max;
    lim.rlim_cur = lim.rlim_max = want;
    ::setrlimit(RLIMIT_AS, &lim);
  }
  // What other threads of the worker had buffered in stdio at the fork is theirs to write, not
  // the child's: flushed here too, it would come out twice.
  ::__fpurge(stdout);
  ::__fpurge(stderr);
  detail::set_in_isolated_child();
  ::on_exit(exit_in_child, nullptr);
  try {
    msgpack::sbuffer out(64);
    body(out);
    flush_stdio();
    if (write_header(out_fd, kResult, out.size())) (void)write_all(out_fd, out.data(), out.size());
  } catch (...) {
    flush_stdio();
    const std::type_info* type = abi::__cxa_current_exception_type();
    try {
      const std::string name = type != nullptr ? util::demangle(type->name()) : std::string("unknown");
      std::string what;
      try {
        throw;
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
        what = "(an exception that is not a std::exception)";
      }
      write_exception(out_fd, name.data(), name.size(), what.data(), what.size());
    } catch (...) {  // no memory left for the strings: the mangled name, no message
      const char* name = type != nullptr ? type->name() : "unknown";
      static const char kNoRoom[] = "(its message could not be copied: out of memory)";
      write_exception(out_fd, name, std::strlen(name), kNoRoom, sizeof kNoRoom - 1);
    }
  }
  ::_exit(0);
}

int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

/// True once the child has ended (not reaped: WNOWAIT keeps its pid ours).
bool has_ended(pid_t pid) {
  siginfo_t info{};
  while (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
    if (errno != EINTR) return true;  // ECHILD: nothing to wait for
  }
  return info.si_pid != 0;
}

/// Reads the child's message as it comes: the header, then straight into its final buffer.
class Reader {
 public:
  /// Where the next bytes go and how many are wanted (0: complete or malformed).
  std::pair<char*, std::size_t> space() {
    if (header_got_ < kHeaderBytes) return {header_ + header_got_, kHeaderBytes - header_got_};
    if (bad_) return {nullptr, 0};
    return {body_ + body_got_, size_ - body_got_};
  }
  /// `n` bytes were read into space(). May throw std::bad_alloc (the result's buffer).
  void advance(std::size_t n) {
    if (header_got_ < kHeaderBytes) {
      header_got_ += n;
      if (header_got_ < kHeaderBytes) return;
      std::memcpy(&size_, header_ + 1, sizeof size_);
      if (header_[0] == kResult) {
        result_ = net::Buffer::allocate(size_);
        body_ = result_->mutable_data();
      } else if (header_[0] == kException && size_ >= sizeof(std::uint32_t) && size_ <= kMaxErrorBytes + 4) {
        error_.resize(size_);
        body_ = error_.data();
      } else {
        bad_ = true;
      }
      return;
    }
    body_got_ += n;
  }
  bool complete() const { return header_got_ == kHeaderBytes && !bad_ && body_got_ == size_; }
  bool started() const { return header_got_ > 0; }

  void into(IsolatedOutcome& o) {
    if (header_[0] == kResult) {
      o.kind = IsolatedOutcome::Kind::result;
      o.result = std::move(result_);
      return;
    }
    std::uint32_t t = 0;
    std::memcpy(&t, error_.data(), sizeof t);
    t = std::min<std::uint32_t>(t, static_cast<std::uint32_t>(error_.size() - sizeof t));
    o.kind = IsolatedOutcome::Kind::exception;
    o.type = error_.substr(sizeof t, t);
    o.message = error_.substr(sizeof t + t);
  }

 private:
  char header_[kHeaderBytes] = {};
  std::size_t header_got_ = 0;
  std::uint64_t size_ = 0;
  bool bad_ = false;
  std::unique_ptr<net::Buffer> result_;
  std::string error_;
  char* body_ = nullptr;
  std::size_t body_got_ = 0;
};

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

void IsolatedChild::kill_locked() {
  kill_requested_ = true;
  if (pid_ > 0 && !reaped_) {  // not reaped: the pid (and its group) cannot be anyone else's yet
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);  // before it made its group
  }
}

void IsolatedChild::kill() {
  std::lock_guard lock(mu_);
  kill_locked();
}

void IsolatedChild::kill(std::string reason) {
  std::lock_guard lock(mu_);
  if (kill_reason_.empty()) kill_reason_ = std::move(reason);
  kill_locked();
}

bool IsolatedChild::kill_requested() const {
  std::lock_guard lock(mu_);
  return kill_requested_;
}

pid_t IsolatedChild::pid() const {
  std::lock_guard lock(mu_);
  return pid_;
}

std::string IsolatedOutcome::death() const {
  if (signal != 0) {
    std::string s = "was killed by signal " + std::to_string(signal) + " (" + signal_name(signal) + ")";
    if (core_dumped) s += ", core dumped";
    if (signal == SIGKILL && !killed) s += " from outside the worker (the out-of-memory killer?)";
    return s;
  }
  if (exit_code == kParentGone) return "found its worker gone before it started";
  return "exited with code " + std::to_string(exit_code) + " without a result";
}

IsolatedOutcome run_isolated(const IsolatedBody& body, std::uint64_t memory_cap, IsolatedChild& child) {
  IsolatedOutcome o;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    o.message = std::string("cannot make a pipe for an isolated task: ") + std::strerror(errno);
    return o;
  }
  Fd in{fds[0]};
  const auto start = std::chrono::steady_clock::now();
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[1]);
    o.message = std::string("cannot fork a child for an isolated task: ") + std::strerror(errno);
    return o;
  }
  if (pid == 0) {
    ::close(fds[0]);
    child_main(fds[1], parent, body, memory_cap);
  }
  ::close(fds[1]);
  ::setpgid(pid, pid);  // here too: a kill may come before the child got to it
  o.pid = pid;
  {
    std::lock_guard lock(g_children_mu);
    g_children.insert(&child);
  }
  {
    std::lock_guard lock(child.mu_);
    child.pid_ = pid;
    if (child.kill_requested_) child.kill_locked();  // asked before it existed
  }

  // The pipe until its message is whole or it closes, and the child's end (a process the task
  // started may hold the pipe open after the child died). Nothing here wakes without a reason,
  // except on kernels without pidfds, which look at the child once a second.
  Fd pidfd{open_pidfd(pid)};
  (void)::fcntl(in.fd, F_SETFL, ::fcntl(in.fd, F_GETFL) | O_NONBLOCK);
  Reader reader;
  bool eof = false, ended = false, no_room = false;
  while (true) {
    while (!eof && !no_room) {  // what the pipe holds now
      auto [dst, want] = reader.space();
      if (want == 0) break;
      const ssize_t k = ::read(in.fd, dst, std::min<std::size_t>(want, 1u << 20));
      if (k > 0) {
        try {
          reader.advance(static_cast<std::size_t>(k));
        } catch (const std::bad_alloc&) {
          no_room = true;
        }
      } else if (k == 0) {
        eof = true;
      } else if (errno != EINTR) {
        if (errno != EAGAIN) eof = true;
        break;
      }
    }
    if (eof || no_room || reader.complete() || reader.space().second == 0 || ended) break;
    pollfd p[2] = {{in.fd, POLLIN, 0}, {pidfd.fd, POLLIN, 0}};
    const int n = ::poll(p, pidfd.fd >= 0 ? 2 : 1, pidfd.fd >= 0 ? -1 : 1000);
    if (n < 0 && errno != EINTR) break;
    ended = pidfd.fd >= 0 ? (n > 0 && p[1].revents != 0) : (n == 0 && has_ended(pid));
  }
  if (no_room) child.kill();  // the worker cannot hold the result: nothing to wait for

  // Its end (whole message or not, it is about to _exit), then reaped: never a zombie.
  siginfo_t info{};
  while (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) != 0 && errno == EINTR) {
  }
  int status = 0;
  {
    std::lock_guard lock(child.mu_);
    ::kill(-pid, SIGKILL);  // what the task started and left behind goes with it
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    child.reaped_ = true;
    o.killed = child.kill_requested_;
    o.kill_reason = child.kill_reason_;
  }
  {
    std::lock_guard lock(g_children_mu);
    g_children.erase(&child);
  }
  o.duration_us = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count());
  if (no_room) {
    o.kind = IsolatedOutcome::Kind::exception;
    o.type = "std::bad_alloc";
    o.message = "the worker could not allocate the isolated task's result in memory";
    return o;
  }
  if (reader.complete()) {
    reader.into(o);
    return o;
  }
  o.kind = IsolatedOutcome::Kind::died;
  if (WIFSIGNALED(status)) {
    o.signal = WTERMSIG(status);
    o.core_dumped = WCOREDUMP(status);
  } else if (WIFEXITED(status)) {
    o.exit_code = WEXITSTATUS(status);
  }
  return o;
}

void kill_isolated_children() {
  std::lock_guard lock(g_children_mu);
  for (IsolatedChild* c : g_children) c->kill();
}

pid_t kill_largest_isolated_child(const std::function<std::string(std::uint64_t rss)>& reason) {
  std::lock_guard lock(g_children_mu);
  IsolatedChild* largest = nullptr;
  std::uint64_t most = 0;
  for (IsolatedChild* c : g_children) {
    const pid_t pid = c->pid();
    if (pid <= 0 || c->kill_requested()) continue;
    const std::uint64_t rss = process::tree_rss_bytes(pid);
    if (largest == nullptr || rss > most) {
      largest = c;
      most = rss;
    }
  }
  if (largest == nullptr) return 0;
  largest->kill(reason(most));
  return largest->pid();
}

std::string signal_name(int sig) {
  switch (sig) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGCHLD: return "SIGCHLD";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    case SIGSYS: return "SIGSYS";
    default: return "signal " + std::to_string(sig);
  }
}

}  // namespace herd::worker
