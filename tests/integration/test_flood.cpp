// A stranger on the login node floods every port a scheduler listens on (its ZeroMQ port, its
// control links' port, its dashboard) with idle connections, ~500 a second on each, while a
// client runs its work, the scheduler under a limit of 4,096 descriptors: nothing is lost,
// every status is answered within 100 ms, and the scheduler's descriptors and log stay bounded.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <filesystem>
#include <numeric>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <herd/herd.hpp>

#include "common/process.hpp"
#include "support/process_util.hpp"

using namespace std::chrono_literals;
using herd::testing::eventually;
using herd::testing::read_file;

namespace {

using Clock = std::chrono::steady_clock;

std::int64_t flood_square(std::int64_t x) { return x * x; }
HERD_TASK(flood_square);

/// The TCP ports process `pid` listens on (ss sees every process's).
std::set<int> listening_ports(int pid) {
  const std::string out = herd::testing::run_command("ss -Hltnp 2>/dev/null");
  std::set<int> ports;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("pid=" + std::to_string(pid) + ",") == std::string::npos) continue;
    std::smatch m;
    if (std::regex_search(line, m, std::regex(R"(\s\S+:(\d+)\s+\S+:\*)"))) ports.insert(std::stoi(m[1]));
  }
  return ports;
}

std::size_t open_descriptors(int pid) {
  std::size_t n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}

/// Opens ~`per_second` idle connections a second to 127.0.0.1:`port` until `stop`, each held
/// until the server closes it or `hold` passes. Counts what it opened.
void flood(int port, int per_second, std::chrono::milliseconds hold, const std::atomic<bool>& stop,
           std::atomic<std::uint64_t>& opened) {
  struct Held {
    int fd;
    Clock::time_point until;
  };
  std::deque<Held> held;
  const auto gap = std::chrono::microseconds(1000000 / per_second);
  auto next = Clock::now();
  std::vector<pollfd> fds;
  while (!stop) {
    const auto now = Clock::now();
    while (next <= now) {
      next += gap;
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) continue;
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(static_cast<std::uint16_t>(port));
      (void)::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);  // EINPROGRESS
      held.push_back({fd, now + hold});
      ++opened;
    }
    // Let go of those past their time, and of those the server closed.
    while (!held.empty() && held.front().until <= now) {
      ::close(held.front().fd);
      held.pop_front();
    }
    fds.clear();
    for (const Held& h : held) fds.push_back({h.fd, POLLIN, 0});
    (void)::poll(fds.data(), fds.size(), 1);
    std::set<int> gone;
    for (const pollfd& p : fds) {
      if ((p.revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      char buf[256];
      if (::recv(p.fd, buf, sizeof buf, MSG_DONTWAIT) <= 0) gone.insert(p.fd);
    }
    if (!gone.empty()) {
      std::deque<Held> kept;
      for (const Held& h : held) {
        if (gone.count(h.fd) != 0) ::close(h.fd);
        else kept.push_back(h);
      }
      held.swap(kept);
    }
  }
  for (const Held& h : held) ::close(h.fd);
}

}  // namespace

TEST_CASE("Flood.IdleStrangersOnEveryPort.NothingLostStatusAnsweredDescriptorsAndLogBounded" * doctest::timeout(300)) {
  // This process holds the strangers' ends: thousands of descriptors.
  rlimit lim{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &lim) == 0);
  lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, 65536);
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &lim) == 0);

  const std::string dir = "/tmp/herd-flood-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string log = dir + "/scheduler.log";
  // The scheduler under a limit of 4,096 descriptors, as a login node's default soft limit.
  const auto [sched, address] = herd::testing::start_scheduler(
      {"/usr/bin/prlimit", "--nofile=4096:4096", "--", HERD_CLI_PATH, "scheduler", "--listen", "tcp://127.0.0.1:*",
       "--local-workers", "2", "--worker-exe", herd::process::self_executable(), "--log-dir", dir},
      log);
  // prlimit execs the scheduler in its own process: the pid is the scheduler's.
  herd::Client client{address};
  client.wait_for_workers(2, 30s);
  herd::Client watcher{address};  // connected before the flood: status from here
  std::set<int> ports;
  REQUIRE(eventually([&] {
    ports = listening_ports(sched);
    return ports.size() >= 3;  // the ZeroMQ port, the control links' port, the dashboard's
  }, 10s));
  const std::size_t fds_before = open_descriptors(sched);
  const auto log_before = std::filesystem::file_size(log);

  std::atomic<bool> stop{false};
  std::vector<std::atomic<std::uint64_t>> opened(ports.size());
  std::vector<std::thread> flooders;
  std::size_t k = 0;
  for (int port : ports) {
    flooders.emplace_back([&, port, k] { flood(port, 500, 10s, stop, opened[k]); });
    ++k;
  }
  // Meanwhile: status every 50 ms, the descriptors every 250 ms, and the work.
  std::vector<double> status_ms;
  std::size_t fds_max = 0;
  std::atomic<bool> work_done{false};
  std::thread observer([&] {
    auto last_fd_look = Clock::now();
    while (!work_done) {
      const auto t0 = Clock::now();
      const auto st = watcher.status();
      status_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      CHECK(st.workers.size() == 2);
      if (Clock::now() - last_fd_look >= 250ms) {
        last_fd_look = Clock::now();
        fds_max = std::max(fds_max, open_descriptors(sched));
      }
      std::this_thread::sleep_for(50ms);
    }
  });
  const auto flood_start = Clock::now();
  std::uint64_t tasks = 0;
  while (Clock::now() - flood_start < 20s) {
    std::vector<std::int64_t> xs(2000);
    std::iota(xs.begin(), xs.end(), static_cast<std::int64_t>(tasks));
    const auto values = client.gather(client.map(flood_square, xs));
    REQUIRE(values.size() == xs.size());
    for (std::size_t i = 0; i < xs.size(); ++i) REQUIRE(values[i] == xs[i] * xs[i]);
    tasks += xs.size();
    // A steady stream of work, not the most the machine can do: the bound on status is about
    // the strangers, not about a scheduler with no core left (the test also runs under CPU hogs).
    std::this_thread::sleep_for(20ms);
  }
  work_done = true;
  observer.join();
  stop = true;
  for (auto& t : flooders) t.join();

  std::uint64_t strangers = 0;
  for (auto& o : opened) strangers += o;
  const double worst = *std::max_element(status_ms.begin(), status_ms.end());
  const auto log_growth = std::filesystem::file_size(log) - log_before;
  MESSAGE("strangers: " << strangers << " connections; tasks: " << tasks << "; status: " << status_ms.size()
                        << " asked, worst " << worst << " ms; scheduler descriptors: " << fds_before << " before, "
                        << fds_max << " at most; log: +" << log_growth << " bytes");
  CHECK(strangers > 3 * 500 * 15);  // the flood happened, on every port
  CHECK(tasks >= 2000);
  CHECK(status_ms.size() > 100);
  CHECK(worst < 100.0);
  CHECK(fds_max < 3000);       // under the limit, with room for workers, clients, journal, sbatch
  CHECK(log_growth < 64 * 1024);  // kilobytes, not megabytes

  // After it: a new client gets in and is served.
  {
    herd::Client late{address};
    CHECK(late.submit(flood_square, std::int64_t{12}).result() == 144);
  }
  ::kill(sched, SIGTERM);
  int status = 0;
  ::waitpid(sched, &status, 0);
  std::filesystem::remove_all(dir);
}
