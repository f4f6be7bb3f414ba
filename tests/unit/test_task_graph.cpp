// The scheduler's task graph as a state machine, with no sockets.
#include <doctest/doctest.h>

#include <algorithm>

#include "scheduler/task_graph.hpp"

using namespace herd::scheduler;
using herd::protocol::ArgRef;
using herd::protocol::TaskSpec;

namespace {
TaskSpec spec(TaskId id, std::vector<TaskId> deps = {}, bool wanted = true) {
  TaskSpec s;
  s.id = id;
  s.function = "f";
  s.want_result = wanted;
  for (std::uint32_t i = 0; i < deps.size(); ++i) s.refs.push_back(ArgRef{deps[i], i, -1});
  return s;
}
bool contains(const std::vector<TaskId>& v, TaskId id) { return std::find(v.begin(), v.end(), id) != v.end(); }
bool freed(const Effects& fx, std::uint32_t worker, TaskId id) {
  return std::find(fx.free.begin(), fx.free.end(), std::make_pair(worker, id)) != fx.free.end();
}
TaskStatus state(TaskGraph& g, TaskId id) { return g.find(id)->status; }
}  // namespace

TEST_CASE("TaskGraph.Chain.WaitingReadyProcessingMemory") {
  TaskGraph g;
  Effects fx;
  g.add(spec(1), 1, 0, fx);
  g.add(spec(2, {1}), 1, 0, fx);
  CHECK(state(g, 1) == TaskStatus::ready);
  CHECK(state(g, 2) == TaskStatus::waiting);
  CHECK(fx.ready == std::vector<TaskId>{1});
  fx.clear();

  g.started(1, 7);
  CHECK(state(g, 1) == TaskStatus::processing);
  g.finished(1, 7, 10, fx);
  CHECK(state(g, 1) == TaskStatus::memory);
  CHECK(g.find(1)->who_has == std::vector<std::uint32_t>{7});
  CHECK(fx.ready == std::vector<TaskId>{2});
  CHECK(contains(fx.notify, 1));
  fx.clear();

  g.started(2, 8);
  g.finished(2, 8, 10, fx);
  CHECK(state(g, 2) == TaskStatus::memory);
  // 1 is still wanted by the client: its data stays.
  CHECK_FALSE(freed(fx, 7, 1));
  fx.clear();
  g.release(1, fx);
  CHECK(freed(fx, 7, 1));  // data freed; recipe kept for 2's lineage
  fx.clear();
  g.release(2, fx);
  CHECK(freed(fx, 8, 2));
  CHECK(g.size() == 0);
}

TEST_CASE("TaskGraph.Failure.PropagatesRootCause") {
  TaskGraph g;
  Effects fx;
  g.add(spec(1), 1, 0, fx);
  g.add(spec(2, {1}), 1, 0, fx);
  g.add(spec(3, {2}), 1, 0, fx);
  g.add(spec(4), 1, 0, fx);  // unrelated
  g.started(1, 1);
  fx.clear();
  g.failed(1, {"std::runtime_error", "boom", "f-1", "w"}, fx);
  CHECK(state(g, 1) == TaskStatus::erred);
  CHECK(state(g, 2) == TaskStatus::erred);
  CHECK(state(g, 3) == TaskStatus::erred);
  CHECK(g.find(3)->error->task == "f-1");
  CHECK(g.find(3)->error->message == "boom");
  CHECK(state(g, 4) == TaskStatus::ready);
  CHECK(contains(fx.notify, 1));
  CHECK(contains(fx.notify, 3));
  // A task added later on top of a failed input fails at once, naming the root.
  fx.clear();
  g.add(spec(5, {2}), 1, 0, fx);
  CHECK(state(g, 5) == TaskStatus::erred);
  CHECK(g.find(5)->error->task == "f-1");
}

TEST_CASE("TaskGraph.Retries") {
  TaskGraph g;
  Effects fx;
  TaskSpec s = spec(1);
  s.retries = 1;
  g.add(s, 1, 0, fx);
  g.started(1, 1);
  fx.clear();
  CHECK(g.failed(1, {"E", "first", "f-1", "w"}, fx));
  CHECK(state(g, 1) == TaskStatus::ready);
  CHECK(fx.ready == std::vector<TaskId>{1});
  g.started(1, 1);
  CHECK_FALSE(g.failed(1, {"E", "second", "f-1", "w"}, fx));
  CHECK(state(g, 1) == TaskStatus::erred);
}

TEST_CASE("TaskGraph.UnknownInput.Fails") {
  TaskGraph g;
  Effects fx;
  g.add(spec(2, {99}), 1, 0, fx);
  CHECK(state(g, 2) == TaskStatus::erred);
  CHECK(g.find(2)->error->type == "herd::MissingInput");
}

TEST_CASE("TaskGraph.Cancel.PendingAndDependents") {
  TaskGraph g;
  Effects fx;
  g.add(spec(1), 1, 0, fx);
  g.add(spec(2, {1}), 1, 0, fx);
  g.started(1, 3);
  fx.clear();
  g.cancel(1, fx);
  CHECK(state(g, 1) == TaskStatus::cancelled);
  CHECK(state(g, 2) == TaskStatus::erred);
  CHECK(fx.cancel == std::vector<std::pair<std::uint32_t, TaskId>>{{3, 1}});
  // A late result of the cancelled task is dropped, not stored.
  fx.clear();
  g.finished(1, 3, 8, fx);
  CHECK(state(g, 1) == TaskStatus::cancelled);
  CHECK(freed(fx, 3, 1));
}

TEST_CASE("TaskGraph.LateResult.FromOtherWorkerIgnored") {
  TaskGraph g;
  Effects fx;
  g.add(spec(1), 1, 0, fx);
  g.started(1, 1);
  g.finished(1, 2, 8, fx);  // worker 2 was never given it
  CHECK(state(g, 1) == TaskStatus::processing);
  CHECK(freed(fx, 2, 1));
}

TEST_CASE("TaskGraph.WorkerLost.RequeuesAndRecomputes") {
  TaskGraph g;
  Effects fx;
  g.add(spec(1, {}, false), 1, 0, fx);  // an intermediate the client does not hold
  g.add(spec(2, {1}), 1, 0, fx);
  g.started(1, 5);
  g.finished(1, 5, 8, fx);
  g.started(2, 6);
  fx.clear();
  // Worker 5 dies holding 1's only copy while 2 runs on 6; then 6 dies too.
  g.worker_lost(5, {}, {1}, 3, fx);
  CHECK(state(g, 1) == TaskStatus::ready);  // recomputed from its recipe: 2 still needs it
  CHECK(contains(fx.ready, 1));
  fx.clear();
  g.worker_lost(6, {2}, {}, 3, fx);
  CHECK(state(g, 2) == TaskStatus::waiting);  // back, waiting for 1 again
  CHECK(g.find(2)->deaths == 1);
  g.started(1, 7);
  g.finished(1, 7, 8, fx);
  CHECK(state(g, 2) == TaskStatus::ready);
}

TEST_CASE("TaskGraph.WorkerLost.TooManyDeathsFails") {
  TaskGraph g;
  Effects fx;
  g.add(spec(1), 1, 0, fx);
  for (std::uint32_t w = 1; w <= 2; ++w) {  // allowed failures: 2
    g.started(1, w);
    g.worker_lost(w, {1}, {}, 2, fx);
    CHECK(state(g, 1) == TaskStatus::ready);
  }
  g.started(1, 3);
  g.worker_lost(3, {1}, {}, 2, fx);  // the third death is one too many
  CHECK(state(g, 1) == TaskStatus::erred);
  CHECK(g.find(1)->error->type == "herd::KilledWorker");
  CHECK(g.find(1)->error->message.find("Workers: 1, 2, 3") != std::string::npos);
}

TEST_CASE("TaskGraph.Release.PendingTaskForgotten") {
  TaskGraph g;
  Effects fx;
  g.add(spec(1), 1, 0, fx);
  g.add(spec(2, {1}), 1, 0, fx);
  g.release(1, fx);  // 2 still needs 1
  CHECK(g.find(1) != nullptr);
  g.release(2, fx);  // nobody needs either any more
  CHECK(g.size() == 0);
}

TEST_CASE("TaskGraph.Scattered.LostFailsDependents") {
  TaskGraph g;
  Effects fx;
  g.add_scattered(1, "", 1);
  g.add(spec(2, {1}), 1, 0, fx);
  CHECK(state(g, 1) == TaskStatus::waiting);  // no worker has it yet
  CHECK(state(g, 2) == TaskStatus::waiting);
  g.started(1, 4);
  CHECK(state(g, 1) == TaskStatus::processing);  // on its way to the worker
  g.finished(1, 4, 100, fx);
  CHECK(state(g, 1) == TaskStatus::memory);
  CHECK(state(g, 2) == TaskStatus::ready);
  g.started(2, 4);
  fx.clear();
  g.worker_lost(4, {2}, {1}, 3, fx);
  CHECK(state(g, 1) == TaskStatus::erred);
  CHECK(g.find(1)->error->type == "herd::ScatteredDataLost");
  CHECK(state(g, 2) == TaskStatus::erred);
}

TEST_CASE("TaskGraph.Preemptions.CountedApartFromRetries") {
  // checkpointable(3).retries(0): three preemptions re-run it; the fourth fails it, naming the
  // preemption budget.
  TaskGraph g;
  Effects fx;
  TaskSpec s = spec(1);
  s.preemptions = 3;
  s.retries = 0;
  g.add(s, 1, 0, fx);
  for (int i = 0; i < 3; ++i) {
    g.started(1, 7);
    CHECK(g.failed(1, {"std::runtime_error", "preempted", "t", "w"}, fx, true));
    CHECK(state(g, 1) == TaskStatus::ready);
  }
  g.started(1, 7);
  CHECK_FALSE(g.failed(1, {"std::runtime_error", "preempted", "t", "w"}, fx, true));
  CHECK(state(g, 1) == TaskStatus::erred);
  const std::string why = g.find(1)->error->message;
  CHECK(why.find("preempted 4 times") != std::string::npos);
  CHECK(why.find("checkpointable(3)") != std::string::npos);
}

TEST_CASE("TaskGraph.Preemptions.AFailureSpendsRetriesOnly") {
  // checkpointable(3).retries(0) that throws once (not draining) fails at once, naming retries.
  TaskGraph g;
  Effects fx;
  TaskSpec s = spec(1);
  s.preemptions = 3;
  g.add(s, 1, 0, fx);
  g.started(1, 7);
  CHECK_FALSE(g.failed(1, {"std::runtime_error", "boom", "t", "w"}, fx, false));
  CHECK(state(g, 1) == TaskStatus::erred);
  const std::string why = g.find(1)->error->message;
  CHECK(why.find("boom") == 0);
  CHECK(why.find("retries(0)") != std::string::npos);

  // retries(1) with preemptions: a preemption leaves the retry, a failure then takes it.
  TaskSpec t = spec(2);
  t.preemptions = 1;
  t.retries = 1;
  g.add(t, 1, 0, fx);
  g.started(2, 7);
  CHECK(g.failed(2, {"E", "drained", "t", "w"}, fx, true));
  g.started(2, 7);
  CHECK(g.failed(2, {"E", "boom", "t", "w"}, fx, false));
  g.started(2, 7);
  CHECK_FALSE(g.failed(2, {"E", "boom", "t", "w"}, fx, false));
  CHECK(g.find(2)->error->message.find("failed 2 times") != std::string::npos);

  // Not checkpointable: a run that fails while draining spends retries, as before.
  TaskSpec u = spec(3);
  u.retries = 1;
  g.add(u, 1, 0, fx);
  g.started(3, 7);
  CHECK(g.failed(3, {"E", "drained", "t", "w"}, fx, true));
  g.started(3, 7);
  CHECK_FALSE(g.failed(3, {"E", "drained", "t", "w"}, fx, true));
  CHECK(g.find(3)->error->message == "drained");
}
