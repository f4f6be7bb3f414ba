// Gangs on a real LocalCluster: all-or-nothing placement on distinct workers, the rendezvous
// through the scheduler, all-reduce over the CPU ring between worker processes, and failure of
// the whole gang when one rank raises, is cancelled or loses its worker.
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <herd/collective.hpp>
#include <herd/herd.hpp>

using namespace std::chrono_literals;

namespace {

std::int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string tmp_path(const std::string& what) {
  return "/tmp/herd-gang-" + std::to_string(::getpid()) + "-" + what;
}

}  // namespace

// ---- tasks ----

/// (rank, size, worker name), as the member sees them both ways.
std::tuple<int, int, std::string> identify() {
  herd::Communicator& comm = herd::gang();
  if (comm.rank() != herd::this_task().gang_rank || comm.size() != herd::this_task().gang_size) {
    throw std::logic_error("gang() and this_task() disagree");
  }
  return {comm.rank(), comm.size(), herd::this_task().worker};
}
HERD_TASK(identify);

/// Every collective once: int64 sum, float avg, int32 max/min, a broadcast, a barrier.
std::vector<double> collectives(int n) {
  herd::Communicator& comm = herd::gang();
  const int r = comm.rank();
  std::vector<std::int64_t> sum(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) sum[static_cast<std::size_t>(i)] = static_cast<std::int64_t>(i) * (r + 1);
  comm.allreduce(sum);
  std::vector<float> avg(static_cast<std::size_t>(n), static_cast<float>(r));
  comm.allreduce(avg, herd::ReduceOp::avg);
  std::vector<std::int32_t> mx{r, -r}, mn{r, -r};
  comm.allreduce(mx, herd::ReduceOp::max);
  comm.allreduce(mn, herd::ReduceOp::min);
  std::vector<double> bc(3, r == comm.size() - 1 ? 2.5 : -1.0);
  comm.broadcast(bc, comm.size() - 1);
  comm.barrier();
  return {static_cast<double>(sum.back()), static_cast<double>(avg.front()), static_cast<double>(avg.back()),
          static_cast<double>(mx[0]), static_cast<double>(mx[1]), static_cast<double>(mn[0]),
          static_cast<double>(mn[1]), bc[0], bc[2]};
}
HERD_TASK(collectives);

/// Holds a slot for `ms`, returns when it let go (unix ms).
std::int64_t hold_slot(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return unix_ms();
}
HERD_TASK(hold_slot);

/// A gang member that says when it started (unix ms) after an all-reduce with the others.
std::int64_t started_at(int work_ms) {
  const std::int64_t start = unix_ms();
  herd::Communicator& comm = herd::gang();
  std::vector<std::int32_t> one{1};
  comm.allreduce(one);
  if (one[0] != comm.size()) throw std::logic_error("allreduce of ones gave " + std::to_string(one[0]));
  std::this_thread::sleep_for(std::chrono::milliseconds(work_ms));
  comm.barrier();
  return start;
}
HERD_TASK(started_at);

/// Rank `bad` raises before joining; the others wait in an all-reduce it never joins.
int one_rank_throws(int bad) {
  if (herd::this_task().gang_rank == bad) throw std::runtime_error("rank " + std::to_string(bad) + " broke");
  std::vector<float> g(1000, 1.0f);
  herd::gang().allreduce(g);
  return 0;
}
HERD_TASK(one_rank_throws);

/// Rank 0 fails on the first attempt (marker file absent); every run is logged per rank.
int fails_once(std::string marker) {
  const int rank = herd::this_task().gang_rank;
  std::ofstream(marker + "-rank" + std::to_string(rank), std::ios::app) << "run\n";
  if (rank == 0 && !std::filesystem::exists(marker)) {
    std::ofstream(marker) << "x";
    throw std::runtime_error("first attempt fails");
  }
  std::vector<std::int32_t> v{rank};
  herd::gang().allreduce(v);
  return v[0];
}
HERD_TASK(fails_once);

/// Rank 1's worker process dies while rank 0 waits in an all-reduce.
int rank1_dies() {
  herd::Communicator& comm = herd::gang();
  if (comm.rank() == 1) ::kill(::getpid(), SIGKILL);
  std::vector<double> v(1 << 16, 1.0);
  comm.allreduce(v);
  return 0;
}
HERD_TASK(rank1_dies);

/// Rank 0 takes `ms` before joining (so the others sit in the rendezvous).
int slow_to_join(int ms) {
  if (herd::this_task().gang_rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  herd::gang().barrier();
  return 1;
}
HERD_TASK(slow_to_join);

int not_in_a_gang() {
  herd::gang();
  return 0;
}
HERD_TASK(not_in_a_gang);

int wants_nccl() {
  herd::gang(herd::CollectiveBackend::nccl);
  return 0;
}
HERD_TASK(wants_nccl);

int plus_one(int x) { return x + 1; }
HERD_TASK(plus_one);

/// Rank 0 takes `slow_ms` (only on the first attempt when `marker` is given: it makes the file)
/// before it joins an all-reduce; every run is logged per rank.
int slow_rank0(int slow_ms, std::string marker) {
  const int rank = herd::this_task().gang_rank;
  if (!marker.empty()) std::ofstream(marker + "-rank" + std::to_string(rank), std::ios::app) << "run\n";
  if (rank == 0 && (marker.empty() || !std::filesystem::exists(marker))) {
    if (!marker.empty()) std::ofstream(marker) << "x";
    std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms));
  }
  std::vector<std::int32_t> v{rank};
  herd::gang().allreduce(v);
  return v[0];
}
HERD_TASK(slow_rank0);

// ---- tests ----

/// Lines in rank r's marker file (one per run of that rank); the file is removed.
static int take_rank_runs(const std::string& marker, int r) {
  const std::string path = marker + "-rank" + std::to_string(r);
  int runs = 0;
  {
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) ++runs;
  }
  std::filesystem::remove(path);
  return runs;
}

TEST_CASE("Gang.RanksOnDistinctWorkers" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{3}};
  auto fs = client.submit_gang(3, identify);
  REQUIRE(fs.size() == 3);
  std::set<std::string> workers;
  for (int r = 0; r < 3; ++r) {
    auto [rank, size, worker] = fs[static_cast<std::size_t>(r)].result();
    CHECK(rank == r);
    CHECK(size == 3);
    workers.insert(worker);
  }
  CHECK(workers.size() == 3);
  // A gang of one is a gang too.
  auto solo = client.submit_gang(1, identify);
  CHECK(std::get<1>(solo.at(0).result()) == 1);
}

TEST_CASE("Gang.CollectivesAcrossWorkerProcesses" * doctest::timeout(120)) {
  herd::Client client{herd::LocalCluster{4}};
  for (int n : {1, 7, 300000}) {  // one element, fewer than the ranks... and 2.4 MB of int64
    auto fs = client.submit_gang(4, collectives, n);
    const std::vector<double> first = fs[0].result();
    const double expected_sum = static_cast<double>(n - 1) * (1 + 2 + 3 + 4);
    for (auto& f : fs) {
      const std::vector<double> v = f.result();
      REQUIRE(v.size() == 9);
      CHECK(v[0] == expected_sum);
      CHECK(v[1] == doctest::Approx(1.5));  // avg of 0..3
      CHECK(v[2] == doctest::Approx(1.5));
      CHECK(v[3] == 3);                     // max of r
      CHECK(v[4] == 0);                     // max of -r
      CHECK(v[5] == 0);                     // min of r
      CHECK(v[6] == -3);                    // min of -r
      CHECK(v[7] == 2.5);                   // broadcast from rank 3
      CHECK(v[8] == 2.5);
      CHECK(v == first);                    // every rank holds the same bits
    }
  }
}

TEST_CASE("Gang.WaitsUntilEnoughSlotsAreFree" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{2}};
  // One of the two slots is busy: a gang of two cannot start until it is free.
  auto blocker = client.submit(hold_slot, 1500);
  std::this_thread::sleep_for(100ms);  // let the blocker be placed first (ordering, not a check)
  auto gang = client.submit_gang(2, started_at, 0);
  const std::int64_t released = blocker.result();
  for (auto& f : gang) CHECK(f.result() >= released);
  // Tasks queued behind a waiting gang do not overtake it.
  auto blocker2 = client.submit(hold_slot, 800);
  std::this_thread::sleep_for(100ms);
  auto gang2 = client.submit_gang(2, started_at, 0);
  auto after = client.submit(hold_slot, 0);
  const std::int64_t released2 = blocker2.result();
  std::int64_t gang_start = 0;
  for (auto& f : gang2) gang_start = std::max(gang_start, f.result());
  CHECK(gang_start >= released2);
  CHECK(after.result() >= gang_start);
}

TEST_CASE("Gang.CompetingGangsBothFinish" * doctest::timeout(90)) {
  // 3 workers, gangs of 2 and of 3: they can never run at the same time; with partial
  // placement each would hold a slot the other needs and wait forever.
  herd::Client client{herd::LocalCluster{3}};
  std::vector<std::vector<herd::Future<std::int64_t>>> gangs;
  for (int round = 0; round < 4; ++round) {
    gangs.push_back(client.submit_gang(2, started_at, 200));
    gangs.push_back(client.submit_gang(3, started_at, 200));
  }
  for (auto& g : gangs) {
    for (auto& f : g) CHECK(f.result(60s) > 0);
  }
}

TEST_CASE("Gang.ARankThatThrowsFailsTheGang" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{3}};
  auto fs = client.submit_gang(3, one_rank_throws, 1);
  for (auto& f : fs) {
    try {
      (void)f.result(30s);
      FAIL("expected the gang to fail");
    } catch (const herd::TaskError& e) {
      CHECK(e.type() == "std::runtime_error");
      CHECK(std::string(e.message()).find("rank 1 of 3") != std::string::npos);
      CHECK(std::string(e.message()).find("rank 1 broke") != std::string::npos);
    }
  }
  // Nobody hangs: every slot is free again.
  std::vector<int> xs{1, 2, 3};
  CHECK(client.gather(client.map(plus_one, xs)) == std::vector<int>{2, 3, 4});
  auto again = client.submit_gang(3, identify);
  for (auto& f : again) CHECK(std::get<1>(f.result()) == 3);
}

TEST_CASE("Gang.TimeLimitFailsTheGang" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{3}};
  const auto t0 = std::chrono::steady_clock::now();
  // Rank 0 sleeps 6 s before the all-reduce the others wait in; the limit is 1 s.
  auto fs = client.submit_gang(3, herd::TaskOptions{}.timeout(1), slow_rank0, 6000, std::string());
  for (auto& f : fs) {
    try {
      (void)f.result(30s);
      FAIL("expected the gang to fail");
    } catch (const herd::TaskError& e) {
      CHECK(e.type() == "herd::TimeoutError");
      CHECK_MESSAGE(e.message().find("exceeded its time limit of 1 s") != std::string::npos, e.message());
      CHECK_MESSAGE(e.message().find(" of 3 failed") != std::string::npos, e.message());
    }
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("a gang with timeout(1) failed after " << took << " s");
  CHECK(took < 5.0);  // at the limit, not when rank 0 woke up
  // Every slot is free again (rank 0's thread still sleeps, without its slot).
  std::vector<int> xs{1, 2, 3};
  CHECK(client.gather(client.map(plus_one, xs)) == std::vector<int>{2, 3, 4});
  auto again = client.submit_gang(3, identify);
  for (auto& f : again) CHECK(std::get<1>(f.result(30s)) == 3);
}

TEST_CASE("Gang.TimeLimitRetriedAsAWhole" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{2}};
  const std::string marker = tmp_path("time-retry");
  for (int r = 0; r < 2; ++r) std::filesystem::remove(marker + "-rank" + std::to_string(r));
  std::filesystem::remove(marker);
  // The first attempt's rank 0 is slow (4 s > 1.5 s): the attempt fails, the retry finishes.
  auto fs = client.submit_gang(2, herd::TaskOptions{}.timeout(1.5).retries(1), slow_rank0, 4000, marker);
  for (auto& f : fs) CHECK(f.result(30s) == 0 + 1);
  for (int r = 0; r < 2; ++r) {
    const int runs = take_rank_runs(marker, r);
    CHECK_MESSAGE(runs == 2, "rank " << r << " ran " << runs << " times");
  }
  std::filesystem::remove(marker);
}

TEST_CASE("Gang.RetriedAsAWhole" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{3}};
  const std::string marker = tmp_path("retry");
  for (int r = 0; r < 3; ++r) std::filesystem::remove(marker + "-rank" + std::to_string(r));
  std::filesystem::remove(marker);
  auto fs = client.submit_gang(3, herd::TaskOptions{}.retries(1), fails_once, marker);
  for (auto& f : fs) CHECK(f.result() == 0 + 1 + 2);
  for (int r = 0; r < 3; ++r) {
    const int runs = take_rank_runs(marker, r);
    CHECK_MESSAGE(runs == 2, "rank " << r << " ran " << runs << " times");
  }
  std::filesystem::remove(marker);
}

TEST_CASE("Gang.AWorkerThatDiesFailsTheGang" * doctest::timeout(90)) {
  herd::Client client{herd::LocalCluster{2}};
  auto fs = client.submit_gang(2, rank1_dies);
  for (auto& f : fs) {
    try {
      (void)f.result(60s);
      FAIL("expected the gang to fail");
    } catch (const herd::TaskError& e) {
      // Whichever is heard first: rank 0's ring losing its peer, or rank 1's worker lost.
      const std::string m = e.message();
      CHECK_MESSAGE((m.find("rank 0 of 2") != std::string::npos || m.find("rank 1 of 2") != std::string::npos), m);
    }
  }
  // The pool replaces the worker and the cluster goes on.
  client.wait_for_workers(2, 30s);
  CHECK(client.submit(plus_one, 1).result() == 2);
}

TEST_CASE("Gang.CancelWhileInTheRendezvous" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{2}};
  auto fs = client.submit_gang(2, slow_to_join, 1500);
  std::this_thread::sleep_for(300ms);  // rank 1 is in the rendezvous by now (not a check)
  fs[1].cancel();
  for (auto& f : fs) CHECK_THROWS_AS(f.result(30s), herd::CancelledError);
  // Both slots come back.
  auto again = client.submit_gang(2, identify);
  for (auto& f : again) CHECK(std::get<1>(f.result(30s)) == 2);
}

TEST_CASE("Gang.BadUse" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{2}};
  try {
    client.submit(not_in_a_gang).result();
    FAIL("expected an error");
  } catch (const herd::TaskError& e) {
    CHECK(e.type() == "std::logic_error");
    CHECK(std::string(e.message()).find("submit_gang") != std::string::npos);
  }
  auto fs = client.submit_gang(2, wants_nccl);
  try {
    fs[0].result(30s);
    FAIL("expected an error");
  } catch (const herd::TaskError& e) {
    CHECK(std::string(e.message()).find("herd::gang(nccl)") != std::string::npos);
  }
  CHECK_THROWS_AS(client.submit_gang(0, identify), std::invalid_argument);
  // A gang larger than the cluster waits for workers (it does not block the others).
  auto big = client.submit_gang(3, identify);
  CHECK(client.submit(plus_one, 1).result(30s) == 2);
  CHECK_FALSE(big[0].done());
  client.scale(3);
  for (auto& f : big) CHECK(std::get<1>(f.result(60s)) == 3);
}
