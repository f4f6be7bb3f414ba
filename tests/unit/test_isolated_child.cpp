// The child process of an isolated task (src/worker/isolated.*) on its own, without a worker:
// what crosses the pipe (a result of any size, an exception's type and message), how a child's
// death is told (signal, exit code), kill() before and during the run, the memory cap, a
// process the task started that keeps the pipe open, and that every child is reaped.
//
// Under ASan/TSan the memory cap case is skipped: their shadow memory needs more address space
// than any cap leaves.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "task/this_task.hpp"
#include "worker/isolated.hpp"

#include <herd/error.hpp>
#include <herd/remote.hpp>

using herd::worker::IsolatedChild;
using herd::worker::IsolatedOutcome;
using herd::worker::run_isolated;
using Kind = IsolatedOutcome::Kind;
using namespace std::chrono_literals;

namespace {
/// No child of this process is left, running or zombie.
bool no_children() {
  errno = 0;
  return ::waitpid(-1, nullptr, WNOHANG) == -1 && errno == ECHILD;
}

template <typename T>
T unpack_result(const IsolatedOutcome& o) {
  REQUIRE(o.kind == Kind::result);
  REQUIRE(o.result != nullptr);
  msgpack::object_handle h = msgpack::unpack(o.result->data(), o.result->size());
  return h.get().as<T>();
}

bool gone_within(pid_t pid, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
}  // namespace

TEST_CASE("IsolatedChild.ResultCrossesThePipe" * doctest::timeout(90)) {
  IsolatedChild child;
  const pid_t me = ::getpid();
  auto o = run_isolated([](msgpack::sbuffer& out) { msgpack::pack(out, std::make_pair(41 + 1, ::getpid())); }, 0,
                        child);
  const auto [v, pid] = unpack_result<std::pair<int, int>>(o);
  CHECK(v == 42);
  CHECK(pid == o.pid);  // it ran in the child
  CHECK(pid != me);
  CHECK_FALSE(o.killed);
  CHECK(no_children());

  // 48 MiB (one msgpack bin: the pipe is what is tested, not msgpack): far past a pipe's
  // buffer, read as it is written.
  IsolatedChild big;
  auto b = run_isolated(
      [](msgpack::sbuffer& out) {
        std::vector<char> w(48u << 20);
        for (std::size_t i = 0; i < w.size(); i += 4096) w[i] = static_cast<char>(i >> 12);
        w.back() = 'z';
        msgpack::pack(out, w);
      },
      0, big);
  const auto v2 = unpack_result<std::vector<char>>(b);
  REQUIRE(v2.size() == (48u << 20));
  CHECK(v2[5 * 4096] == 5);
  CHECK(v2[5 * 4096 + 1] == 0);
  CHECK(v2.back() == 'z');
  CHECK(no_children());
}

TEST_CASE("IsolatedChild.ExceptionTypeAndMessage" * doctest::timeout(30)) {
  IsolatedChild child;
  auto o = run_isolated([](msgpack::sbuffer&) { throw std::invalid_argument("x must be even, got 3"); }, 0, child);
  REQUIRE(o.kind == Kind::exception);
  CHECK(o.type == "std::invalid_argument");
  CHECK(o.message == "x must be even, got 3");
  IsolatedChild other;
  auto n = run_isolated([](msgpack::sbuffer&) { throw 7; }, 0, other);
  REQUIRE(n.kind == Kind::exception);
  CHECK(n.type == "int");
  CHECK(n.message == "(an exception that is not a std::exception)");
  CHECK(no_children());
}

TEST_CASE("IsolatedChild.DeathsAreNamed" * doctest::timeout(30)) {
  IsolatedChild segv;
  auto s = run_isolated([](msgpack::sbuffer&) { std::raise(SIGSEGV); }, 0, segv);
  REQUIRE(s.kind == Kind::died);
  CHECK(s.signal == SIGSEGV);
  CHECK(s.death().find("signal 11 (SIGSEGV)") != std::string::npos);
  CHECK_FALSE(s.killed);

  IsolatedChild abrt;
  auto a = run_isolated([](msgpack::sbuffer&) { std::abort(); }, 0, abrt);
  REQUIRE(a.kind == Kind::died);
  CHECK(a.signal == SIGABRT);
  CHECK(a.death().find("SIGABRT") != std::string::npos);

  IsolatedChild exits;
  auto e = run_isolated([](msgpack::sbuffer&) { std::exit(3); }, 0, exits);
  REQUIRE(e.kind == Kind::died);
  CHECK(e.signal == 0);
  CHECK(e.exit_code == 3);
  CHECK(e.death() == "exited with code 3 without a result");

  IsolatedChild quiet;  // _exit(0) before writing: no result is not a result
  auto q = run_isolated([](msgpack::sbuffer&) { ::_exit(0); }, 0, quiet);
  REQUIRE(q.kind == Kind::died);
  CHECK(q.exit_code == 0);
  CHECK(herd::worker::signal_name(SIGKILL) == "SIGKILL");
  CHECK(herd::worker::signal_name(40) == "signal 40");
  CHECK(no_children());
}

TEST_CASE("IsolatedChild.KillDuringAndBefore" * doctest::timeout(30)) {
  IsolatedChild child;
  std::atomic<pid_t> seen{0};
  std::thread killer([&] {
    while (child.pid() == 0) std::this_thread::sleep_for(1ms);
    seen = child.pid();
    std::this_thread::sleep_for(100ms);
    child.kill();
    child.kill();  // twice is harmless
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto o = run_isolated(
      [](msgpack::sbuffer&) {
        for (;;) {
        }
      },
      0, child);
  killer.join();
  const auto took = std::chrono::steady_clock::now() - t0;
  REQUIRE(o.kind == Kind::died);
  CHECK(o.signal == SIGKILL);
  CHECK(o.killed);
  CHECK(o.pid == seen.load());
  CHECK(took < 5s);
  CHECK(::kill(o.pid, 0) == -1);  // reaped: the pid is not ours any more
  CHECK(no_children());
  child.kill();  // after the reap: does nothing (the pid may be someone else's by now)

  IsolatedChild early;
  early.kill();  // before the fork: the child dies as soon as it exists
  auto e = run_isolated([](msgpack::sbuffer&) { std::this_thread::sleep_for(30s); }, 0, early);
  REQUIRE(e.kind == Kind::died);
  CHECK(e.signal == SIGKILL);
  CHECK(e.killed);
  CHECK(e.duration_us < 5'000'000u);
  CHECK(no_children());
}

TEST_CASE("IsolatedChild.AProcessItStartedDoesNotHoldItUp" * doctest::timeout(30)) {
  // The task forks a process that keeps the pipe's write end, then crashes: the parent must
  // not wait for that process to close it, and it goes with the child's process group.
  IsolatedChild child;
  const auto t0 = std::chrono::steady_clock::now();
  int fds[2];
  REQUIRE(::pipe(fds) == 0);  // the grandchild's pid comes back through this one
  auto o = run_isolated(
      [&](msgpack::sbuffer&) {
        const pid_t g = ::fork();
        if (g == 0) {
          ::sleep(30);
          ::_exit(0);
        }
        (void)!::write(fds[1], &g, sizeof g);
        std::raise(SIGSEGV);
      },
      0, child);
  ::close(fds[1]);
  pid_t grandchild = 0;
  REQUIRE(::read(fds[0], &grandchild, sizeof grandchild) == sizeof grandchild);
  ::close(fds[0]);
  MESSAGE("run_isolated returned after " << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s");
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  REQUIRE(o.kind == Kind::died);
  CHECK(o.signal == SIGSEGV);
  CHECK(gone_within(grandchild, 5000ms));
  CHECK(no_children());
}

TEST_CASE("IsolatedChild.MemoryCap" * doctest::timeout(90)) {
  if (kSanitized) return;
  IsolatedChild child;
  const std::uint64_t cap = 256ull << 20;
  auto o = run_isolated(
      [](msgpack::sbuffer& out) {
        std::vector<char> v(2ull << 30);
        for (std::size_t i = 0; i < v.size(); i += 4096) v[i] = 1;
        msgpack::pack(out, v.size());
      },
      cap, child);
  REQUIRE(o.kind == Kind::exception);
  CHECK(o.type == "std::bad_alloc");
  // Within the cap the task has its room.
  IsolatedChild fits;
  auto f = run_isolated(
      [](msgpack::sbuffer& out) {
        std::vector<char> v(16u << 20, 1);
        msgpack::pack(out, v.size());
      },
      cap, fits);
  CHECK(unpack_result<std::size_t>(f) == (16u << 20));
  CHECK(no_children());
}

TEST_CASE("IsolatedChild.NestedCallsThrowInTheChild" * doctest::timeout(30)) {
  IsolatedChild child;
  auto o = run_isolated([](msgpack::sbuffer&) { herd::secede(); }, 0, child);
  REQUIRE(o.kind == Kind::exception);
  CHECK(o.type == "herd::Error");
  CHECK(o.message.find("herd::secede() is not supported in an isolated task") != std::string::npos);
  CHECK_FALSE(herd::detail::in_isolated_child());  // only the child's copy was marked
}

TEST_CASE("IsolatedChild.KillAllChildren" * doctest::timeout(30)) {
  IsolatedChild a;
  std::thread runner([&] {
    auto o = run_isolated([](msgpack::sbuffer&) { std::this_thread::sleep_for(30s); }, 0, a);
    CHECK(o.signal == SIGKILL);
  });
  while (a.pid() == 0) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(50ms);
  herd::worker::kill_isolated_children();
  runner.join();
  CHECK(no_children());
}
