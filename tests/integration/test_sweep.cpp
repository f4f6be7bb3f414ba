// Sweeps on a real LocalCluster (a scheduler process and worker processes on loopback): command
// and function trials, the results files, malformed output, timeouts and retries, the limit on
// trials in flight, early stopping (which runs happen, exactly), resuming after the sweep
// process is killed, and the `herd sweep` command line.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <herd/herd.hpp>

#include "common/process.hpp"
#include "common/util.hpp"
#include "sweep/results.hpp"
#include "support/process_util.hpp"

using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

const std::string kTrain = (fs::path(HERD_SOURCE_DIR) / "tests" / "sweep" / "fake_train.sh").string();

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

/// A fresh directory for one test, removed at the end.
struct TempDir {
  std::string path;
  explicit TempDir(const std::string& name)
      : path("/tmp/herd-sweep-test-" + std::to_string(::getpid()) + "-" + name) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& f) const { return path + "/" + f; }
};

std::vector<herd::sweep::RunRecord> read_log(const std::string& jsonl) {
  std::vector<herd::sweep::RunRecord> out;
  for (const auto& line : lines_of(read_file(jsonl))) out.push_back(herd::sweep::from_json_line(line));
  return out;
}

const herd::TrialResult& by_param(const herd::SweepReport& r, const std::string& name, const std::string& value) {
  for (const auto& t : r.trials) {
    if (t.params.at(name) == value) return t;
  }
  throw std::runtime_error("no trial with " + name + "=" + value);
}

/// "trial budget" lines of a marker file, counted.
std::map<std::pair<std::string, std::string>, int> runs_in(const std::string& marker) {
  std::map<std::pair<std::string, std::string>, int> out;
  for (const auto& line : lines_of(read_file(marker))) {
    std::istringstream in(line);
    std::string trial, budget;
    in >> trial >> budget;
    ++out[{trial, budget}];
  }
  return out;
}

template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return pred();
}

}  // namespace

// ---- C++ trials ----

/// Gradient descent on f(w) = (w - 3)^2 from w = 0: the loss after each epoch is reported.
herd::Metrics descend(herd::Params p) {
  const double lr = herd::param<double>(p, "lr");
  const int epochs = herd::param<int>(p, "epochs");
  double w = 0, loss = 9;
  for (int e = 0; e < epochs; ++e) {
    w -= lr * 2 * (w - 3);
    loss = (w - 3) * (w - 3);
    herd::report_metric("loss", loss);
  }
  return {{"loss", loss}, {"w", w}};
}
HERD_TASK(descend);

double plain(herd::Params p) { return herd::param<double>(p, "x") * 2; }
HERD_TASK(plain);

herd::Metrics explode(herd::Params p) {
  if (p.at("x") == "2") throw std::domain_error("x=2 is not allowed");
  return {{"y", herd::param<double>(p, "x")}};
}
HERD_TASK(explode);

herd::Metrics nap(herd::Params p) {
  std::this_thread::sleep_for(std::chrono::milliseconds(herd::param<int>(p, "ms")));
  return {{"slept", herd::param<double>(p, "ms")}};
}
HERD_TASK(nap);

// ---- tests ----

TEST_CASE("Sweep.Local.ValuesInTheTemplatesQuotesAreNotRun" * doctest::timeout(60)) {
  // The values a user might sweep over by mistake (or a file of them might hold), written inside
  // the template's own double quotes: each trial echoes its value; nothing is run.
  TempDir dir("noeval");
  herd::Client client{herd::LocalCluster{2}};
  const std::vector<std::string> values = {"$(touch X)", "`touch X`", "\"; touch X; \""};
  const auto report = herd::Sweep{herd::SearchSpace{}.grid("v", values)}
                          .command("echo \"value: {v}\" >> values; echo herd-metric n=1")
                          .minimize("n")
                          .working_directory(dir.path)
                          .progress(herd::Progress::none)
                          .run(client);
  CHECK(report.ok == 3);
  CHECK_FALSE(fs::exists(dir / "X"));
  auto got = lines_of(read_file(dir / "values"));
  std::sort(got.begin(), got.end());
  std::vector<std::string> want;
  for (const auto& v : values) want.push_back("value: " + v);
  std::sort(want.begin(), want.end());
  CHECK(got == want);  // each value arrived, as it was written
}

TEST_CASE("Sweep.Local.CommandGridWritesBothFiles" * doctest::timeout(60)) {
  TempDir dir("grid");
  herd::Client client{herd::LocalCluster{2}};
  const auto space = herd::SearchSpace{}.grid("x", {"0.4", "0.2", "0.8"}).grid("tag", {"a b", "c"});
  // {tag} arrives as one word even with a space in it; HERD_PARAM_x is in the environment.
  const auto report = herd::Sweep{space}
                          .command("sh " + kTrain + " {x} 3 && echo \"herd-metric len=$(printf %s {tag} | wc -c) "
                                   "envx=$HERD_PARAM_x\"")
                          .minimize("loss")
                          .max_running(2)
                          .results(dir / "out")
                          .progress(herd::Progress::none)
                          .run(client);
  REQUIRE(report.trials.size() == 6);
  CHECK(report.ok == 6);
  CHECK(report.runs == 6);
  CHECK(report.parameters == std::vector<std::string>{"x", "tag"});
  const herd::TrialResult* best = report.best();
  REQUIRE(best != nullptr);
  CHECK(best->params.at("x") == "0.2");
  CHECK(best->metrics.at("loss") == doctest::Approx(0.2 / 3));
  const auto& t = by_param(report, "tag", "a b");
  CHECK(t.metrics.at("len") == 3);
  CHECK(t.history.at("loss").size() == 3);
  CHECK(t.history.at("loss")[0] == doctest::Approx(std::stod(t.params.at("x"))));
  CHECK(t.metrics.at("envx") == doctest::Approx(std::stod(t.params.at("x"))));
  CHECK(!t.worker.empty());
  CHECK(!t.job_id.empty());  // HERD_JOB_ID of the local worker (SLURM_JOB_ID on Slurm)

  // The log: one final line per trial, with everything.
  const auto log = read_log(dir / "out.jsonl");
  REQUIRE(log.size() == 6);
  std::set<std::string> ids;
  for (const auto& r : log) {
    CHECK(r.final);
    CHECK(r.result.status == herd::TrialStatus::ok);
    CHECK(r.result.history.at("loss").size() == 3);
    CHECK(!r.finished_at.empty());
    ids.insert(r.result.id);
  }
  CHECK(ids.size() == 6);
  // The CSV: a header and one row per trial.
  const auto csv = lines_of(read_file(dir / "out.csv"));
  REQUIRE(csv.size() == 7);
  CHECK(csv[0] ==
        "trial,index,status,x,tag,loss,envx,len,exit_code,wall_time_s,attempts,worker,job_id,host,error,finished_at");
  CHECK(std::count_if(csv.begin(), csv.end(), [](const std::string& l) { return l.find(",ok,") != std::string::npos; }) == 6);
  // The table: the best first.
  const std::string table = report.table(3);
  CHECK(table.find("6 trials: 6 ok, 0 failed, 0 timeout, 0 stopped") != std::string::npos);
  CHECK(table.find("best 3 by loss (min):") != std::string::npos);
  const auto rows = lines_of(table);
  REQUIRE(rows.size() == 6);
  CHECK(rows[3].find("0.2") != std::string::npos);
}

TEST_CASE("Sweep.Local.FunctionTrials" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{2}};
  const auto report = herd::Sweep{herd::SearchSpace{}.grid("lr", {"0.1", "0.4", "1.1"}).grid("epochs", {"5"})}
                          .function(descend)
                          .minimize("loss")
                          .progress(herd::Progress::none)
                          .run(client);
  CHECK(report.ok == 3);
  const auto& good = by_param(report, "lr", "0.4");
  CHECK(good.history.at("loss").size() == 5);
  CHECK(good.metrics.at("loss") == doctest::Approx(good.history.at("loss").back()));
  CHECK(good.metrics.at("w") == doctest::Approx(3).epsilon(0.01));
  CHECK(report.best()->params.at("lr") == "0.4");
  CHECK(by_param(report, "lr", "1.1").metrics.at("loss") > 9);  // diverges, and is still ok

  // A plain number is recorded under the objective's name.
  const auto numbers = herd::Sweep{herd::SearchSpace{}.grid("x", {"1", "2"})}
                           .function(plain)
                           .maximize("twice")
                           .progress(herd::Progress::none)
                           .run(client);
  CHECK(numbers.best()->metrics.at("twice") == 4);

  // An exception fails its trial, with the type and message; the others go on.
  const auto thrown = herd::Sweep{herd::SearchSpace{}.grid("x", {"1", "2", "3"})}
                          .function(explode)
                          .progress(herd::Progress::none)
                          .run(client);
  CHECK(thrown.ok == 2);
  CHECK(thrown.failed == 1);
  const auto& bad = by_param(thrown, "x", "2");
  CHECK(bad.status == herd::TrialStatus::failed);
  CHECK(bad.error == "std::domain_error: x=2 is not allowed");
  CHECK(!bad.worker.empty());
}

TEST_CASE("Sweep.Local.MalformedOutputFailsAndTheSweepGoesOn" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{2}};
  const std::string script =
      "case {how} in "
      "good) echo 'herd-metric loss=0.5' ;; "
      "badline) echo 'herd-metric loss=0.5'; echo 'herd-metric loss=NaNa' ;; "
      "badjson) echo '{\"loss\": 0.5,' ;; "
      "nometric) echo 'herd-metric acc=0.5' ;; "
      "exit) echo 'herd-metric loss=0.1'; echo 'it broke' >&2; exit 3 ;; "
      "esac";
  const auto report =
      herd::Sweep{herd::SearchSpace{}.grid("how", {"good", "badline", "badjson", "nometric", "exit"})}
          .command(script)
          .minimize("loss")
          .progress(herd::Progress::none)
          .run(client);
  CHECK(report.ok == 1);
  CHECK(report.failed == 4);
  CHECK(by_param(report, "how", "good").status == herd::TrialStatus::ok);
  CHECK(by_param(report, "how", "badline").error.find("'loss=NaNa' is not name=number") != std::string::npos);
  CHECK(by_param(report, "how", "badjson").error.find("malformed JSON object on the last line") != std::string::npos);
  CHECK(by_param(report, "how", "nometric").error == "no metric 'loss' reported");
  const auto& exited = by_param(report, "how", "exit");
  CHECK(exited.exit_code == 3);
  CHECK(exited.error == "exit code 3: it broke");
  CHECK(report.trials.size() == 5);

  // A program that is not there: failed, with the reason and the worker.
  const auto missing = herd::Sweep{herd::SearchSpace{}.grid("x", {"1"})}
                           .command(std::vector<std::string>{"no-such-program-herd", "{x}"})
                           .progress(herd::Progress::none)
                           .run(client);
  CHECK(missing.failed == 1);
  CHECK(missing.trials[0].error.find("command not found: no-such-program-herd") != std::string::npos);
  CHECK(!missing.trials[0].worker.empty());
  CHECK(report.best()->params.at("how") == "good");  // a failed trial's metrics do not rank
}

TEST_CASE("Sweep.Local.TimeoutAndRetries" * doctest::timeout(60)) {
  TempDir dir("retry");
  herd::Client client{herd::LocalCluster{3}};
  // flaky fails on its first run only; broken always fails; slow runs past the timeout.
  const std::string script = "case {how} in "
                             "flaky) if [ ! -e " + dir / "tried" + " ]; then touch " + dir / "tried" +
                             "; echo first >&2; exit 1; fi; echo 'herd-metric loss=1' ;; "
                             "broken) echo 'no luck' >&2; exit 1 ;; "
                             "slow) sleep 30; echo 'herd-metric loss=0' ;; "
                             "esac";
  const auto start = std::chrono::steady_clock::now();
  const auto report = herd::Sweep{herd::SearchSpace{}.grid("how", {"flaky", "broken", "slow"})}
                          .command(script)
                          .minimize("loss")
                          .timeout(0.5)
                          .retries(1)
                          .results(dir / "out")
                          .progress(herd::Progress::none)
                          .run(client);
  CHECK(std::chrono::steady_clock::now() - start < 10s);  // the sleep was killed, twice
  const auto& flaky = by_param(report, "how", "flaky");
  CHECK(flaky.status == herd::TrialStatus::ok);
  CHECK(flaky.attempts == 2);
  const auto& broken = by_param(report, "how", "broken");
  CHECK(broken.status == herd::TrialStatus::failed);
  CHECK(broken.attempts == 2);
  CHECK(broken.error == "exit code 1: no luck");
  const auto& slow = by_param(report, "how", "slow");
  CHECK(slow.status == herd::TrialStatus::timeout);
  CHECK(slow.attempts == 2);
  CHECK(slow.error == "timed out after 0.5 s");
  CHECK(slow.wall_time_s < 3);
  CHECK(report.runs == 6);
  // Every run is logged; only the last of each trial is final.
  const auto log = read_log(dir / "out.jsonl");
  CHECK(log.size() == 6);
  CHECK(std::count_if(log.begin(), log.end(), [](const auto& r) { return r.final; }) == 3);
  const auto csv = lines_of(read_file(dir / "out.csv"));
  CHECK(csv.size() == 4);
}

TEST_CASE("Sweep.Local.FunctionTimeout" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{2}};
  const auto start = std::chrono::steady_clock::now();
  const auto report = herd::Sweep{herd::SearchSpace{}.grid("ms", {"10", "5000"})}
                          .function(nap)
                          .timeout(0.5)
                          .progress(herd::Progress::none)
                          .run(client);
  CHECK(std::chrono::steady_clock::now() - start < 4s);  // the sweep did not wait for the nap
  CHECK(by_param(report, "ms", "10").status == herd::TrialStatus::ok);
  const auto& slow = by_param(report, "ms", "5000");
  CHECK(slow.status == herd::TrialStatus::timeout);
  CHECK(slow.error.find("timed out after 0.5 s") != std::string::npos);
}

TEST_CASE("Sweep.Local.MaxRunningLimitsTrialsInFlight" * doctest::timeout(60)) {
  TempDir dir("maxrun");
  herd::Client client{herd::LocalCluster{3}};
  // Each trial counts the trials running beside it (itself included).
  const std::string d = dir / "running";
  fs::create_directories(d);
  const auto report = herd::Sweep{herd::SearchSpace{}.grid("i", {"1", "2", "3", "4", "5", "6"})}
                          .command("touch " + d + "/{i}; ls " + d + " | wc -l >> " + dir / "counts" +
                                   "; sleep 0.2; rm " + d + "/{i}")
                          .max_running(2)
                          .progress(herd::Progress::none)
                          .run(client);
  CHECK(report.ok == 6);
  const auto counts = lines_of(read_file(dir / "counts"));
  REQUIRE(counts.size() == 6);
  for (const auto& c : counts) CHECK(std::stoi(c) <= 2);
}

TEST_CASE("Sweep.Local.EarlyStopping.SynchronousStopsExactlyTheWorst" * doctest::timeout(60)) {
  TempDir dir("sh");
  herd::Client client{herd::LocalCluster{3}};
  // loss = x / budget: the order at every rung is the order of x.
  const auto space = herd::SearchSpace{}.grid("x", {"0.9", "0.1", "0.5", "0.3", "0.7", "0.2", "0.8", "0.6", "0.4"});
  auto sweep = [&] {
    return herd::Sweep{space}
        .command("sh " + kTrain + " {x} {epochs} " + dir / "runs")
        .minimize("loss")
        .early_stopping(herd::SuccessiveHalving{}.parameter("epochs").budgets(1, 9).eta(3))
        .results(dir / "out")
        .progress(herd::Progress::none)
        .run(client);
  };
  const auto report = sweep();
  std::map<std::string, std::string> x_of;
  for (const auto& t : report.trials) x_of[t.id] = t.params.at("x");
  std::set<std::pair<std::string, std::string>> ran;  // (x, budget)
  for (const auto& [run, n] : runs_in(dir / "runs")) {
    CHECK(n == 1);  // no run twice
    ran.insert({x_of.at(run.first), run.second});
  }
  std::set<std::pair<std::string, std::string>> expected;
  for (const auto& [id, x] : x_of) expected.insert({x, "1"});
  for (const char* x : {"0.1", "0.2", "0.3"}) expected.insert({x, "3"});
  expected.insert({"0.1", "9"});
  CHECK(ran == expected);
  CHECK(report.ok == 1);
  CHECK(report.stopped == 8);
  CHECK(report.runs == 13);
  const auto& winner = by_param(report, "x", "0.1");
  CHECK(winner.status == herd::TrialStatus::ok);
  CHECK(winner.budget == "9");
  CHECK(winner.metrics.at("loss") == doctest::Approx(0.1 / 9));
  CHECK(winner.history.at("loss").size() == 9);
  CHECK(by_param(report, "x", "0.3").status == herd::TrialStatus::stopped);
  CHECK(by_param(report, "x", "0.3").budget == "3");
  CHECK(by_param(report, "x", "0.4").budget == "1");
  CHECK(by_param(report, "x", "0.4").metrics.at("loss") == doctest::Approx(0.4));
  // The CSV holds each trial's outcome; the log every run and decision.
  CHECK(lines_of(read_file(dir / "out.csv")).size() == 10);
  CHECK(read_log(dir / "out.jsonl").size() == 13 + 8);

  // Again with the same results: nothing runs, the same outcome.
  const auto again = sweep();
  CHECK(again.runs == 0);
  CHECK(again.resumed == 9);
  CHECK(again.stopped == 8);
  CHECK(again.best()->params.at("x") == "0.1");
  CHECK(lines_of(read_file(dir / "runs")).size() == 13);
  CHECK(read_log(dir / "out.jsonl").size() == 13 + 8);  // no decision written twice
}

TEST_CASE("Sweep.Local.EarlyStopping.AsynchronousOneAtATime" * doctest::timeout(60)) {
  TempDir dir("asha");
  herd::Client client{herd::LocalCluster{2}};
  // One run at a time makes ASHA's order, and so its decisions, fixed (as in the unit test
  // Sweep.Halving.AsynchronousEndToEnd).
  const auto space = herd::SearchSpace{}.grid("x", {"0.5", "0.9", "0.1", "0.7", "0.3", "0.8", "0.2", "0.6", "0.4"});
  const auto report = herd::Sweep{space}
                          .command("sh " + kTrain + " {x} {budget} " + dir / "runs")
                          .minimize("loss")
                          .early_stopping(herd::SuccessiveHalving{}.budgets(1, 9).eta(3).asynchronous())
                          .max_running(1)
                          .progress(herd::Progress::none)
                          .run(client);
  std::map<std::string, std::string> x_of;
  for (const auto& t : report.trials) x_of[t.id] = t.params.at("x");
  std::set<std::pair<std::string, std::string>> ran;
  for (const auto& [run, n] : runs_in(dir / "runs")) ran.insert({x_of.at(run.first), run.second});
  std::set<std::pair<std::string, std::string>> expected;
  for (const auto& [id, x] : x_of) expected.insert({x, "1"});
  for (const char* x : {"0.1", "0.3", "0.2"}) expected.insert({x, "3"});
  expected.insert({"0.1", "9"});
  CHECK(ran == expected);
  CHECK(report.ok == 1);
  CHECK(report.stopped == 8);
}

TEST_CASE("Sweep.Resume.RerunFailedOnlyWhenAsked" * doctest::timeout(60)) {
  TempDir dir("rerun");
  herd::Client client{herd::LocalCluster{2}};
  // x=2 fails while the file FAIL exists.
  std::ofstream(dir / "FAIL") << "";
  auto sweep = [&](bool rerun) {
    return herd::Sweep{herd::SearchSpace{}.grid("x", {"1", "2", "3"})}
        .command("echo {x} >> " + dir / "runs" + "; if [ {x} = 2 ] && [ -e " + dir / "FAIL" +
                 " ]; then exit 1; fi; echo herd-metric loss={x}")
        .minimize("loss")
        .results(dir / "out")
        .rerun_failed(rerun)
        .progress(herd::Progress::none)
        .run(client);
  };
  const auto first = sweep(false);
  CHECK(first.ok == 2);
  CHECK(first.failed == 1);
  fs::remove(dir / "FAIL");
  const auto second = sweep(false);
  CHECK(second.runs == 0);
  CHECK(second.resumed == 3);
  CHECK(second.failed == 1);
  CHECK(lines_of(read_file(dir / "runs")).size() == 3);
  const auto third = sweep(true);
  CHECK(third.runs == 1);
  CHECK(third.ok == 3);
  CHECK(third.resumed == 2);
  const auto runs = lines_of(read_file(dir / "runs"));
  CHECK(runs == std::vector<std::string>{runs[0], runs[1], runs[2], "2"});
  // The CSV keeps one row per trial: the rerun replaced the failure.
  const std::string csv = read_file(dir / "out.csv");
  CHECK(lines_of(csv).size() == 4);
  CHECK(csv.find("failed") == std::string::npos);
}

// Runs only as the child of Sweep.Resume.AfterTheSweepIsKilled, which kills it mid-way.
TEST_CASE("Child.Sweep" * doctest::skip(std::getenv("HERD_SWEEP_CHILD_DIR") == nullptr)) {
  const std::string dir = std::getenv("HERD_SWEEP_CHILD_DIR");
  herd::Client client{herd::LocalCluster{2}};
  herd::Sweep{herd::SearchSpace{}.grid("i", {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"})}
      .command("sleep 0.25; echo {i} >> " + dir + "/runs; echo herd-metric loss={i}")
      .minimize("loss")
      .max_running(2)
      .results(dir + "/out")
      .progress(herd::Progress::lines)
      .run(client);
}

TEST_CASE("Sweep.Resume.AfterTheSweepIsKilled" * doctest::timeout(90)) {
  TempDir dir("kill");
  herd::process::SpawnOptions spawn;
  spawn.argv = {herd::process::self_executable(), "--test-case=Child.Sweep"};
  spawn.env["HERD_SWEEP_CHILD_DIR"] = dir.path;
  spawn.stdout_path = dir / "child.log";
  const pid_t child = herd::process::spawn(spawn);
  // Killed (SIGKILL: no chance to clean up) once 4 trials are in the log.
  const bool some_done = eventually([&] { return lines_of(read_file(dir / "out.jsonl")).size() >= 4; }, 30s);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  REQUIRE_MESSAGE(some_done, read_file(dir / "child.log"));
  const auto log = read_log(dir / "out.jsonl");  // every line whole
  std::set<std::string> finished;
  for (const auto& r : log) finished.insert(r.result.params.at("i"));
  CHECK(finished.size() == log.size());
  CHECK(finished.size() < 10);
  // Commands that were running when their worker died end on their own: wait until they have.
  std::size_t runs_before = lines_of(read_file(dir / "runs")).size();
  for (int i = 0; i < 20; ++i) {
    std::this_thread::sleep_for(400ms);
    const std::size_t now = lines_of(read_file(dir / "runs")).size();
    if (now == runs_before) break;
    runs_before = now;
  }

  herd::Client client{herd::LocalCluster{2}};
  const auto report = herd::Sweep{herd::SearchSpace{}.grid("i", {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"})}
                          .command("sleep 0.25; echo {i} >> " + dir / "runs" + "; echo herd-metric loss={i}")
                          .minimize("loss")
                          .max_running(2)
                          .results(dir / "out")
                          .progress(herd::Progress::none)
                          .run(client);
  CHECK(report.ok == 10);
  CHECK(report.resumed == finished.size());
  CHECK(report.runs == 10 - finished.size());
  // A trial that had finished ran once; the rest ran at most twice (once if not yet started
  // at the kill, twice if it was running then).
  std::map<std::string, int> count;
  for (const auto& i : lines_of(read_file(dir / "runs"))) ++count[i];
  CHECK(count.size() == 10);
  for (const auto& [i, n] : count) {
    if (finished.count(i) != 0) {
      CHECK_MESSAGE(n == 1, "trial i=" << i << " finished before the kill and ran again");
    } else {
      CHECK(n <= 2);
    }
  }
  CHECK(lines_of(read_file(dir / "runs")).size() == runs_before + 10 - finished.size());
  CHECK(lines_of(read_file(dir / "out.csv")).size() == 11);
  CHECK(read_log(dir / "out.jsonl").size() == 10);
}

// ---- the command line ----

namespace {

std::string herd_cli() { return herd::testing::herd_cli_path(); }

/// Runs `herd ARGS...` in `cwd`; returns the exit code, stdout+stderr in `output`.
int run_cli(const std::vector<std::string>& args, const std::string& cwd, std::string& output) {
  std::string line = "cd " + herd::util::shell_quote(cwd) + " && " + herd::util::shell_quote(herd_cli());
  for (const auto& a : args) line += " " + herd::util::shell_quote(a);
  const herd::ShellResult r = herd::shell(herd::ShellCommand{line + " 2>&1"});
  output = r.stdout_tail;
  return r.exit_code;
}

}  // namespace

TEST_CASE("Sweep.Cli.PrintsTheTableAndWritesTheFiles" * doctest::timeout(90)) {
  TempDir dir("cli");
  std::string out;
  const int rc = run_cli({"sweep", "--grid", "x=0.4,0.2,0.8", "--random", "y=uniform:0:1", "--samples", "2", "--seed", "5",
                          "--metric", "loss", "--local-workers", "2", "--top", "3", "--results", "runs/a", "--",
                          "sh", kTrain, "{x}", "2"},
                         dir.path, out);
  CHECK_MESSAGE(rc == 0, out);
  CHECK(out.find("best 3 by loss (min):") != std::string::npos);
  CHECK(out.find("results: runs/a.csv, runs/a.jsonl") != std::string::npos);
  const auto lines = lines_of(out);
  const auto head = std::find_if(lines.begin(), lines.end(), [](const std::string& l) { return l.rfind("#  trial", 0) == 0; });
  REQUIRE(head != lines.end());
  CHECK(head->find("x") != std::string::npos);
  CHECK((head + 1)->find("0.2") != std::string::npos);  // the best row
  CHECK(lines_of(read_file(dir / "runs/a.csv")).size() == 7);

  // Again: everything is there already.
  CHECK(run_cli({"sweep", "--grid", "x=0.4,0.2,0.8", "--random", "y=uniform:0:1", "--samples", "2", "--seed", "5",
                 "--metric", "loss", "--local-workers", "2", "--results", "runs/a", "--", "sh", kTrain, "{x}", "2"},
                dir.path, out) == 0);
  CHECK(out.find("(6 from an earlier run); 0 runs") != std::string::npos);

  // A sweep file, with an option overriding it; a failing trial gives exit status 3.
  std::ofstream(dir / "sweep.toml") << "command = \"sh " << kTrain << " {x} 1; [ {x} != 0.3 ]\"\n"
                                    << "metric = \"loss\"\nmode = \"max\"\nresults = \"fromfile\"\n"
                                    << "[grid]\nx = [0.1, 0.3, 0.2]\n[cluster]\nlocal_workers = 2\n";
  CHECK(run_cli({"sweep", "--file", "sweep.toml", "--mode", "min", "--progress", "none"}, dir.path, out) == 3);
  CHECK(out.find("3 trials: 2 ok, 1 failed") != std::string::npos);
  CHECK(out.find("best 3 by loss (min):") != std::string::npos);
  CHECK(lines_of(read_file(dir / "fromfile.csv")).size() == 4);

  // --dry-run: the commands, quoted for the shell.
  CHECK(run_cli({"sweep", "--dry-run", "--grid", "name=a b,c", "--", "echo {name} > out-{name}.txt"}, dir.path, out) == 0);
  CHECK(out == "echo 'a b' > out-'a b'.txt\necho c > out-c.txt\n");

  // A sweep file's numbers reach the command as written in the file.
  std::ofstream(dir / "written.toml") << "[grid]\nlr = [1e-4, 0.10, 3]\n";
  CHECK(run_cli({"sweep", "--file", "written.toml", "--dry-run", "--", "echo {lr}"}, dir.path, out) == 0);
  CHECK(out == "echo 1e-4\necho 0.10\necho 3\n");

  // Mistakes are named, in a sweep file with their place.
  std::ofstream(dir / "bad.toml") << "metric = \"loss\"\nsamples = \"ten\"\n[grid]\nx = [1, 2]\n";
  CHECK(run_cli({"sweep", "--file", "bad.toml", "--dry-run", "--", "echo {x}"}, dir.path, out) == 2);
  CHECK(out.find("bad.toml:2:11: samples: expected a number, got the string \"ten\"") != std::string::npos);
  std::ofstream(dir / "bad.toml") << "[grid\nx = [1, 2]\n";
  CHECK(run_cli({"sweep", "--file", "bad.toml", "--dry-run", "--", "echo {x}"}, dir.path, out) == 2);
  CHECK(out.find("bad.toml:1:6: ") != std::string::npos);
  CHECK(run_cli({"sweep", "--grid", "x=1,2", "--", "echo {y}"}, dir.path, out) == 2);
  CHECK(out.find("placeholder {y} is not a parameter") != std::string::npos);
  CHECK(run_cli({"sweep", "--grid", "x=1", "--early-stop", "sh", "--", "echo {x}"}, dir.path, out) == 2);
  CHECK(out.find("needs an objective") != std::string::npos);
}

TEST_CASE("Sweep.Cli.ClusterFromAConfigurationFile" * doctest::timeout(90)) {
  TempDir dir("config");
  std::ofstream(dir / "cluster.toml") << "[pool.here]\nkind = \"local\"\njobs = 2\n";
  std::string out;
  const int rc = run_cli({"sweep", "--config", "cluster.toml", "--grid", "x=3,1,2", "--metric", "loss", "--progress",
                          "lines", "--", "echo herd-metric loss={x}"},
                         dir.path, out);
  CHECK_MESSAGE(rc == 0, out);
  CHECK(out.find("3 trials: 3 ok") != std::string::npos);
  std::ofstream(dir / "idle.toml") << "[pool.here]\nkind = \"local\"\n";
  CHECK(run_cli({"sweep", "--config", "idle.toml", "--grid", "x=1", "--", "true"}, dir.path, out) == 2);
  CHECK(out.find("no pool starts workers") != std::string::npos);
}
