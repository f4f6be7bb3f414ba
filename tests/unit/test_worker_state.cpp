// The worker's state machine with no sockets and no threads: events in, instructions read
// back (what Dask's worker-state tests do). validate() is checked after every step.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include <herd/options.hpp>

#include "net/data_port.hpp"
#include "task/this_task.hpp"
#include "worker/worker_state.hpp"

using namespace herd::worker;
using herd::protocol::DepLocation;
using herd::protocol::ExecuteTask;

namespace {

ExecuteTask task(TaskId id, std::vector<DepLocation> inputs = {}, std::map<std::string, double> resources = {}) {
  ExecuteTask t;
  t.id = id;
  t.key = "t" + std::to_string(id);
  t.function = "f";
  t.inputs = std::move(inputs);
  t.resources = std::move(resources);
  return t;
}

WorkerState make(std::uint32_t nthreads = 1, std::map<std::string, double> resources = {}, std::size_t gpus = 0) {
  WorkerStateOptions o;
  o.name = "w";
  o.data_address = "tcp://me:1";
  o.nthreads = nthreads;
  o.resources = std::move(resources);
  o.gpus = gpus;
  return WorkerState(o);
}

std::vector<TaskId> started(WorkerState& s) {
  std::vector<TaskId> ids;
  for (const auto& r : s.out().run) ids.push_back(r.task.id);
  return ids;
}

Completion ok(TaskId id, std::size_t size = 8) {
  Completion c;
  c.id = id;
  c.ok = true;
  c.bytes = std::make_shared<herd::net::Buffer>(static_cast<char*>(std::calloc(size, 1)), size);
  return c;
}

void exec(WorkerState& s, std::vector<ExecuteTask> ts) { s.execute(std::move(ts)); }

}  // namespace

TEST_CASE("WorkerState.Run.ThreadsBoundWhatStarts") {
  auto s = make(2);
  exec(s, {task(1), task(2), task(3)});
  CHECK(started(s) == std::vector<TaskId>{1, 2});
  CHECK(s.validate().empty());
  s.out().clear();
  s.finished(ok(1));
  CHECK(started(s) == std::vector<TaskId>{3});
  REQUIRE(s.out().results.size() == 1);
  CHECK(s.out().results[0].ok);
  CHECK(s.out().results[0].inline_data.size() == 8);  // small: it rides with the notice
  CHECK(s.holds(1));
  CHECK(s.validate().empty());
}

TEST_CASE("WorkerState.Inputs.FetchedPerHolderThenRun") {
  auto s = make(1);
  exec(s, {task(10, {{1, {"tcp://a:1"}}, {2, {"tcp://b:1"}}}), task(11, {{1, {"tcp://a:1"}}, {3, {"tcp://a:1"}}})});
  auto& fetch = s.out().fetch;
  REQUIRE(fetch.size() == 2);
  CHECK(fetch.at("tcp://a:1") == std::vector<TaskId>{1, 3});  // one request per holder
  CHECK(fetch.at("tcp://b:1") == std::vector<TaskId>{2});
  CHECK(started(s).empty());
  s.out().clear();
  s.fetched("tcp://a:1", 1, 100);
  s.fetched("tcp://a:1", 3, 100);
  CHECK(started(s) == std::vector<TaskId>{11});
  CHECK(s.out().acquired == std::vector<TaskId>{1, 3});  // the scheduler hears of the copies
  s.fetched("tcp://b:1", 2, 100);
  CHECK(s.queued(10, ""));  // ready, waiting for the thread
  s.finished(ok(11));
  CHECK(started(s) == std::vector<TaskId>{11, 10});
  CHECK(s.validate().empty());
}

TEST_CASE("WorkerState.Inputs.NextHolderThenGiveBackNamingThem") {
  auto s = make(1);
  exec(s, {task(10, {{1, {"tcp://a:1", "tcp://b:1", "tcp://c:1"}}})});
  CHECK(s.out().fetch.at("tcp://a:1") == std::vector<TaskId>{1});
  s.out().clear();
  s.not_there("tcp://a:1", 1);
  CHECK(s.out().fetch.at("tcp://b:1") == std::vector<TaskId>{1});
  s.out().clear();
  s.fetch_failed("tcp://b:1", {1}, "no data from tcp://b:1 for 10000 ms");
  CHECK(s.out().fetch.at("tcp://c:1") == std::vector<TaskId>{1});
  s.out().clear();
  s.fetch_failed("tcp://c:1", {1}, "no data from tcp://c:1 for 10000 ms");
  REQUIRE(s.out().results.size() == 1);
  const auto& r = s.out().results[0];
  CHECK(r.id == 10);
  CHECK(r.missing_input);
  REQUIRE(r.unreachable.size() == 1);
  CHECK(r.unreachable[0].holders == std::vector<std::string>{"tcp://b:1", "tcp://c:1"});
  REQUIRE(r.not_held.size() == 1);
  CHECK(r.not_held[0].holders == std::vector<std::string>{"tcp://a:1"});
  CHECK(r.error.message.find("could not reach tcp://b:1") != std::string::npos);
  CHECK(s.waiting_for_inputs() == 0);
  CHECK(s.validate().empty());
}

TEST_CASE("WorkerState.Inputs.OwnAddressIsSkipped") {
  auto s = make(1);
  exec(s, {task(10, {{1, {"tcp://me:1"}}})});  // the scheduler thinks we hold it, we do not
  REQUIRE(s.out().results.size() == 1);
  CHECK(s.out().results[0].missing_input);
}

TEST_CASE("WorkerState.Cancel.QueuedGoBackRunningFinish") {
  auto s = make(1);
  exec(s, {task(1), task(2), task(3, {{9, {"tcp://a:1"}}})});
  s.out().clear();
  s.cancel({1, 2, 3});
  std::vector<TaskId> back;
  for (const auto& r : s.out().results) {
    CHECK(r.handed_back);
    back.push_back(r.id);
  }
  CHECK(back == std::vector<TaskId>{2, 3});  // 1 runs already
  CHECK(s.executing() == 1);
  CHECK(s.validate().empty());
}

TEST_CASE("WorkerState.Resources.GpusAndGangMembersFirst") {
  auto s = make(2, {{"gpu", 1}}, 1);
  exec(s, {task(1, {}, {{"gpu", 1}}), task(2, {}, {{"gpu", 1}})});
  REQUIRE(s.out().run.size() == 1);
  CHECK(s.out().run[0].devices == std::vector<int>{0});
  s.out().clear();
  auto g = task(3);
  g.gang = 3;
  g.gang_size = 2;
  exec(s, {task(4), g});
  CHECK(started(s) == std::vector<TaskId>{3});  // the gang member before the plain task
  s.out().clear();
  s.finished(ok(1));
  CHECK(started(s) == std::vector<TaskId>{2});  // the GPU is free again
  CHECK(s.validate().empty());
}

TEST_CASE("WorkerState.Memory.OverLimitFailsRunningHandsBackTheRest") {
  auto s = make(1);
  exec(s, {task(1), task(2), task(3, {{9, {"tcp://a:1"}}})});
  s.out().clear();
  s.over_memory("worker w reached 900 MiB");
  int failed = 0, back = 0;
  for (const auto& r : s.out().results) {
    if (r.handed_back) ++back;
    else if (!r.ok && r.error.type == "herd::MemoryLimitExceeded") ++failed;
  }
  CHECK(failed == 1);
  CHECK(back == 2);
  CHECK(s.executing() == 0);
}

TEST_CASE("WorkerState.Store.FreeAndAcquire") {
  auto s = make(1);
  exec(s, {task(1)});
  s.finished(ok(1, 10));
  s.out().clear();
  s.free_keys({1, 77});
  CHECK(s.out().free == std::vector<TaskId>{1});
  CHECK_FALSE(s.holds(1));
  s.out().clear();
  s.acquire({{5, {"tcp://a:1"}}});
  CHECK(s.out().fetch.at("tcp://a:1") == std::vector<TaskId>{5});
  s.out().clear();
  s.fetched("tcp://a:1", 5, 64);
  CHECK(s.out().acquired == std::vector<TaskId>{5});
  CHECK(s.stored_bytes() == 64);
  CHECK(s.validate().empty());
}

TEST_CASE("WorkerState.Scatter.FetchedFromTheClientElseReportedOutOfReach") {
  // A big scattered value is fetched from the client's data port and reported as the scatter's
  // result (not as a copy); a port out of reach is reported as such, naming it.
  auto s = make(1);
  s.put_from(5, "tcp://login:7");
  CHECK(s.out().fetch.at("tcp://login:7") == std::vector<TaskId>{5});
  s.out().clear();
  s.fetched("tcp://login:7", 5, 1 << 20);
  REQUIRE(s.out().results.size() == 1);
  CHECK(s.out().results[0].id == 5);
  CHECK(s.out().results[0].ok);
  CHECK(s.out().results[0].nbytes == (1u << 20));
  CHECK(s.out().acquired.empty());
  CHECK(s.holds(5));
  s.out().clear();
  s.put_from(5, "tcp://login:7");  // a resend: held already, reported again, not fetched
  CHECK(s.out().fetch.empty());
  REQUIRE(s.out().results.size() == 1);
  CHECK(s.out().results[0].ok);
  s.out().clear();

  s.put_from(6, "tcp://login:7");
  s.out().clear();
  s.fetch_failed("tcp://login:7", {6}, "no data from tcp://login:7 for 10000 ms");
  REQUIRE(s.out().results.size() == 1);
  const auto& r = s.out().results[0];
  CHECK(r.id == 6);
  CHECK_FALSE(r.ok);
  CHECK_FALSE(r.missing_input);
  CHECK(r.error.type == herd::protocol::kScatterSourceUnreachable);
  CHECK(r.error.message.find("could not reach tcp://login:7 (no data") != std::string::npos);
  CHECK_FALSE(s.holds(6));
  CHECK(s.validate().empty());
}

TEST_CASE("Task.CheckpointPath.SameForEveryRunOfATask") {
  namespace fs = std::filesystem;
  const std::string dir = (fs::temp_directory_path() / ("herd-ckpt-" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  herd::TaskInfo& info = herd::detail::current_task();
  const herd::TaskInfo saved = info;
  info.key = "long sum/7";
  // The key as a file name, in the directory given (created).
  CHECK(herd::this_task().checkpoint_path(dir + "/a") == dir + "/a/long_sum_7.ckpt");
  CHECK(fs::is_directory(dir + "/a"));
  // Else $HERD_CHECKPOINT_DIR; neither: an error that says what to set.
  ::setenv("HERD_CHECKPOINT_DIR", (dir + "/env").c_str(), 1);
  CHECK(herd::this_task().checkpoint_path() == dir + "/env/long_sum_7.ckpt");
  ::unsetenv("HERD_CHECKPOINT_DIR");
  CHECK_THROWS_WITH_AS(herd::this_task().checkpoint_path(), doctest::Contains("HERD_CHECKPOINT_DIR"),
                       std::runtime_error);
  info.key.clear();
  CHECK_THROWS_WITH_AS(herd::this_task().checkpoint_path(dir), doctest::Contains("outside a task"), std::runtime_error);
  info = saved;
  // checkpointable(n): n preemptions, apart from the retries (issue 45).
  CHECK(herd::TaskOptions{}.retries(1).checkpointable(3).retries() == 1);
  CHECK(herd::TaskOptions{}.retries(1).checkpointable(3).preemptions() == 3);
  CHECK(herd::TaskOptions{}.checkpointable().retries() == 0);
  CHECK(herd::TaskOptions{}.checkpointable().preemptions() == 3);
  fs::remove_all(dir);
}

TEST_CASE("WorkerState.Abandon.RunningTaskFailsAtOnceAndFreesItsSlotAndResources") {
  auto s = make(1, {{"lic", 1}});
  exec(s, {task(1, {}, {{"lic", 1}}), task(2, {}, {{"lic", 1}}), task(3)});
  CHECK(started(s) == std::vector<TaskId>{1});
  s.out().clear();
  CHECK(s.running(1));
  CHECK(s.running_key(1) == "t1");
  CHECK(s.abandon(1, {"herd::TimeoutError", "task t1 exceeded its time limit of 1 s", "t1", ""}));
  REQUIRE(s.out().results.size() == 1u);
  const auto& r = s.out().results[0];
  CHECK(r.id == 1u);
  CHECK_FALSE(r.ok);
  CHECK_FALSE(r.handed_back);
  CHECK(r.error.type == "herd::TimeoutError");
  CHECK(r.error.worker == "w");  // filled in when the caller left it empty
  CHECK(started(s) == std::vector<TaskId>{2});  // the thread and the licence went to the next
  CHECK_FALSE(s.running(1));
  CHECK(s.validate().empty());
  s.out().clear();
  // Not running (queued): handed back as a cancel would.
  CHECK_FALSE(s.abandon(3, {"herd::CancelledError", "x", "t3", ""}));
  REQUIRE(s.out().results.size() == 1u);
  CHECK(s.out().results[0].handed_back);
  CHECK(s.validate().empty());
}

TEST_CASE("WorkerState.Secede.SlotGoesToTheNextTaskAndRejoinWaitsForOne") {
  auto s = make(1);
  exec(s, {task(1), task(2), task(3)});
  CHECK(started(s) == std::vector<TaskId>{1});
  s.out().clear();
  // 1 waits on others: it gives its slot back, 2 starts beside it; the scheduler is told.
  CHECK(s.secede(1));
  CHECK(started(s) == std::vector<TaskId>{2});
  CHECK(s.out().seceded == std::vector<TaskId>{1});
  CHECK(s.slots_used() == 1);
  CHECK(s.executing() == 2);
  CHECK(s.validate().empty());
  s.out().clear();
  CHECK(s.secede(1));  // twice: nothing more
  CHECK(s.out().seceded.empty());
  CHECK(!s.secede(99));  // not running here
  // 1 wants its slot back while 2 holds it: it waits, and goes before 3 when 2 ends.
  CHECK(!s.rejoin(1));
  CHECK(s.out().rejoined.empty());
  CHECK(s.validate().empty());
  s.finished(ok(2));
  CHECK(s.out().rejoined == std::vector<TaskId>{1});
  CHECK(started(s).empty());  // 3 waits: the one slot is 1's again
  CHECK(s.slots_used() == 1);
  s.out().clear();
  CHECK(s.rejoin(1));  // not seceded any more: at once, nothing reported
  CHECK(s.out().rejoined.empty());
  s.finished(ok(1));
  CHECK(started(s) == std::vector<TaskId>{3});
  CHECK(s.validate().empty());
}

TEST_CASE("WorkerState.Secede.EndingOrAbandonedWhileSecededFreesNoSlot") {
  auto s = make(1);
  exec(s, {task(1), task(2), task(3), task(4)});
  s.secede(1);
  CHECK(started(s) == std::vector<TaskId>{1, 2});
  s.out().clear();
  // A seceded task that ends held no slot: nothing new starts for it.
  s.finished(ok(1));
  CHECK(started(s).empty());
  CHECK(s.slots_used() == 1);
  CHECK(s.validate().empty());
  // 2 secedes, asks to rejoin, and is abandoned (its time limit) while it waits: no rejoin
  // is granted to it later, and the slot 3 takes is the only one used.
  s.secede(2);
  CHECK(started(s) == std::vector<TaskId>{3});
  CHECK(!s.rejoin(2));
  s.abandon(2, {"herd::TimeoutError", "too long", "t2", "w"});
  CHECK(s.validate().empty());
  s.out().clear();
  s.finished(ok(3));
  CHECK(s.out().rejoined.empty());
  CHECK(started(s) == std::vector<TaskId>{4});
  CHECK(s.validate().empty());
}

// ---- ResultBatch: when executors' results travel -------------------------------------------

TEST_CASE("ResultBatch.Lone.ReportedAtOnce") {
  using C = ResultBatch::Clock;
  ResultBatch b(std::chrono::microseconds(1000));
  const C::time_point t0{};
  CHECK_FALSE(b.send_now(t0));
  CHECK(b.finished(t0, false));  // nothing more to run: wake the I/O thread
  CHECK(b.send_now(t0));
  CHECK_FALSE(b.deadline());
  b.sent(t0);
  CHECK_FALSE(b.send_now(t0));
}

TEST_CASE("ResultBatch.Burst.WakesTheIoThreadTwice") {
  using C = ResultBatch::Clock;
  using us = std::chrono::microseconds;
  ResultBatch b(us(1000));
  const C::time_point t0{};
  int wakes = 0, sends = 0;
  // 100 tasks 5 us apart, each with another waiting, then the last with none.
  for (int i = 0; i < 100; ++i) {
    const auto now = t0 + us(5 * i);
    if (b.finished(now, i < 99)) ++wakes;
    if (b.send_now(now)) {  // the I/O thread's turn after a wake
      ++sends;
      b.sent(now);
    }
  }
  CHECK(wakes == 2);  // the first result (sent at once), and the last (out of work)
  CHECK(sends == 2);
  CHECK_FALSE(b.send_now(t0 + us(495)));
}

TEST_CASE("ResultBatch.Window.ResultsWaitAtMostTheWindow") {
  using C = ResultBatch::Clock;
  using us = std::chrono::microseconds;
  ResultBatch b(us(1000));
  const C::time_point t0{};
  REQUIRE(b.finished(t0, true));  // first of the burst: at once
  b.sent(t0);
  REQUIRE(b.deadline());
  CHECK(*b.deadline() == t0 + us(1000));
  CHECK_FALSE(b.finished(t0 + us(10), true));  // waits: no wake-up
  CHECK_FALSE(b.send_now(t0 + us(999)));
  CHECK(b.send_now(t0 + us(1000)));  // the I/O thread's poll timed out: the batch goes
  b.sent(t0 + us(1000));
  CHECK_FALSE(b.deadline());
  CHECK(b.finished(t0 + us(1200), true));  // a new burst: its first goes at once again
  CHECK(*b.deadline() == t0 + us(2200));
}

TEST_CASE("ResultBatch.Window.ZeroSendsEveryResultAtOnce") {
  using C = ResultBatch::Clock;
  ResultBatch b(std::chrono::microseconds(0));
  const C::time_point t0{};
  for (int i = 0; i < 3; ++i) {
    CHECK(b.finished(t0, true));
    CHECK(b.send_now(t0));
    b.sent(t0);
  }
  CHECK_FALSE(b.deadline());
}

TEST_CASE("WorkerState.Cores.TasksHoldDisjointCoresNotSlots") {
  // A worker with one thread slot and 4 cores (CPU ids 10-13): two 2-core tasks run at once,
  // on disjoint cores; a third waits for cores; a plain task takes the slot beside them.
  WorkerStateOptions o;
  o.name = "w";
  o.data_address = "tcp://me:1";
  o.nthreads = 1;
  o.resources = {{"cpus", 4}};
  o.cores = {10, 11, 12, 13};
  WorkerState s(o);
  CHECK(s.core_task_limit() == 4);
  exec(s, {task(1, {}, {{"cpus", 2}}), task(2, {}, {{"cpus", 2}}), task(3, {}, {{"cpus", 1}}), task(4)});
  REQUIRE(s.out().run.size() == 3);
  std::map<TaskId, std::vector<int>> cores;
  for (const auto& r : s.out().run) cores[r.task.id] = r.cores;
  CHECK(cores[1] == std::vector<int>{10, 11});
  CHECK(cores[2] == std::vector<int>{12, 13});
  CHECK(cores.count(4) == 1);  // the plain task: a slot, no cores
  CHECK(cores[4].empty());
  CHECK(s.slots_used() == 1);
  CHECK(s.free_cores().empty());
  s.out().clear();
  s.finished(ok(1));
  REQUIRE(s.out().run.size() == 1);
  CHECK(s.out().run[0].task.id == 3);
  CHECK(s.out().run[0].cores == std::vector<int>{10});
  CHECK(s.free_cores() == std::vector<int>{11});
  CHECK(s.validate().empty());
}

TEST_CASE("WorkerState.Cores.ThirtyTwoOneCoreTasksOnOneSlot") {
  WorkerStateOptions o;
  o.name = "w";
  o.nthreads = 1;
  o.resources = {{"cpus", 32}};
  for (int c = 0; c < 32; ++c) o.cores.push_back(c);
  WorkerState s(o);
  std::vector<ExecuteTask> ts;
  for (TaskId id = 1; id <= 40; ++id) ts.push_back(task(id, {}, {{"cpus", 1}}));
  exec(s, std::move(ts));
  CHECK(s.out().run.size() == 32);
  CHECK(s.ready() == 8);
  CHECK(s.validate().empty());
}

TEST_CASE("WorkerState.Cores.WithoutAMaskCountsAndPinsNothing") {
  // --cpus beyond its mask: it counts cores but hands none out.
  auto s = make(1, {{"cpus", 4}});
  exec(s, {task(1, {}, {{"cpus", 2}}), task(2, {}, {{"cpus", 2}}), task(3, {}, {{"cpus", 2}})});
  REQUIRE(s.out().run.size() == 2);
  CHECK(s.out().run[0].cores.empty());
  CHECK(s.validate().empty());
}

TEST_CASE("WorkerState.Preemption.AFailureWhileDrainingIsReportedAsOne") {
  auto s = make(2);
  exec(s, {task(1), task(2)});
  s.out().clear();
  Completion drained;
  drained.id = 1;
  drained.error = {"std::runtime_error", "preempted at step 3", "t1", "w"};
  drained.preempted = true;
  s.finished(drained);
  Completion failed;
  failed.id = 2;
  failed.error = {"std::runtime_error", "boom", "t2", "w"};
  s.finished(failed);
  REQUIRE(s.out().results.size() == 2);
  CHECK(s.out().results[0].preempted);
  CHECK_FALSE(s.out().results[1].preempted);
  CHECK(s.validate().empty());
}
