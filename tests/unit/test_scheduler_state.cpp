// The scheduler's state machine with no process, no socket and no clock: events in, the outbox
// read back (as Dask's scheduler-state tests and HyperQueue's tako tests do). Every event is
// followed by validate() (StateOptions::validate), so each test also checks the invariants.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <deque>
#include <filesystem>
#include <map>
#include <queue>
#include <random>
#include <set>

#include "net/buffer.hpp"
#include "scheduler/journal.hpp"
#include "scheduler/state.hpp"

using namespace herd::scheduler;
using herd::protocol::ArgRef;
using herd::protocol::TaskSpec;
using namespace std::chrono_literals;

namespace {

/// A worker's report that task `id` succeeded with a result of `nbytes`.
herd::protocol::TaskResultsEvent one_ok_result(TaskId id, std::uint64_t nbytes) {
  herd::protocol::TaskResultsEvent ev;
  herd::protocol::TaskResult r;
  r.id = id;
  r.ok = true;
  r.nbytes = nbytes;
  ev.results.push_back(r);
  return ev;
}

/// A scheduler state and virtual workers that do what the outbox says: each runs its queue in
/// order, `nthreads` at a time; `finish()` completes running tasks, a cancel hands back what
/// has not started.
struct Harness {
  SchedulerState state;
  Now now{Clock::time_point{} + 1h, 1'700'000'000'000};
  ClientId client = 0;
  std::uint64_t next = 1;
  struct VWorker {
    WorkerId id = 0;
    std::uint32_t nthreads = 1;
    std::deque<TaskId> queue;      // received, not started
    std::vector<TaskId> running;
    std::set<TaskId> has;
  };
  std::map<WorkerId, VWorker> workers;
  std::vector<herd::protocol::TaskUpdate> updates;  // everything the client heard
  std::map<ClientId, std::vector<herd::protocol::TaskUpdate>> heard;  // the same, by client
  std::vector<std::string> shutdowns;

  explicit Harness(StateOptions o = {}) : state([&] {
    o.validate = true;
    return o;
  }()) {
    herd::protocol::HelloRequest hello;
    hello.name = "client";
    client = state.add_client(hello, now);
  }

  WorkerId add_worker(const std::string& name, std::uint32_t nthreads = 1, std::map<std::string, double> resources = {},
                      std::int64_t end_time = 0) {
    herd::protocol::HelloRequest hello;
    hello.name = name;
    hello.nthreads = nthreads;
    hello.data_address = "tcp://" + name + ":1";
    hello.resources = std::move(resources);
    hello.end_time = end_time;
    const WorkerId id = state.add_worker(hello, now);
    workers[id] = VWorker{id, nthreads, {}, {}, {}};
    return id;
  }

  TaskId submit(const std::string& fn, std::map<std::string, double> resources = {}, std::vector<TaskId> deps = {},
                std::int32_t priority = 0, std::uint32_t duration_s = 0) {
    TaskSpec s;
    s.id = (static_cast<TaskId>(client) << 40) | next++;
    s.function = fn;
    s.resources = std::move(resources);
    s.priority = priority;
    s.duration_s = duration_s;
    for (std::uint32_t i = 0; i < deps.size(); ++i) s.refs.push_back(ArgRef{deps[i], i, -1});
    std::string error;
    REQUIRE(state.submit(client, s, nullptr, error));
    return s.id;
  }

  /// A gang of `size` ranks of `fn` (ids gang, gang + 1, ...), in `campaign` if named.
  /// Returns the gang id (rank 0's task id).
  TaskId submit_gang(const std::string& fn, std::uint32_t size, const std::string& campaign = "") {
    const TaskId gang = (static_cast<TaskId>(client) << 40) | next;
    next += size;
    for (std::uint32_t r = 0; r < size; ++r) {
      TaskSpec s;
      s.id = gang + r;
      s.function = fn;
      s.gang = gang;
      s.gang_rank = r;
      s.gang_size = size;
      s.campaign = campaign;
      std::string error;
      REQUIRE(state.submit(client, s, nullptr, error));
    }
    return gang;
  }

  /// schedule(), then deliver the outbox to the virtual workers and the client.
  void turn() {
    state.heard_from_client(client, now);  // the client stays connected
    state.tick(now);
    state.schedule(now);
    deliver();
  }

  void deliver() {
    Outbox& out = state.outbox();
    for (auto& [id, w] : out.workers) {
      auto it = workers.find(id);
      if (w.shutdown) shutdowns.push_back(*w.shutdown);
      if (it == workers.end()) continue;
      VWorker& vw = it->second;
      for (TaskId f : w.free) vw.has.erase(f);
      for (auto& e : w.execute) {
        vw.queue.push_back(e.id);
        if (e.timeout_ms > 0) timeouts[e.id] = e.timeout_ms;
      }
      start(vw);
      for (TaskId a : w.abandon) abandoned.emplace_back(id, a);  // the test plays the worker's part
      herd::protocol::TaskResultsEvent handed;
      for (TaskId c : w.cancel) {
        auto q = std::find(vw.queue.begin(), vw.queue.end(), c);
        if (q == vw.queue.end()) continue;  // running or done: ignored, as a real worker does
        vw.queue.erase(q);
        herd::protocol::TaskResult r;
        r.id = c;
        r.handed_back = true;
        handed.results.push_back(r);
      }
      if (!handed.results.empty()) pending_results.emplace_back(id, std::move(handed));
    }
    for (auto& [id, c] : out.clients) {
      for (auto& u : c.updates.updates) {
        updates.push_back(u);
        heard[id].push_back(u);
      }
    }
    for (const auto& d : out.departed) workers.erase(d.id);
    out.clear();
    auto results = std::move(pending_results);
    pending_results.clear();
    for (auto& [id, ev] : results) {
      if (workers.count(id)) state.task_results(id, ev, now);
    }
    if (!results.empty()) {
      state.schedule(now);  // what was handed back is placed again, as the server's next turn does
      deliver();
    }
  }

  void start(VWorker& w) {
    while (w.running.size() < w.nthreads && !w.queue.empty()) {
      w.running.push_back(w.queue.front());
      w.queue.pop_front();
    }
  }

  /// The running tasks of `id` finish (results of `nbytes`); then a turn.
  std::vector<TaskId> finish(WorkerId id, std::uint64_t nbytes = 8) {
    VWorker& w = workers.at(id);
    herd::protocol::TaskResultsEvent ev;
    std::vector<TaskId> done = w.running;
    for (TaskId t : w.running) {
      herd::protocol::TaskResult r;
      r.id = t;
      r.ok = true;
      r.nbytes = nbytes;
      r.duration_us = 1000;
      ev.results.push_back(r);
      w.has.insert(t);
    }
    w.running.clear();
    state.task_results(id, ev, now);
    start(w);
    turn();
    return done;
  }

  const Task* task(TaskId id) const { return state.graph().find(id); }
  TaskStatus status(TaskId id) const { return task(id)->status; }
  WorkerId where(TaskId id) const { return task(id)->worker; }
  std::size_t placed_on(WorkerId w) const {
    const auto& vw = workers.at(w);
    return vw.queue.size() + vw.running.size();
  }
  std::vector<std::pair<WorkerId, TaskId>> pending_results_for_test;
  std::vector<std::pair<WorkerId, TaskId>> abandoned;  // abandon_tasks the workers were sent
  std::map<TaskId, std::uint32_t> timeouts;            // time limits the execute messages carried
  std::vector<std::pair<WorkerId, herd::protocol::TaskResultsEvent>> pending_results;
};

}  // namespace

TEST_CASE("SchedulerState.Placement.NoHeadOfLineBlockingBehindBusyResources") {
  // One worker offers a GPU, one offers nothing; four long GPU tasks, then 20 instant CPU tasks:
  // the CPU tasks all run while the GPU worker is still busy with its first GPU task.
  Harness h;
  const WorkerId gpu = h.add_worker("gpu-worker", 1, {{"gpu", 1}});
  const WorkerId cpu = h.add_worker("cpu-worker", 1);
  std::vector<TaskId> gpu_tasks, cpu_tasks;
  for (int i = 0; i < 4; ++i) gpu_tasks.push_back(h.submit("train", {{"gpu", 1}}));
  for (int i = 0; i < 20; ++i) cpu_tasks.push_back(h.submit("inc"));
  h.turn();
  CHECK(h.where(gpu_tasks[0]) == gpu);
  for (int i = 1; i < 4; ++i) CHECK(h.status(gpu_tasks[static_cast<std::size_t>(i)]) == TaskStatus::ready);  // the GPU is taken
  // The CPU worker runs CPU tasks one after the other; the GPU worker never finishes anything.
  for (int round = 0; round < 40 && h.workers.at(cpu).running.size() + h.workers.at(cpu).queue.size() > 0; ++round) {
    h.finish(cpu);
  }
  for (TaskId t : cpu_tasks) CHECK(h.status(t) == TaskStatus::memory);
  CHECK(h.status(gpu_tasks[0]) == TaskStatus::processing);  // still running: nothing waited for it
}

TEST_CASE("SchedulerState.Placement.PriorityHoldsWithinWhatCanRun") {
  Harness h;
  const WorkerId w = h.add_worker("w", 1);
  std::vector<TaskId> low, high;
  for (int i = 0; i < 5; ++i) low.push_back(h.submit("low", {}, {}, 0));
  for (int i = 0; i < 5; ++i) high.push_back(h.submit("high", {}, {}, 10));
  h.turn();
  // The worker takes 2 (one slot + one queued): both high.
  for (TaskId t : h.workers.at(w).running) CHECK(std::count(high.begin(), high.end(), t) == 1);
  for (TaskId t : h.workers.at(w).queue) CHECK(std::count(high.begin(), high.end(), t) == 1);
  std::vector<TaskId> order;
  while (!h.workers.at(w).running.empty()) {
    auto done = h.finish(w);
    order.insert(order.end(), done.begin(), done.end());
  }
  REQUIRE(order.size() == 10);
  for (int i = 0; i < 5; ++i) CHECK(std::count(high.begin(), high.end(), order[static_cast<std::size_t>(i)]) == 1);
}

TEST_CASE("SchedulerState.Placement.InputsStayWhereTheyAre") {
  Harness h;
  const WorkerId a = h.add_worker("a", 1);
  const WorkerId b = h.add_worker("b", 1);
  const TaskId big = h.submit("load");
  h.turn();
  const WorkerId holder = h.where(big);
  h.finish(holder, 1 << 20);  // 1 MiB result held by one worker
  const TaskId use = h.submit("reduce", {}, {big});
  h.turn();
  CHECK(h.where(use) == holder);
  (void)a;
  (void)b;
}

TEST_CASE("SchedulerState.Placement.WorkersWithIdleThreadsFirst") {
  Harness h;
  const WorkerId a = h.add_worker("a", 2);
  const WorkerId b = h.add_worker("b", 2);
  for (int i = 0; i < 4; ++i) h.submit("f");
  h.turn();
  CHECK(h.workers.at(a).running.size() == 2);  // every idle thread got a task before any queued
  CHECK(h.workers.at(b).running.size() == 2);
  CHECK(h.workers.at(a).queue.empty());
  CHECK(h.workers.at(b).queue.empty());
}

TEST_CASE("SchedulerState.Stealing.LateWorkerGetsWorkAtOnce") {
  Harness h;
  const WorkerId a = h.add_worker("a", 1);
  for (int i = 0; i < 2; ++i) h.submit("slow");
  h.turn();
  CHECK(h.placed_on(a) == 2);  // one running, one queued
  const WorkerId b = h.add_worker("b", 1);
  h.turn();  // b is idle, a queues one beyond its thread: a hands it back, b runs it
  CHECK(h.workers.at(b).running.size() == 1);
  CHECK(h.workers.at(a).running.size() == 1);
  CHECK(h.workers.at(a).queue.empty());
}

TEST_CASE("SchedulerState.Stealing.ThiefTakesOnlyWhatItCanRun") {
  // v (2 threads, 2 GPUs) runs two CPU tasks and queues two GPU tasks. A CPU-only worker that
  // joins cannot run those: nothing is asked back. A GPU worker that joins takes one (its one
  // thread), the newest; v keeps the other.
  Harness h;
  const WorkerId v = h.add_worker("v", 2, {{"gpu", 2}});
  const TaskId c1 = h.submit("prep");
  const TaskId c2 = h.submit("prep");
  const TaskId g1 = h.submit("train", {{"gpu", 1}});
  const TaskId g2 = h.submit("train", {{"gpu", 1}});
  h.turn();
  REQUIRE(h.placed_on(v) == 4);
  CHECK(h.workers.at(v).running == std::vector<TaskId>{c1, c2});
  const WorkerId cpu = h.add_worker("cpu", 1);
  h.turn();
  CHECK(h.placed_on(v) == 4);  // nothing handed back
  CHECK(h.placed_on(cpu) == 0);
  CHECK_FALSE(h.task(g1)->stealing);
  CHECK_FALSE(h.task(g2)->stealing);
  const WorkerId gpu = h.add_worker("gpu", 1, {{"gpu", 1}});
  h.turn();
  CHECK(h.where(g2) == gpu);
  CHECK(h.workers.at(gpu).running == std::vector<TaskId>{g2});
  CHECK(h.where(g1) == v);
  CHECK(h.placed_on(v) == 3);
}

TEST_CASE("SchedulerState.Stealing.NoMoreAskedBackThanQueued") {
  // a runs one task and queues one; two idle workers join at once: only the queued one is
  // asked back (the running one is not, though both thieves want work).
  Harness h;
  const WorkerId a = h.add_worker("a", 1);
  const TaskId first = h.submit("slow");
  const TaskId second = h.submit("slow");
  h.turn();
  REQUIRE(h.workers.at(a).running == std::vector<TaskId>{first});
  const WorkerId b = h.add_worker("b", 1);
  const WorkerId c = h.add_worker("c", 1);
  h.turn();
  CHECK_FALSE(h.task(first)->stealing);
  CHECK(h.where(first) == a);
  CHECK((h.where(second) == b || h.where(second) == c));
  CHECK(h.placed_on(a) == 1);
  CHECK(h.placed_on(b) + h.placed_on(c) == 1);
}

namespace {
/// Makes `fn`'s run time known to the state: one task of it runs (on an idle worker) and
/// takes `us`.
void learn_run_time(Harness& h, const std::string& fn, std::uint64_t us) {
  const TaskId t = h.submit(fn);
  h.turn();
  const WorkerId w = h.where(t);
  auto& vw = h.workers.at(w);
  REQUIRE(vw.running == std::vector<TaskId>{t});
  auto ev = one_ok_result(t, 8);
  ev.results[0].duration_us = us;
  vw.running.clear();
  vw.has.insert(t);
  h.state.task_results(w, ev, h.now);
  h.turn();
}

}  // namespace

TEST_CASE("SchedulerState.Batching.TinyTasksGoABatchAtATime") {
  // Tasks known to take 10 us, 4 idle workers, batch_us 1000: a worker gets 100 of them in
  // one visit (one message), not one per idle thread with the rest spread over every queue.
  StateOptions o;
  o.batch_us = 1000;
  Harness h(o);
  const WorkerId a = h.add_worker("a", 1);
  std::vector<WorkerId> ws{a, h.add_worker("b", 1), h.add_worker("c", 1), h.add_worker("d", 1)};
  learn_run_time(h, "tiny", 10);
  for (int i = 0; i < 200; ++i) h.submit("tiny");
  h.turn();
  std::vector<std::size_t> placed;
  for (WorkerId w : ws) placed.push_back(h.placed_on(w));
  std::sort(placed.begin(), placed.end());
  // The idle two ask nothing back either (a stolen task would be running there now): a tiny
  // task runs where it is.
  CHECK(placed == std::vector<std::size_t>{0, 0, 100, 100});
  CHECK(h.state.validate().empty());
}

TEST_CASE("SchedulerState.Batching.LongAndUnknownTasksStillSpread") {
  // The same with a function that takes 5 ms, and one never seen: one per idle thread first.
  Harness h;
  const WorkerId a = h.add_worker("a", 1);
  std::vector<WorkerId> ws{a, h.add_worker("b", 1), h.add_worker("c", 1), h.add_worker("d", 1)};
  learn_run_time(h, "slow", 5000);
  for (int i = 0; i < 4; ++i) h.submit("slow");
  for (int i = 0; i < 4; ++i) h.submit("new");
  h.turn();
  for (WorkerId w : ws) CHECK(h.workers.at(w).running.size() == 1);
  for (WorkerId w : ws) CHECK(h.placed_on(w) == 2);
}

TEST_CASE("SchedulerState.Batching.ABatchStopsAtATaskThatIsNotTiny") {
  // 50 tiny tasks, one of 5 ms, 50 more tiny: the first batch ends before the slow one, which
  // takes the other worker's idle thread; every tiny task is placed. (A long horizon, so that
  // a queue holds 50.)
  StateOptions o;
  o.queue_horizon_us = 1'000'000;
  Harness h(o);
  const WorkerId a = h.add_worker("a", 1);
  const WorkerId b = h.add_worker("b", 1);
  learn_run_time(h, "tiny", 10);
  learn_run_time(h, "slow", 5000);
  std::vector<TaskId> tiny;
  for (int i = 0; i < 50; ++i) tiny.push_back(h.submit("tiny"));
  const TaskId slow = h.submit("slow");
  for (int i = 0; i < 50; ++i) tiny.push_back(h.submit("tiny"));
  h.turn();
  const WorkerId first = h.where(tiny.front());
  CHECK(h.where(slow) != first);
  for (std::size_t i = 0; i < 50; ++i) CHECK(h.where(tiny[i]) == first);
  for (TaskId t : tiny) CHECK(h.status(t) == TaskStatus::processing);
  CHECK(h.placed_on(a) + h.placed_on(b) == 101);
}

TEST_CASE("SchedulerState.Stealing.TinyTasksStayLongOnesMove") {
  // a queues tiny tasks and one long one behind its running task; a worker that joins asks back
  // the long one only.
  StateOptions o;
  o.queue_horizon_us = 1'000'000;
  Harness h(o);
  const WorkerId a = h.add_worker("a", 1);
  learn_run_time(h, "tiny", 10);
  learn_run_time(h, "slow", 5000);
  const TaskId running = h.submit("slow");
  const TaskId queued_slow = h.submit("slow");
  std::vector<TaskId> tiny;
  for (int i = 0; i < 20; ++i) tiny.push_back(h.submit("tiny"));
  h.turn();
  REQUIRE(h.workers.at(a).running == std::vector<TaskId>{running});
  REQUIRE(h.placed_on(a) == 22);
  const WorkerId b = h.add_worker("b", 1);
  h.turn();
  CHECK(h.where(queued_slow) == b);
  for (TaskId t : tiny) CHECK(h.where(t) == a);
  CHECK(h.placed_on(a) == 21);
}

TEST_CASE("SchedulerState.Stealing.TinyTasksLeaveAStuckQueue") {
  // a runs a task of unknown length with 20 tiny tasks queued behind it. A worker that joins
  // leaves them there while a's queue may still move; once a has reported nothing for longer
  // than the stall time, the idle worker takes them, one per idle thread and turn.
  Harness h;
  const WorkerId a = h.add_worker("a", 1);
  learn_run_time(h, "tiny", 10);
  const TaskId nap = h.submit("nap");
  for (int i = 0; i < 20; ++i) h.submit("tiny");
  h.turn();
  REQUIRE(h.workers.at(a).running == std::vector<TaskId>{nap});
  REQUIRE(h.placed_on(a) == 21);
  const WorkerId b = h.add_worker("b", 1);
  h.turn();
  CHECK(h.placed_on(b) == 0);
  h.now.mono += 200ms;
  h.now.unix_ms += 200;
  h.turn();
  CHECK(h.placed_on(b) == 1);
  CHECK(h.placed_on(a) == 20);
  for (int i = 0; i < 3; ++i) h.finish(b);
  CHECK(h.placed_on(b) == 1);
  CHECK(h.placed_on(a) == 17);
  CHECK(h.workers.at(a).running == std::vector<TaskId>{nap});
}

TEST_CASE("SchedulerState.Batching.OffAtZero") {
  // batch_us = 0: tiny tasks are placed as any others (one per idle thread, then shares).
  StateOptions o;
  o.batch_us = 0;
  Harness h(o);
  const WorkerId a = h.add_worker("a", 1);
  std::vector<WorkerId> ws{a, h.add_worker("b", 1), h.add_worker("c", 1), h.add_worker("d", 1)};
  learn_run_time(h, "tiny", 10);
  for (int i = 0; i < 8; ++i) h.submit("tiny");
  h.turn();
  for (WorkerId w : ws) CHECK(h.workers.at(w).running.size() == 1);
}

TEST_CASE("SchedulerState.NoWorker.ReportedWithReasonThenPlaced") {
  Harness h;
  h.add_worker("cpu", 1);
  const TaskId t = h.submit("train", {{"tpu", 1}});
  h.turn();
  CHECK(h.status(t) == TaskStatus::ready);
  REQUIRE(!h.updates.empty());
  CHECK(h.updates.back().id == t);
  CHECK(h.updates.back().state == static_cast<std::uint8_t>(herd::protocol::TaskState::no_worker));
  CHECK(h.updates.back().error.message == "no connected worker offers {tpu: 1}");
  CHECK(h.state.why_no_worker(*h.task(t)) == "no connected worker offers {tpu: 1}");
  CHECK(h.state.unrunnable().at("no connected worker offers {tpu: 1}") == 1);
  // Other tasks are not held back by it.
  const TaskId other = h.submit("inc");
  h.turn();
  CHECK(h.status(other) == TaskStatus::processing);
  // A worker that offers it comes: it runs, and the client hears it is processing again.
  const WorkerId tpu = h.add_worker("tpu", 1, {{"tpu", 2}});
  h.turn();
  CHECK(h.where(t) == tpu);
  CHECK(h.updates.back().id == t);
  CHECK(h.updates.back().state == static_cast<std::uint8_t>(herd::protocol::TaskState::processing));
  CHECK(h.state.unrunnable().empty());
}

TEST_CASE("SchedulerState.Walltime.TooLongTaskWaitsAloneAndSaysWhy") {
  Harness h;
  const std::int64_t now_s = h.now.unix_s();
  const WorkerId shortw = h.add_worker("short", 1, {}, now_s + 600);
  const TaskId long_task = h.submit("train", {}, {}, 0, 3600);
  const TaskId quick = h.submit("inc");
  h.turn();
  CHECK(h.status(long_task) == TaskStatus::ready);
  CHECK(h.where(quick) == shortw);
  CHECK(h.state.why_no_worker(*h.task(long_task)).find("needs 3600 s") != std::string::npos);
  const WorkerId longw = h.add_worker("long", 1, {}, now_s + 7200);
  h.turn();
  CHECK(h.where(long_task) == longw);
}

TEST_CASE("SchedulerState.Gang.DistinctWorkersReservationAndNever") {
  Harness h;
  const WorkerId a = h.add_worker("a", 1);
  const WorkerId b = h.add_worker("b", 1);
  const TaskId busy = h.submit("busy");
  h.turn();
  const WorkerId busy_on = h.where(busy);
  // A gang of 2: one worker is busy, so it waits and reserves both; a later task does not
  // overtake it.
  const TaskId gang = h.submit_gang("step", 2);
  const TaskId later = h.submit("later");
  h.turn();
  CHECK(h.status(gang) == TaskStatus::ready);
  CHECK(h.status(later) == TaskStatus::ready);  // the idle worker is reserved for the gang
  h.finish(busy_on);
  CHECK(h.status(gang) == TaskStatus::processing);
  CHECK(h.status(gang + 1) == TaskStatus::processing);
  CHECK(h.where(gang) != h.where(gang + 1));
  CHECK(h.status(later) != TaskStatus::memory);
  // A gang of 3 on 2 workers can never start: said so, and nothing else is held back.
  const TaskId g3 = h.submit_gang("step", 3);
  h.finish(a);
  h.finish(b);
  h.turn();
  CHECK(h.status(g3) == TaskStatus::ready);
  CHECK(h.state.why_no_worker(*h.task(g3)).find("needs 3 workers") != std::string::npos);
  const TaskId free_task = h.submit("inc");
  h.turn();
  CHECK(h.status(free_task) == TaskStatus::processing);
}

TEST_CASE("SchedulerState.Suspect.RunsAloneAfterItsWorkerDied") {
  Harness h;
  const WorkerId a = h.add_worker("a", 2);
  const TaskId poison = h.submit("poison");
  h.turn();
  REQUIRE(h.where(poison) == a);
  h.state.worker_lost(a, "killed");
  h.workers.erase(a);
  const WorkerId b = h.add_worker("b", 2);
  for (int i = 0; i < 3; ++i) h.submit("innocent");
  h.turn();
  // b runs the suspect alone: nothing else shares the worker with it.
  CHECK(h.where(poison) == b);
  CHECK(h.placed_on(b) == 1);
  h.finish(b);
  CHECK(h.status(poison) == TaskStatus::memory);
  CHECK(h.placed_on(b) > 0);  // innocents run once it is done
}

TEST_CASE("SchedulerState.Liveness.SilentWorkerIsLostAndItsTasksRunElsewhere") {
  StateOptions o;
  o.timeout_ms = 1000;
  o.heartbeat_ms = 100;
  Harness h(o);
  const WorkerId a = h.add_worker("a", 1);
  const TaskId t = h.submit("f");
  h.turn();
  REQUIRE(h.where(t) == a);
  const WorkerId b = h.add_worker("b", 1);
  h.now.mono += 600ms;
  h.state.heard_from_worker(b, h.now);
  h.turn();
  CHECK(h.state.worker(a) != nullptr);  // not silent for long enough yet
  h.now.mono += 600ms;
  h.state.heard_from_worker(b, h.now);
  h.turn();
  CHECK(h.state.worker(a) == nullptr);
  CHECK(h.where(t) == b);  // a suspect now, alone on b
}

TEST_CASE("SchedulerState.Retire.UniqueResultsCopiedBeforeLeaving") {
  Harness h;
  const WorkerId a = h.add_worker("a", 1);
  const WorkerId b = h.add_worker("b", 1);
  const TaskId t = h.submit("f");
  h.turn();
  const WorkerId holder = h.where(t);
  const WorkerId other = holder == a ? b : a;
  h.finish(holder);
  h.state.retire(holder, "pool shrinks", true, h.now);
  h.state.tick(h.now);
  Outbox& out = h.state.outbox();
  REQUIRE(out.workers.count(other));
  REQUIRE(out.workers.at(other).acquire.size() == 1);
  CHECK(out.workers.at(other).acquire[0].id == t);
  out.clear();
  // The copy arrives: the retiring worker leaves, with its job released to the pool.
  herd::protocol::TaskResultsEvent ev;
  ev.acquired.push_back(t);
  h.state.task_results(other, ev, h.now);
  h.state.tick(h.now);
  CHECK(h.state.worker(holder) == nullptr);
  REQUIRE(out.departed.size() == 1);
  CHECK(out.departed[0].release_job);
  CHECK(out.workers.at(holder).shutdown == std::string("retired"));
  CHECK(h.task(t)->who_has == std::vector<std::uint32_t>{other});
}

namespace {
/// Worker `w` of `h` finishes its running tasks with results of `nbytes`, sent whole with the
/// report (as a worker sends a small result: the client gets it in the update) or not.
void finish_with(Harness& h, WorkerId w, std::uint64_t nbytes, bool inline_data) {
  auto& vw = h.workers.at(w);
  herd::protocol::TaskResultsEvent ev;
  for (TaskId t : vw.running) {
    herd::protocol::TaskResult r;
    r.id = t;
    r.ok = true;
    r.nbytes = nbytes;
    r.duration_us = 1000;
    if (inline_data) r.inline_data.assign(nbytes, 'x');
    ev.results.push_back(r);
    vw.has.insert(t);
  }
  vw.running.clear();
  h.state.task_results(w, ev, h.now);
  h.turn();
}
}  // namespace

TEST_CASE("SchedulerState.Retire.AResultTheClientHoldsNeedsNoWorkerAndIsRecomputedOnlyForATask") {
  // The repro in the core: a small result reached the client with its update; the
  // worker that computed it retires with no other worker to take it, and leaves at once
  // (nothing to copy, nothing kept), the result is not recomputed, and a task that later takes
  // it as input makes it computed again.
  Harness h;
  const WorkerId a = h.add_worker("a", 1);
  const TaskId t = h.submit("f");
  h.turn();
  REQUIRE(h.where(t) == a);
  finish_with(h, a, 16, /*inline_data=*/true);
  REQUIRE(h.status(t) == TaskStatus::memory);
  REQUIRE(!h.updates.empty());
  CHECK(h.updates.back().inline_data.size() == 16);  // the client has the value
  CHECK(h.task(t)->client_has);
  CHECK(h.state.unique_results(a) == 0);
  auto e = h.state.explain(*h.task(t), h.now);
  CHECK(e.summary.find("its client holds the value too") != std::string::npos);
  h.state.retire(a, "pool local shrinks", /*by_pool=*/true, h.now);
  h.state.tick(h.now);
  CHECK(h.state.worker(a) == nullptr);  // left at once
  CHECK(h.state.outbox().workers.at(a).acquire.empty());
  h.deliver();
  CHECK(h.status(t) == TaskStatus::released);  // not recomputed: nobody needs it on a worker
  CHECK(h.state.graph().count(TaskStatus::ready) == 0);
  CHECK(h.state.explain(*h.task(t), h.now).summary.find("its client holds the value") != std::string::npos);
  // A new worker, then a task that takes the result as input: it is computed again first.
  const WorkerId b = h.add_worker("b", 1);
  const TaskId g = h.submit("g", {}, {t});
  h.turn();
  CHECK(h.status(t) == TaskStatus::processing);
  CHECK(h.where(t) == b);
  CHECK(h.status(g) == TaskStatus::waiting);
  finish_with(h, b, 16, true);
  CHECK(h.status(t) == TaskStatus::memory);
  CHECK(h.status(g) == TaskStatus::processing);
}

TEST_CASE("SchedulerState.Retire.AResultOnlyAWorkerHoldsIsCopiedOrKeepsItAndSaysSo") {
  // A big result (the client fetches it when asked): only its worker holds it. unique_results
  // counts it; with a worker to take it, retirement copies it there (Dask's retire_workers);
  // a pool that keeps its worker for it marks it, and status and explain say what it holds.
  Harness h;
  const WorkerId a = h.add_worker("a", 1);
  const TaskId t = h.submit("f");
  h.turn();
  finish_with(h, a, 4096, /*inline_data=*/false);
  CHECK(!h.task(t)->client_has);
  std::uint64_t bytes = 0;
  CHECK(h.state.unique_results(a, &bytes) == 1);
  CHECK(bytes == 4096);
  h.state.set_kept_for_data("", {a});
  REQUIRE(h.state.worker(a)->kept_for_data);
  const std::string text = h.state.kept_for_data_text(*h.state.worker(a));
  CHECK(text.find("1 result(s) only it has (4.0 KiB)") == 0);
  auto e = h.state.explain(*h.task(t), h.now);
  CHECK(e.summary.find("worker a is kept for data") != std::string::npos);
  h.state.set_kept_for_data("", {});
  CHECK(!h.state.worker(a)->kept_for_data);
  // Released by the client: nothing left to keep it for.
  const WorkerId b = h.add_worker("b", 1);
  h.state.retire(a, "retired by the user", true, h.now);
  h.state.tick(h.now);
  REQUIRE(h.state.outbox().workers.count(b));
  CHECK(h.state.outbox().workers.at(b).acquire.size() == 1);  // copied to the worker that stays
}

TEST_CASE("SchedulerState.Retire.APoolRetirementTellsTheWorkerTheSecondsItsTasksHave") {
  StateOptions o;
  o.retire_grace_s = 30;
  o.timeout_ms = 600'000;  // nobody is lost for silence while the clock moves on
  Harness h(o);
  const std::int64_t now_s = h.now.unix_s();
  const WorkerId a = h.add_worker("a", 1);  // no job end
  const TaskId t = h.submit("train");
  h.turn();
  REQUIRE(h.where(t) == a);
  const WorkerId ends = h.add_worker("ends", 1, {}, now_s + 20);  // its job ends in 20 s
  const WorkerId gone = h.add_worker("gone", 1, {}, now_s + 3);   // ... in 3 s
  const WorkerId asked = h.add_worker("asked", 1);                // retires on its own (a signal)
  h.turn();
  Outbox& out = h.state.outbox();
  out.clear();

  // The pool shrinks: the worker hears it, with the whole grace when its job has no end...
  h.state.retire(a, "pool local shrinks", /*by_pool=*/true, h.now);
  REQUIRE(out.workers.count(a) == 1);
  REQUIRE(out.workers.at(a).retiring.has_value());
  CHECK(out.workers.at(a).retiring->seconds == 30);
  CHECK(out.workers.at(a).retiring->reason == "pool local shrinks");
  // ... and with what is left before the grace is cut short (5 s before its job ends) otherwise.
  h.state.retire(ends, "pool local shrinks", true, h.now);
  REQUIRE(out.workers.at(ends).retiring.has_value());
  CHECK(out.workers.at(ends).retiring->seconds == 15);
  h.state.retire(gone, "pool local shrinks", true, h.now);
  REQUIRE(out.workers.at(gone).retiring.has_value());
  CHECK(out.workers.at(gone).retiring->seconds == 0);
  // A worker that asked to retire is not told (it set its own deadline), not even when the pool
  // then picks it too; nor is a worker told twice.
  h.state.retire_request(asked, "drain on signal", h.now);
  h.state.retire(asked, "pool local shrinks", true, h.now);
  CHECK(!(out.workers.count(asked) && out.workers.at(asked).retiring.has_value()));
  out.clear();
  h.state.retire(a, "pool local shrinks again", true, h.now);
  CHECK(!(out.workers.count(a) && out.workers.at(a).retiring.has_value()));
  out.clear();

  // The grace itself is unchanged: the running task stays where it is until it has passed.
  const WorkerId staying = h.add_worker("staying", 1);
  h.now.mono += 29s;
  h.turn();
  CHECK(h.status(t) == TaskStatus::processing);
  CHECK(h.where(t) == a);
  h.now.mono += 2s;  // 31 s in: handed back, placed on the worker that stays
  h.state.tick(h.now);
  REQUIRE(out.departed.size() == 1);
  CHECK(out.departed[0].id == a);
  CHECK(out.departed[0].release_job);
  CHECK(out.departed[0].retired_by_pool);  // its job is no capacity from this turn on
  h.turn();
  CHECK(h.state.worker(a) == nullptr);
  CHECK(h.status(t) == TaskStatus::processing);
  CHECK(h.where(t) == staying);
}

TEST_CASE("SchedulerState.Backlog.CountsWhatAPoolCouldRun") {
  Harness h;
  h.submit("cpu1");
  h.submit("cpu2");
  h.submit("gpu", {{"gpu", 1}});
  h.turn();
  CHECK(h.state.backlog({}) == 2);
  CHECK(h.state.backlog({{"gpu", 1}}) == 3);
}

TEST_CASE("SchedulerState.Validate.CatchesACorruptIndex") {
  Harness h;
  const WorkerId a = h.add_worker("a", 1);
  const TaskId t = h.submit("f");
  h.turn();
  CHECK(h.state.validate().empty());
  // Corrupt one field through the back door: validate must see it.
  auto& w = const_cast<WorkerRec&>(*h.state.worker(a));
  w.processing.erase(t);
  CHECK(h.state.validate().find("does not list it") != std::string::npos);
  w.processing.emplace(t, 0);
  CHECK(h.state.validate().empty());
}

TEST_CASE("TaskGraph.Transitions.IllegalMoveThrowsInStrictMode") {
  TaskGraph g;
  g.set_strict(true);
  Effects fx;
  TaskSpec s;
  s.id = 1;
  s.function = "f";
  g.add(s, 1, 0, fx);
  g.started(1, 3);
  fx.clear();
  g.finished(1, 3, 8, fx);
  CHECK(g.find(1)->status == TaskStatus::memory);
  CHECK_THROWS_AS(g.started(1, 3), std::logic_error);  // memory -> processing is not a move
  CHECK(g.illegal_transitions() == 1);
}

namespace {
herd::protocol::TaskResult unreachable_result(TaskId task, TaskId input, const std::string& holder) {
  herd::protocol::TaskResult r;
  r.id = task;
  r.missing_input = true;
  r.unreachable.push_back({input, {holder}});
  r.error = {"herd::MissingInput", "input could not be fetched: could not reach " + holder, "", ""};
  return r;
}
}  // namespace

TEST_CASE("SchedulerState.Unreachable.PlacedElsewhereThenInputRecomputed") {
  Harness h;
  const WorkerId a = h.add_worker("a", 1, {{"x", 1}});
  const WorkerId b = h.add_worker("b", 1, {{"y", 1}});
  const WorkerId c = h.add_worker("c", 1, {{"y", 1}});
  const TaskId in = h.submit("load", {{"x", 1}});  // only a can make it
  h.turn();
  REQUIRE(h.where(in) == a);
  h.finish(a, 1 << 20);
  const TaskId use = h.submit("use", {{"y", 1}}, {in});  // only b or c can use it
  h.turn();
  const WorkerId first = h.where(use);
  REQUIRE((first == b || first == c));
  const WorkerId second_expected = first == b ? c : b;
  // The first cannot reach a: the task goes to the other, never back to the first.
  h.workers.at(first).running.clear();
  herd::protocol::TaskResultsEvent ev;
  ev.results.push_back(unreachable_result(use, in, "tcp://a:1"));
  h.state.task_results(first, ev, h.now);
  h.turn();
  REQUIRE(h.where(use) == second_expected);
  CHECK(h.status(in) == TaskStatus::memory);  // one worker's trouble: the copy on a stands
  // The second cannot reach a either: the copy there counts as out of reach, a frees it, and
  // the input is computed again (on a, the only one that can).
  h.workers.at(second_expected).running.clear();
  herd::protocol::TaskResultsEvent ev2;
  ev2.results.push_back(unreachable_result(use, in, "tcp://a:1"));
  h.state.task_results(second_expected, ev2, h.now);
  h.turn();
  CHECK(h.status(in) == TaskStatus::processing);
  CHECK(h.where(in) == a);
  CHECK(h.status(use) == TaskStatus::waiting);
}

TEST_CASE("SchedulerState.Unreachable.AWorkerCutFromAHolderIsLearntOnceForEveryTask") {
  Harness h;
  const WorkerId a = h.add_worker("a", 1, {{"x", 1}});
  const WorkerId b = h.add_worker("b", 1, {{"y", 1}});
  const TaskId in = h.submit("load", {{"x", 1}});
  h.turn();
  REQUIRE(h.where(in) == a);
  h.finish(a, 1 << 20);
  // b could not reach a for one consumer: the later consumers of the same input go to c, even
  // while b is free, instead of each finding out for itself (a timeout each).
  const TaskId first = h.submit("use", {{"y", 1}}, {in});
  h.turn();
  REQUIRE(h.where(first) == b);  // the only worker offering y yet
  const WorkerId c = h.add_worker("c", 4, {{"y", 4}});
  h.workers.at(b).running.clear();
  herd::protocol::TaskResultsEvent ev;
  ev.results.push_back(unreachable_result(first, in, h.state.worker(a)->address));
  h.state.task_results(b, ev, h.now);
  h.turn();
  std::vector<TaskId> later;
  for (int i = 0; i < 3; ++i) later.push_back(h.submit("use", {{"y", 1}}, {in}));
  h.turn();
  for (TaskId t : later) CHECK(h.where(t) == c);
  CHECK(h.where(first) == c);
  // Tasks that do not need a's data still go to b.
  const TaskId other = h.submit("other", {{"y", 1}});
  h.turn();
  CHECK(h.where(other) == b);
}

TEST_CASE("SchedulerState.Unreachable.FailsAfterAllowedReportsNamingTheHolder") {
  StateOptions o;
  o.allowed_failures = 1;
  Harness h(o);
  const WorkerId a = h.add_worker("a", 1);
  const TaskId in = h.submit("load");
  h.turn();
  h.finish(a, 100);
  const WorkerId b = h.add_worker("b", 1, {{"b", 1}});
  const TaskId use = h.submit("use", {{"b", 1}}, {in});  // only b can run it
  h.turn();
  REQUIRE(h.where(use) == b);
  for (int i = 0; i < 2; ++i) {
    h.workers.at(b).running.clear();
    h.workers.at(b).queue.clear();
    herd::protocol::TaskResultsEvent ev;
    ev.results.push_back(unreachable_result(use, in, "tcp://a:1"));
    h.state.task_results(b, ev, h.now);
    h.turn();
  }
  REQUIRE(h.status(use) == TaskStatus::erred);
  CHECK(h.task(use)->error->message.find("could not reach tcp://a:1") != std::string::npos);
  // ... by its worker's name and host when the scheduler knows the address.
  CHECK(h.task(use)->error->message.find("could not reach worker a on " + h.state.worker(a)->host) != std::string::npos);
  CHECK(h.task(use)->error->message.find("in 2 tries") != std::string::npos);
}

TEST_CASE("SchedulerState.ClientFetchFailed.AnotherHolderThenACopyThenAClearError") {
  Harness h;
  const WorkerId a = h.add_worker("a", 1);
  const WorkerId b = h.add_worker("b", 1);
  const TaskId t = h.submit("f");
  h.turn();
  const WorkerId holder = h.where(t);
  const WorkerId other = holder == a ? b : a;
  h.finish(holder, 1 << 20);
  h.updates.clear();
  // The client could not reach the holder: another worker copies it, the client is told.
  h.state.client_fetch_failed(h.client, {{t}, h.state.worker(holder)->address, "no data for 10000 ms"});
  Outbox& out = h.state.outbox();
  REQUIRE(out.workers.count(other));
  REQUIRE(out.workers.at(other).acquire.size() == 1);
  out.clear();
  herd::protocol::TaskResultsEvent ev;
  ev.acquired.push_back(t);
  h.state.task_results(other, ev, h.now);
  REQUIRE(out.clients.count(h.client));
  const auto& u = out.clients.at(h.client).updates;
  REQUIRE(u.updates.size() == 1);
  CHECK(u.updates[0].state == static_cast<std::uint8_t>(herd::protocol::TaskState::memory));
  CHECK(u.addresses.at(static_cast<std::size_t>(u.updates[0].location)) == h.state.worker(other)->address);
  out.clear();
  // Now two holders: a failure at one points the client at the other, at once.
  h.state.client_fetch_failed(h.client, {{t}, h.state.worker(other)->address, "no data"});
  REQUIRE(out.clients.count(h.client));
  CHECK(out.clients.at(h.client).updates.addresses.at(0) == h.state.worker(holder)->address);
  out.clear();
  // A result on one worker that no other can copy: a clear error naming the holder.
  const TaskId t2 = h.submit("g");
  h.turn();
  const WorkerId holder2 = h.where(t2);
  h.finish(holder2, 1 << 20);
  const WorkerId other2 = holder2 == a ? b : a;
  h.state.client_fetch_failed(h.client, {{t2}, h.state.worker(holder2)->address, "no data for 10000 ms"});
  out.clear();
  herd::protocol::TaskResultsEvent failed;
  failed.acquire_failed.push_back({t2, {h.state.worker(holder2)->address}});
  h.state.task_results(other2, failed, h.now);
  REQUIRE(out.clients.count(h.client));
  const auto& e = out.clients.at(h.client).updates.updates;
  REQUIRE(e.size() == 1);
  CHECK(e[0].state == static_cast<std::uint8_t>(herd::protocol::TaskState::erred));
  CHECK(e[0].error.message.find("could not be fetched from " + h.state.worker(holder2)->address) != std::string::npos);
  CHECK(e[0].error.message.find("could not copy it either") != std::string::npos);
}

TEST_CASE("SchedulerState.ReadyQueue.PriorityThenOldestFirstWhateverTheArrivalOrder") {
  // The FIFO-beside-a-heap must pop exactly what one heap of (priority, seq) would, for
  // in-order runs (the FIFO), out-of-order arrivals (the heap) and everything mixed.
  std::mt19937_64 rng(11);
  ReadyQueue q;
  std::priority_queue<ReadyItem> ref;
  std::uint64_t seq = 0;
  std::vector<std::uint64_t> late;  // seqs handed out but pushed later (older tasks ready late)
  for (int round = 0; round < 60000; ++round) {  // long enough that the FIFO compacts
    const auto r = rng();
    if (r % 3 != 0) {
      ReadyItem item;
      item.priority = (r >> 8) % 5 == 0 ? static_cast<std::int32_t>((r >> 16) % 3) : 0;
      // Mostly increasing seq (submission order); now and then an older task that became
      // ready late. Each seq once, as in the state (one per task).
      if ((r >> 24) % 7 == 0) late.push_back(seq++);
      if ((r >> 32) % 5 == 0 && !late.empty()) {
        item.seq = late[(r >> 40) % late.size()];
        late.erase(std::find(late.begin(), late.end(), item.seq));
      } else {
        item.seq = seq++;
      }
      item.id = static_cast<TaskId>(round + 1);
      q.push(item);
      ref.push(item);
    } else if (!ref.empty()) {
      REQUIRE(!q.empty());
      CHECK(q.top().id == ref.top().id);
      q.pop();
      ref.pop();
    }
    REQUIRE(q.size() == ref.size());
  }
  while (!ref.empty()) {
    CHECK(q.top().id == ref.top().id);
    q.pop();
    ref.pop();
  }
  CHECK(q.empty());
}

namespace {
/// The acquire_keys for `t` in the outbox, by worker; the outbox is cleared.
std::map<WorkerId, herd::protocol::DepLocation> take_acquires(Harness& h, TaskId t) {
  std::map<WorkerId, herd::protocol::DepLocation> m;
  Outbox& out = h.state.outbox();
  for (auto& [id, w] : out.workers) {
    for (auto& a : w.acquire) {
      if (a.id == t) m[id] = a;
    }
  }
  out.clear();
  return m;
}

void copied(Harness& h, WorkerId w, TaskId t) {
  herd::protocol::TaskResultsEvent ev;
  ev.acquired.push_back(t);
  h.state.task_results(w, ev, h.now);
}
}  // namespace

TEST_CASE("SchedulerState.Replicate.TreeShapedCopiesThenALostOneCostsNoRecompute") {
  Harness h;
  for (int i = 0; i < 5; ++i) h.add_worker("w" + std::to_string(i), 1);
  const TaskId t = h.submit("f");
  h.turn();
  const WorkerId first = h.where(t);
  h.finish(first);
  REQUIRE(h.task(t)->in_memory());
  // Every worker (0): one holder serves one copy...
  h.state.replicate(h.client, {t}, 0);
  auto round1 = take_acquires(h, t);
  REQUIRE(round1.size() == 1);
  const auto [second, loc1] = *round1.begin();
  CHECK(loc1.holders == std::vector<std::string>{h.state.worker(first)->address});
  copied(h, second, t);
  // ... then two holders serve two, each from a different source first (not both from one).
  auto round2 = take_acquires(h, t);
  REQUIRE(round2.size() == 2);
  std::set<std::string> sources;
  for (const auto& [w, loc] : round2) {
    CHECK(loc.holders.size() == 2);  // the other holder is the fallback
    sources.insert(loc.holders.front());
  }
  CHECK(sources == std::set<std::string>{h.state.worker(first)->address, h.state.worker(second)->address});
  for (const auto& [w, loc] : round2) copied(h, w, t);
  // Four holders, one worker left: one more copy, then nothing.
  auto round3 = take_acquires(h, t);
  REQUIRE(round3.size() == 1);
  copied(h, round3.begin()->first, t);
  CHECK(take_acquires(h, t).empty());
  CHECK(h.task(t)->who_has.size() == 5);
  // Losing the first holder costs nothing: the result stays in memory, nothing reruns.
  h.state.worker_lost(first, "killed");
  h.turn();
  REQUIRE(h.task(t) != nullptr);
  CHECK(h.task(t)->in_memory());
  CHECK(h.task(t)->who_has.size() == 4);
  for (const auto& [id, w] : h.workers) {
    CHECK(w.queue.empty());
    CHECK(w.running.empty());
  }
  // A task that needs it runs on a holder.
  const TaskId user = h.submit("g", {}, {t});
  h.turn();
  const WorkerId where = h.where(user);
  CHECK(std::find(h.task(t)->who_has.begin(), h.task(t)->who_has.end(), where) != h.task(t)->who_has.end());
}

TEST_CASE("SchedulerState.Scatter.FromTheClientsPortElseThroughTheScheduler") {
  // A big scattered value comes with its client's data port instead of its bytes: the worker
  // chosen is told to fetch it there. When that worker cannot reach the port, the scatter waits
  // again (the future is not failed) and the client is asked for the bytes, which then go to a
  // worker as any small scatter does.
  Harness h;
  const WorkerId a = h.add_worker("a", 1);
  const TaskId id = (static_cast<TaskId>(h.client) << 40) | h.next++;
  std::string error;
  REQUIRE(h.state.scatter(h.client, {id, "", "tcp://login:7", 64 << 20}, nullptr, error));
  Outbox& out = h.state.outbox();
  REQUIRE(out.workers[a].put_from.size() == 1);
  CHECK(out.workers[a].put_from[0].id == id);
  CHECK(out.workers[a].put_from[0].source == "tcp://login:7");
  CHECK(out.workers[a].put.empty());
  CHECK(h.status(id) == TaskStatus::processing);
  out.clear();

  herd::protocol::TaskResult r;
  r.id = id;
  r.error = {herd::protocol::kScatterSourceUnreachable,
             "worker a could not fetch scattered value 7: could not reach tcp://login:7 (no data for 10000 ms)", "", "a"};
  herd::protocol::TaskResultsEvent failed;
  failed.results.push_back(r);
  h.state.task_results(a, failed, h.now);
  CHECK(h.status(id) == TaskStatus::waiting);
  CHECK(out.clients[h.client].scatter_inline.ids == std::vector<TaskId>{id});
  CHECK(out.clients[h.client].scatter_inline.reason.find("tcp://login:7") != std::string::npos);
  CHECK(out.clients[h.client].updates.updates.empty());  // the future goes on waiting
  out.clear();

  // A second announcement is a resend: ignored. The bytes are placed.
  REQUIRE(h.state.scatter(h.client, {id, "", "tcp://login:7", 64 << 20}, nullptr, error));
  CHECK(out.workers[a].put_from.empty());
  REQUIRE(h.state.scatter(h.client, {id, "", "", 0}, herd::net::copy_payload("abc", 3), error));
  REQUIRE(out.workers[a].put.size() == 1);
  CHECK(out.workers[a].put[0].first == id);
  CHECK(out.workers[a].put[0].second->size() == 3);
  CHECK(h.status(id) == TaskStatus::processing);
  out.clear();
  // The same bytes again: a resend, nothing more is sent.
  REQUIRE(h.state.scatter(h.client, {id, "", "", 0}, herd::net::copy_payload("abc", 3), error));
  CHECK(out.workers[a].put.empty());

  herd::protocol::TaskResultsEvent held;
  r.ok = true;
  r.nbytes = 3;
  r.error = {};
  held.results.push_back(r);
  h.state.task_results(a, held, h.now);
  CHECK(h.status(id) == TaskStatus::memory);
  CHECK(h.state.validate().empty());
}

TEST_CASE("SchedulerState.Scatter.WorkerLostWhileFetchingAnotherFetchesIt") {
  // The client still holds a big scattered value until a worker has it: a worker lost while
  // fetching it is replaced by another, not reported as lost data. A few times only.
  StateOptions o;
  o.allowed_failures = 1;
  Harness h(o);
  const WorkerId a = h.add_worker("a", 1);
  const TaskId id = (static_cast<TaskId>(h.client) << 40) | h.next++;
  std::string error;
  REQUIRE(h.state.scatter(h.client, {id, "", "tcp://login:7", 64 << 20}, nullptr, error));
  Outbox& out = h.state.outbox();
  out.clear();
  const WorkerId b = h.add_worker("b", 1);
  h.state.worker_lost(a, "killed");
  REQUIRE(out.workers[b].put_from.size() == 1);
  CHECK(out.workers[b].put_from[0].source == "tcp://login:7");
  CHECK(h.status(id) == TaskStatus::processing);
  CHECK(h.where(id) == b);
  CHECK(out.clients[h.client].updates.updates.empty());
  out.clear();
  // Lost again, past allowed_failures: the scatter fails, naming what happened.
  const WorkerId c = h.add_worker("c", 1);
  h.state.worker_lost(b, "killed");
  CHECK(out.workers[c].put_from.empty());
  CHECK(h.status(id) == TaskStatus::erred);
  CHECK(h.state.validate().empty());
}

TEST_CASE("SchedulerState.Replicate.NCopiesOnceComputedAndFailuresRetried") {
  Harness h;
  for (int i = 0; i < 4; ++i) h.add_worker("w" + std::to_string(i), 1);
  const TaskId t = h.submit("f");
  // Asked before it finished: copies follow the result.
  h.state.replicate(h.client, {t}, 3);
  h.turn();
  const WorkerId first = h.where(t);
  CHECK(take_acquires(h, t).empty());
  {  // it finishes (without a turn, which would deliver the outbox)
    herd::protocol::TaskResultsEvent ev;
    herd::protocol::TaskResult r;
    r.id = t;
    r.ok = true;
    r.nbytes = 8;
    ev.results.push_back(r);
    h.workers.at(first).running.clear();
    h.state.task_results(first, ev, h.now);
  }
  auto round1 = take_acquires(h, t);
  REQUIRE(round1.size() == 1);
  // The copy fails: another worker is asked.
  const WorkerId failed = round1.begin()->first;
  herd::protocol::TaskResultsEvent ev;
  ev.acquire_failed.push_back(round1.begin()->second);
  h.state.task_results(failed, ev, h.now);
  auto retry = take_acquires(h, t);
  REQUIRE(retry.size() == 1);
  copied(h, retry.begin()->first, t);
  auto round2 = take_acquires(h, t);
  REQUIRE(round2.size() == 1);  // 2 holders, 3 wanted: one more
  copied(h, round2.begin()->first, t);
  CHECK(take_acquires(h, t).empty());
  CHECK(h.task(t)->who_has.size() == 3);
}

TEST_CASE("State.Explain.GivesEachWorkersReason") {
  Harness h;
  // cpu-1's one "slot" resource is held by the first task: nothing more fits there.
  const WorkerId cpu = h.add_worker("cpu-1", 1, {{"slot", 1}});
  const TaskId first = h.submit("f", {{"slot", 1}});
  h.turn();
  h.add_worker("gpu-short", 1, {{"gpu", 1}, {"slot", 1}}, h.now.unix_s() + 100);
  const Task* running = h.state.graph().find(first);
  REQUIRE(running != nullptr);
  auto e = h.state.explain(*running, h.now);
  CHECK(e.state == "processing");
  CHECK(e.summary.find("running on worker") != std::string::npos);

  // Waiting on an input that is not computed yet.
  const TaskId second = h.submit("g", {}, {first});
  h.turn();
  e = h.state.explain(*h.state.graph().find(second), h.now);
  CHECK(e.state == "waiting");
  CHECK(e.summary == "waiting for 1 of its 1 input(s) to be computed");
  REQUIRE(e.inputs.size() == 1);
  CHECK(e.inputs[0].find("(processing)") != std::string::npos);

  // Ready, but cpu-1 is busy and gpu-short's walltime is too short for its duration.
  const TaskId third = h.submit("h", {{"slot", 1}}, {}, 0, /*duration_s=*/500);
  h.turn();
  const Task* t3 = h.state.graph().find(third);
  REQUIRE(t3->status == TaskStatus::ready);
  e = h.state.explain(*t3, h.now);
  CHECK(e.state == "ready");
  CHECK_FALSE(e.never);
  REQUIRE(e.workers.size() == 2);
  CHECK(e.workers[0].find("cpu-1: busy") == 0);
  CHECK(e.workers[1].find("gpu-short: has 100 s of walltime left, the task needs 500 s") == 0);
  CHECK(e.summary.find("waiting for a free slot on one of the 1 worker(s)") != std::string::npos);

  // Resources no connected worker offers: never, as far as the core knows.
  const TaskId fourth = h.submit("k", {{"bigmem", 1}});
  h.turn();
  e = h.state.explain(*h.state.graph().find(fourth), h.now);
  CHECK(e.never);
  CHECK(e.summary.find("no connected worker offers {bigmem: 1}") != std::string::npos);
  CHECK(e.workers[0].find("cpu-1: offers {slot: 1}, the task needs {bigmem: 1}") == 0);
  CHECK(e.resources == std::map<std::string, double>{{"bigmem", 1}});

  // Found by key; a finished task says so.
  const std::string key = h.state.graph().key_of(*h.state.graph().find(fourth));
  CHECK(h.state.find_by_key(key) == h.state.graph().find(fourth));
  CHECK(h.state.find_by_key("no-such-key") == nullptr);
  h.finish(cpu);
  e = h.state.explain(*h.state.graph().find(first), h.now);
  CHECK(e.state == "memory");
}

TEST_CASE("SchedulerState.ForceCancel.RunningTaskIsAbandonedAndItsSlotReused") {
  Harness h;
  const WorkerId w = h.add_worker("w", 1);
  TaskSpec spec;
  spec.id = (static_cast<TaskId>(h.client) << 40) | h.next++;
  spec.function = "endless";
  spec.timeout_ms = 1500;
  std::string error;
  REQUIRE(h.state.submit(h.client, spec, nullptr, error));
  const TaskId endless = spec.id;
  const TaskId next = h.submit("inc");
  h.turn();
  REQUIRE(h.workers.at(w).running == std::vector<TaskId>{endless});
  CHECK(h.timeouts[endless] == 1500u);  // the limit travels to the worker
  CHECK(h.timeouts.count(next) == 0u);

  // A plain cancel leaves a running task alone on its worker.
  h.state.cancel(h.client, {next});
  h.turn();
  CHECK(h.abandoned.empty());
  const TaskId after = h.submit("inc");
  h.turn();

  h.state.force_cancel(h.client, {endless});
  h.turn();
  REQUIRE(h.abandoned.size() == 1u);
  CHECK(h.abandoned[0] == std::make_pair(w, endless));
  CHECK(h.status(endless) == TaskStatus::cancelled);
  CHECK(h.state.worker(w)->processing.count(endless) == 1u);  // until the worker says so
  // The worker reports it failed at once and starts the next task in its place.
  auto& vw = h.workers.at(w);
  vw.running.erase(std::find(vw.running.begin(), vw.running.end(), endless));
  herd::protocol::TaskResultsEvent ev;
  herd::protocol::TaskResult r;
  r.id = endless;
  r.error = {"herd::CancelledError", "cancelled while running (cancel(force))", "endless", "w"};
  ev.results.push_back(r);
  h.state.task_results(w, ev, h.now);
  h.start(vw);
  h.turn();
  CHECK(h.state.worker(w)->processing.count(endless) == 0u);
  CHECK(h.status(endless) == TaskStatus::cancelled);  // a late failure does not change it
  h.finish(w);
  CHECK(h.status(after) == TaskStatus::memory);
  // The client heard it cancelled exactly once.
  CHECK(std::count_if(h.updates.begin(), h.updates.end(), [&](const auto& u) {
          return u.id == endless && u.state == static_cast<std::uint8_t>(herd::protocol::TaskState::cancelled);
        }) == 1);
}

namespace {
TaskId submit_restricted(Harness& h, std::vector<std::string> workers, bool loose, std::string pool) {
  TaskSpec s;
  s.id = (static_cast<TaskId>(h.client) << 40) | h.next++;
  s.function = "placed";
  s.workers = std::move(workers);
  s.allow_other_workers = loose;
  s.pool = std::move(pool);
  std::string error;
  REQUIRE(h.state.submit(h.client, s, nullptr, error));
  return s.id;
}
}  // namespace

TEST_CASE("SchedulerState.Restrictions.WorkersPoolAndAllowOtherWorkers") {
  Harness h;
  herd::protocol::HelloRequest hello;
  const WorkerId a = h.add_worker("a", 4);
  const WorkerId b = h.add_worker("b", 4);
  hello.name = "g";
  hello.host = "gpuhost";
  hello.nthreads = 4;
  hello.data_address = "tcp://gpuhost:9";
  hello.pool = "gpu";
  const WorkerId g = h.state.add_worker(hello, h.now);
  h.workers[g] = Harness::VWorker{g, 4, {}, {}, {}};

  std::vector<TaskId> on_b, on_gpu_host, in_pool, prefer_a;
  for (int i = 0; i < 6; ++i) on_b.push_back(submit_restricted(h, {"b"}, false, ""));
  for (int i = 0; i < 3; ++i) on_gpu_host.push_back(submit_restricted(h, {"gpuhost"}, false, ""));  // by host
  for (int i = 0; i < 3; ++i) in_pool.push_back(submit_restricted(h, {}, false, "gpu"));
  for (int i = 0; i < 2; ++i) prefer_a.push_back(submit_restricted(h, {"a", "nobody"}, true, ""));
  const TaskId nowhere = submit_restricted(h, {"nobody"}, false, "");
  const TaskId wrong_pool = submit_restricted(h, {"a"}, false, "gpu");  // both must hold: none does
  h.turn();
  for (TaskId t : on_b) {
    if (h.status(t) == TaskStatus::processing) CHECK(h.where(t) == b);
  }
  for (TaskId t : on_gpu_host) CHECK(h.where(t) == g);
  for (TaskId t : in_pool) {
    if (h.status(t) == TaskStatus::processing) CHECK(h.where(t) == g);
  }
  for (TaskId t : prefer_a) CHECK(h.where(t) == a);  // preferred, and free
  CHECK(h.status(nowhere) == TaskStatus::ready);
  CHECK(h.status(wrong_pool) == TaskStatus::ready);
  CHECK(h.state.why_no_worker(*h.task(nowhere)) == "no connected worker offers a slot among the workers {nobody}");
  CHECK(h.state.why_no_worker(*h.task(wrong_pool)) ==
        "no connected worker offers a slot among the workers {a} in pool 'gpu'");
  // The client was told, once each.
  for (TaskId t : {nowhere, wrong_pool}) {
    CHECK(std::count_if(h.updates.begin(), h.updates.end(), [&](const auto& u) {
            return u.id == t && u.state == static_cast<std::uint8_t>(herd::protocol::TaskState::no_worker);
          }) == 1);
  }
  // Everything restricted ends where it must, however many turns it takes.
  for (int round = 0; round < 20; ++round) {
    for (WorkerId w : {a, b, g}) h.finish(w);
  }
  for (TaskId t : on_b) CHECK(h.status(t) == TaskStatus::memory);
  for (TaskId t : in_pool) CHECK(h.status(t) == TaskStatus::memory);
  CHECK(h.status(nowhere) == TaskStatus::ready);
  CHECK(h.state.unrunnable().at("no connected worker offers a slot among the workers {nobody}") == 1u);
  // allow_other_workers: with every preferred worker busy, another one takes it.
  const WorkerId c = h.add_worker("c", 1);
  for (int i = 0; i < 40; ++i) submit_restricted(h, {}, false, "");  // keep a busy
  // Fill a until a task restricted to it has to wait.
  for (int i = 0; i < 5000; ++i) {
    const TaskId blocker = submit_restricted(h, {"a"}, false, "");
    h.turn();
    if (h.status(blocker) == TaskStatus::ready) break;
  }
  REQUIRE(h.state.worker(a)->processing.size() >= 4u);
  const TaskId loose = submit_restricted(h, {"a"}, true, "");
  h.turn();
  CHECK(h.status(loose) == TaskStatus::processing);
  CHECK(h.where(loose) != a);  // a is full of its own tasks; the loose one went elsewhere
  (void)c;
  // A worker named later picks the waiting task up.
  hello = {};
  hello.name = "nobody";
  hello.nthreads = 1;
  hello.data_address = "tcp://nobody:1";
  const WorkerId n = h.state.add_worker(hello, h.now);
  h.workers[n] = Harness::VWorker{n, 1, {}, {}, {}};
  h.turn();
  CHECK(h.where(nowhere) == n);
}

TEST_CASE("SchedulerState.Restart.CancelsEveryClientsTasksStopsEveryWorkerAndEmptiesTheState") {
  StateOptions o;
  o.full_results = true;  // keyed results go to the journal: a restart drops this turn's records
  Harness h(o);
  const WorkerId a = h.add_worker("a", 1);
  const WorkerId b = h.add_worker("b", 1);
  herd::protocol::HelloRequest hello;
  hello.name = "other";
  const ClientId other = h.state.add_client(hello, h.now);
  // Client 1: a result in memory, a dependent of it, and more queued; client 2: one task.
  const TaskId done = h.submit("load");
  h.turn();
  h.finish(h.where(done));
  REQUIRE(h.status(done) == TaskStatus::memory);
  const TaskId dependent = h.submit("use", {}, {done});
  std::vector<TaskId> queued;
  for (int i = 0; i < 4; ++i) queued.push_back(h.submit("more"));
  TaskSpec theirs;
  theirs.id = (static_cast<TaskId>(other) << 40) | 1;
  theirs.function = "theirs";
  std::string error;
  REQUIRE(h.state.submit(other, theirs, nullptr, error));
  TaskSpec keyed;  // placed first (priority), finished in the restart's own turn below
  keyed.id = (static_cast<TaskId>(h.client) << 40) | h.next++;
  keyed.function = "keyed";
  keyed.key = "keyed-1";
  keyed.priority = 100;
  REQUIRE(h.state.submit(h.client, keyed, nullptr, error));
  h.state.replicate(h.client, {done}, 0);
  h.turn();
  REQUIRE(h.state.graph().size() == 8);
  const WorkerId keyed_on = h.where(keyed.id);
  REQUIRE(keyed_on != kNoWorker);
  // Its result comes in the restart's turn: its journal record is queued...
  herd::protocol::TaskResultsEvent ev;
  herd::protocol::TaskResult r;
  r.id = keyed.id;
  r.ok = true;
  r.inline_data = {'\x01'};
  r.nbytes = 1;
  ev.results.push_back(r);
  h.state.task_results(keyed_on, ev, h.now);
  REQUIRE(h.state.outbox().journal.size() == 1);

  const std::string why = "cancelled: the cluster was restarted by client client";
  const auto restarted = h.state.restart(why);
  CHECK(restarted.stopped == 2);
  CHECK(restarted.cancelled == 8);  // every wanted task of both clients, finished ones too
  Outbox& out = h.state.outbox();
  CHECK(out.journal.empty());  // ...and goes with the restart
  // Every future of both clients: cancelled, with the reason.
  std::map<ClientId, std::set<TaskId>> cancelled;
  for (auto& [cid, c] : out.clients) {
    for (const auto& u : c.updates.updates) {
      if (u.state != static_cast<std::uint8_t>(herd::protocol::TaskState::cancelled)) continue;
      CHECK(u.error.type == "herd::CancelledError");
      CHECK(u.error.message == why);
      cancelled[cid].insert(u.id);
    }
  }
  CHECK(cancelled[h.client].size() == 7);
  CHECK(cancelled[h.client].count(done) == 1);
  CHECK(cancelled[h.client].count(dependent) == 1);
  CHECK(cancelled[h.client].count(keyed.id) == 1);
  CHECK(cancelled[other] == std::set<TaskId>{theirs.id});
  // Every worker: told to stop, gone from the state, its job released to its pool.
  CHECK(out.departed.size() == 2);
  for (const Departure& d : out.departed) {
    CHECK(d.release_job);
    CHECK(d.worked);  // its job ends because it was asked to: no crash for the pool
    REQUIRE(out.workers.count(d.id) == 1);
    CHECK(out.workers.at(d.id).shutdown == why);
    CHECK(out.workers.at(d.id).execute.empty());
  }
  CHECK(h.state.workers().empty());
  CHECK(h.state.graph().size() == 0);
  CHECK(h.state.gangs().empty());
  CHECK(h.state.ready_count() == 0);
  CHECK(h.state.validate() == "");
  h.deliver();
  CHECK(h.shutdowns.size() == 2);
  CHECK(h.workers.empty());

  // Late words from the old workers find nothing to act on.
  herd::protocol::TaskResultsEvent late;
  herd::protocol::TaskResult lr;
  lr.id = queued[0];
  lr.ok = true;
  lr.nbytes = 8;
  late.results.push_back(lr);
  h.state.task_results(a, late, h.now);
  h.state.journal_read(queued[1], nullptr);
  CHECK(h.state.graph().size() == 0);
  (void)b;

  // Usable at once: a new worker, a new task, a result.
  h.updates.clear();
  const WorkerId fresh = h.add_worker("fresh", 1);
  const TaskId next = h.submit("after");
  h.turn();
  CHECK(h.where(next) == fresh);
  h.finish(fresh);
  CHECK(h.status(next) == TaskStatus::memory);
  REQUIRE(!h.updates.empty());
  CHECK(h.updates.back().id == next);
  CHECK(h.updates.back().state == static_cast<std::uint8_t>(herd::protocol::TaskState::memory));
  CHECK(h.state.validate() == "");
}

TEST_CASE("SchedulerState.Restart.ForgetsGangsAndSuspectsAndARestartWithNothingIsHarmless") {
  Harness h;
  // Nothing to do: no worker, no task.
  auto nothing = h.state.restart("cancelled: the cluster was restarted by client x");
  CHECK(nothing.stopped == 0);
  CHECK(nothing.cancelled == 0);
  h.deliver();
  // A gang of 2 running on two workers, and a suspect (its worker died under it).
  const WorkerId w1 = h.add_worker("w1", 1);
  const WorkerId w2 = h.add_worker("w2", 1);
  const WorkerId w3 = h.add_worker("w3", 1);
  h.submit_gang("member", 2);
  h.turn();
  REQUIRE(h.state.gangs().size() == 1);
  const TaskId lone = h.submit("lone");
  h.turn();
  const WorkerId lone_on = h.where(lone);
  REQUIRE(lone_on != kNoWorker);
  h.state.worker_lost(lone_on, "killed");
  h.deliver();
  const auto restarted = h.state.restart("cancelled: the cluster was restarted by client x");
  CHECK(restarted.cancelled == 3);
  CHECK(restarted.stopped == 2);
  CHECK(h.state.gangs().empty());
  CHECK(h.state.graph().size() == 0);
  CHECK(h.state.validate() == "");
  h.deliver();
  // A gang again, on new workers: placed as on a fresh scheduler.
  h.add_worker("n1", 1);
  h.add_worker("n2", 1);
  const TaskId gang2 = h.submit_gang("member", 2);
  h.turn();
  CHECK(h.status(gang2) == TaskStatus::processing);
  CHECK(h.status(gang2 + 1) == TaskStatus::processing);
  (void)w1;
  (void)w2;
  (void)w3;
}

TEST_CASE("SchedulerState.Secede.ASecededTaskCountsNoSlotUntilItRejoinsOrEnds") {
  Harness h;
  const WorkerId w = h.add_worker("w", 1);
  const TaskId parent = h.submit("fan_out");
  h.turn();
  std::vector<TaskId> children;
  for (int i = 0; i < 6; ++i) children.push_back(h.submit("child"));
  h.turn();
  const std::size_t before = h.state.worker(w)->processing.size();  // the slot and its queue
  CHECK(before >= 1u);
  // The parent waits on its children without its slot: one thread more on that worker, and
  // the scheduler fills it.
  herd::protocol::SecedeEvent ev;
  ev.seceded = {parent, 12345};  // a task that is not there is ignored
  h.state.task_seceded(w, ev, h.now);
  h.workers.at(w).nthreads = 2;
  h.turn();
  CHECK(h.state.worker(w)->nthreads == 2u);
  CHECK(h.state.worker(w)->processing.size() > before);
  h.state.task_seceded(w, ev, h.now);  // told twice: counted once
  CHECK(h.state.worker(w)->nthreads == 2u);
  // It rejoins: back to one slot; then ends: nothing more to give back.
  herd::protocol::SecedeEvent back;
  back.rejoined = {parent};
  h.state.task_seceded(w, back, h.now);
  CHECK(h.state.worker(w)->nthreads == 1u);
  // Seceded again, it ends while seceded: its thread goes with it.
  h.state.task_seceded(w, ev, h.now);
  CHECK(h.state.worker(w)->nthreads == 2u);
  auto& vw = h.workers.at(w);
  vw.running.erase(std::remove(vw.running.begin(), vw.running.end(), parent), vw.running.end());
  auto done = one_ok_result(parent, 8);
  h.state.task_results(w, done, h.now);
  CHECK(h.state.worker(w)->nthreads == 1u);
  CHECK(h.state.worker(w)->seceded.empty());
  vw.nthreads = 1;
  for (int i = 0; i < 8 && h.status(children.back()) != TaskStatus::memory; ++i) h.finish(w);
  for (TaskId c : children) CHECK(h.status(c) == TaskStatus::memory);
  CHECK(h.status(parent) == TaskStatus::memory);
}

// ---- detached campaigns ------------------------------------------------------------------------

namespace {
TaskId submit_to_campaign(Harness& h, ClientId client, std::uint64_t seq, const std::string& campaign,
                          const std::string& fn = "sim") {
  TaskSpec s;
  s.id = (static_cast<TaskId>(client) << 40) | seq;
  s.function = fn;
  s.campaign = campaign;
  std::string error;
  REQUIRE(h.state.submit(client, s, nullptr, error));
  return s.id;
}

ClientId connect_client(Harness& h, const std::string& name) {
  herd::protocol::HelloRequest hello;
  hello.name = name;
  return h.state.add_client(hello, h.now);
}
}  // namespace

TEST_CASE("SchedulerState.Campaign.OutlivesItsClientAndIsAttachedByName" * doctest::timeout(30)) {
  // Three campaign tasks and a plain one; two finish, then the client drops every future and
  // leaves. The plain task is forgotten, the campaign's stay (results kept); a new client
  // attaches by name, gets the tasks in submission order and the finished ones' places, and
  // hears of the third when it finishes.
  Harness h;
  const WorkerId w = h.add_worker("w", 2);
  const TaskId a = submit_to_campaign(h, h.client, 1, "nightly");
  const TaskId b = submit_to_campaign(h, h.client, 2, "nightly");
  const TaskId c = submit_to_campaign(h, h.client, 3, "nightly");
  h.next = 4;
  const TaskId plain = h.submit("other");
  h.turn();
  h.finish(w);  // a and b (two threads)
  REQUIRE(h.status(a) == TaskStatus::memory);
  REQUIRE(h.status(b) == TaskStatus::memory);
  auto camps = h.state.campaigns();
  REQUIRE(camps.size() == 1);
  CHECK(camps[0].name == "nightly");
  CHECK(camps[0].total == 3);
  CHECK(camps[0].done == 2);
  CHECK(camps[0].pending == 1);
  CHECK(camps[0].client == "client");
  CHECK(h.state.campaign_of(a) == "nightly");
  CHECK(h.state.campaign_of(plain).empty());

  h.state.release(h.client, {a, b, c, plain});  // the client dropped its futures
  h.state.client_lost(h.client, "killed");
  h.deliver();
  CHECK(h.task(a) != nullptr);
  CHECK(h.status(a) == TaskStatus::memory);
  CHECK(h.workers.at(w).has.count(a) == 1);  // the result was not freed
  CHECK(h.task(c) != nullptr);
  camps = h.state.campaigns();
  REQUIRE(camps.size() == 1);
  CHECK(camps[0].client.empty());  // detached

  const ClientId again = connect_client(h, "again");
  h.client = again;  // the harness's turns keep this one connected
  herd::protocol::CampaignReply reply;
  REQUIRE(h.state.attach_campaign(again, "nightly", reply));
  CHECK(reply.ok);
  REQUIRE(reply.tasks.size() == 3);
  CHECK(reply.tasks[0].id == a);
  CHECK(reply.tasks[1].id == b);
  CHECK(reply.tasks[2].id == c);
  CHECK(reply.tasks[0].function == "sim");
  REQUIRE(reply.current.updates.size() == 2);  // a and b: where they are
  for (const auto& u : reply.current.updates) {
    CHECK(u.state == static_cast<std::uint8_t>(herd::protocol::TaskState::memory));
    REQUIRE(u.location >= 0);
    CHECK(reply.current.addresses.at(static_cast<std::size_t>(u.location)) == "tcp://w:1");
  }
  REQUIRE(reply.campaigns.size() == 1);
  CHECK(reply.campaigns[0].client == "again");
  // c was still running when the first client left: the new one hears of it.
  if (h.status(c) != TaskStatus::processing) h.turn();
  REQUIRE(h.status(c) == TaskStatus::processing);
  h.finish(w);
  CHECK(h.status(c) == TaskStatus::memory);
  const auto& heard = h.heard[again];
  CHECK(std::count_if(heard.begin(), heard.end(), [&](const auto& u) { return u.id == c; }) == 1);
  CHECK(h.state.campaigns()[0].done == 3);
}

TEST_CASE("SchedulerState.Campaign.FailureIsVisibleAndReleaseFreesIt" * doctest::timeout(30)) {
  Harness h;
  const WorkerId w = h.add_worker("w", 1);
  const TaskId ok = submit_to_campaign(h, h.client, 1, "sweep");
  h.turn();
  h.finish(w);
  const TaskId bad = submit_to_campaign(h, h.client, 2, "sweep");
  const TaskId later = submit_to_campaign(h, h.client, 3, "sweep");
  h.turn();
  REQUIRE(h.workers.at(w).running.size() == 1);
  REQUIRE(h.workers.at(w).running[0] == bad);
  herd::protocol::TaskResultsEvent ev;
  herd::protocol::TaskResult r;
  r.id = bad;
  r.ok = false;
  r.error = {"std::runtime_error", "diverged", "", "w"};
  ev.results.push_back(r);
  h.workers.at(w).running.clear();
  h.state.task_results(w, ev, h.now);
  h.turn();
  REQUIRE(h.status(bad) == TaskStatus::erred);
  h.state.client_lost(h.client, "gone");
  h.deliver();

  const ClientId again = connect_client(h, "again");
  h.client = again;
  herd::protocol::CampaignReply reply;
  REQUIRE(h.state.attach_campaign(again, "sweep", reply));
  auto camps = h.state.campaigns();
  REQUIRE(camps.size() == 1);
  CHECK(camps[0].total == 3);
  CHECK(camps[0].done == 1);
  CHECK(camps[0].failed == 1);
  CHECK(camps[0].pending == 1);
  bool saw_error = false;
  for (const auto& u : reply.current.updates) {
    if (u.id != bad) continue;
    saw_error = true;
    CHECK(u.state == static_cast<std::uint8_t>(herd::protocol::TaskState::erred));
    CHECK(u.error.type == "std::runtime_error");
    CHECK(u.error.message == "diverged");
  }
  CHECK(saw_error);

  // Released: the unfinished task is cancelled (its client hears it), every task leaves the
  // graph, the result is freed on its worker, and the campaign is listed no more.
  REQUIRE(h.state.release_campaign("sweep"));
  h.deliver();
  CHECK(h.state.campaigns().empty());
  CHECK(h.task(ok) == nullptr);
  CHECK(h.task(bad) == nullptr);
  CHECK(h.workers.at(w).has.count(ok) == 0);
  const auto& heard = h.heard[again];
  CHECK(std::any_of(heard.begin(), heard.end(), [&](const auto& u) {
    return u.id == later && u.state == static_cast<std::uint8_t>(herd::protocol::TaskState::cancelled);
  }));
  CHECK_FALSE(h.state.release_campaign("sweep"));
  herd::protocol::CampaignReply none;
  CHECK_FALSE(h.state.attach_campaign(again, "sweep", none));
  CHECK(none.error.find("no campaign named 'sweep'") != std::string::npos);
}

TEST_CASE("SchedulerState.Campaign.RestartForgetsCampaigns" * doctest::timeout(30)) {
  Harness h;
  h.add_worker("w", 1);
  submit_to_campaign(h, h.client, 1, "x");
  h.turn();
  REQUIRE(h.state.campaigns().size() == 1);
  (void)h.state.restart("cancelled: restarted");
  h.deliver();
  CHECK(h.state.campaigns().empty());
  CHECK(h.state.validate().empty());
}

TEST_CASE("SchedulerState.Campaign.UnfinishedGangIsLostInRestartWithTheReason" * doctest::timeout(30)) {
  // A gang runs whole: a campaign's gang that had not finished is not put together again from
  // its recipes (some ranks may have finished); each rank fails with LostInRestart saying so.
  StateOptions o;
  o.full_results = true;
  std::vector<std::pair<std::string, std::vector<char>>> records;
  {
    Harness h(o);
    h.submit_gang("ring", 2, "nightly");
    records = h.state.outbox().journal;
  }
  REQUIRE(records.size() == 2);
  CHECK(records[1].first == herd::scheduler::campaign_record_key("nightly", "nightly/1"));
  Harness h(o);
  std::vector<TaskId> ids;
  for (int r = 0; r < 2; ++r) {
    ids.push_back(h.state.restore_campaign_task("nightly", "nightly/" + std::to_string(r), nullptr, false, nullptr,
                                                records[static_cast<std::size_t>(r)].second));
  }
  h.state.restore_done();
  for (TaskId id : ids) {
    REQUIRE(h.status(id) == TaskStatus::erred);
    CHECK(h.task(id)->error->type == "herd::LostInRestart");
    CHECK(h.task(id)->error->message.find("gang") != std::string::npos);
  }
  CHECK(h.state.campaigns().at(0).failed == 2);
}

TEST_CASE("SchedulerState.Campaign.JournaledAndRestoredAfterARestart" * doctest::timeout(30)) {
  // With the journal on, a campaign's tasks get keys "<campaign>/<index>"; their membership
  // (with recipes), results and errors are recorded in a real journal file. A new state,
  // restored from that file as the scheduler does, gives back: the finished task's result, the
  // failed task's own error, the unfinished task run again from its recipe (its input found by
  // key), and LostInRestart, naming the input, for one whose input was not a campaign's task.
  StateOptions o;
  o.full_results = true;
  const std::string path = "/tmp/herd-state-campaign-" + std::to_string(::getpid()) + ".journal";
  std::filesystem::remove(path);
  auto record = [](Harness& h, Journal& j) {
    for (auto& [key, bytes] : h.state.outbox().journal) j.append(key, bytes);
  };
  {
    Journal j(path);
    Harness h(o);
    const WorkerId w = h.add_worker("w", 3);
    const TaskId a = submit_to_campaign(h, h.client, 1, "nightly");
    const TaskId c = submit_to_campaign(h, h.client, 2, "nightly");
    h.next = 3;
    const TaskId p = h.submit("plain");
    TaskSpec b;  // b(a), in the campaign
    b.id = (static_cast<TaskId>(h.client) << 40) | 4;
    b.function = "step";
    b.args = {'\x91', '\xc0'};  // [nil]: filled by a
    b.refs.push_back(ArgRef{a, 0, -1});
    b.retries = 2;
    b.campaign = "nightly";
    TaskSpec d = b;  // d(p), in the campaign
    d.id = (static_cast<TaskId>(h.client) << 40) | 5;
    d.refs[0].id = p;
    std::string error;
    REQUIRE(h.state.submit(h.client, b, nullptr, error));
    REQUIRE(h.state.submit(h.client, d, nullptr, error));
    CHECK(h.state.graph().key_of(*h.task(a)) == "nightly/0");
    CHECK(h.state.graph().key_of(*h.task(b.id)) == "nightly/2");
    record(h, j);
    h.turn();
    REQUIRE(h.workers.at(w).running.size() == 3);  // a, c and p
    herd::protocol::TaskResultsEvent ev = one_ok_result(a, 1);
    ev.results[0].inline_data = {'\x07'};
    herd::protocol::TaskResult& failed = ev.results.emplace_back();
    failed.id = c;
    failed.error = {"std::runtime_error", "c diverged", "nightly/1", "w"};
    ev.results.push_back(one_ok_result(p, 1).results[0]);
    h.workers.at(w).running.clear();
    h.state.task_results(w, ev, h.now);
    h.state.schedule(h.now);
    record(h, j);
    h.deliver();
    CHECK(h.status(c) == TaskStatus::erred);
    CHECK(h.status(b.id) == TaskStatus::processing);  // unfinished when the scheduler "stops"
    CHECK(h.status(d.id) == TaskStatus::processing);
    j.flush();
    REQUIRE(j.wait_durable(10s));
  }

  Journal j(path);
  REQUIRE(j.campaign_members().size() == 4);
  CHECK(j.error_of("nightly/1") != nullptr);
  Harness h(o);
  std::map<std::string, TaskId> id;
  for (const Journal::CampaignMember& m : j.campaign_members()) {
    CHECK_FALSE(m.recipe.empty());
    const bool done = j.contains(m.key);
    id[m.key] = h.state.restore_campaign_task(m.campaign, m.key, done ? j.find(m.key) : nullptr, false,
                                              done ? nullptr : j.error_of(m.key), m.recipe);
  }
  h.state.restore_done();
  CHECK(h.state.outbox().journal.empty());  // the restore journals nothing again
  CHECK(h.status(id["nightly/1"]) == TaskStatus::erred);
  CHECK(h.task(id["nightly/1"])->error->type == "std::runtime_error");
  CHECK(h.task(id["nightly/1"])->error->message == "c diverged");
  CHECK(h.status(id["nightly/3"]) == TaskStatus::erred);
  CHECK(h.task(id["nightly/3"])->error->type == "herd::LostInRestart");
  CHECK(h.task(id["nightly/3"])->error->message.find("plain-") != std::string::npos);  // names its input
  CHECK(h.status(id["nightly/2"]) == TaskStatus::waiting);  // on nightly/0's result
  const WorkerId w = h.add_worker("w", 1);  // the scattered result goes to the first worker
  h.turn();
  REQUIRE(h.workers.at(w).running.empty());
  auto ev = one_ok_result(id["nightly/0"], 1);
  h.state.task_results(w, ev, h.now);
  h.state.schedule(h.now);
  h.deliver();
  CHECK(h.status(id["nightly/0"]) == TaskStatus::memory);
  // nightly/2 runs again, as submitted: its function, arguments, retries and input.
  REQUIRE(h.workers.at(w).running == std::vector<TaskId>{id["nightly/2"]});
  const Task* rerun = h.task(id["nightly/2"]);
  CHECK(h.state.graph().function_name(*rerun) == "step");
  CHECK(rerun->retries_left == 2);
  REQUIRE(rerun->deps.size() == 1);
  CHECK(rerun->deps[0] == id["nightly/0"]);
  h.finish(w);
  CHECK(h.status(id["nightly/2"]) == TaskStatus::memory);
  const auto camps = h.state.campaigns();
  REQUIRE(camps.size() == 1);
  CHECK(camps[0].total == 4);
  CHECK(camps[0].done == 2);
  CHECK(camps[0].failed == 2);
  herd::protocol::CampaignReply reply;
  REQUIRE(h.state.attach_campaign(h.client, "nightly", reply));
  REQUIRE(reply.tasks.size() == 4);
  CHECK(reply.tasks[0].key == "nightly/0");
  CHECK(reply.current.updates.size() == 4);
  // Released: a record says so, for the next load.
  REQUIRE(h.state.release_campaign("nightly"));
  const auto& recs = h.state.outbox().journal;
  CHECK(std::any_of(recs.begin(), recs.end(), [](const auto& rec) {
    return rec.first == herd::scheduler::campaign_record_key("nightly", "");
  }));
  std::filesystem::remove(path);
  std::filesystem::remove(path + ".lock");
}

TEST_CASE("SchedulerState.Cores.TasksHoldCoresNotThreadSlots") {
  // A worker with one thread slot and 32 cores runs 32 one-core tasks at once, or four 8-core
  // ones: its slots do not cap what its cores allow. Plain tasks still take its slot.
  Harness h;
  const WorkerId w = h.add_worker("big", 1, {{"cpus", 32}});
  h.workers.at(w).nthreads = 64;  // the virtual worker starts what it is sent
  std::vector<TaskId> one;
  for (int i = 0; i < 40; ++i) one.push_back(h.submit("omp", {{"cpus", 1}}));
  h.turn();
  std::size_t running = 0;
  for (TaskId t : one) running += h.status(t) == TaskStatus::processing;
  CHECK(running == 32);
  const TaskId plain = h.submit("inc");
  h.turn();
  CHECK(h.status(plain) == TaskStatus::processing);

  Harness h8;
  const WorkerId v = h8.add_worker("big", 1, {{"cpus", 32}});
  h8.workers.at(v).nthreads = 64;
  std::vector<TaskId> eight;
  for (int i = 0; i < 6; ++i) eight.push_back(h8.submit("omp", {{"cpus", 8}}));
  h8.turn();
  std::size_t placed = 0;
  for (TaskId t : eight) placed += h8.status(t) == TaskStatus::processing;
  CHECK(placed == 4);
  h8.finish(v);
  for (TaskId t : eight) CHECK(h8.status(t) != TaskStatus::ready);
}

// ---- jobs of shell commands (state_jobs.cpp) --------------------------------------------------

namespace {
herd::protocol::JobInfo job_of(const SchedulerState& s, std::uint64_t id) {
  for (const auto& j : s.jobs()) {
    if (j.id == id) return j;
  }
  FAIL("no job " << id);
  return {};
}
}  // namespace

TEST_CASE("SchedulerState.Jobs.ArrayEntersTheGraphAWindowAtATime") {
  Harness h;
  const WorkerId w = h.add_worker("w1", 2);
  herd::protocol::JobSpec spec;
  spec.task.argv = {"true"};
  spec.array = {1, 1000000, 1};
  std::string error;
  const std::uint64_t job = h.state.submit_job(spec, h.now, error);
  REQUIRE(job == 1);
  h.turn();
  const std::size_t in_graph = h.state.graph().size();
  CHECK(in_graph >= 2);
  CHECK(in_graph <= 4096);  // the window, not a million
  for (int i = 0; i < 10; ++i) h.finish(w);
  const auto info = job_of(h.state, job);
  CHECK(info.total == 1000000);
  CHECK(info.ok == 20);
  CHECK(info.ok + info.running + info.waiting == 1000000);
  CHECK(h.state.graph().size() <= 4096);
  // The tasks that ran are gone from the graph; each ran the job's command for its index.
  CHECK(h.state.validate().empty());
  REQUIRE(h.state.cancel_job(job, "enough", error));
  h.turn();
  const auto after = job_of(h.state, job);
  CHECK(after.ok == 20);
  CHECK(after.waiting == 0);
  CHECK(after.running == 0);
  CHECK(after.cancelled == 1000000 - 20);
  CHECK(after.state == "cancelled");
  CHECK(h.state.graph().size() == 0);
}

TEST_CASE("SchedulerState.Jobs.FileDependenciesFailureCancelsWhatFollows") {
  Harness h;
  const WorkerId w = h.add_worker("w1", 4);
  herd::protocol::JobSpec spec;
  for (std::uint64_t id : {1, 2, 3, 4}) {
    herd::protocol::JobTaskDef d;
    d.id = id;
    d.argv = {"step", std::to_string(id)};
    if (id == 2 || id == 3) d.deps = {1};
    if (id == 4) d.deps = {2, 3};
    spec.tasks.push_back(d);
  }
  std::string error;
  const std::uint64_t job = h.state.submit_job(spec, h.now, error);
  REQUIRE(job != 0);
  h.turn();
  CHECK(h.placed_on(w) == 1);  // only task 1
  h.finish(w);
  CHECK(h.placed_on(w) == 2);  // 2 and 3
  // Task 2 fails with exit code 3: task 4 is cancelled, task 3 still runs.
  auto& vw = h.workers.at(w);
  herd::protocol::TaskResultsEvent ev;
  const TaskId failing = vw.running.front();
  herd::protocol::TaskResult r;
  r.id = failing;
  r.ok = false;
  r.error = {"herd::CommandFailed", "exit code 3\nboom", "", "w1"};
  ev.results.push_back(r);
  vw.running.erase(vw.running.begin());
  h.state.task_results(w, ev, h.now);
  h.turn();
  h.finish(w);
  const auto info = job_of(h.state, job);
  CHECK(info.ok == 2);
  CHECK(info.failed == 1);
  CHECK(info.cancelled == 1);
  herd::protocol::JobReply reply;
  REQUIRE(h.state.job_info(job, false, reply));
  // A job file's info lists every task (they are few); the failed one carries its exit code.
  REQUIRE(reply.tasks.size() == 4);
  std::size_t failed_tasks = 0;
  for (const auto& t : reply.tasks) {
    if (t.state != "failed") continue;
    ++failed_tasks;
    CHECK(t.exit_code == 3);
    CHECK(t.error == "exit code 3\nboom");
  }
  CHECK(failed_tasks == 1);
  // A cycle, an unknown dependency and --after an unknown job are refused.
  spec.tasks[0].deps = {4};
  CHECK(h.state.submit_job(spec, h.now, error) == 0);
  CHECK(error.find("form a cycle") != std::string::npos);
  spec.tasks[0].deps = {9};
  CHECK(h.state.submit_job(spec, h.now, error) == 0);
  CHECK(error.find("does not have") != std::string::npos);
  herd::protocol::JobSpec after;
  after.task.argv = {"true"};
  after.after = {77};
  CHECK(h.state.submit_job(after, h.now, error) == 0);
  CHECK(error == "--after 77: no job of that id");
}
