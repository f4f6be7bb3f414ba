// Big results (issue 18). Results bigger than memory: a worker with a memory limit spills its least-recently-used
// results to its local directory and reads them back when a task or a fetch asks; the files go
// when the results are released and when the worker leaves; a full disk leaves the results in
// memory (nothing lost), pauses the worker and says why in status. Replicate and broadcast:
// copies on several workers, a lost holder costs no recompute while a copy is left. Real worker
// processes on loopback, real files.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <herd/herd.hpp>

#include "support/process_util.hpp"

using namespace std::chrono_literals;
using herd::testing::eventually;
using herd::testing::read_file;
using herd::testing::spawn_worker;
namespace fs = std::filesystem;

namespace {

std::uint8_t byte_at(int seed, std::size_t i) { return static_cast<std::uint8_t>((seed * 131 + i * 7 + (i >> 12)) & 0xff); }

std::vector<std::uint8_t> block(int seed, int mib) {
  std::vector<std::uint8_t> v(static_cast<std::size_t>(mib) << 20);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = byte_at(seed, i);
  return v;
}
HERD_TASK(block);

std::uint64_t fnv(const std::vector<std::uint8_t>& v) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::uint8_t b : v) h = (h ^ b) * 1099511628211ull;
  return h;
}

std::uint64_t checksum(std::vector<std::uint8_t> v) { return fnv(v); }
HERD_TASK(checksum);

/// block(), counting its runs in `marker`.
std::vector<std::uint8_t> counted_block(std::string marker, int seed, int mib) {
  std::ofstream(marker, std::ios::app) << "run\n";
  return block(seed, mib);
}
HERD_TASK(counted_block);

bool right(const std::vector<std::uint8_t>& v, int seed, int mib) {
  if (v.size() != (static_cast<std::size_t>(mib) << 20)) return false;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i] != byte_at(seed, i)) return false;
  }
  return true;
}

struct TempDir {
  std::string path;
  TempDir() {
    std::string p = fs::temp_directory_path().string() + "/herd-spill-test-XXXXXX";
    REQUIRE(::mkdtemp(p.data()) != nullptr);
    path = p;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

/// The private directories workers made under `base`.
std::vector<std::string> worker_dirs(const std::string& base) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(base)) {
    if (e.path().filename().string().rfind("herd-worker-", 0) == 0) out.push_back(e.path().string());
  }
  return out;
}

std::size_t files_in(const std::string& dir) {
  std::error_code ec;
  std::size_t n = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) ++n;
  return n;
}

herd::WorkerInfo only_worker(herd::Client& client) {
  auto s = client.status();
  REQUIRE(s.workers.size() == 1);
  return s.workers[0];
}

}  // namespace

TEST_CASE("Spill.ThreeTimesTheMemoryLimit.EveryValueComesBackRight" * doctest::timeout(240)) {
  TempDir local;
  constexpr int kN = 75, kMiB = 8;  // 600 MiB of results on a worker limited to 200 MiB
  std::vector<int> seeds(kN);
  std::iota(seeds.begin(), seeds.end(), 1);
  std::string dir;
  {
    herd::Client client{herd::LocalCluster{1}.worker_args({"--memory-limit", "200M", "--local-directory", local.path})};
    auto blocks = client.map(block, seeds, std::vector<int>(kN, kMiB));
    client.wait(blocks);
    const auto dirs = worker_dirs(local.path);
    REQUIRE(dirs.size() == 1);
    dir = dirs[0];
    // At most the target share (60% of 200 MiB) stays in memory: the rest is on disk.
    CHECK(files_in(dir) >= static_cast<std::size_t>(kN - 15));
    CHECK(eventually([&] { return only_worker(client).spilled_bytes >= (std::uint64_t{kN - 15} * kMiB << 20); }, 5s));
    const auto w = only_worker(client);
    CHECK(w.memory_rss < (200u << 20));
    CHECK(w.stored == static_cast<std::uint64_t>(kN));
    // Tasks read the spilled results as inputs...
    auto sums = client.gather(client.map(checksum, blocks));
    REQUIRE(sums.size() == static_cast<std::size_t>(kN));
    int wrong = 0;
    for (int i = 0; i < kN; ++i) wrong += sums[static_cast<std::size_t>(i)] != fnv(block(seeds[static_cast<std::size_t>(i)], kMiB));
    CHECK(wrong == 0);
    // ... and the client fetches them, byte for byte (in groups: the client has no limit, but
    // the test need not hold 600 MiB at once).
    for (int g = 0; g < kN; g += 15) {
      std::vector<herd::Future<std::vector<std::uint8_t>>> part(blocks.begin() + g, blocks.begin() + g + 15);
      auto values = client.gather(part);
      for (int i = 0; i < 15; ++i) wrong += !right(values[static_cast<std::size_t>(i)], seeds[static_cast<std::size_t>(g + i)], kMiB);
    }
    CHECK(wrong == 0);
    CHECK(client.submit(block, 1, 1).result() == block(1, 1));  // the worker still runs tasks
    // Released: the files go.
    blocks.clear();
    CHECK(eventually([&] { return files_in(dir) == 0; }, 10s));
    CHECK(eventually([&] { return only_worker(client).spilled_bytes == 0; }, 5s));
  }
  // The worker left with the client: its directory went with it.
  CHECK(eventually([&] { return !fs::exists(dir); }, 10s));
}

TEST_CASE("Spill.FullDisk.ClearErrorPausedNothingLost" * doctest::timeout(180)) {
  if (::geteuid() != 0) {
    MESSAGE("skipped: mounting a 1 MiB tmpfs needs root");
    return;
  }
  TempDir tmp;
  const std::string mnt = tmp.path + "/small";
  fs::create_directory(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=1M") != 0) {
    MESSAGE("skipped: cannot mount a tmpfs: " << std::strerror(errno));
    return;
  }
  struct Unmount {
    std::string at;
    ~Unmount() { ::umount2(at.c_str(), MNT_DETACH); }
  } unmount{mnt};
  constexpr int kMiB = 12;
  herd::Client client{herd::LocalCluster{1}.worker_args({"--memory-limit", "200M", "--local-directory", mnt})};
  // Results pile up past the target (nothing can spill: 12 MiB files on a 1 MiB disk), then
  // past the pause share (80%): the worker stops starting tasks before its limit.
  std::vector<herd::Future<std::vector<std::uint8_t>>> blocks;
  for (int i = 0; i < 16; ++i) blocks.push_back(client.submit(block, i, kMiB));
  herd::WorkerInfo w;
  REQUIRE(eventually([&] { return !(w = only_worker(client)).paused.empty(); }, 60s));
  MESSAGE("paused: " << w.paused);
  CHECK(w.paused.find("No space left on device") != std::string::npos);
  CHECK(w.paused.find("stays in memory") != std::string::npos);
  CHECK(w.spilled_bytes == 0);
  CHECK(client.status().to_text().find("paused: ") != std::string::npos);
  std::size_t done = 0;
  for (auto& f : blocks) done += f.done();
  CHECK(done < blocks.size());  // some wait for memory
  // Nothing lost: what finished comes back right.
  int wrong = 0;
  std::vector<int> finished;
  for (int i = 0; i < 16; ++i) {
    if (blocks[static_cast<std::size_t>(i)].done()) finished.push_back(i);
  }
  for (int i : finished) wrong += !right(blocks[static_cast<std::size_t>(i)].result(), i, kMiB);
  CHECK(wrong == 0);
  // Released results make room: the worker resumes and the rest run, right.
  for (int i : finished) blocks[static_cast<std::size_t>(i)] = {};
  for (int i = 0; i < 16; ++i) {
    auto& f = blocks[static_cast<std::size_t>(i)];
    if (!f.valid()) continue;
    wrong += !right(f.result(60s), i, kMiB);
    f = {};
  }
  CHECK(wrong == 0);
  CHECK(eventually([&] { return only_worker(client).paused.empty(); }, 10s));
}

namespace {
/// `mib` MiB (+ `extra` bytes) of a pattern, as a string (a str on the wire) and as bytes (bin).
std::string text_block(int seed, int mib, int extra) {
  std::string s((static_cast<std::size_t>(mib) << 20) + static_cast<std::size_t>(extra), '\0');
  for (std::size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>(byte_at(seed, i));
  return s;
}
HERD_TASK(text_block);
std::vector<char> char_block(int seed, int mib, int extra) {
  const std::string s = text_block(seed, mib, extra);
  return {s.begin(), s.end()};
}
HERD_TASK(char_block);
}  // namespace

TEST_CASE("Gather.LargeResultsHandedOverRightEveryTime" * doctest::timeout(120)) {
  // Results of 4 MiB (kHandOverBytes) and more are handed over to result(), which copies them
  // into the value 4 MiB (kHandOverSlice) at a time and lets the received bytes go: every value
  // is right, whatever its size against the slice, and asking again fetches it again, right
  // again. Smaller ones stay with their future as before.
  herd::Client client{herd::LocalCluster{1}};
  for (int mib : {4, 32}) {
    for (int extra : {0, 1, (4 << 20) - 1}) {
      auto f = client.submit(text_block, 3, mib, extra);
      const std::string expected = text_block(3, mib, extra);
      CHECK_MESSAGE(f.result(60s) == expected, mib << " MiB + " << extra);
      CHECK_MESSAGE(f.result(60s) == expected, "again, " << mib << " MiB + " << extra);
    }
  }
  auto small = client.submit(text_block, 4, 3, 0);  // under the hand-over size: kept
  CHECK(small.result(60s) == text_block(4, 3, 0));
  CHECK(small.result(60s) == text_block(4, 3, 0));
  std::vector<herd::Future<std::vector<char>>> blocks;
  for (int seed = 0; seed < 3; ++seed) blocks.push_back(client.submit(char_block, seed, 33, seed));
  const auto values = client.gather(blocks);
  REQUIRE(values.size() == 3);
  for (int seed = 0; seed < 3; ++seed) CHECK(values[static_cast<std::size_t>(seed)] == char_block(seed, 33, seed));
  CHECK(blocks[1].result(60s) == char_block(1, 33, 1));  // gathered, then asked again
}

namespace {
/// Two workers with different resources (so that we know where a result is made), and
/// counted_block(seed, mib) made on the first, "wa", then copied to the second, "wb": two holders.
struct TwoHolders {
  herd::LocalCluster cluster{0};
  std::string address;
  TempDir tmp;
  std::string marker = tmp.path + "/runs";
  pid_t wa = 0, wb = 0;
  std::unique_ptr<herd::Client> client;
  herd::Future<std::vector<std::uint8_t>> block;

  TwoHolders(int seed, int mib) {
    cluster.env("HERD_TIMEOUT_MS", "1500").env("HERD_HEARTBEAT_MS", "100");
    address = cluster.start();
    wa = spawn_worker(address, "wa", "a=1", tmp.path + "/a.log");
    wb = spawn_worker(address, "wb", "b=1", tmp.path + "/b.log");
    ::setenv("HERD_TIMEOUT_MS", "1500", 1);  // the client gives up on a silent holder in 1.5 s
    client = std::make_unique<herd::Client>(address);
    ::unsetenv("HERD_TIMEOUT_MS");
    client->wait_for_workers(2, 20s);
    block = client->submit(herd::TaskOptions{}.resource("a", 1), counted_block, marker, seed, mib);
    block.wait();
    client->replicate(std::vector{block}, 2);
    REQUIRE(eventually([&] {
      std::size_t n = 0;
      for (const auto& w : client->status().workers) n += w.stored;
      return n == 2;
    }, 30s));
  }
  ~TwoHolders() { ::kill(wb, SIGTERM); }
};

std::uint64_t self_rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}
}  // namespace

TEST_CASE("Replicate.LostHolderCostsNoRecompute" * doctest::timeout(120)) {
  TwoHolders h(5, 6);  // 6 MiB: streamed
  REQUIRE(::kill(h.wa, SIGKILL) == 0);  // the worker that made it goes
  auto sum = h.client->submit(herd::TaskOptions{}.resource("b", 1), checksum, h.block);
  CHECK(sum.result(60s) == fnv(block(5, 6)));
  CHECK(right(h.block.result(), 5, 6));
  CHECK(read_file(h.marker) == "run\n");  // made once: the copy on wb served
}

TEST_CASE("Transfer.HolderKilledMidTransfer.ReceiverFailsOverValueRight" * doctest::timeout(120)) {
  // A 384 MiB result held by two workers; the client streams it from the worker that made it
  // (its first holder), which is SIGKILLed once the bytes are arriving. The client fails over
  // to the copy: the value is right and the task did not run again.
  constexpr int kMiB = 384;
  TwoHolders h(7, kMiB);
  const std::uint64_t rss0 = self_rss_bytes();
  std::atomic<bool> done{false};
  std::vector<std::uint8_t> got;
  std::string error;
  std::thread gather([&] {
    try {
      got = h.block.result(60s);
    } catch (const std::exception& e) {
      error = e.what();
    }
    done = true;
  });
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (!done && self_rss_bytes() < rss0 + (std::uint64_t{32} << 20) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  const bool mid = !done.load();
  REQUIRE(::kill(h.wa, SIGKILL) == 0);
  gather.join();
  CHECK(mid);  // killed while the bytes were on their way
  CHECK(error.empty());
  CHECK(right(got, 7, kMiB));
  CHECK(read_file(h.marker) == "run\n");  // the copy served: made once
}

TEST_CASE("Replicate.ScatterBroadcastReachesEveryWorker" * doctest::timeout(120)) {
  herd::Client client{herd::LocalCluster{4}};
  client.wait_for_workers(4, 20s);
  const auto value = block(9, 3);
  auto shared = client.scatter(value, true);
  auto held_by = [&] {
    std::size_t n = 0;
    for (const auto& w : client.status().workers) n += w.stored == 1;
    return n;
  };
  CHECK(eventually([&] { return held_by() == 4; }, 20s));
  // Tasks anywhere read it; every copy is the same.
  std::vector<herd::Future<std::uint64_t>> sums;
  for (int i = 0; i < 16; ++i) sums.push_back(client.submit(checksum, shared));
  for (auto s : client.gather(sums)) CHECK(s == fnv(value));
  CHECK(shared.result() == value);
  // Released: every copy goes.
  shared = {};
  sums.clear();
  CHECK(eventually([&] {
    std::size_t n = 0;
    for (const auto& w : client.status().workers) n += w.stored;
    return n == 0;
  }, 20s));
}

TEST_CASE("Scatter.BigValueGoesStraightFromTheClientPastTheMessageLimit" * doctest::timeout(120)) {
  // The scheduler takes no message over 1 MiB. A scattered value of 24 MiB never passes through
  // it: the worker chosen fetches it from the client's own data port, streamed, and reports it
  // held. A broadcast copies it to every worker, tasks read it right, and so does the client.
  herd::Client client{herd::LocalCluster{3}.env("HERD_MAX_MESSAGE_BYTES", std::to_string(1 << 20))};
  client.wait_for_workers(3, 20s);
  const auto value = block(11, 24);
  auto everywhere = client.scatter(value, true);
  CHECK(eventually([&] {
    std::size_t n = 0;
    for (const auto& w : client.status().workers) n += w.stored == 1;
    return n == 3;
  }, 30s));
  std::vector<herd::Future<std::uint64_t>> sums;
  for (int i = 0; i < 6; ++i) sums.push_back(client.submit(checksum, everywhere));
  for (auto s : client.gather(sums)) CHECK(s == fnv(value));
  CHECK(everywhere.result(60s) == value);
  // One more, not broadcast, while the first is held.
  const auto other = block(12, 40);
  auto once = client.scatter(other);
  CHECK(client.submit(checksum, once).result(60s) == fnv(other));
  CHECK(once.result(60s) == other);
  // A small value still goes through the scheduler, as one message.
  CHECK(client.scatter(std::vector<std::uint8_t>(1000, 7)).result(30s) == std::vector<std::uint8_t>(1000, 7));
}
