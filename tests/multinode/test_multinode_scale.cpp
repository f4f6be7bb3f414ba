// Scaling on the multi-node test bed (label multinode; scripts/local-slurm.sh start --nodes 3):
// scale() to one worker per node and down again, a worker retired by name while it holds a big
// result only it has (the result moves to a worker on another node, and is not computed again),
// and an adaptive pool that goes back to 0 jobs while the client holds the values of its futures.
// The same requests as `herd scale`, `herd worker retire` and `herd adapt` (they print the
// herd::PoolChange checked here).
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <herd/herd.hpp>

#include "support/multinode_util.hpp"

using namespace std::chrono_literals;
using namespace herd::testing;
namespace fs = std::filesystem;

namespace {

/// Appends a line to `marker` (every host sees /tmp) and returns `n` bytes: too big to travel
/// with the task's update, so only its worker holds it.
std::string marked_big(const std::string& marker, int n) {
  std::ofstream(marker, std::ios::app) << "run\n";
  return std::string(static_cast<std::size_t>(n), 'm');
}
HERD_TASK(marked_big);

int nap_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}
HERD_TASK(nap_ms);

/// "name@host:stored" of each worker, for the failure messages.
std::string workers_text(const herd::Client& client) {
  std::string out;
  for (const auto& w : client.status().workers) out += w.name + "@" + w.host + ":" + std::to_string(w.stored) + " ";
  return out;
}

std::size_t lines(const std::string& path) {
  std::ifstream in(path);
  std::size_t n = 0;
  for (std::string l; std::getline(in, l);) ++n;
  return n;
}

}  // namespace

TEST_CASE("MultinodeScale.ScaleRetireAdapt.OverThreeNodes" * doctest::timeout(280)) {
  bed::require_whole_bed(3);
  const std::string name = unique("mn-scale");
  const std::string dir = "/tmp/" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  herd::Client client{herd::SlurmCluster{herd::SlurmOptions{}
                                             .job_name(name)
                                             .partition("cpu")
                                             .cores(1)
                                             .memory("400M")
                                             .walltime("00:15:00")
                                             .log_directory(dir + "/logs/a")}};
  const std::string pool = client.pools().at(0).name;

  herd::PoolChange c = client.scale(3, pool);
  CHECK(c.before == 0);
  CHECK(c.after == 3);
  CHECK(c.submitted == 3);
  CHECK(c.to_text().find("pool " + pool + ": 0 → 3 workers (3 jobs submitted)") != std::string::npos);
  client.wait_for_workers(3, 120s);
  std::set<std::string> hosts;
  for (const auto& w : client.status().workers) hosts.insert(w.host);
  CHECK(hosts.size() == 3);  // Slurm spreads them (CR_LLN): one per node

  // A big result only its worker holds; that worker retired by name: the result moves to a
  // worker on another node first, and is fetched from there, not computed again.
  const std::string marker = dir + "/big.marker";
  {
  auto big = client.submit(marked_big, marker, 256 << 10);
  client.wait(std::vector<herd::Future<std::string>>{big});
  std::string holder, holder_host;
  for (const auto& w : client.status().workers) {
    if (w.stored > 0) {
      holder = w.name;
      holder_host = w.host;
    }
  }
  REQUIRE(!holder.empty());
  c = client.retire_worker(holder);
  CHECK(c.worker == holder);
  CHECK(c.note.find("1 result(s) only it holds") != std::string::npos);
  CHECK(c.note.find("copied to a worker that stays") != std::string::npos);
  CHECK(c.after == 2);  // the fixed pool shrinks by its job: not replaced
  CHECK(eventually([&] {
    const auto ws = client.status().workers;
    return ws.size() == 2 && std::none_of(ws.begin(), ws.end(), [&](const herd::WorkerInfo& w) { return w.name == holder; });
  }, 60s));
  CHECK(big.result().size() == (256u << 10));
  CHECK(lines(marker) == 1);  // moved, not recomputed
  INFO("retired " << holder << " on " << holder_host << "; now " << workers_text(client));
  std::string now_on;
  for (const auto& w : client.status().workers) {
    if (w.stored > 0) now_on = w.host;
  }
  CHECK(!now_on.empty());
  CHECK(now_on != holder_host);
  CHECK(queued(name).size() == 2);
  }  // big released

  // Adaptive 0-3 with 30 tasks and every future kept: the pool grows, then goes back to 0 jobs
  // (the small values are in the client's hands; the big one was released first).
  c = client.adapt(0, 3, pool, 3s);
  CHECK(c.adaptive);
  auto fs = client.map(nap_ms, std::vector<int>(30, 500));
  for (int v : client.gather(fs)) CHECK(v == 500);
  CHECK(eventually([&] { return client.n_workers() == 0 && queued(name).empty(); }, 90s));
  CHECK(fs.front().result() == 500);
  fs::remove_all(dir);
}
