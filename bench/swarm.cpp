// herd_swarm: thousands of real workers on a real scheduler, from a few processes.
//
// A peer is a full protocol peer of the scheduler, as a worker is: a CURVE-authenticated
// DEALER, its hello, the control link it is offered (net::WorkerChannels: the handshake, the
// hand-over), heartbeats, and the tasks it is given, run through herd's function registry (the
// no-op registered here), their results reported as a worker reports them. What it does not
// have is what no-op tasks do not need: executor threads, a data port (results ride inline),
// spilling, logs. Many peers share one process and one poll loop, so N workers cost the
// machine N sockets, not N processes, while the scheduler sees N workers.
//
//   herd_swarm run --workers 1000,5000,10000 [--processes 4] [--tasks 200000] [--storm]
//       starts a scheduler (`herd scheduler`, no local workers), the swarm processes, a client;
//       per N prints one JSON line: time for all to join, the scheduler's RSS and descriptors
//       per worker, map + gather tasks/s with N connected (and with 10, the same way, for the
//       ratio), `status` latency during the map (p50, max), workers lost (heartbeat misses),
//       and with --storm half the workers killed at once mid-map (every value checked) and
//       their rejoining.
//   herd_swarm run --small        a smoke test: 40 workers, 2 processes, 2,000 tasks, the storm
//   herd_swarm peers --scheduler tcp://HOST:PORT --workers N --name PREFIX
//       one swarm process (what `run` starts): N peers until killed or told to stop.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <herd/herd.hpp>
#include <zmq.hpp>

#include "common/config.hpp"
#include "common/process.hpp"
#include "common/security.hpp"
#include "common/util.hpp"
#include "herd/detail/scratch_zone.hpp"
#include "net/channel.hpp"
#include "net/interfaces.hpp"
#include "protocol/codec.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using herd::protocol::MessageType;

std::int64_t swarm_noop(std::int64_t x) { return x; }
HERD_TASK(swarm_noop);

std::atomic<bool> g_stop{false};

// ---------------------------------------------------------------------------------------------
// One process of peers.

struct Peer {
  std::string name;
  zmq::socket_t dealer;
  std::unique_ptr<herd::net::WorkerChannels> channels;
  bool joined = false, gone = false;
  Clock::time_point last_heartbeat{};
  Clock::time_point last_heard{};
  herd::protocol::TaskResultsEvent results;
  Peer(zmq::context_t& ctx, std::string n) : name(std::move(n)), dealer(ctx, zmq::socket_type::dealer) {}
};

/// Runs one task as a worker does (the registry's invoker over its arguments); a failed one
/// reports the exception, as a worker's would.
herd::protocol::TaskResult run(const herd::protocol::ExecuteTask& task, const std::string& worker) {
  herd::protocol::TaskResult r;
  r.id = task.id;
  const auto start = Clock::now();
  try {
    const herd::detail::FunctionEntry* entry = herd::detail::find_function(task.function);
    if (entry == nullptr) throw std::runtime_error("no function " + task.function + " in this swarm");
    if (!task.refs.empty()) throw std::runtime_error("a swarm peer takes no inputs from other tasks");
    herd::detail::ScratchZone zone;
    const msgpack::object args = zone.unpack(task.args.data(), task.args.size(), false);
    msgpack::sbuffer out(64);
    entry->invoke(args, out);
    r.ok = true;
    r.nbytes = out.size();
    r.inline_data.assign(out.data(), out.data() + out.size());
  } catch (const std::exception& e) {
    r.ok = false;
    r.error = {"std::runtime_error", e.what(), task.key, worker};
  }
  r.duration_us = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count());
  return r;
}

int peers_main(const std::string& scheduler, int n, const std::string& prefix) {
  ::signal(SIGTERM, [](int) { g_stop = true; });
  ::signal(SIGINT, [](int) { g_stop = true; });
  ::signal(SIGPIPE, SIG_IGN);
  zmq::context_t ctx(1);
  ctx.set(zmq::ctxopt::max_sockets, n + 64);
  const herd::security::Auth auth = herd::security::Auth::for_client();
  const std::string host = herd::net::endpoint_host(scheduler);
  const herd::Config config = herd::Config::from_env();
  std::vector<std::unique_ptr<Peer>> peers;
  peers.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    auto p = std::make_unique<Peer>(ctx, prefix + "-" + std::to_string(i));
    p->dealer.set(zmq::sockopt::linger, 0);
    auth.client(p->dealer);
    p->dealer.connect(scheduler);
    p->channels = std::make_unique<herd::net::WorkerChannels>(p->dealer, host);
    herd::protocol::HelloRequest hello;
    hello.role = static_cast<std::uint8_t>(herd::protocol::Role::worker);
    hello.name = p->name;
    hello.host = herd::util::hostname();
    hello.pid = ::getpid();
    hello.nthreads = 1;
    hello.data_address = "tcp://127.0.0.1:9";  // results ride inline: nobody fetches here
    hello.links = config.links != 0;
    herd::protocol::send<MessageType::hello_request>(p->dealer, "", hello);
    p->last_heard = Clock::now();
    peers.push_back(std::move(p));
  }
  std::vector<zmq::pollitem_t> items;
  std::vector<std::size_t> first(peers.size());
  std::vector<herd::protocol::Received> in;
  std::uint32_t heartbeat_ms = config.heartbeat_ms, timeout_ms = config.timeout_ms;
  while (!g_stop) {
    items.clear();
    for (std::size_t i = 0; i < peers.size(); ++i) {
      if (!peers[i]->gone) first[i] = peers[i]->channels->add_poll_items(items);
    }
    try {
      herd::protocol::poll(items, std::chrono::milliseconds(20));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
    const auto now = Clock::now();
    std::size_t live = 0;
    for (std::size_t i = 0; i < peers.size(); ++i) {
      Peer& p = *peers[i];
      if (p.gone) continue;
      ++live;
      in.clear();
      const bool ok = p.channels->receive(items, first[i], in) && p.channels->expire(now);
      if (!in.empty()) p.last_heard = now;
      for (auto& msg : in) {
        std::string error;
        const auto type = herd::protocol::parse_header(msg, error);
        if (!type) continue;
        switch (*type) {
          case MessageType::hello_reply: {
            herd::protocol::HelloReply reply;
            if (!herd::protocol::decode<MessageType::hello_reply>(msg, reply, error) || !reply.ok) {
              std::cerr << "herd_swarm: " << p.name << " refused: " << (error.empty() ? reply.error : error) << "\n";
              p.gone = true;
              break;
            }
            heartbeat_ms = reply.heartbeat_ms;
            timeout_ms = reply.timeout_ms;
            p.joined = true;
            if (reply.link_port != 0) {
              p.channels->start_link(static_cast<std::uint16_t>(reply.link_port), {reply.link_offer, reply.link_secret},
                                     auth.keys.has_value(), now + std::chrono::milliseconds(reply.timeout_ms) + std::chrono::seconds(5));
            }
            break;
          }
          case MessageType::execute_tasks: {
            herd::protocol::ExecuteTasksEvent ev;
            if (!herd::protocol::decode<MessageType::execute_tasks>(msg, ev, error)) break;
            for (const auto& t : ev.tasks) p.results.results.push_back(run(t, p.name));
            break;
          }
          case MessageType::cancel_tasks:
          case MessageType::abandon_tasks:
            break;  // every task ran at once: nothing unstarted to hand back
          case MessageType::shutdown:
            p.gone = true;
            break;
          default:
            break;  // free_keys, peers_gone, heartbeats, retiring: nothing a no-op peer keeps
        }
      }
      if (!ok) p.gone = true;
      if (p.gone) continue;
      if (!p.results.results.empty()) {
        herd::protocol::send<MessageType::task_results>(*p.channels, "", p.results);
        p.results.results.clear();
      }
      if (p.joined && now - p.last_heartbeat >= std::chrono::milliseconds(heartbeat_ms)) {
        p.last_heartbeat = now;
        herd::protocol::send<MessageType::heartbeat>(*p.channels, "", {});
      }
      if (now - p.last_heard > std::chrono::milliseconds(timeout_ms)) p.gone = true;  // the scheduler went
    }
    if (live == 0) break;
  }
  for (auto& p : peers) {
    if (!p->gone && p->joined) herd::protocol::send<MessageType::goodbye>(*p->channels, "", {"swarm stopping"});
    p->channels->drain(std::chrono::milliseconds(100));
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// The benchmark driver.

std::uint64_t rss_bytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

std::size_t descriptors(pid_t pid) {
  std::size_t n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

/// Raises this process's descriptor limit (its children inherit it) to `need`; a clear error
/// when the hard limit is lower.
void raise_descriptors(std::uint64_t need) {
  rlimit lim{};
  ::getrlimit(RLIMIT_NOFILE, &lim);
  if (lim.rlim_cur >= need) return;
  if (lim.rlim_max < need) {
    throw std::runtime_error("herd_swarm: " + std::to_string(need) + " descriptors are needed, but the hard limit is " +
                             std::to_string(lim.rlim_max) +
                             " (ulimit -Hn): raise it (/etc/security/limits.conf, or run as root) or ask for fewer workers");
  }
  lim.rlim_cur = need;
  if (::setrlimit(RLIMIT_NOFILE, &lim) != 0) throw std::runtime_error(std::string("herd_swarm: setrlimit: ") + std::strerror(errno));
}

struct Swarm {
  std::vector<pid_t> processes;
  std::vector<int> sizes;
  std::string address, prefix, dir;
  void start_process(std::size_t k) {
    herd::process::SpawnOptions spawn;
    spawn.argv = {herd::process::self_executable(), "peers", "--scheduler", address, "--workers",
                  std::to_string(sizes[k]), "--name", prefix + std::to_string(k)};
    spawn.stdout_path = dir + "/swarm-" + std::to_string(k) + ".log";
    spawn.death_signal = SIGKILL;
    processes[k] = herd::process::spawn(spawn);
  }
  Swarm(const std::string& a, int workers, int nproc, std::string p, std::string d)
      : address(a), prefix(std::move(p)), dir(std::move(d)) {
    for (int k = 0; k < nproc; ++k) sizes.push_back(workers / nproc + (k < workers % nproc ? 1 : 0));
    processes.resize(sizes.size(), 0);
    for (std::size_t k = 0; k < sizes.size(); ++k) start_process(k);
  }
  void kill(std::size_t k) {
    if (processes[k] <= 0) return;
    ::kill(processes[k], SIGKILL);
    ::waitpid(processes[k], nullptr, 0);
    processes[k] = 0;
  }
  ~Swarm() {
    for (std::size_t k = 0; k < processes.size(); ++k) {
      if (processes[k] > 0) ::kill(processes[k], SIGTERM);
    }
    for (pid_t p : processes) {
      if (p > 0) ::waitpid(p, nullptr, 0);
    }
  }
};

/// Waits until the scheduler counts `n` workers; how long it took (or throws after `limit`).
double wait_workers(herd::Client& client, std::size_t n, std::chrono::seconds limit) {
  const auto t0 = Clock::now();
  while (client.status().workers.size() < n) {
    if (Clock::now() - t0 > limit) {
      throw std::runtime_error("herd_swarm: only " + std::to_string(client.status().workers.size()) + " of " +
                               std::to_string(n) + " workers joined within " + std::to_string(limit.count()) + " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// map + gather of `tasks` no-ops, every value checked; tasks per second.
double map_gather(herd::Client& client, std::int64_t tasks) {
  std::vector<std::int64_t> xs(static_cast<std::size_t>(tasks));
  std::iota(xs.begin(), xs.end(), std::int64_t{0});
  const auto t0 = Clock::now();
  const auto values = client.gather(client.map(swarm_noop, xs));
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (values != xs) throw std::runtime_error("herd_swarm: a map's values came back wrong");
  return static_cast<double>(tasks) / s;
}

struct StatusProbe {
  herd::Client& client;
  std::vector<double> ms;
  std::atomic<bool> stop{false};
  std::thread thread;
  explicit StatusProbe(herd::Client& c) : client(c) {
    thread = std::thread([this] {
      while (!stop) {
        const auto t0 = Clock::now();
        (void)client.status();
        ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
  }
  std::pair<double, double> finish() {
    stop = true;
    thread.join();
    if (ms.empty()) return {0, 0};
    std::vector<double> s = ms;
    std::sort(s.begin(), s.end());
    return {s[s.size() / 2], s.back()};
  }
};

int run_main(std::vector<int> sizes, int nproc, std::int64_t tasks, bool storm, int base_workers) {
  ::signal(SIGPIPE, SIG_IGN);
  const int largest = *std::max_element(sizes.begin(), sizes.end());
  // Each peer: its DEALER (a socket and ZeroMQ's mailbox) and its link, in a swarm process; a
  // ZeroMQ connection and a link in the scheduler.
  raise_descriptors(static_cast<std::uint64_t>(largest) * 4 + 4096);
  const std::string dir = "/tmp/herd-swarm-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  for (const int n : sizes) {
    const std::string log = dir + "/scheduler-" + std::to_string(n) + ".log";
    herd::process::SpawnOptions spawn;
    spawn.argv = {HERD_CLI_PATH, "scheduler", "--listen", "tcp://127.0.0.1:*", "--no-dashboard"};
    spawn.env["HERD_LOG_LEVEL"] = "info";
    spawn.stdout_path = log;
    spawn.death_signal = SIGKILL;
    const pid_t sched = herd::process::spawn(spawn);
    std::string address;
    for (auto t0 = Clock::now(); address.empty(); std::this_thread::sleep_for(std::chrono::milliseconds(20))) {
      const std::string text = read_file(log);
      if (const auto at = text.find("listening at "); at != std::string::npos) {
        address = text.substr(at + 13, text.find('\n', at) - at - 13);
      }
      if (Clock::now() - t0 > std::chrono::seconds(20)) throw std::runtime_error("herd_swarm: the scheduler did not start: " + text);
    }
    herd::Client client{address};
    herd::Client watcher{address};
    const std::uint64_t rss0 = rss_bytes(sched);
    const std::size_t fds0 = descriptors(sched);
    // The baseline: the same swarm's way with `base_workers` workers.
    double base_rate = 0;
    {
      Swarm few(address, base_workers, 1, "few", dir);
      wait_workers(client, static_cast<std::size_t>(base_workers), std::chrono::seconds(60));
      (void)map_gather(client, std::min<std::int64_t>(tasks, 2000));  // warm-up
      base_rate = map_gather(client, tasks);
    }
    while (!client.status().workers.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const std::size_t lost_before = count(read_file(log), " lost");
    Swarm swarm(address, n, nproc, "w", dir);
    const double join_s = wait_workers(client, static_cast<std::size_t>(n), std::chrono::seconds(120));
    std::this_thread::sleep_for(std::chrono::seconds(2));  // heartbeats settle; links up
    const std::uint64_t rss = rss_bytes(sched);
    const std::size_t fds = descriptors(sched);
    std::size_t on_links = 0;
    for (const auto& w : client.status().workers) on_links += w.link ? 1 : 0;
    (void)map_gather(client, std::min<std::int64_t>(tasks, 2000));  // warm-up
    StatusProbe probe(watcher);
    const double rate = map_gather(client, tasks);
    const auto [status_p50, status_max] = probe.finish();
    const std::size_t lost = count(read_file(log), " lost") - lost_before;
    std::printf("{\"system\":\"herd\",\"bench\":\"swarm\",\"workers\":%d,\"processes\":%d,\"join_s\":%.3f,"
                "\"workers_on_links\":%zu,\"scheduler_rss_bytes\":%llu,\"rss_per_worker_bytes\":%.0f,"
                "\"scheduler_fds\":%zu,\"fds_per_worker\":%.2f,\"tasks\":%lld,\"tasks_per_s\":%.0f,"
                "\"base_workers\":%d,\"base_tasks_per_s\":%.0f,\"ratio_to_base\":%.3f,\"status_p50_ms\":%.1f,"
                "\"status_max_ms\":%.1f,\"workers_lost\":%zu}\n",
                n, nproc, join_s, on_links, static_cast<unsigned long long>(rss),
                static_cast<double>(rss - std::min(rss, rss0)) / n, fds, static_cast<double>(fds - fds0) / n,
                static_cast<long long>(tasks), rate, base_workers, base_rate, rate / base_rate, status_p50,
                status_max, lost);
    std::fflush(stdout);
    if (storm && nproc >= 2) {
      // Half the swarm's processes die at once, mid-map: their tasks run elsewhere, every value
      // is checked; then they come back.
      std::vector<std::int64_t> xs(static_cast<std::size_t>(tasks));
      std::iota(xs.begin(), xs.end(), std::int64_t{0});
      auto futures = client.map(swarm_noop, xs);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      const auto killed_at = Clock::now();
      std::size_t killed = 0;
      for (std::size_t k = 0; k < swarm.processes.size() / 2; ++k) {
        swarm.kill(k);
        killed += static_cast<std::size_t>(swarm.sizes[k]);
      }
      const auto values = client.gather(futures);
      const double storm_s = std::chrono::duration<double>(Clock::now() - killed_at).count();
      if (values != xs) throw std::runtime_error("herd_swarm: values after the storm came back wrong");
      // The scheduler drops them (their links broke); then they rejoin.
      const auto gone_t0 = Clock::now();
      while (client.status().workers.size() > static_cast<std::size_t>(n) - killed) {
        if (Clock::now() - gone_t0 > std::chrono::seconds(60)) throw std::runtime_error("herd_swarm: the killed workers were never dropped");
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      const double dropped_s = std::chrono::duration<double>(Clock::now() - killed_at).count();
      const auto back_t0 = Clock::now();
      for (std::size_t k = 0; k < swarm.processes.size() / 2; ++k) {
        swarm.prefix = "r";  // new names: a worker that comes back is a new worker
        swarm.start_process(k);
      }
      const double rejoin_s = wait_workers(client, static_cast<std::size_t>(n), std::chrono::seconds(120));
      (void)back_t0;
      const double after = map_gather(client, tasks);
      std::printf("{\"system\":\"herd\",\"bench\":\"swarm_storm\",\"workers\":%d,\"killed\":%zu,\"tasks\":%lld,"
                  "\"values_exact\":true,\"map_through_storm_s\":%.3f,\"dropped_s\":%.3f,\"rejoin_s\":%.3f,"
                  "\"tasks_per_s_after\":%.0f}\n",
                  n, killed, static_cast<long long>(tasks), storm_s, dropped_s, rejoin_s, after);
      std::fflush(stdout);
    }
    ::kill(sched, SIGTERM);
    ::waitpid(sched, nullptr, 0);
  }
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  herd::init(argc, argv);
  CLI::App app{"herd_swarm: thousands of real workers on a real scheduler, from a few processes"};
  app.require_subcommand(1);
  auto* peers = app.add_subcommand("peers", "one swarm process: N peers of a running scheduler");
  std::string scheduler, prefix = "swarm";
  int n = 100;
  peers->add_option("--scheduler", scheduler, "the scheduler's address")->required();
  peers->add_option("--workers", n, "peers in this process")->check(CLI::PositiveNumber);
  peers->add_option("--name", prefix, "their names' prefix");
  auto* run = app.add_subcommand("run", "the benchmark: a scheduler, swarm processes, a client");
  std::vector<int> sizes{1000, 5000, 10000};
  int nproc = 4, base = 10;
  std::int64_t tasks = 200000;
  bool storm = false, small = false;
  run->add_option("--workers", sizes, "swarm sizes, one run each")->delimiter(',');
  run->add_option("--processes", nproc, "swarm processes the workers are shared among")->check(CLI::PositiveNumber);
  run->add_option("--tasks", tasks, "tasks of each map")->check(CLI::PositiveNumber);
  run->add_option("--base-workers", base, "the swarm size the ratio is taken against")->check(CLI::PositiveNumber);
  run->add_flag("--storm", storm, "then half the workers killed mid-map, and their rejoining");
  run->add_flag("--small", small, "40 workers in 2 processes, 2,000 tasks, the storm (the smoke test)");
  CLI11_PARSE(app, argc, argv);
  try {
    if (*peers) return peers_main(scheduler, n, prefix);
    if (small) {
      sizes = {40};
      nproc = 2;
      tasks = 2000;
      storm = true;
    }
    return run_main(sizes, nproc, tasks, storm, base);
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
}
