// herd_bench: the benchmarks of bench/README.md, one JSON line per figure.
//
//   herd_bench throughput --tasks 100000 --workers 2     map+gather and a submit loop
//   herd_bench latency --rounds 1000                      sequential submit().result()
//   herd_bench tree --leaves 8192                         binary-tree sum, 2*leaves-1 tasks
//   herd_bench data --mib 1,16,256 [--warmup 2]           gather one big result vs raw ZeroMQ
//                                                         (after N untimed gathers of it)
//   herd_bench spread --mib 256 --workers 4               worker-to-worker copy (replicate) and
//                                                         scatter broadcast to W workers
//   herd_bench startup --workers 2                        LocalCluster creation to N workers
//   herd_bench memory --pending 1000000                   scheduler bytes per pending task
//   herd_bench slurm --workers 8                          scale(8) to 8 workers, close() to an
//                                                         empty queue (needs SLURM_CONF)
//   herd_bench faults                                     time to declare a SIGKILLed and a
//                                                         SIGSTOPped worker lost
//   herd_bench allreduce --ranks 2,3,4                    CPU ring all-reduce, 1 KiB..256 MiB, vs raw
//                                                         loopback TCP (bench/allreduce.cpp)
//   herd_bench record --tasks 100000 --repeat 5           map+gather, recording on vs off, interleaved
//                                                         (bench/record_bench.cpp)
//   herd_bench report --runs 1000000                      a synthetic record of that many runs: its
//                                                         report's build time and size
//   herd_bench all --small                                everything, small sizes (CI smoke)
#include <dirent.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include <herd/herd.hpp>

#include "net/aead.hpp"
#include "net/lane.hpp"
#include "common/roles.hpp"
#include "common/process.hpp"
#include "common/security.hpp"
#include "scheduler/journal.hpp"

using Clock = std::chrono::steady_clock;

int noop(int x) { return x; }
HERD_TASK(noop);
long add(long a, long b) { return a + b; }
HERD_TASK(add);
std::vector<char> blob(std::uint64_t bytes) { return std::vector<char>(bytes, 'x'); }
HERD_TASK(blob);

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void emit(const std::string& bench, const std::vector<std::pair<std::string, double>>& fields,
          const std::string& extra = "") {
  std::ostringstream out;
  out << "{\"system\":\"herd\",\"bench\":\"" << bench << "\"";
  for (const auto& [k, v] : fields) out << ",\"" << k << "\":" << v;
  out << extra << "}";
  std::printf("%s\n", out.str().c_str());
  std::fflush(stdout);
}

std::uint64_t rss_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  while (dirent* e = ::readdir(d)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(in, line)) continue;
    std::istringstream rest(line.substr(line.rfind(')') + 2));
    char state;
    pid_t ppid;
    rest >> state >> ppid;
    if (ppid == parent) out.push_back(pid);
  }
  ::closedir(d);
  return out;
}

void throughput(int tasks, int workers, int repeat) {
  herd::Client client{herd::LocalCluster{workers, 1}};
  std::vector<int> xs(static_cast<std::size_t>(tasks));
  std::iota(xs.begin(), xs.end(), 0);
  client.gather(client.map(noop, std::vector<int>(1000, 1)));  // warm-up
  for (int r = 0; r < repeat; ++r) {
    auto t0 = Clock::now();
    auto out = client.gather(client.map(noop, xs));
    const double s = seconds_since(t0);
    if (out.back() != tasks - 1) throw std::runtime_error("wrong result");
    emit("map_gather", {{"workers", workers}, {"tasks", tasks}, {"seconds", s}, {"tasks_per_s", tasks / s}});
  }
  for (int r = 0; r < repeat; ++r) {
    auto t0 = Clock::now();
    std::vector<herd::Future<int>> fs;
    fs.reserve(xs.size());
    for (int x : xs) fs.push_back(client.submit(noop, x));
    const double submit_s = seconds_since(t0);
    client.wait(fs);
    const double s = seconds_since(t0);
    emit("submit_loop", {{"workers", workers}, {"tasks", tasks}, {"seconds", s}, {"tasks_per_s", tasks / s},
                         {"submit_calls_per_s", tasks / submit_s}});
  }
}

/// zmq_round_trip's raw relay (client -> scheduler -> worker -> scheduler -> client, three
/// processes, CURVE as herd's sockets), kept running in `serve` mode so that blocks of its
/// round trips can alternate with herd's in short turns. Its run() answers false when the
/// program is not built next to this one or does not start.
class Relay {
 public:
  Relay() {
    const auto exe = std::filesystem::path(herd::process::self_executable()).parent_path() / "zmq_round_trip";
    if (!std::filesystem::exists(exe)) return;
    int to[2], from[2];
    // Everything the child needs is made before fork: this process has threads, so the child
    // may only dup2 and exec (no allocation) until it runs the relay.
    const std::string path = exe.string();
    const char* argv[] = {path.c_str(), "relay", herd::security::auth_off() ? "plain" : "curve", "serve", nullptr};
    if (::pipe2(to, O_CLOEXEC) != 0) return;
    if (::pipe2(from, O_CLOEXEC) != 0) {
      ::close(to[0]);
      ::close(to[1]);
      return;
    }
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(to[0], 0);
      ::dup2(from[1], 1);
      ::execv(path.c_str(), const_cast<char* const*>(argv));
      ::_exit(127);
    }
    ::close(to[0]);
    ::close(from[1]);
    if (pid_ < 0) {
      ::close(to[1]);
      ::close(from[0]);
      return;
    }
    in_ = ::fdopen(to[1], "w");
    out_ = ::fdopen(from[0], "r");
    std::string line;
    ok_ = in_ != nullptr && out_ != nullptr && read_line(line) && line == "ready";
  }
  ~Relay() {
    if (in_ != nullptr) std::fclose(in_);  // end of input: the relay stops
    if (out_ != nullptr) std::fclose(out_);
    if (pid_ > 0) ::waitpid(pid_, nullptr, 0);
  }
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  /// `n` round trips; their times (µs) appended to `us`. False when the relay did not start or
  /// did not answer them (and from then on).
  bool run(int n, std::vector<double>& us) {
    if (!ok_) return false;
    std::fprintf(in_, "%d\n", n);
    std::fflush(in_);
    std::string line;
    std::vector<double> got;
    if (read_line(line)) {
      std::istringstream words(line);
      for (double v; words >> v;) got.push_back(v);
    }
    ok_ = got.size() == static_cast<std::size_t>(n);
    if (ok_) us.insert(us.end(), got.begin(), got.end());
    return ok_;
  }

 private:
  bool read_line(std::string& line) {
    line.clear();
    for (int c; (c = std::fgetc(out_)) != EOF;) {
      if (c == '\n') return true;
      line.push_back(static_cast<char>(c));
    }
    return false;
  }
  pid_t pid_ = -1;
  FILE* in_ = nullptr;
  FILE* out_ = nullptr;
  bool ok_ = false;
};

/// The sample at floor(p·(n−1)) of `sorted` (0 when there is none).
double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  return sorted[static_cast<std::size_t>(p * static_cast<double>(sorted.size() - 1))];
}

void latency(int rounds) {
  herd::Client client{herd::LocalCluster{1, 1}};
  for (int i = 0; i < 100; ++i) client.submit(noop, i).result();
  // Beside it, in the same run: raw libzmq over the same hops (Relay). The ratio is what herd's
  // own work adds to the transport. The two take turns in blocks of 50 round trips (the relay
  // first), so that both see the same seconds of a shared machine, whose speed changes from
  // one second to the next (a relay's p50 ranged 390-2,300 µs between runs of one minute).
  constexpr int kBlock = 50;
  Relay relay;
  std::vector<double> us, relay_us;
  int blocks = 0;
  for (int next = 0; next < rounds;) {
    const int n = std::min(kBlock, rounds - next);
    if (relay.run(n, relay_us)) ++blocks;
    for (int i = 0; i < n; ++i, ++next) {
      auto t0 = Clock::now();
      client.submit(noop, next).result();
      us.push_back(seconds_since(t0) * 1e6);
    }
  }
  std::sort(us.begin(), us.end());
  std::sort(relay_us.begin(), relay_us.end());
  const double p50 = percentile(us, 0.5), relay_p50 = percentile(relay_us, 0.5);
  emit("round_trip", {{"rounds", rounds}, {"p50_us", p50}, {"p99_us", percentile(us, 0.99)}, {"max_us", us.back()},
                      {"relay_p50_us", relay_p50}, {"relay_blocks", blocks},
                      {"p50_over_relay", relay_p50 > 0 ? p50 / relay_p50 : 0.0}});
}

void tree(int leaves, int workers, int repeat) {
  herd::Client client{herd::LocalCluster{workers, 1}};
  std::vector<long> xs(static_cast<std::size_t>(leaves));
  std::iota(xs.begin(), xs.end(), 0L);
  std::vector<long> zeros(xs.size(), 0);
  for (int r = 0; r < repeat; ++r) {
    auto t0 = Clock::now();
    auto level = client.map(add, xs, zeros);
    std::size_t ntasks = level.size();
    while (level.size() > 1) {
      std::vector<herd::Future<long>> next;
      next.reserve(level.size() / 2 + 1);
      for (std::size_t i = 0; i + 1 < level.size(); i += 2) next.push_back(client.submit(add, level[i], level[i + 1]));
      if (level.size() % 2) next.push_back(level.back());
      ntasks += level.size() / 2;
      level = std::move(next);
    }
    const long total = level.front().result();
    const double s = seconds_since(t0);
    if (total != static_cast<long>(leaves) * (leaves - 1) / 2) throw std::runtime_error("wrong tree sum");
    emit("tree_reduction", {{"workers", workers}, {"leaves", leaves}, {"tasks", static_cast<double>(ntasks)},
                            {"seconds", s}, {"tasks_per_s", static_cast<double>(ntasks) / s}});
  }
}

/// One request/reply transfer of `bytes` over loopback, optionally CURVE-encrypted as herd's
/// own sockets are by default: the limit a gather can reach.
double raw_zmq_mbps(std::size_t bytes, bool curve) {
  zmq::context_t ctx;
  zmq::socket_t server(ctx, zmq::socket_type::router), client(ctx, zmq::socket_type::dealer);
  std::unique_ptr<herd::security::ZapHandler> zap;
  if (curve) {
    const auto keys = herd::security::cluster_keys();
    if (!keys) return 0;
    zap = std::make_unique<herd::security::ZapHandler>(ctx, keys->client_public);
    herd::security::make_server(server, *keys);
    herd::security::make_client(client, *keys);
  }
  server.bind("tcp://127.0.0.1:*");
  client.connect(server.get(zmq::sockopt::last_endpoint));
  std::vector<char> data(bytes, 'x');
  // Same shape as a gather: request, then the server answers with the bytes.
  client.send(zmq::str_buffer("warm"), zmq::send_flags::none);
  zmq::message_t id, m;
  (void)server.recv(id);
  (void)server.recv(m);
  auto t0 = Clock::now();
  server.send(id, zmq::send_flags::sndmore);
  server.send(zmq::message_t(data.data(), data.size()), zmq::send_flags::none);
  zmq::message_t got;
  (void)client.recv(got);
  const double s = seconds_since(t0);
  if (got.size() != bytes) throw std::runtime_error("raw transfer short");
  return static_cast<double>(bytes) / 1e6 / s;
}

/// The same bytes on a bulk lane (net/lane.hpp), plain or sealed, in this process: a
/// LaneServer's transfer thread sends, this thread receives into a fresh buffer, as a
/// gather's fetcher does. The transport's ceiling without herd's messages around it.
double raw_lane_mbps(std::size_t bytes, bool sealed) {
  auto held = herd::net::Buffer::allocate(bytes);
  std::memset(held->mutable_data(), 'x', bytes);
  const herd::net::PayloadPtr payload(std::move(held));
  herd::net::LaneServer lanes("127.0.0.1", sealed, std::chrono::seconds(30));
  const auto t0 = Clock::now();
  const herd::protocol::DataLane lane = lanes.offer({payload});
  std::vector<herd::net::LaneReceiver::Item> items;
  items.push_back({1, herd::net::Buffer::allocate(bytes), 0});
  herd::net::LaneReceiver in("127.0.0.1", lane, std::move(items), sealed);
  std::vector<herd::net::LaneReceiver::Item> done;
  while (!in.finished()) {
    pollfd p{in.fd(), in.events(), 0};
    if (::poll(&p, 1, 10000) <= 0) throw std::runtime_error("raw lane: no progress for 10 s");
    bool unreachable = false;
    if (std::string why = in.step(p.revents, std::size_t{16} << 20, done, unreachable); !why.empty()) {
      throw std::runtime_error("raw lane: " + why);
    }
  }
  const double s = seconds_since(t0);
  if (done.size() != 1 || done[0].buffer->size() != bytes || done[0].buffer->data()[bytes - 1] != 'x') {
    throw std::runtime_error("raw lane: wrong bytes");
  }
  return static_cast<double>(bytes) / 1e6 / s;
}

/// This process's resident bytes ("VmRSS") or peak ("VmHWM").
std::uint64_t self_status_bytes(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::stoull(line.substr(key.size())) * 1024;
  }
  return 0;
}

void data(const std::vector<int>& mibs, int warmup) {
  herd::Client client{herd::LocalCluster{1, 1}};
  for (int mib : mibs) {
    const std::uint64_t bytes = static_cast<std::uint64_t>(mib) << 20;
    // Untimed gathers first, as compare_dask.py's Dask side does: a program's later gathers
    // of a size find the allocator's memory (and herd's kept receive buffers) warm. Each of
    // another task (a future keeps a result under 4 MiB: a second result() would not fetch).
    for (int i = 0; i < warmup; ++i) {
      auto w = client.submit(herd::TaskOptions{}.key("warmup-" + std::to_string(mib) + "-" + std::to_string(i)), blob, bytes);
      if (w.result().size() != bytes) throw std::runtime_error("short result");
    }
    auto f = client.submit(blob, bytes);
    f.wait();
    std::ofstream("/proc/self/clear_refs") << "5";  // the peak (VmHWM) starts again from now
    const std::uint64_t rss_before = self_status_bytes("VmRSS");
    auto t0 = Clock::now();
    auto v = f.result();
    const double s = seconds_since(t0);
    const std::uint64_t peak = self_status_bytes("VmHWM");
    if (v.size() != bytes) throw std::runtime_error("short result");
    const double raw = raw_zmq_mbps(bytes, false);
    const double raw_curve = raw_zmq_mbps(bytes, true);
    const double lane = raw_lane_mbps(bytes, false);
    const double lane_sealed = raw_lane_mbps(bytes, true);
    const double mbps = static_cast<double>(bytes) / 1e6 / s;
    // herd encrypts by default (HERD_AUTH=off does not): compare with the same kind of socket.
    const double limit = herd::security::cluster_keys() ? raw_curve : raw;
    emit("gather_bytes", {{"mib", mib}, {"seconds", s}, {"mb_per_s", mbps}, {"raw_zmq_mb_per_s", raw},
                          {"raw_zmq_curve_mb_per_s", raw_curve}, {"raw_lane_mb_per_s", lane},
                          {"raw_lane_sealed_mb_per_s", lane_sealed}, {"fraction_of_raw", mbps / limit},
                          {"client_rss_before_bytes", static_cast<double>(rss_before)},
                          {"client_peak_rss_bytes", static_cast<double>(peak)}});
  }
}

/// Waits until `n` workers hold a result (status polled every 2 ms).
void until_held_by(herd::Client& client, std::size_t n) {
  const auto deadline = Clock::now() + std::chrono::minutes(5);
  while (Clock::now() < deadline) {
    std::size_t held = 0;
    for (const auto& w : client.status().workers) held += w.stored > 0;
    if (held >= n) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  throw std::runtime_error("copies did not arrive within 5 minutes");
}

/// Worker to worker: one result copied to a second worker (replicate). Broadcast: a value
/// scattered to every one of `workers` workers (each new holder serves the next ones).
void spread(const std::vector<int>& mibs, int workers) {
  for (int mib : mibs) {
    const std::uint64_t bytes = static_cast<std::uint64_t>(mib) << 20;
    {
      herd::Client client{herd::LocalCluster{2, 1}};
      auto f = client.submit(blob, bytes);
      f.wait();
      until_held_by(client, 1);
      auto t0 = Clock::now();
      client.replicate(std::vector{f}, 2);
      until_held_by(client, 2);
      const double s = seconds_since(t0);
      emit("worker_to_worker", {{"mib", mib}, {"seconds", s}, {"mb_per_s", static_cast<double>(bytes) / 1e6 / s}});
    }
    {
      herd::Client client{herd::LocalCluster{workers, 1}};
      client.wait_for_workers(workers);
      const std::vector<char> value(bytes, 'x');
      auto t0 = Clock::now();
      auto f = client.scatter(value, true);
      until_held_by(client, static_cast<std::size_t>(workers));
      const double s = seconds_since(t0);
      emit("scatter_broadcast", {{"mib", mib}, {"workers", workers}, {"seconds", s},
                                 {"mb_per_s", static_cast<double>(bytes) * workers / 1e6 / s}});
    }
  }
}

void startup(int workers, int repeat) {
  for (int r = 0; r < repeat; ++r) {
    auto t0 = Clock::now();
    herd::Client client{herd::LocalCluster{workers, 1}};
    const double s = seconds_since(t0);
    emit("startup", {{"workers", workers}, {"seconds", s}});
  }
}

void memory(int pending) {
  herd::LocalCluster cluster{1, 1};
  // A resource no worker has: every task stays pending in the scheduler.
  herd::Client client{std::move(cluster)};
  const pid_t sched = children_of(::getpid()).front();
  const pid_t worker = children_of(sched).front();
  const std::uint64_t before = rss_of(sched);
  const std::uint64_t worker_rss = rss_of(worker);
  std::vector<herd::Future<int>> fs;
  fs.reserve(static_cast<std::size_t>(pending));
  const auto options = herd::TaskOptions{}.resource("nowhere", 1);
  auto t0 = Clock::now();
  for (int i = 0; i < pending; ++i) fs.push_back(client.submit(options, noop, i));
  // All accepted: a dependent of the last one is only placed when the scheduler has it.
  fs.back().wait_for(std::chrono::milliseconds(1));
  std::uint64_t after = 0;
  for (int i = 0; i < 200; ++i) {  // wait for the scheduler to take in the last batch
    after = rss_of(sched);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (rss_of(sched) == after) break;
  }
  const double s = seconds_since(t0);
  emit("scheduler_memory", {{"pending", pending}, {"rss_before_bytes", static_cast<double>(before)},
                            {"rss_after_bytes", static_cast<double>(after)},
                            {"bytes_per_task", static_cast<double>(after - before) / pending},
                            {"seconds", s}});
  emit("idle_worker_memory", {{"rss_bytes", static_cast<double>(worker_rss)}});

  // Finished results the client still holds futures for: each stays on the worker (and a
  // small one inline in the client) until the future goes.
  const int held = std::max(1, pending / 10);
  const std::uint64_t worker_before = rss_of(worker);
  const std::uint64_t client_before = rss_of(::getpid());
  std::vector<int> xs(static_cast<std::size_t>(held));
  std::iota(xs.begin(), xs.end(), 0);
  auto results = client.map(noop, xs);
  client.wait(results);
  const std::uint64_t worker_after = rss_of(worker);
  const std::uint64_t client_after = rss_of(::getpid());
  emit("held_result_memory",
       {{"results", held},
        {"worker_bytes_per_result", static_cast<double>(worker_after - worker_before) / held},
        {"client_bytes_per_future", static_cast<double>(client_after - client_before) / held}});
}

void slurm(int workers, const std::string& partition) {
  const auto t0 = Clock::now();
  herd::Client client{herd::SlurmCluster{herd::SlurmOptions{}
                                             .partition(partition)
                                             .cores(1)
                                             .memory("200M")
                                             .job_name("herd-bench-" + std::to_string(::getpid()))
                                             .log_directory("/tmp/herd-bench-logs")}};
  const double start_s = seconds_since(t0);
  auto t1 = Clock::now();
  client.scale(workers);
  client.wait_for_workers(workers, std::chrono::minutes(5));
  const double scale_s = seconds_since(t1);
  t1 = Clock::now();
  client.close();  // returns once squeue no longer lists the jobs
  const double close_s = seconds_since(t1);
  emit("slurm_scale", {{"workers", workers}, {"scheduler_start_s", start_s}, {"scale_to_connected_s", scale_s},
                       {"close_to_empty_queue_s", close_s}});
}

/// Two workers started by hand (no pool replaces them), one of them killed or stopped: how long
/// until the scheduler declares it lost. The dead one is noticed through the heartbeat timeout
/// here; inside a pool (LocalCluster, Slurm) a dead worker's job end is noticed sooner.
void faults() {
  for (const char* how : {"SIGKILL", "SIGSTOP"}) {
    herd::LocalCluster cluster{0};
    const std::string address = cluster.start();
    herd::Client client{address};
    std::vector<pid_t> pids;
    for (int i = 0; i < 2; ++i) {
      herd::process::SpawnOptions spawn;
      spawn.argv = {herd::process::self_executable()};
      spawn.env[herd::detail::kRoleEnv] = "worker";
      spawn.env[herd::detail::kRoleArgsEnv] = herd::detail::join_role_args({"--scheduler", address, "--name", "w" + std::to_string(i)});
      spawn.death_signal = SIGKILL;
      pids.push_back(herd::process::spawn(spawn));
    }
    client.wait_for_workers(2, std::chrono::seconds(30));
    const auto t0 = Clock::now();
    ::kill(pids[0], std::string(how) == "SIGKILL" ? SIGKILL : SIGSTOP);
    while (client.n_workers() > 1 && seconds_since(t0) < 120) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const double s = seconds_since(t0);
    const char* timeout = std::getenv("HERD_TIMEOUT_MS");
    emit("worker_lost_detect", {{"seconds", s}, {"timeout_ms", timeout ? std::atof(timeout) : 10000.0}},
         std::string(",\"signal\":\"") + how + "\"");
    for (pid_t p : pids) {
      ::kill(p, SIGCONT);
      ::kill(p, SIGKILL);
    }
  }
}

// The journal: (1) the file alone, in this process: records made durable per second and what
// the event loop pays per record (append + flush; the writer thread does the IO), with one
// fdatasync per batch and without; (2) end to end: keyed tasks (journaled) through a
// LocalCluster, with and without a journal.
void journal(int tasks, int per_turn, int workers, int repeat) {
  const std::string dir = "/tmp/herd-bench-journal-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::vector<char> value(100, 'v');  // a small keyed result
  for (const bool sync : {true, false}) {
    for (int r = 0; r < repeat; ++r) {
      const std::string path = dir + "/j" + std::to_string(r) + (sync ? "s" : "n");
      std::filesystem::remove(path);
      herd::scheduler::Journal::Options o;
      o.sync = sync;
      double loop_s = 0;
      const auto t0 = Clock::now();
      {
        herd::scheduler::Journal j(path, o);
        for (int i = 0; i < tasks;) {
          const auto a = Clock::now();
          for (int k = 0; k < per_turn && i < tasks; ++k, ++i) j.append("task-" + std::to_string(i), value);
          j.flush();
          loop_s += seconds_since(a);
          (void)j.poll();
        }
        if (!j.wait_durable(std::chrono::minutes(5))) throw std::runtime_error("journal: not durable");
        const double s = seconds_since(t0);
        emit("journal_file", {{"records", tasks}, {"per_turn", per_turn}, {"seconds", s}, {"records_per_s", tasks / s},
                              {"loop_us_per_record", loop_s * 1e6 / tasks},
                              {"batches", static_cast<double>(j.batches_written())}},
             std::string(",\"fdatasync\":") + (sync ? "true" : "false"));
      }
      std::filesystem::remove(path);
      std::filesystem::remove(path + ".lock");
    }
  }
  for (const bool with_journal : {false, true}) {
    herd::LocalCluster cluster{workers, 1};
    const std::string path = dir + "/cluster.journal";
    std::filesystem::remove(path);
    if (with_journal) cluster.env("HERD_JOURNAL", path);
    herd::Client client{std::move(cluster)};
    std::vector<int> xs(static_cast<std::size_t>(tasks));
    std::iota(xs.begin(), xs.end(), 0);
    for (int r = 0; r < repeat; ++r) {
      const auto t0 = Clock::now();
      auto out = client.gather(client.map(herd::TaskOptions{}.key("r" + std::to_string(r)), noop, xs));
      const double s = seconds_since(t0);
      if (out.back() != tasks - 1) throw std::runtime_error("wrong result");
      emit("journal_keyed_map", {{"workers", workers}, {"tasks", tasks}, {"seconds", s}, {"tasks_per_s", tasks / s}},
           std::string(",\"journal\":") + (with_journal ? "true" : "false"));
    }
    client.close();
    std::filesystem::remove(path);
    std::filesystem::remove(path + ".lock");
  }
  std::filesystem::remove_all(dir);
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stoi(item));
  return out;
}

}  // namespace

// bench/allreduce.cpp
void allreduce_bench(const std::vector<int>& ranks, bool small, const std::vector<std::size_t>& only);
// bench/record_bench.cpp
void record_cost_bench(int tasks, int workers, int repeat);
void report_bench(long runs);

int main(int argc, char** argv) {
  herd::init(argc, argv);
  CLI::App app{"herd benchmarks (JSON lines on stdout)"};
  std::string what = "all";
  int tasks = 100000, workers = 2, rounds = 1000, leaves = 8192, pending = 1000000, repeat = 3;
  std::string mibs = "1,16,256", worker_list = "1,2";
  bool small = false;
  std::string partition = "cpu";
  app.add_option("workload", what, "throughput|latency|tree|data|startup|memory|slurm|all")
      ->check(CLI::IsMember({"throughput", "latency", "tree", "data", "spread", "startup", "memory", "slurm", "faults", "allreduce",
                             "journal", "record", "report", "all"}));
  app.add_option("--partition", partition, "partition for the slurm workload")->capture_default_str();
  app.add_option("--tasks", tasks, "tasks for throughput")->capture_default_str();
  app.add_option("--workers", worker_list, "worker counts, comma separated")->capture_default_str();
  std::string rank_list = "2,3,4";
  app.add_option("--ranks", rank_list, "gang sizes for allreduce, comma separated")->capture_default_str();
  std::string allreduce_mib;
  app.add_option("--allreduce-mib", allreduce_mib, "only these sizes for allreduce (MiB, comma separated)");
  app.add_option("--rounds", rounds, "round trips for latency")->capture_default_str();
  app.add_option("--leaves", leaves, "leaves of the tree reduction")->capture_default_str();
  app.add_option("--mib", mibs, "result sizes for data, comma separated")->capture_default_str();
  int warmup = 0;
  app.add_option("--warmup", warmup, "data: untimed gathers of each size before the timed one")->capture_default_str();
  app.add_option("--pending", pending, "pending tasks for memory")->capture_default_str();
  app.add_option("--repeat", repeat, "repetitions (report the median yourself)")->capture_default_str();
  app.add_flag("--small", small, "tiny sizes: a smoke test that every benchmark runs");
  long runs = 1000000;
  app.add_option("--runs", runs, "report: synthetic task runs in the record")->capture_default_str();
  int per_turn = 100;
  app.add_option("--per-turn", per_turn, "journal: records appended per scheduler turn")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (small) {
    tasks = 2000, rounds = 50, leaves = 256, pending = 10000, repeat = 1, mibs = "1,4", worker_list = "1,2";
    runs = 20000;
  }
  const auto wl = parse_list(worker_list);
  workers = wl.back();
  try {
    if (what == "throughput" || what == "all") for (int w : wl) throughput(tasks, w, repeat);
    if (what == "latency" || what == "all") latency(rounds);
    if (what == "tree" || what == "all") tree(leaves, workers, repeat);
    if (what == "data" || what == "all") data(parse_list(mibs), warmup);
    if (what == "spread" || what == "all") spread(parse_list(mibs), std::max(2, workers));
    if (what == "startup" || what == "all") startup(workers, repeat);
    if (what == "memory" || what == "all") memory(pending);
    if (what == "slurm") slurm(workers, partition);
    if (what == "faults") faults();
    if (what == "allreduce" || what == "all") {
      std::vector<std::size_t> only;
      if (!allreduce_mib.empty()) {
        for (int m : parse_list(allreduce_mib)) only.push_back(static_cast<std::size_t>(m) << 20);
      }
      allreduce_bench(parse_list(rank_list), small, only);
    }
    if (what == "journal" || what == "all") journal(small ? 2000 : tasks, per_turn, workers, repeat);
    if (what == "record" || what == "all") record_cost_bench(tasks, workers, small ? 2 : repeat);
    if (what == "report" || what == "all") report_bench(runs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "herd_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
