// herd on the multi-node test bed (label multinode; scripts/local-slurm.sh start --nodes 3): the
// scheduler runs on the login host, in this test's own SlurmCluster; its workers are Slurm jobs
// on node1..node3, each host with its own name and address. Faults are real: a link pulled, a
// node's processes frozen or killed, two hosts cut apart, a link slowed (tc).
//
// What each case checks, it checks with values (every result compared with what it must be),
// run counts (every task appends a line to its own marker file under /tmp, which every host
// shares, so a run anywhere is counted) and time bounds; the figures a report needs (time to
// recover from a crash, the slow-link transfer time) are printed with MESSAGE.
//
//   Spread     scale(6) puts two workers on every node; a tree reduction moves parts between
//              nodes; gather fetches from every node; a CPU-ring gang with one rank per node;
//              a sweep whose trials ran on every node.
//   Nodes      a pool of 2-node jobs (nodes = 2): one job brings two workers, one per host, both
//              with the job's id; tasks run on both; scancel of that job takes both away, and
//              the pool submits one job in its place, which brings two new workers.
//              With gpus = 2 and processes = 2 on each of 2 nodes (the bed's fake GPUs), each of
//              the 4 workers holds its own GPU of its node.
//   Crash      a node hangs (link down, every process frozen) in the middle of a map: its
//              workers are declared lost within the timeout, every value is right, what ran
//              there runs once more and nothing else does, the pool is back to size on the
//              other nodes; when the node comes back, its stale workers are not taken back.
//              A second case kills the node (link down, SIGKILL) with a herd timeout longer
//              than Slurm's, so that Slurm sets the node DOWN and requeues the jobs first.
//   Partition  one that heals within the timeout changes nothing; a partial one (two workers
//              that cannot reach each other, both reaching the scheduler) ends with the right
//              values or an error naming the host, never a loop.
//   SlowLink   a 256 MiB input over a link so slow that it takes longer than the timeout:
//              it arrives whole, nothing is recomputed, no worker is lost.
//   Firewall   a node that takes connections only on its worker's data port: big results
//              (bulk lanes, on another port) still reach the client, over the data port. A
//              login node that opens only the scheduler's port: big scattered values (fetched
//              from the client's own port) still reach the worker, through the scheduler.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <future>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <thread>

#include <herd/herd.hpp>

#include "common/process.hpp"
#include "common/util.hpp"
#include "support/multinode_util.hpp"

using namespace std::chrono_literals;
using namespace herd::testing;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

/// HERD_TIMEOUT_MS of the scheduler in these tests (the default, written out so that the
/// bounds below do not depend on the environment).
constexpr auto kTimeout = 10s;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string this_host() {
  char h[256] = {};
  ::gethostname(h, sizeof h - 1);
  return h;
}

std::int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// ---- run markers ---------------------------------------------------------------------------

/// Appends "<host> <pid> <unix ms>" to DIR/WHAT-I, one write(2) with O_APPEND: the file has one
/// line per run of that task, wherever it ran.
void mark(const std::string& dir, const std::string& what, std::int64_t i) {
  const std::string path = dir + "/" + what + "-" + std::to_string(i);
  const std::string line = this_host() + " " + std::to_string(::getpid()) + " " + std::to_string(unix_ms()) + "\n";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot open the run marker " + path);
  const bool whole = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  ::close(fd);
  if (!whole) throw std::runtime_error("cannot write the run marker " + path);
}

struct Run {
  std::string host;
  std::int64_t at_ms = 0;
};

std::vector<Run> runs(const std::string& dir, const std::string& what, std::int64_t i) {
  std::istringstream in(read_file(dir + "/" + what + "-" + std::to_string(i)));
  std::vector<Run> out;
  std::string host;
  long pid = 0;
  std::int64_t at = 0;
  while (in >> host >> pid >> at) out.push_back({host, at});
  return out;
}

std::size_t count_runs(const std::string& dir, const std::string& what, std::int64_t n) {
  std::size_t total = 0;
  for (std::int64_t i = 0; i < n; ++i) total += runs(dir, what, i).size();
  return total;
}

// ---- tasks ---------------------------------------------------------------------------------

/// A piece of a tree reduction: 8 KiB of numbers, more than a result that rides with its
/// completion notice (kInlineResultBytes, 4 KiB), so parts stay on their workers and travel
/// from worker to worker as inputs. `moves` counts the inputs that came from another host.
constexpr std::size_t kPartLen = 1024;
struct Part {
  std::string host;
  std::int32_t moves = 0;
  std::vector<std::int64_t> v;
  MSGPACK_DEFINE(host, moves, v);
};

/// Big numbers, so that msgpack cannot pack them small: 9 bytes each, 9 KiB a part.
std::int64_t part_value(std::int64_t i, std::size_t k) {
  return ((i + 1) << 32) + i * static_cast<std::int64_t>(k + 1);
}

Part leaf(std::string dir, std::int64_t i) {
  mark(dir, "leaf", i);
  std::this_thread::sleep_for(100ms);  // long enough that every worker takes some
  Part p{this_host(), 0, std::vector<std::int64_t>(kPartLen)};
  for (std::size_t k = 0; k < kPartLen; ++k) p.v[k] = part_value(i, k);
  return p;
}
HERD_TASK(leaf);

Part combine(std::string dir, std::int64_t id, Part a, Part b) {
  mark(dir, "combine", id);
  if (a.v.size() != kPartLen || b.v.size() != kPartLen) throw std::runtime_error("a part arrived cut short");
  const std::string h = this_host();
  Part p{h, a.moves + b.moves + static_cast<std::int32_t>(a.host != h) + static_cast<std::int32_t>(b.host != h),
         std::vector<std::int64_t>(kPartLen)};
  for (std::size_t k = 0; k < kPartLen; ++k) p.v[k] = a.v[k] + b.v[k];
  return p;
}
HERD_TASK(combine);

/// 64 KiB of words that depend on the block's index: a result that stays on its worker.
constexpr std::size_t kBlockLen = 16384;
struct Block {
  std::string host;
  std::vector<std::uint32_t> data;
  MSGPACK_DEFINE(host, data);
};

std::uint32_t block_word(std::int64_t i, std::size_t k) {
  return static_cast<std::uint32_t>(static_cast<std::uint64_t>(i) * 2654435761u + k);
}

Block block(std::string dir, std::int64_t i, std::int32_t ms) {
  mark(dir, "block", i);
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  Block b{this_host(), std::vector<std::uint32_t>(kBlockLen)};
  for (std::size_t k = 0; k < kBlockLen; ++k) b.data[k] = block_word(i, k);
  return b;
}
HERD_TASK(block);

/// Words of block i that are wrong (or missing).
std::size_t block_errors(const Block& b, std::int64_t i) {
  std::size_t wrong = b.data.size() == kBlockLen ? 0 : kBlockLen;
  for (std::size_t k = 0; k < std::min(kBlockLen, b.data.size()); ++k) wrong += b.data[k] != block_word(i, k);
  return wrong;
}

/// Every block's words added up, with the blocks fetched as inputs from wherever they are.
std::uint64_t block_sum(std::string dir, std::int64_t id, std::vector<Block> blocks) {
  mark(dir, "sum", id);
  std::uint64_t s = 0;
  for (const auto& b : blocks) {
    for (std::uint32_t w : b.data) s += w;
  }
  return s;
}
HERD_TASK(block_sum);

std::uint64_t expected_block_sum(std::int64_t n) {
  std::uint64_t s = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::size_t k = 0; k < kBlockLen; ++k) s += block_word(i, k);
  }
  return s;
}

/// One rank of a gang: all-reduces n int64 over the CPU ring, and says where it ran and how
/// many of the sums came out wrong.
struct RankReport {
  std::int32_t rank = -1, size = 0;
  std::string host, backend;
  std::int64_t wrong = -1;
  MSGPACK_DEFINE(rank, size, host, backend, wrong);
};

RankReport ring_allreduce(std::string dir, std::int64_t n) {
  mark(dir, "gang", herd::this_task().gang_rank);
  herd::Communicator& comm = herd::gang(herd::CollectiveBackend::cpu_ring);
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (std::size_t k = 0; k < v.size(); ++k) v[k] = (comm.rank() + 1) * static_cast<std::int64_t>(k % 1000 + 1);
  comm.allreduce(v);
  const std::int64_t ranks = static_cast<std::int64_t>(comm.size()) * (comm.size() + 1) / 2;
  std::int64_t wrong = 0;
  for (std::size_t k = 0; k < v.size(); ++k) wrong += v[k] != ranks * static_cast<std::int64_t>(k % 1000 + 1);
  return {comm.rank(), comm.size(), this_host(), herd::to_string(comm.backend()), wrong};
}
HERD_TASK(ring_allreduce);

herd::Metrics square_trial(herd::Params p) {
  const double x = herd::param<double>(p, "x");
  std::this_thread::sleep_for(300ms);
  return {{"loss", x * x}};
}
HERD_TASK(square_trial);

/// A big input: `mib` MiB of bytes that depend on their offset.
std::uint8_t big_byte(std::size_t k) { return static_cast<std::uint8_t>((k * 131) ^ (k >> 13)); }

std::vector<char> big(std::string dir, std::int64_t id, std::int64_t mib) {
  mark(dir, "big", id);
  std::vector<char> b(static_cast<std::size_t>(mib) << 20);
  for (std::size_t k = 0; k < b.size(); ++k) b[k] = static_cast<char>(big_byte(k));
  return b;
}
HERD_TASK(big);

struct Digest {
  std::string host;
  std::uint64_t size = 0;
  std::int64_t wrong = -1;
  MSGPACK_DEFINE(host, size, wrong);
};

Digest digest(std::string dir, std::int64_t id, std::vector<char> b) {
  mark(dir, "digest", id);
  std::int64_t wrong = 0;
  for (std::size_t k = 0; k < b.size(); ++k) wrong += static_cast<std::uint8_t>(b[k]) != big_byte(k);
  return {this_host(), b.size(), wrong};
}
HERD_TASK(digest);

/// Where a task ran: "<host>|<HERD_JOB_ID>|<SLURM_NODEID>|<SLURM_PROCID>" (HERD_JOB_ID: the
/// pool's job as squeue names it, array id and index, "1234_0").
std::string where_am_i(std::int32_t ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v != nullptr ? v : "unset");
  };
  return this_host() + "|" + env("HERD_JOB_ID") + "|" + env("SLURM_NODEID") + "|" + env("SLURM_PROCID");
}
HERD_TASK(where_am_i);

std::vector<std::string> split_on(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string part; std::getline(in, part, sep);) out.push_back(part);
  return out;
}

std::vector<std::string> split_bars(const std::string& s) { return split_on(s, '|'); }

/// The GPUs a task holds: "<host>|<SLURM_LOCALID>|<SLURM_STEP_GPUS>|<CUDA_VISIBLE_DEVICES>|<ordinals>".
std::string gpu_view() {
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v != nullptr ? v : "unset");
  };
  std::string ordinals;
  for (int g : herd::this_task().gpus) ordinals += (ordinals.empty() ? "" : ",") + std::to_string(g);
  return this_host() + "|" + env("SLURM_LOCALID") + "|" + env("SLURM_STEP_GPUS") + "|" + env("CUDA_VISIBLE_DEVICES") +
         "|" + ordinals;
}
HERD_TASK(gpu_view);

// ---- the cluster ---------------------------------------------------------------------------

/// Files every host sees (/tmp is shared, as a cluster's home is): run markers and job logs.
/// Kept when HERD_KEEP_SCRATCH is set, for a post-mortem.
struct Scratch {
  std::string dir;
  explicit Scratch(const std::string& name) : dir("/tmp/" + name) {
    fs::remove_all(dir);
    fs::create_directories(runs());
  }
  ~Scratch() {
    if (std::getenv("HERD_KEEP_SCRATCH") != nullptr) return;
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  std::string runs() const { return dir + "/runs"; }
  std::string logs() const { return dir + "/logs"; }
};

herd::SlurmOptions pool(const std::string& job_name, const Scratch& s, const std::string& memory = "400M") {
  return herd::SlurmOptions{}
      .job_name(job_name)
      .partition("cpu")
      .cores(1)
      .memory(memory)
      .walltime("00:15:00")
      .log_directory(s.logs());
}

herd::SlurmCluster with_timeout(herd::SlurmCluster cluster, std::chrono::milliseconds timeout) {
  cluster.scheduler_env("HERD_TIMEOUT_MS", std::to_string(timeout.count()));
  return cluster;
}

/// Workers the scheduler has now, by host.
std::map<std::string, int> workers_by_host(const herd::Client& client) {
  std::map<std::string, int> out;
  for (const auto& w : client.status().workers) ++out[w.host];
  return out;
}

std::set<std::string> worker_names(const herd::Client& client) {
  std::set<std::string> out;
  for (const auto& w : client.status().workers) out.insert(w.name);
  return out;
}

std::string describe(const std::map<std::string, int>& by_host) {
  std::string s;
  for (const auto& [h, n] : by_host) s += (s.empty() ? "" : " ") + h + ":" + std::to_string(n);
  return s.empty() ? "none" : s;
}

/// Waits for `per_node` workers of `pool_name` ("" = any) on every node; fails the test with what
/// is there instead.
void require_spread(const herd::Client& client, int per_node, const std::string& pool_name = "") {
  std::map<std::string, int> seen;
  const bool ok = eventually([&] {
    seen.clear();
    for (const auto& w : client.status().workers) {
      if (pool_name.empty() || w.pool == pool_name) ++seen[w.host];
    }
    for (const auto& n : bed::nodes()) {
      if (seen[n] != per_node) return false;
    }
    return true;
  }, 120s);
  REQUIRE_MESSAGE(ok, "wanted " << per_node << " worker(s)" << (pool_name.empty() ? "" : " of pool " + pool_name)
                                << " on every node, have " << describe(seen));
}

/// Jobs named `name` in the queue: id -> "STATE NODE".
std::map<std::string, std::string> jobs_where(const std::string& name) {
  auto r = run({"squeue", "--noheader", "-r", "--name=" + name, "--format=%i %T %N"});
  std::map<std::string, std::string> jobs;
  std::istringstream in(r.stdout_tail);
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::string id, state, node;
    f >> id >> state >> node;
    if (!id.empty()) jobs[id] = state + " " + node;
  }
  return jobs;
}

std::string describe(const std::map<std::string, std::string>& jobs) {
  std::string s;
  for (const auto& [id, what] : jobs) s += (s.empty() ? "" : ", ") + id + " " + what;
  return s.empty() ? "none" : s;
}

/// Samples the cluster in the background: the most workers seen at once, and every worker name.
class Watch {
 public:
  explicit Watch(const herd::Client& client) : client_(client), thread_([this] { loop(); }) {}
  ~Watch() { stop(); }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int fewest() const { return fewest_; }
  int most() const { return most_; }
  const std::set<std::string>& names() const { return names_; }

 private:
  void loop() {
    while (!stop_) {
      try {
        const auto s = client_.status();
        const int n = static_cast<int>(s.workers.size());
        fewest_ = std::min(fewest_.load(), n);
        most_ = std::max(most_.load(), n);
        for (const auto& w : s.workers) names_.insert(w.name);
      } catch (const std::exception&) {
      }
      std::this_thread::sleep_for(200ms);
    }
  }
  const herd::Client& client_;
  std::atomic<bool> stop_{false};
  std::atomic<int> fewest_{1 << 30}, most_{0};
  std::set<std::string> names_;  // written by the thread only; read after stop()
  std::thread thread_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------

TEST_CASE("MultinodeHerd.Spread.ScaleTreeGatherGangSweepOverEveryNode" * doctest::timeout(280)) {
  bed::require_whole_bed(3);
  const auto nodes = bed::nodes();
  const std::set<std::string> every_node(nodes.begin(), nodes.end());
  const std::string name = unique("mn-spread");
  Scratch s(name);
  const std::string dir = s.runs();
  herd::Client client{with_timeout(
      herd::SlurmCluster{pool(name, s)}.add_pool(pool(name + "-ring", s).pool("ring").resources({{"ring", 1}})), kTimeout)};

  // scale(6): two workers on every node (Slurm spreads them: CR_LLN).
  auto t0 = Clock::now();
  client.scale(6);
  client.wait_for_workers(6, 120s);
  require_spread(client, 2);
  // Each worker's messages leave ZeroMQ for a control link to the login host's scheduler.
  CHECK(eventually(
      [&] {
        const auto ws = client.status().workers;
        return ws.size() == 6 && std::all_of(ws.begin(), ws.end(), [](const herd::WorkerInfo& w) { return w.link; });
      },
      20s));
  MESSAGE("scale(6) to 6 workers over " << nodes.size() << " nodes: " << seconds_since(t0) << " s");

  // A tree reduction over 48 leaves: every leaf on some node, parts moving between nodes.
  constexpr std::int64_t n_leaves = 48;
  std::vector<std::int64_t> ids(n_leaves);
  std::iota(ids.begin(), ids.end(), 0);
  t0 = Clock::now();
  auto leaves = client.map(leaf, std::vector<std::string>(n_leaves, dir), ids);
  std::vector<herd::Future<Part>> level = leaves;
  std::int64_t next_id = 0;
  while (level.size() > 1) {
    std::vector<herd::Future<Part>> up;
    for (std::size_t k = 0; k + 1 < level.size(); k += 2) up.push_back(client.submit(combine, dir, next_id++, level[k], level[k + 1]));
    if (level.size() % 2 == 1) up.push_back(level.back());
    level = std::move(up);
  }
  const Part root = level.front().result();
  MESSAGE("tree reduction, 48 leaves and 47 combines of 8 KiB parts: " << seconds_since(t0) << " s, " << root.moves
                                                                         << " part(s) moved between nodes");
  REQUIRE(root.v.size() == kPartLen);
  std::size_t wrong = 0;
  for (std::size_t k = 0; k < kPartLen; ++k) {
    std::int64_t want = 0;
    for (std::int64_t i = 0; i < n_leaves; ++i) want += part_value(i, k);
    wrong += root.v[k] != want;
  }
  CHECK(wrong == 0);
  CHECK(root.moves >= 1);  // leaves were on every node, so some part had to travel to another
  CHECK(next_id == n_leaves - 1);
  for (std::int64_t i = 0; i < n_leaves; ++i) CHECK_MESSAGE(runs(dir, "leaf", i).size() == 1, "leaf " << i);
  for (std::int64_t i = 0; i < next_id; ++i) CHECK_MESSAGE(runs(dir, "combine", i).size() == 1, "combine " << i);

  // gather of results held on every node: the client fetches from each node's data port.
  t0 = Clock::now();
  const auto parts = client.gather(leaves);
  MESSAGE("gather of 48 parts from " << nodes.size() << " nodes: " << seconds_since(t0) << " s");
  std::set<std::string> leaf_hosts;
  for (std::int64_t i = 0; i < n_leaves; ++i) {
    const Part& p = parts[static_cast<std::size_t>(i)];
    leaf_hosts.insert(p.host);
    REQUIRE(p.v.size() == kPartLen);
    CHECK_MESSAGE(p.v[kPartLen - 1] == part_value(i, kPartLen - 1), "leaf " << i);
  }
  CHECK(leaf_hosts == every_node);

  // A CPU-ring gang with one rank per node: the ring pool's three workers, one on every node.
  t0 = Clock::now();
  client.scale(3, "ring");
  require_spread(client, 1, "ring");
  MESSAGE("scale(3) of the ring pool: " << seconds_since(t0) << " s");
  t0 = Clock::now();
  constexpr std::int64_t ring_len = 1 << 20;  // 8 MiB per rank through the ring
  auto ranks = client.submit_gang(3, herd::TaskOptions{}.resource("ring", 1), ring_allreduce, dir, ring_len);
  try {
    std::set<std::string> rank_hosts;
    for (const auto& r : client.gather(ranks)) {
      CAPTURE(r.rank);
      CHECK(r.size == 3);
      CHECK(r.backend == "cpu_ring");
      CHECK(r.wrong == 0);
      rank_hosts.insert(r.host);
    }
    CHECK(rank_hosts == every_node);
    MESSAGE("3-rank CPU-ring all-reduce of 8 MiB, one rank per node: " << seconds_since(t0) << " s");
  } catch (const std::exception& e) {
    FAIL_CHECK("the gang across nodes failed: " << std::string(e.what()));
  }
  for (int r = 0; r < 3; ++r) CHECK_MESSAGE(runs(dir, "gang", r).size() == 1, "rank " << r);
  client.scale(0, "ring");

  // A sweep spread over the nodes: 12 trials of 0.3 s on 6 single-slot workers.
  t0 = Clock::now();
  std::vector<std::string> xs;
  for (int x = -6; x < 6; ++x) xs.push_back(std::to_string(x));
  const auto report = herd::Sweep{herd::SearchSpace{}.grid("x", xs)}
                          .function(square_trial)
                          .minimize("loss")
                          .progress(herd::Progress::none)
                          .run(client);
  MESSAGE("sweep of 12 trials: " << seconds_since(t0) << " s");
  CHECK(report.ok == 12);
  std::set<std::string> trial_hosts;
  for (const auto& t : report.trials) {
    const double x = std::stod(t.params.at("x"));
    CHECK_MESSAGE(t.metric("loss").value_or(-1) == x * x, "x=" << x);
    CHECK(every_node.count(t.host) == 1);
    trial_hosts.insert(t.host);
  }
  CHECK(trial_hosts == every_node);
  REQUIRE(report.best() != nullptr);
  CHECK(report.best()->params.at("x") == "0");

  t0 = Clock::now();
  client.close();
  MESSAGE("close(): " << seconds_since(t0) << " s");
  CHECK(queued(name).empty());
  CHECK(queued(name + "-ring").empty());
}

TEST_CASE("MultinodeHerd.Nodes.TwoNodeJobTwoHostsOneJobScancelReplacesBoth" * doctest::timeout(240)) {
  bed::require_whole_bed(2);
  const auto nodes = bed::nodes();
  const std::set<std::string> bed_nodes(nodes.begin(), nodes.end());
  const std::string name = unique("mn-nodes");
  Scratch s(name);
  herd::Client client{with_timeout(herd::SlurmCluster{pool(name, s).nodes(2).processes(1)}, kTimeout)};

  // One job of two nodes: two workers (srun, one task per node), one on each host.
  auto t0 = Clock::now();
  client.scale(herd::ScaleTo{}.jobs(1));
  client.wait_for_workers(2, 120s);
  MESSAGE("one 2-node job to 2 connected workers: " << seconds_since(t0) << " s");
  const auto jobs = jobs_where(name);
  REQUIRE_MESSAGE(jobs.size() == 1, "jobs: " << describe(jobs));
  const std::string job = jobs.begin()->first;
  CHECK(jobs.begin()->second.rfind("RUNNING ", 0) == 0);
  auto status = client.status();
  REQUIRE(status.workers.size() == 2);
  REQUIRE(status.pools.size() == 1);
  CHECK(status.pools[0].workers_per_job == 2);
  CHECK(status.pools[0].target == 2);
  std::map<std::string, std::string> host_of;  // worker name -> host
  std::set<std::string> hosts;
  for (const auto& w : status.workers) {
    CAPTURE(w.name);
    CHECK(w.job_id == job);  // both registered with the one job's id
    CHECK(w.name.rfind(job + ".", 0) == 0);
    CHECK(bed_nodes.count(w.host) == 1);
    CHECK(w.nthreads == 1);
    host_of[w.name] = w.host;
    hosts.insert(w.host);
  }
  CHECK(hosts.size() == 2);  // two different hosts
  CHECK(host_of.size() == 2);
  // Slurm's word: the job holds two nodes, the hosts the workers run on.
  {
    auto r = run({"squeue", "--noheader", "--jobs=" + job, "--format=%D"});
    CHECK(std::string(herd::util::trim(r.stdout_tail)) == "2");
  }

  // Tasks run on both: pinned to each worker, they report its host and the one job (srun task
  // 0 and 1, node 0 and 1 of the job); unpinned, they spread over both hosts.
  std::set<std::string> procids, nodeids;
  for (const auto& [worker, host] : host_of) {
    std::vector<herd::Future<std::string>> fs;
    for (int i = 0; i < 4; ++i) fs.push_back(client.submit(herd::TaskOptions{}.workers({worker}), where_am_i, 0));
    for (const auto& where : client.gather(fs)) {
      const auto f = split_bars(where);
      REQUIRE(f.size() == 4);
      CHECK(f[0] == host);
      CHECK(f[1] == job);
      nodeids.insert(f[2]);
      procids.insert(f[3]);
    }
  }
  CHECK(nodeids == std::set<std::string>{"0", "1"});
  CHECK(procids == std::set<std::string>{"0", "1"});
  {
    std::set<std::string> seen;
    const auto all = client.gather(client.map(where_am_i, std::vector<std::int32_t>(16, 200)));
    CHECK(all.size() == 16);
    for (const auto& where : all) seen.insert(split_bars(where).front());
    CHECK(seen == hosts);
  }

  // scancel of the one job: both workers go (one scancel, two hosts), and the pool replaces
  // the job with one job, not two, which brings two new workers on two hosts.
  t0 = Clock::now();
  REQUIRE(run({"scancel", job}).exit_code == 0);
  const bool both_gone = eventually([&] {
    for (const auto& w : client.status().workers) {
      if (host_of.count(w.name) != 0) return false;
    }
    return true;
  }, kTimeout + 20s);
  CHECK(both_gone);
  MESSAGE("both workers of the cancelled job gone " << seconds_since(t0) << " s after scancel");
  std::map<std::string, std::string> after;
  std::vector<herd::WorkerInfo> fresh;
  const bool replaced = eventually([&] {
    after = jobs_where(name);
    fresh = client.status().workers;
    return after.size() == 1 && after.count(job) == 0 && after.begin()->second.rfind("RUNNING ", 0) == 0 &&
           fresh.size() == 2;
  }, 120s);
  MESSAGE("replaced " << seconds_since(t0) << " s after scancel; jobs now: " << describe(after));
  REQUIRE(replaced);
  const std::string job2 = after.begin()->first;
  std::set<std::string> hosts2;
  for (const auto& w : fresh) {
    CAPTURE(w.name);
    CHECK(w.job_id == job2);
    CHECK(host_of.count(w.name) == 0);
    CHECK(bed_nodes.count(w.host) == 1);
    hosts2.insert(w.host);
  }
  CHECK(hosts2.size() == 2);
  // Still one job's worth: no second replacement comes along.
  std::this_thread::sleep_for(5s);
  CHECK(jobs_where(name).size() == 1);
  CHECK(client.n_workers() == 2);
  std::set<std::string> seen;
  for (const auto& where : client.gather(client.map(where_am_i, std::vector<std::int32_t>(16, 200)))) {
    const auto f = split_bars(where);
    REQUIRE(f.size() == 4);
    CHECK(f[1] == job2);
    seen.insert(f[0]);
  }
  CHECK(seen == hosts2);

  client.close();
  CHECK(jobs_where(name).empty());
}

TEST_CASE("MultinodeHerd.Nodes.GpusSplitAmongTheProcessesOfEachNode" * doctest::timeout(180)) {
  bed::require_whole_bed(2);
  const auto nodes = bed::nodes();
  const std::set<std::string> bed_nodes(nodes.begin(), nodes.end());
  const std::string name = unique("mn-gpus");
  Scratch s(name);
  // Per node: 2 cores, 2 GPUs, 2 workers (srun tasks 2 per node) of one GPU each.
  herd::Client client{with_timeout(herd::SlurmCluster{pool(name, s, "600M")
                                                          .partition("gpu")
                                                          .walltime("00:10:00")
                                                          .cores(2)
                                                          .gpus(2)
                                                          .processes(2)
                                                          .nodes(2)},
                                   kTimeout)};
  client.scale(herd::ScaleTo{}.jobs(1));
  client.wait_for_workers(4, 120s);
  const auto jobs = jobs_where(name);
  REQUIRE_MESSAGE(jobs.size() == 1, "jobs: " << describe(jobs));
  const std::string job = jobs.begin()->first;
  const auto workers = client.status().workers;
  REQUIRE(workers.size() == 4);
  std::map<std::string, std::set<std::string>> gpus_by_host;  // host -> the GPU ids its workers hold
  for (const auto& w : workers) {
    CAPTURE(w.name);
    CHECK(w.job_id == job);
    CHECK(bed_nodes.count(w.host) == 1);
    CHECK(w.nthreads == 1);
    CHECK(w.resources.at("gpu") == 1);
    REQUIRE(w.gpus.size() == 1);
    gpus_by_host[w.host].insert(w.gpus[0].id);
    // The worker's task sees one GPU, ordinal 0, which is entry SLURM_LOCALID of what Slurm
    // gave the step on that node.
    const auto f = split_bars(client.submit(herd::TaskOptions{}.workers({w.name}).gpus(1), gpu_view).result());
    REQUIRE(f.size() == 5);
    CHECK(f[0] == w.host);
    const auto step = split_on(f[2], ',');
    CHECK(step.size() == 2);
    const std::size_t local = static_cast<std::size_t>(std::stoi(f[1]));
    REQUIRE(local < step.size());
    CHECK(f[3] == step[local]);
    CHECK(f[3] == w.gpus[0].id);
    CHECK(f[4] == "0");
  }
  CHECK(gpus_by_host.size() == 2);  // two hosts ...
  for (const auto& [host, ids] : gpus_by_host) CHECK_MESSAGE(ids.size() == 2, host);  // ... two GPUs on each
  client.close();
  CHECK(jobs_where(name).empty());
}

TEST_CASE("MultinodeHerd.Crash.HungNodeLostRecomputedOnceNothingStale" * doctest::timeout(280)) {
  bed::require_whole_bed(3);
  const auto nodes = bed::nodes();
  const std::string victim = nodes.back();
  const std::string name = unique("mn-crash");
  Scratch s(name);
  const std::string dir = s.runs();
  herd::Client client{with_timeout(herd::SlurmCluster{pool(name, s)}, kTimeout)};
  client.scale(6);
  client.wait_for_workers(6, 120s);
  require_spread(client, 2);
  std::set<std::string> victim_workers, victim_jobs;
  for (const auto& w : client.status().workers) {
    if (w.host != victim) continue;
    victim_workers.insert(w.name);
    victim_jobs.insert(w.job_id);
  }
  REQUIRE(victim_workers.size() == 2);

  // A map of 60 blocks of 64 KiB (0.4 s each: 4 s on 6 workers); the node hangs half-way,
  // holding results that exist nowhere else and running others.
  constexpr std::int64_t n = 60;
  std::vector<std::int64_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  auto blocks = client.map(block, std::vector<std::string>(n, dir), ids, std::vector<std::int32_t>(n, 400));
  REQUIRE(eventually([&] {
    std::uint64_t held = 0;
    for (const auto& w : client.status().workers) held += w.host == victim ? w.stored : 0;
    return held >= 2;
  }, 60s));
  const std::string exe = herd::process::self_executable();
  REQUIRE(bed::host_processes(victim, exe).size() == 2);  // its two workers, seen from here
  const std::size_t started_before = count_runs(dir, "block", n);
  CHECK(started_before < static_cast<std::size_t>(n));  // the map was still running

  auto t0 = Clock::now();
  const auto hung_at = t0;
  auto hung = bed::hang(victim);  // cable out, then every process frozen
  const auto frozen_ms = unix_ms();
  // The program is in gather when it happens, as a user's would be.
  auto gathering = std::async(std::launch::async, [&] { return client.gather(blocks); });

  // Its workers are declared lost: not before the timeout (it was silent, not reset), and not
  // much after (a heartbeat period and a scheduler tick).
  const bool lost = eventually([&] { return workers_by_host(client).count(victim) == 0; }, kTimeout + 20s);
  const double lost_s = seconds_since(t0);
  MESSAGE("the hung node's workers were declared lost " << lost_s << " s after the hang (timeout "
                                                        << std::chrono::duration<double>(kTimeout).count() << " s)");
  CHECK(lost);
  CHECK(lost_s >= std::chrono::duration<double>(kTimeout).count() - 1.0);
  CHECK(lost_s <= std::chrono::duration<double>(kTimeout).count() + 3.0);

  // Every value right: what was held or running only there is computed again elsewhere.
  std::vector<Block> got;
  try {
    got = gathering.get();
  } catch (const std::exception& e) {
    FAIL_CHECK("gather after the hang failed: " << std::string(e.what()));
  }
  const double recovered_s = seconds_since(t0);
  REQUIRE(eventually([&] { return workers_by_host(client).count(victim) == 0; }, 30s));  // (gather may fail before)
  if (got.size() == static_cast<std::size_t>(n)) {
    MESSAGE("crash recovery: every value of the map in hand " << recovered_s << " s after the node hung");
    for (std::int64_t i = 0; i < n; ++i) {
      CHECK_MESSAGE(block_errors(got[static_cast<std::size_t>(i)], i) == 0, "block " << i);
      CHECK_MESSAGE(got[static_cast<std::size_t>(i)].host != victim, "block " << i);
    }
    CHECK(recovered_s <= std::chrono::duration<double>(kTimeout).count() + 15.0);
  }
  // The scheduler's own view: a task over every block, whose inputs come from wherever the
  // blocks are now (recomputed where they were lost), while the node is still hung.
  const auto sum_hung = client.submit(block_sum, dir, std::int64_t{0}, blocks);
  try {
    CHECK(sum_hung.result() == expected_block_sum(n));
  } catch (const std::exception& e) {
    FAIL_CHECK("a task over every block failed: " << std::string(e.what()));
  }
  MESSAGE("a task over every block had them all " << seconds_since(t0) << " s after the node hung");

  // Run counts: a block first run on the hung node ran exactly once more, elsewhere; any other
  // block ran exactly once.
  std::size_t recomputed = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto r = runs(dir, "block", i);
    REQUIRE_MESSAGE(!r.empty(), "block " << i << " never ran");
    const bool first_there = r.front().host == victim;
    recomputed += first_there;
    CHECK_MESSAGE(r.size() == (first_there ? 2u : 1u), "block " << i << " ran " << r.size() << " times, first on "
                                                                 << r.front().host);
    CHECK_MESSAGE(r.back().host != victim, "block " << i);
  }
  MESSAGE(recomputed << " of " << n << " blocks had run on the hung node and ran once more");
  CHECK(recomputed >= 2);

  // The pool is back to size on the other nodes (the node is still hung).
  CHECK(eventually([&] {
    const auto by = workers_by_host(client);
    int total = 0;
    for (const auto& [h, k] : by) total += k;
    return total == 6 && by.count(victim) == 0;
  }, 90s));
  MESSAGE("pool back to 6 workers on the other nodes " << seconds_since(hung_at) << " s after the hang: "
                                                       << describe(workers_by_host(client)));
  // Slurm gives up on the node too; the hung jobs are over (herd cancelled them, or Slurm failed
  // them) and none of them holds a place in the pool.
  CHECK(eventually([&] { return bed::node_state(victim).rfind("down", 0) == 0; }, 60s));
  for (const auto& id : victim_jobs) {
    const std::string state = bed::job_state(id);
    MESSAGE("job " << id << " of the hung node: " << (state.empty() ? "gone" : state));
    CHECK(state != "RUNNING");
  }
  // Six jobs hold the pool's six places, all running elsewhere: no more were submitted.
  std::map<std::string, std::string> live;
  CHECK(eventually([&] {
    live = jobs_where(name);
    if (live.size() != 6) return false;
    for (const auto& [id, what] : live) {
      if (what.rfind("RUNNING ", 0) != 0 || what == "RUNNING " + victim) return false;
    }
    return true;
  }, 30s));
  MESSAGE("jobs now: " << describe(live));

  // The node comes back: cable in, every process goes on from where it was. Its workers think
  // they still work for the scheduler; none is taken back, the values stay right, and the
  // stale workers are gone soon (told to leave, or killed by Slurm).
  hung.undo();
  t0 = Clock::now();
  const auto sum = client.submit(block_sum, dir, std::int64_t{1}, blocks);
  {
    Watch watch(client);
    CHECK(sum.result() == expected_block_sum(n));
    const bool stale_gone = eventually([&] { return bed::host_processes(victim, exe).empty(); }, 45s);
    const double gone_s = seconds_since(t0);
    std::this_thread::sleep_for(2s);
    watch.stop();
    MESSAGE("the stale workers on " << victim << " were gone " << gone_s << " s after it came back");
    CHECK(stale_gone);
    for (const auto& w : victim_workers) CHECK_MESSAGE(watch.names().count(w) == 0, "stale worker " << w << " came back");
    CHECK(watch.most() <= 6);
  }
  CHECK(runs(dir, "sum", 0).size() == 1);
  CHECK(runs(dir, "sum", 1).size() == 1);
  // Nothing of the old map ran again; a stale worker may have started what it had queued when
  // it thawed (its own business), but nothing it did was taken.
  std::size_t stale_starts = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    for (const auto& r : runs(dir, "block", i)) stale_starts += r.host == victim && r.at_ms > frozen_ms;
  }
  MESSAGE(stale_starts << " block(s) started by the stale workers after they thawed");
  for (const auto& w : client.status().workers) CHECK(w.host != victim);
  CHECK(client.n_workers() == 6);
}

TEST_CASE("MultinodeHerd.Crash.SlurmRequeuesBeforeHerdGivesUp" * doctest::timeout(280)) {
  bed::require_whole_bed(3);
  const auto nodes = bed::nodes();
  const std::string victim = nodes.back();
  const std::string name = unique("mn-requeue");
  Scratch s(name);
  const std::string dir = s.runs();
  // herd waits longer than Slurm (SlurmdTimeout=10 s on the bed; the node is DOWN after 12-20 s,
  // and a requeued job starts again 11 s later): Slurm fails and requeues the node's jobs
  // while herd still waits for their workers.
  constexpr auto timeout = 40s;
  herd::Client client{with_timeout(herd::SlurmCluster{pool(name, s)}, timeout)};
  client.scale(6);
  client.wait_for_workers(6, 120s);
  require_spread(client, 2);
  std::set<std::string> victim_workers, victim_jobs;
  for (const auto& w : client.status().workers) {
    if (w.host != victim) continue;
    victim_workers.insert(w.name);
    victim_jobs.insert(w.job_id);
  }
  REQUIRE(victim_jobs.size() == 2);
  const auto before = jobs_where(name);
  REQUIRE(before.size() == 6);

  constexpr std::int64_t n = 30;
  std::vector<std::int64_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  auto blocks = client.map(block, std::vector<std::string>(n, dir), ids, std::vector<std::int32_t>(n, 200));
  client.wait(blocks);
  std::size_t held_there = 0;
  for (std::int64_t i = 0; i < n; ++i) held_there += runs(dir, "block", i).front().host == victim;
  REQUIRE(held_there >= 1);

  // The node dies: cable out, then every process on it killed (nothing reset reaches anyone).
  auto t0 = Clock::now();
  auto gone = bed::vanish(victim);
  // Slurm: the node DOWN, its jobs NODE_FAIL and requeued (JobRequeue=1), while herd still
  // counts their silent workers.
  CHECK(eventually([&] { return bed::node_state(victim).rfind("down", 0) == 0; }, 45s));
  const double down_s = seconds_since(t0);
  MESSAGE("Slurm set " << victim << " down " << down_s << " s after the crash");
  {
    auto by = workers_by_host(client);
    CHECK(by[victim] == 2);  // herd has not given up on them yet
  }
  for (const auto& id : victim_jobs) {
    CHECK(eventually([&] {
      auto r = run({"scontrol", "--oneliner", "show", "job", id});
      return r.stdout_tail.find("Restarts=1") != std::string::npos;
    }, 20s));
  }
  // The requeued jobs start again on the other nodes; herd gives up on the old workers at its
  // timeout, and the pool keeps the jobs' new incarnations: the same six job ids, all running,
  // none on the dead node, no job submitted in their place.
  const bool lost = eventually([&] { return workers_by_host(client).count(victim) == 0; }, timeout + 20s);
  const double lost_s = seconds_since(t0);
  MESSAGE("herd declared the dead node's workers lost " << lost_s << " s after the crash (timeout "
                                                        << std::chrono::duration<double>(timeout).count() << " s)");
  CHECK(lost);
  CHECK(lost_s <= std::chrono::duration<double>(timeout).count() + 3.0);
  std::map<std::string, std::string> after;
  const bool back = eventually([&] {
    after = jobs_where(name);
    if (after.size() != 6) return false;
    for (const auto& [id, what] : after) {
      if (what.rfind("RUNNING ", 0) != 0 || what == "RUNNING " + victim) return false;
    }
    return client.n_workers() == 6;
  }, 60s);
  MESSAGE("jobs before the crash: " << describe(before) << "; after: " << describe(after));
  CHECK(back);
  for (const auto& [id, what] : after) CHECK_MESSAGE(before.count(id) == 1, "job " << id << " was submitted in place of a requeued one");
  for (const auto& id : victim_jobs) CHECK_MESSAGE(after.count(id) == 1, "the requeued job " << id << " is gone");
  CHECK(client.n_workers() == 6);
  for (const auto& w : client.status().workers) CHECK(w.host != victim);

  // Every value right; what was held only on the dead node ran once more, nothing else did.
  try {
    const auto got = client.gather(blocks);
    MESSAGE("crash recovery with Slurm first: every value in hand " << seconds_since(t0) << " s after the crash");
    for (std::int64_t i = 0; i < n; ++i) CHECK(block_errors(got[static_cast<std::size_t>(i)], i) == 0);
  } catch (const std::exception& e) {
    FAIL_CHECK("gather after the crash failed: " << std::string(e.what()));
  }
  const auto sum = client.submit(block_sum, dir, std::int64_t{0}, blocks);
  try {
    CHECK(sum.result() == expected_block_sum(n));
  } catch (const std::exception& e) {
    FAIL_CHECK("a task over every block failed: " << std::string(e.what()));
  }
  for (std::int64_t i = 0; i < n; ++i) {
    const auto r = runs(dir, "block", i);
    const bool first_there = r.front().host == victim;
    CHECK_MESSAGE(r.size() == (first_there ? 2u : 1u), "block " << i << " ran " << r.size() << " times");
  }
  gone.undo();  // cable in, slurmd again (the node is empty now)
}

TEST_CASE("MultinodeHerd.Partition.HealingWithinTheTimeoutChangesNothing" * doctest::timeout(200)) {
  bed::require_whole_bed(3);
  const auto nodes = bed::nodes();
  const std::string cut = nodes.back();
  const std::string name = unique("mn-heal");
  Scratch s(name);
  const std::string dir = s.runs();
  herd::Client client{with_timeout(herd::SlurmCluster{pool(name, s)}, kTimeout)};
  client.scale(6);
  client.wait_for_workers(6, 120s);
  require_spread(client, 2);
  const auto names = worker_names(client);

  // 36 blocks of 0.5 s: 3 s of work on 6 workers. The node is cut from the login host (the
  // scheduler and this client) for half the timeout while the map runs.
  constexpr std::int64_t n = 36;
  std::vector<std::int64_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  constexpr auto cut_for = kTimeout / 2;
  Watch watch(client);
  const auto t0 = Clock::now();
  auto blocks = client.map(block, std::vector<std::string>(n, dir), ids, std::vector<std::int32_t>(n, 500));
  std::future<std::vector<Block>> gathering;
  {
    REQUIRE(eventually([&] { return count_runs(dir, "block", n) >= 6; }, 30s));  // every worker busy
    auto partition = bed::partition(cut, "login");
    gathering = std::async(std::launch::async, [&] { return client.gather(blocks); });  // in gather meanwhile
    std::this_thread::sleep_for(cut_for);
  }
  const auto got = gathering.get();
  const double took = seconds_since(t0);
  watch.stop();
  MESSAGE("map of 36 x 0.5 s with " << cut << " cut off for " << std::chrono::duration<double>(cut_for).count()
                                    << " s: " << took << " s");
  // The node's results could not arrive before the cut healed (so it was felt), and the
  // retransmissions after it took at most a few seconds.
  CHECK(took >= std::chrono::duration<double>(cut_for).count());
  CHECK(took <= std::chrono::duration<double>(cut_for).count() + 12.0);
  std::set<std::string> hosts;
  for (std::int64_t i = 0; i < n; ++i) {
    CHECK_MESSAGE(block_errors(got[static_cast<std::size_t>(i)], i) == 0, "block " << i);
    CHECK_MESSAGE(runs(dir, "block", i).size() == 1, "block " << i << " ran " << runs(dir, "block", i).size() << " times");
    hosts.insert(got[static_cast<std::size_t>(i)].host);
  }
  CHECK(hosts.count(cut) == 1);  // the cut node's own results came through
  // No worker was lost or added at any moment.
  CHECK(watch.fewest() == 6);
  CHECK(watch.most() == 6);
  CHECK(watch.names() == names);
  CHECK(worker_names(client) == names);
  CHECK(jobs_where(name).size() == 6);
}

TEST_CASE("MultinodeHerd.Partition.PartialEndsRightOrClearNeverLoops" * doctest::timeout(240)) {
  bed::require_whole_bed(3);
  const auto nodes = bed::nodes();
  const std::string a = nodes[0], b = nodes[1], c = nodes[2];
  const std::string name = unique("mn-partial");
  Scratch s(name);
  const std::string dir = s.runs();
  // One worker per node, pinned: inputs are made on A only; consumers ("taker") may run on B
  // or C, and some ("b_only") on B only.
  auto pinned = [&](const std::string& node, std::map<std::string, double> offers) {
    return pool(name + "-" + node, s).pool(node).job_extra_directives({"--nodelist=" + node}).resources(std::move(offers));
  };
  herd::Client client{with_timeout(herd::SlurmCluster{pinned(a, {{"maker", 1}})}
                                       .add_pool(pinned(b, {{"taker", 1}, {"b_only", 1}}))
                                       .add_pool(pinned(c, {{"taker", 1}})),
                                   kTimeout)};
  for (const auto& node : {a, b, c}) client.scale(1, node);
  client.wait_for_workers(3, 120s);
  require_spread(client, 1);
  const auto names = worker_names(client);
  // A and B cannot hear each other; both hear the scheduler (and C).
  auto cut = bed::partition(a, b);

  // Two inputs of 1 MiB made on A; `per_input` consumers of each needing `resource`. Whatever
  // herd does when B cannot fetch from A (run the consumer elsewhere, fetch from another holder,
  // compute the input again, or fail naming A), it ends within a few timeouts, however many
  // consumers wait on the unreachable copy: a bound that grows with their number (each one
  // finding out for itself, a timeout at a time) is a loop in slow motion for a map of
  // thousands. Returns how long it took, and counts what came out right and what failed clearly.
  struct Outcome {
    double took = 0;
    bool ended = false;
    std::size_t ok = 0, failed = 0;
    std::set<std::string> where;
    std::string first_error;
  };
  auto consume = [&](std::int64_t first, const std::string& resource, std::int64_t per_input) {
    std::vector<herd::Future<std::vector<char>>> inputs;
    for (std::int64_t i = first; i < first + 2; ++i) {
      inputs.push_back(client.submit(herd::TaskOptions{}.resource("maker", 1), big, dir, i, std::int64_t{1}));
    }
    client.wait(inputs);
    Outcome o;
    const auto t0 = Clock::now();
    std::vector<herd::Future<Digest>> takers;
    for (std::int64_t j = 0; j < 2 * per_input; ++j) {
      takers.push_back(client.submit(herd::TaskOptions{}.resource(resource, 1), digest, dir, first * 100 + j,
                                     inputs[static_cast<std::size_t>(j % 2)]));
    }
    const auto bound = 4 * kTimeout + 20s;
    o.ended = client.wait(takers, bound);
    o.took = seconds_since(t0);
    CHECK_MESSAGE(o.ended, "consumers of " << resource << " not done " << std::chrono::duration<double>(bound).count()
                                           << " s after they were submitted: a loop?");
    for (const auto& f : takers) {
      if (!f.done()) continue;
      try {
        const Digest d = f.result();
        ++o.ok;
        o.where.insert(d.host);
        CHECK(d.size == (1u << 20));
        CHECK(d.wrong == 0);
      } catch (const herd::Error& e) {
        ++o.failed;
        const std::string what = e.what();  // a clear error names the host it could not reach
        if (o.first_error.empty()) o.first_error = what;
        CHECK_MESSAGE((what.find(a) != std::string::npos || what.find("198.18.0.11") != std::string::npos), what);
      }
    }
    if (!o.ended) client.cancel(takers);
    // Never a loop: each input made at most twice (once more where it can be reached), no
    // consumer run more than twice.
    for (std::int64_t i = first; i < first + 2; ++i) CHECK(runs(dir, "big", i).size() <= 2);
    for (std::int64_t j = 0; j < 2 * per_input; ++j) CHECK(runs(dir, "digest", first * 100 + j).size() <= 2);
    return o;
  };

  // Consumers that C can run too: every value right. B tried (its fetch from A can only fail by
  // the timeout, as the cut is silent), and the consumer went elsewhere.
  const Outcome either = consume(0, "taker", 6);
  MESSAGE("partial partition " << a << " / " << b << ", consumers on " << b << " or " << c << ": ended after "
                               << either.took << " s, " << either.ok << " right (on " << either.where.size()
                               << " host(s)), " << either.failed << " failed");
  CHECK(either.ok == 12);
  CHECK(either.took >= std::chrono::duration<double>(kTimeout).count() - 1.0);

  // Consumers only B can run, of inputs only A holds: no way to the values; a clear error.
  const Outcome only_b = consume(1, "b_only", 2);
  MESSAGE("consumers only " << b << " can run, inputs only on " << a << ": ended after " << only_b.took << " s, "
                            << only_b.ok << " right, " << only_b.failed << " failed"
                            << (only_b.first_error.empty() ? "" : ", e.g.: " + only_b.first_error));
  CHECK(only_b.ok + only_b.failed == 4);

  // Nobody was declared lost for any of it.
  CHECK(worker_names(client) == names);
}

TEST_CASE("MultinodeHerd.SlowLink.BigInputOutlastsTheTimeoutAndArrives" * doctest::timeout(240)) {
  bed::require_whole_bed(2);
  const auto nodes = bed::nodes();
  const std::string from = nodes[0], to = nodes[1];
  const std::string name = unique("mn-slow");
  Scratch s(name);
  const std::string dir = s.runs();
  auto pinned = [&](const std::string& node, const std::string& offer) {
    return pool(name + "-" + node, s, "1500M").pool(node).job_extra_directives({"--nodelist=" + node}).resources({{offer, 1}});
  };
  herd::Client client{with_timeout(herd::SlurmCluster{pinned(from, "maker")}.add_pool(pinned(to, "taker")), kTimeout)};
  client.scale(1, from);
  client.scale(1, to);
  client.wait_for_workers(2, 120s);
  const auto names = worker_names(client);

  // 256 MiB made on one node, at full speed.
  constexpr std::int64_t mib = 256;
  auto input = client.submit(herd::TaskOptions{}.resource("maker", 1), big, dir, std::int64_t{0}, mib);
  client.wait(std::vector<herd::Future<std::vector<char>>>{input});
  REQUIRE(input.done());

  // The other node's link at 120 Mbit/s: 256 MiB take about 18 s, longer than the timeout.
  constexpr double rate_mbit = 120;
  auto slow = bed::slow(to, "120mbit");
  Watch watch(client);
  const auto t0 = Clock::now();
  auto out = client.submit(herd::TaskOptions{}.resource("taker", 1), digest, dir, std::int64_t{0}, input);
  Digest d;
  try {
    d = out.result();
  } catch (const std::exception& e) {
    FAIL_CHECK("the big input did not arrive: " << std::string(e.what()));
  }
  const double took = seconds_since(t0);
  watch.stop();
  const double wire_s = static_cast<double>(mib << 20) * 8 / (rate_mbit * 1e6);
  MESSAGE("256 MiB over a " << rate_mbit << " Mbit/s link (" << wire_s << " s at line rate): the consumer had it after "
                            << took << " s (timeout " << std::chrono::duration<double>(kTimeout).count() << " s)");
  CHECK(d.size == (static_cast<std::uint64_t>(mib) << 20));
  CHECK(d.wrong == 0);
  CHECK(d.host == to);
  // It really took longer than the timeout (the link was the bottleneck), and not absurdly longer.
  CHECK(took > std::chrono::duration<double>(kTimeout).count());
  CHECK(took >= wire_s * 0.9);
  CHECK(took <= wire_s * 2 + 15);
  // Nothing recomputed, nothing retried, nobody lost.
  CHECK(runs(dir, "big", 0).size() == 1);
  CHECK(runs(dir, "digest", 0).size() == 1);
  CHECK(watch.fewest() == 2);
  CHECK(watch.names() == names);
}

namespace {
/// A client whose pool puts its workers on `node`, with the bed's timeout.
herd::Client client_on(const std::string& node, const std::string& name, Scratch& s) {
  return herd::Client{with_timeout(
      herd::SlurmCluster{pool(name, s, "1500M").job_extra_directives({"--nodelist=" + node})}, kTimeout)};
}

/// Scales the client's pool to one worker and returns it, checked to run on `node`.
herd::WorkerInfo one_worker_on(herd::Client& client, const std::string& node) {
  client.scale(1);
  client.wait_for_workers(1, 120s);
  const auto workers = client.status().workers;
  REQUIRE(workers.size() == 1);
  REQUIRE(workers[0].host == node);
  return workers[0];
}
}  // namespace

TEST_CASE("MultinodeHerd.Firewall.OnlyTheDataPortOpenBigResultsStillArrive" * doctest::timeout(200)) {
  // A site that opens only each worker's data port: the lane the worker offers for a big
  // result cannot be reached (its SYNs vanish). The client waits one timeout for it, then asks
  // over the data port; the value is whole, the task ran once, and the next big result from
  // that worker comes over the data port at once.
  bed::require_whole_bed(1);
  const std::string node = bed::nodes()[0];
  const std::string name = unique("mn-fw");
  Scratch s(name);
  const std::string dir = s.runs();
  herd::Client client = client_on(node, name, s);
  const herd::WorkerInfo worker = one_worker_on(client, node);
  const std::string data_port = worker.address.substr(worker.address.rfind(':') + 1);
  auto fw = bed::firewall(node, {data_port});

  auto check = [](const std::vector<char>& v, std::int64_t mib) {
    std::int64_t wrong = 0;
    for (std::size_t k = 0; k < v.size(); ++k) wrong += static_cast<std::uint8_t>(v[k]) != big_byte(k);
    CHECK(v.size() == (static_cast<std::size_t>(mib) << 20));
    CHECK(wrong == 0);
  };
  constexpr std::int64_t mib = 48;
  auto first = client.submit(big, dir, std::int64_t{0}, mib);
  client.wait(std::vector<herd::Future<std::vector<char>>>{first});
  auto t0 = Clock::now();
  check(first.result(), mib);
  const double first_s = seconds_since(t0);
  auto second = client.submit(big, dir, std::int64_t{1}, mib);
  client.wait(std::vector<herd::Future<std::vector<char>>>{second});
  t0 = Clock::now();
  check(second.result(), mib);
  const double second_s = seconds_since(t0);
  MESSAGE("behind the firewall: the first 48 MiB took " << first_s << " s (the lane's timeout, then the data port), "
                                                         << "the second " << second_s << " s");
  // The first waited out the timeout (the scheduler's, which clients adopt) for the lane, and
  // not two of them; the second did not try the lane again.
  const double timeout_s = std::chrono::duration<double>(kTimeout).count();
  CHECK(first_s >= timeout_s * 0.9);
  CHECK(first_s < 2 * timeout_s + 10);
  CHECK(second_s < timeout_s * 0.9);
  CHECK(runs(dir, "big", 0).size() == 1);
  CHECK(runs(dir, "big", 1).size() == 1);
  CHECK(client.status().workers.size() == 1);  // nobody was lost on the way
}

TEST_CASE("MultinodeHerd.Firewall.LoginOpensOnlyTheSchedulerBigScattersStillArrive" * doctest::timeout(200)) {
  // A big scattered value goes from the client's own data port straight to a worker, over the
  // bed's network. A login node that opens only the scheduler's port (and Slurm's) keeps the
  // workers out of that port: the worker waits one timeout for it and says so, and the client
  // sends the value through the scheduler instead. It arrives whole, and the next big scatter
  // goes through the scheduler at once.
  bed::require_whole_bed(1);
  const std::string node = bed::nodes()[0];
  const std::string name = unique("mn-sfw");
  Scratch s(name);
  const std::string dir = s.runs();
  herd::Client client = client_on(node, name, s);
  (void)one_worker_on(client, node);

  constexpr std::int64_t mib = 24;
  std::vector<char> value(static_cast<std::size_t>(mib) << 20);
  for (std::size_t k = 0; k < value.size(); ++k) value[k] = static_cast<char>(big_byte(k));
  auto scatter_and_digest = [&](std::int64_t id) {
    const auto t0 = Clock::now();
    auto shared = client.scatter(value);
    const Digest d = client.submit(digest, dir, id, shared).result(120s);
    CHECK(d.host == node);
    CHECK(d.size == value.size());
    CHECK(d.wrong == 0);
    return seconds_since(t0);
  };
  const double open_s = scatter_and_digest(0);

  const std::string sched = client.scheduler_address();
  auto fw = bed::firewall("login", {sched.substr(sched.rfind(':') + 1)});
  const double first_s = scatter_and_digest(1);
  const double second_s = scatter_and_digest(2);
  MESSAGE("24 MiB scattered and read on " << node << ": " << open_s << " s from the client's port, " << first_s
                                          << " s behind the login's firewall (one timeout, then through the "
                                          << "scheduler), then " << second_s << " s");
  const double timeout_s = std::chrono::duration<double>(kTimeout).count();
  CHECK(first_s >= timeout_s * 0.9);  // the worker did try the client's port, once
  CHECK(first_s < 2 * timeout_s + 10);
  CHECK(second_s < timeout_s * 0.9);  // and the client did not make it try again
  for (std::int64_t i = 0; i < 3; ++i) CHECK(runs(dir, "digest", i).size() == 1);
  CHECK(client.status().workers.size() == 1);  // nobody was lost on the way
}

TEST_CASE("MultinodeHerd.Firewall.LoginOpensOnlyTheSchedulerWorkersStayOnZeroMq" * doctest::timeout(200)) {
  // A login node that opens only the scheduler's port (and Slurm's) from the start: a worker
  // cannot reach the control links' port beside it (its SYNs vanish). It joins and works over
  // ZeroMQ meanwhile and after, and is not counted lost for the link it could not make.
  bed::require_whole_bed(1);
  const std::string node = bed::nodes()[0];
  const std::string name = unique("mn-lfw");
  Scratch s(name);
  const std::string dir = s.runs();
  herd::Client client = client_on(node, name, s);
  const std::string sched = client.scheduler_address();
  auto fw = bed::firewall("login", {sched.substr(sched.rfind(':') + 1)});
  (void)one_worker_on(client, node);
  std::vector<std::int32_t> ms(12, 200);
  auto where = client.map(where_am_i, ms);
  for (auto& f : where) CHECK(split_on(f.result(120s), '|')[0] == node);
  // Past the timeout the worker gave up on the link, and works on.
  std::this_thread::sleep_for(kTimeout + 6s);
  auto again = client.map(where_am_i, std::vector<std::int32_t>(6, 0));
  for (auto& f : again) CHECK(split_on(f.result(60s), '|')[0] == node);
  const auto workers = client.status().workers;
  REQUIRE(workers.size() == 1);  // nobody was lost on the way
  CHECK_FALSE(workers[0].link);
}
