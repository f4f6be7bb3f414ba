// Multi-node tasks (TaskOptions::nodes) in the scheduler's pure state (state_multinode.cpp):
// workers on n distinct hosts of one allocation, all at once, held for the task alone, the
// task run once on the first; a lost node fails the run naming its host, and a retry runs it on
// healthy nodes. Events in, the outbox read back; validate() after every event.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "scheduler/state.hpp"

using namespace herd::scheduler;
using herd::protocol::TaskSpec;
using namespace std::chrono_literals;

namespace {

struct Bed {
  SchedulerState state{[] {
    StateOptions o;
    o.validate = true;
    return o;
  }()};
  Now now{Clock::time_point{} + 1h, 1'700'000'000'000};
  ClientId client = 0;
  std::uint64_t next = 1;
  std::map<WorkerId, std::vector<herd::protocol::ExecuteTask>> executed;  // what each was sent
  std::map<WorkerId, std::vector<TaskId>> abandoned;
  std::vector<herd::protocol::TaskUpdate> updates;
  std::map<std::string, WorkerId> by_name;

  Bed() {
    herd::protocol::HelloRequest hello;
    hello.name = "client";
    client = state.add_client(hello, now);
  }

  WorkerId add(const std::string& name, const std::string& host, const std::string& job, std::uint32_t nthreads = 1) {
    herd::protocol::HelloRequest hello;
    hello.name = name;
    hello.host = host;
    hello.job_id = job;
    hello.nthreads = nthreads;
    hello.data_address = "tcp://" + name + ":1";
    const WorkerId id = state.add_worker(hello, now);
    by_name[name] = id;
    return id;
  }

  TaskId submit(const std::string& fn, std::uint32_t nodes = 0, std::uint32_t retries = 0) {
    TaskSpec s;
    s.id = (static_cast<TaskId>(client) << 40) | next++;
    s.function = fn;
    s.nodes = nodes;
    s.retries = retries;
    std::string error;
    REQUIRE(state.submit(client, s, nullptr, error));
    return s.id;
  }

  void turn() {
    state.heard_from_client(client, now);
    state.tick(now);
    state.schedule(now);
    Outbox& out = state.outbox();
    for (auto& [id, w] : out.workers) {
      for (auto& e : w.execute) executed[id].push_back(e);
      for (TaskId a : w.abandon) abandoned[id].push_back(a);
    }
    for (auto& [id, c] : out.clients) {
      for (auto& u : c.updates.updates) updates.push_back(u);
    }
    out.clear();
  }

  void report(WorkerId w, TaskId id, bool ok, const std::string& error = "boom") {
    herd::protocol::TaskResultsEvent ev;
    herd::protocol::TaskResult r;
    r.id = id;
    r.ok = ok;
    r.nbytes = 8;
    if (!ok) r.error = {"std::runtime_error", error, "", ""};
    ev.results.push_back(r);
    state.task_results(w, ev, now);
    turn();
  }

  const Task* task(TaskId id) const { return state.graph().find(id); }
  TaskStatus status(TaskId id) const { return task(id)->status; }
  WorkerId where(TaskId id) const { return task(id)->worker; }
  /// The execute message of `id` sent last, and the worker it went to.
  std::pair<WorkerId, herd::protocol::ExecuteTask> sent(TaskId id) const {
    std::pair<WorkerId, herd::protocol::ExecuteTask> found{0, {}};
    for (const auto& [w, list] : executed) {
      for (const auto& e : list) {
        if (e.id == id) found = {w, e};
      }
    }
    return found;
  }
  std::size_t sent_count(TaskId id) const {
    std::size_t n = 0;
    for (const auto& [w, list] : executed) n += std::count_if(list.begin(), list.end(), [&](const auto& e) { return e.id == id; });
    return n;
  }
  const WorkerRec& rec(WorkerId id) const { return *state.worker(id); }
};

}  // namespace

TEST_CASE("MultiNode.DistinctHostsOfOneAllocation") {
  Bed b;
  // Allocation 7: two workers on n1, one on n2, one on n3. Allocation 8: one worker on n4.
  b.add("a1", "n1", "7_0");
  b.add("a1b", "n1", "7_0");
  b.add("a2", "n2", "7_0");
  b.add("a3", "n3", "7_0");
  b.add("b1", "n4", "8_0");
  const TaskId t = b.submit("mpi", 3);
  b.turn();
  REQUIRE(b.status(t) == TaskStatus::processing);
  CHECK(b.sent_count(t) == 1);  // once, on the first
  const auto [head, e] = b.sent(t);
  CHECK(e.nodes == std::vector<std::string>{"n1", "n2", "n3"});
  CHECK(b.rec(head).host == e.nodes.front());
  CHECK(b.rec(head).job_id == "7_0");
  // One worker per host held for it; the second worker of n1 and allocation 8 are not.
  std::set<std::string> held_hosts;
  std::size_t held = 0;
  for (const auto& [id, w] : b.state.workers()) {
    if (w.held_by != t) continue;
    ++held;
    held_hosts.insert(w.host);
    CHECK(w.job_id == "7_0");
  }
  CHECK(held == 3);
  CHECK(held_hosts.size() == 3);
  CHECK(b.rec(b.by_name["b1"]).held_by == 0);
}

TEST_CASE("MultiNode.NeverWhenNoAllocationHasEnoughHosts") {
  Bed b;
  b.add("a1", "n1", "7_0");
  b.add("a2", "n2", "7_0");
  b.add("b1", "n3", "8_0");  // three hosts in all, but two allocations
  b.add("a1b", "n1", "7_0");  // a second worker on a host counts once
  const TaskId t = b.submit("mpi", 3);
  b.turn();
  CHECK(b.status(t) == TaskStatus::ready);
  const std::string why = b.state.why_no_worker(*b.task(t));
  CHECK(why.find("3 whole node(s)") != std::string::npos);
  CHECK(why.find("largest connected allocation has 2") != std::string::npos);
  bool told = false;
  for (const auto& u : b.updates) {
    told = told || (u.id == t && u.state == static_cast<std::uint8_t>(herd::protocol::TaskState::no_worker) &&
                    u.error.message == why);
  }
  CHECK(told);
  // Nothing is held, and other tasks run.
  for (const auto& [id, w] : b.state.workers()) CHECK(w.held_by == 0);
  const TaskId other = b.submit("inc");
  b.turn();
  CHECK(b.status(other) == TaskStatus::processing);
  b.report(b.where(other), other, true);
  // A third host joins the allocation: it starts.
  b.add("a3", "n3", "7_0");
  b.turn();
  CHECK(b.status(t) == TaskStatus::processing);
  CHECK(b.state.unrunnable().empty());
}

TEST_CASE("MultiNode.AllOrNothingReservesThenStartsExclusive") {
  Bed b;
  const WorkerId w1 = b.add("w1", "n1", "5_0");
  const WorkerId w2 = b.add("w2", "n2", "5_0");
  const WorkerId w3 = b.add("w3", "n3", "5_0");
  const TaskId busy = b.submit("busy");
  b.turn();
  const WorkerId busy_on = b.where(busy);
  const TaskId t = b.submit("mpi", 3);
  const TaskId later = b.submit("later");
  b.turn();
  // Not all three are idle: it waits, holding none of them to run but reserving all three; the
  // task that came after it does not take the idle ones.
  CHECK(b.status(t) == TaskStatus::ready);
  CHECK(b.sent_count(t) == 0);
  CHECK(b.status(later) == TaskStatus::ready);
  for (WorkerId w : {w1, w2, w3}) CHECK(b.rec(w).held_by == t);
  b.report(busy_on, busy, true);
  REQUIRE(b.status(t) == TaskStatus::processing);
  // Exclusive: while it runs, nothing else goes to any of its nodes.
  CHECK(b.status(later) == TaskStatus::ready);
  const TaskId more = b.submit("more");
  b.turn();
  CHECK(b.status(more) == TaskStatus::ready);
  // The pool does not see its idle nodes as idle (they must not be retired under it).
  for (const auto& v : b.state.pool_workers("", 0, b.now)) CHECK_FALSE(v.idle);
  // Another worker (another allocation) takes the others meanwhile.
  const WorkerId other = b.add("x", "n9", "6_0");
  b.turn();
  CHECK(b.where(later) == other);
  // Its result comes from the first: the nodes are let go and take work again.
  const WorkerId head = b.sent(t).first;
  b.report(head, t, true);
  CHECK(b.status(t) == TaskStatus::memory);
  for (WorkerId w : {w1, w2, w3}) CHECK(b.rec(w).held_by == 0);
  std::vector<TaskId> after;
  for (int i = 0; i < 6; ++i) after.push_back(b.submit("after"));
  b.turn();
  std::size_t on_nodes = 0;
  for (TaskId a : after) {
    if (b.status(a) == TaskStatus::processing && b.where(a) != other) ++on_nodes;
  }
  CHECK(on_nodes >= 3);
  (void)more;
}

TEST_CASE("MultiNode.ANodeLostFailsTheRunNamingItAndARetryRunsOnHealthyNodes") {
  Bed b;
  b.add("w1", "n1", "5_0");
  b.add("w2", "n2", "5_0");
  b.add("w3", "n3", "5_0");
  const TaskId t = b.submit("mpi", 2, /*retries=*/1);
  b.turn();
  REQUIRE(b.status(t) == TaskStatus::processing);
  auto [head, e] = b.sent(t);
  REQUIRE(e.nodes.size() == 2);
  // The second node of the run dies: the first is told to stop the task.
  WorkerId second = 0;
  for (const auto& [id, w] : b.state.workers()) {
    if (w.held_by == t && id != head) second = id;
  }
  REQUIRE(second != 0);
  const std::string lost_host = b.rec(second).host;
  b.state.worker_lost(second, "its control link broke");
  b.turn();
  REQUIRE(b.abandoned[head].size() == 1);
  CHECK(b.abandoned[head].front() == t);
  // The first reports the stop as a failure; that costs the one retry and it runs again on the
  // two hosts left, with the lost one nowhere in its node list.
  b.report(head, t, false, "cancelled while running");
  REQUIRE(b.status(t) == TaskStatus::processing);
  CHECK(b.sent_count(t) == 2);
  auto [head2, e2] = b.sent(t);
  CHECK(e2.nodes.size() == 2);
  CHECK(std::find(e2.nodes.begin(), e2.nodes.end(), lost_host) == e2.nodes.end());
  // This time the first itself dies: no retry is left, and the error names its host.
  const std::string head_host = b.rec(head2).host;
  b.state.worker_lost(head2, "silent for 10000 ms");
  b.turn();
  REQUIRE(b.status(t) == TaskStatus::erred);
  const auto& err = *b.task(t)->error;
  CHECK(err.type == "herd::WorkerLostError");
  CHECK(err.message.find("node " + head_host) != std::string::npos);
  CHECK(err.message.find("silent for 10000 ms") != std::string::npos);
  for (const auto& [id, w] : b.state.workers()) CHECK(w.held_by == 0);
}

TEST_CASE("MultiNode.ALostNodeNamesItselfInTheFailure") {
  Bed b;
  b.add("w1", "n1", "5_0");
  b.add("w2", "n2", "5_0");
  const TaskId t = b.submit("mpi", 2);
  b.turn();
  const WorkerId head = b.sent(t).first;
  WorkerId second = 0;
  for (const auto& [id, w] : b.state.workers()) {
    if (w.held_by == t && id != head) second = id;
  }
  b.state.worker_lost(second, "its control link broke");
  b.turn();
  b.report(head, t, false, "mpirun exited with 1");
  REQUIRE(b.status(t) == TaskStatus::erred);
  CHECK(b.task(t)->error->type == "herd::WorkerLostError");
  CHECK(b.task(t)->error->message.find("node n2 (worker w2)") != std::string::npos);
  CHECK(b.rec(head).held_by == 0);
}

TEST_CASE("MultiNode.GangsAndMultiNodeTasksTakeNothingOfEachOther") {
  Bed b;
  b.add("w1", "n1", "5_0");
  b.add("w2", "n2", "5_0");
  const TaskId t = b.submit("mpi", 2);
  b.turn();
  REQUIRE(b.status(t) == TaskStatus::processing);
  // A gang of 2 cannot start on the held nodes: it waits until the task is done.
  const TaskId gang = (static_cast<TaskId>(b.client) << 40) | b.next;
  b.next += 2;
  for (std::uint32_t r = 0; r < 2; ++r) {
    TaskSpec s;
    s.id = gang + r;
    s.function = "step";
    s.gang = gang;
    s.gang_rank = r;
    s.gang_size = 2;
    std::string error;
    REQUIRE(b.state.submit(b.client, s, nullptr, error));
  }
  b.turn();
  CHECK(b.status(gang) == TaskStatus::ready);
  b.report(b.sent(t).first, t, true);
  CHECK(b.status(gang) == TaskStatus::processing);
  CHECK(b.status(gang + 1) == TaskStatus::processing);
}

TEST_CASE("MultiNode.CancelledWhileWaitingLetsItsReservationGo") {
  Bed b;
  const WorkerId w1 = b.add("w1", "n1", "5_0");
  const WorkerId w2 = b.add("w2", "n2", "5_0");
  const TaskId busy = b.submit("busy");
  b.turn();
  const TaskId t = b.submit("mpi", 2);
  b.turn();
  CHECK(b.rec(w1).held_by == t);
  b.state.cancel(b.client, {t});
  b.turn();
  CHECK(b.rec(w1).held_by == 0);
  CHECK(b.rec(w2).held_by == 0);
  const TaskId after = b.submit("after");
  b.turn();
  CHECK(b.status(after) == TaskStatus::processing);
  (void)busy;
}

TEST_CASE("MultiNode.AJobOfHerdSubmitTakesNodesToo") {
  // `herd submit --nodes 2 -- mpirun ...`: the job's task is placed as TaskOptions::nodes(2).
  Bed b;
  b.add("a1", "n1", "7_0");
  b.add("a2", "n2", "7_0");
  b.add("b1", "n3", "8_0");
  herd::protocol::JobSpec spec;
  spec.task.argv = {"mpirun", "./solver"};
  spec.task.nodes = 2;
  std::string error;
  const std::uint64_t job = b.state.submit_job(spec, b.now, error);
  REQUIRE_MESSAGE(job != 0, error);
  b.turn();
  std::vector<std::pair<WorkerId, herd::protocol::ExecuteTask>> sent;
  for (const auto& [w, list] : b.executed) {
    for (const auto& e : list) sent.emplace_back(w, e);
  }
  REQUIRE(sent.size() == 1);  // once, on the first of its hosts
  CHECK(sent[0].second.nodes == std::vector<std::string>{"n1", "n2"});
  CHECK(b.rec(sent[0].first).job_id == "7_0");
  std::size_t held = 0;
  for (const auto& [id, w] : b.state.workers()) held += w.held_by == sent[0].second.id;
  CHECK(held == 2);
  CHECK(b.rec(b.by_name["b1"]).held_by == 0);
}
