// Observability against a real LocalCluster: Client::status(), `herd status` (text and
// --json), the dashboard's /metrics and /api/status, and herd::progress's plain-line output.
#include <doctest/doctest.h>

#include <cstdio>
#include <map>
#include <sstream>
#include <thread>

#include <herd/herd.hpp>

#include "support/http_get.hpp"
#include "support/process_util.hpp"
#include "common/json.hpp"

using namespace std::chrono_literals;

namespace {
int square(int x) { return x * x; }
HERD_TASK(square);
int nap(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}
HERD_TASK(nap);
int refuse(int x) {
  if (x % 5 == 0) throw std::runtime_error("multiple of five");
  return x;
}
HERD_TASK(refuse);

using herd::testing::run_command;

/// Prometheus text format: "name{labels} value" lines, comments skipped. Every sample line
/// must parse, or the check fails.
std::map<std::string, double> parse_metrics(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto space = line.rfind(' ');
    REQUIRE_MESSAGE(space != std::string::npos, line);
    const std::string name = line.substr(0, space);
    if (const auto brace = name.find('{'); brace != std::string::npos) REQUIRE_MESSAGE(name.back() == '}', line);
    std::size_t used = 0;
    const double v = std::stod(line.substr(space + 1), &used);
    REQUIRE_MESSAGE(used == line.size() - space - 1, line);
    out[name] = v;
  }
  return out;
}
}  // namespace

TEST_CASE("Status.Client.WorkersTasksAndPools" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{2}};
  std::vector<int> xs(40);
  for (int i = 0; i < 40; ++i) xs[static_cast<std::size_t>(i)] = i;
  auto futures = client.map(square, xs);
  auto values = client.gather(futures);
  CHECK(values[7] == 49);
  const herd::ClusterStatus s = client.status(100);
  REQUIRE(s.workers.size() == 2);
  for (const auto& w : s.workers) {
    CHECK(w.nthreads >= 1);
    CHECK(w.pool == "local");
    CHECK(!w.host.empty());
    CHECK(w.time_left_s == -1);  // local workers have no walltime
  }
  CHECK(s.finished_total == 40);
  CHECK(s.failed_total == 0);
  CHECK(s.throughput > 0);
  CHECK(s.tasks.at("memory") == 40);  // the futures are still held
  CHECK(s.functions.at("square").at("memory") == 40);
  REQUIRE(s.pools.size() == 1);
  CHECK(s.pools[0].name == "local");
  CHECK(s.pools[0].workers == 2);
  CHECK(s.jobs.size() == 2);
  CHECK(s.events.size() == 40);
  CHECK(s.events.back().function == "square");
  CHECK(s.clients == 1);
  CHECK(s.dashboard.rfind("http://127.0.0.1:", 0) == 0);
  const std::string text = s.to_text();
  CHECK(text.find("workers: 2") != std::string::npos);
  CHECK(text.find("40 finished") != std::string::npos);
  CHECK(text.find("square") != std::string::npos);
}

TEST_CASE("Status.Client.CountsFailures" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{1}};
  std::vector<int> xs(20);
  for (int i = 0; i < 20; ++i) xs[static_cast<std::size_t>(i)] = i + 1;
  auto futures = client.map(refuse, xs);
  client.wait(futures);
  const auto s = client.status();
  CHECK(s.finished_total == 16);
  CHECK(s.failed_total == 4);
  CHECK(s.functions.at("refuse").at("erred") == 4);
  CHECK(s.functions.at("refuse").at("finished_total") == 16);
  CHECK(s.functions.at("refuse").at("failed_total") == 4);
  CHECK(s.events.empty());  // none asked for
}

TEST_CASE("Status.Cli.TextAndJson" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{2}};
  std::vector<int> xs(30, 3);
  auto futures = client.map(square, xs);
  client.wait(futures);
  int rc = -1;
  const std::string text = run_command(std::string(HERD_CLI_PATH) + " status --scheduler " + client.scheduler_address(), &rc);
  CHECK(rc == 0);
  CHECK(text.find("workers: 2") != std::string::npos);
  CHECK(text.find("30 finished") != std::string::npos);
  CHECK(text.find("local") != std::string::npos);
  const std::string json = run_command(std::string(HERD_CLI_PATH) + " status --json --events 5 --scheduler " +
                                   client.scheduler_address(), &rc);
  CHECK(rc == 0);
  const auto doc = herd::json::parse(json);
  REQUIRE(doc.is_object());
  CHECK(doc.begin().key() == "scheduler_id");  // in the order written, as before
  CHECK(doc.at("workers").size() == 2);
  CHECK(doc.at("workers")[0].at("nthreads").get<int>() >= 1);
  CHECK(doc.at("finished_total") == 30);
  CHECK(doc.at("events").size() == 5);
  CHECK(doc.at("events")[0].at("ok") == true);
  CHECK(doc.at("pools")[0].at("name") == "local");
  CHECK(doc.at("functions").at("square").at("memory") == 30);
  // No scheduler there: a clear error and a non-zero exit.
  const std::string err = run_command(std::string(HERD_CLI_PATH) + " status --timeout 0.5 --scheduler tcp://127.0.0.1:1 2>&1", &rc);
  CHECK(rc == 1);
  CHECK(err.find("no herd scheduler answered") != std::string::npos);
}

TEST_CASE("Status.Dashboard.MetricsAndJson" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{2}};
  std::vector<int> xs(25, 2);
  auto futures = client.map(square, xs);
  client.wait(futures);
  const auto s = client.status();
  REQUIRE(!s.dashboard.empty());
  // Each request gets a snapshot taken after it arrived; the loop only guards against a slow turn.
  std::map<std::string, double> m;
  for (int i = 0; i < 40; ++i) {
    m = parse_metrics(herd::test::http_get(s.dashboard, "/metrics"));
    if (m["herd_tasks_finished_total"] == 25) break;
    std::this_thread::sleep_for(100ms);
  }
  CHECK(m["herd_workers"] == 2);
  CHECK(m["herd_tasks_finished_total"] == 25);
  CHECK(m["herd_tasks{state=\"memory\"}"] == 25);
  CHECK(m["herd_function_tasks{function=\"square\",state=\"memory\"}"] == 25);
  CHECK(m["herd_pool_workers{pool=\"local\"}"] == 2);
  CHECK(m["herd_function_runs_total{function=\"square\",outcome=\"finished\"}"] == 25);
  CHECK(m.count("herd_pool_jobs{pool=\"local\",state=\"running\"}") == 1);
  CHECK(m["herd_threads"] >= 2);
  const auto doc = herd::json::parse(herd::test::http_get(s.dashboard, "/api/status"));
  CHECK(doc.at("workers").size() == 2);
  CHECK(doc.at("finished_total") == 25);
  const std::string page = herd::test::http_get(s.dashboard, "/");
  CHECK(page.find("<title>herd dashboard</title>") != std::string::npos);
  // Self-contained: no external script, style sheet, image or font (its one link is to this
  // scheduler's own report of the run so far).
  for (const char* ref : {"src=", "url(", "@import", "href=\"http", "href=\"//"}) CHECK(page.find(ref) == std::string::npos);
  CHECK(page.find("href=\"report\"") != std::string::npos);
}

TEST_CASE("Progress.Lines.CountsRateAndFailures" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{2}};
  std::vector<int> xs(20);
  for (int i = 0; i < 20; ++i) xs[static_cast<std::size_t>(i)] = i + 1;
  auto futures = client.map(refuse, xs);
  std::vector<int> naps(8, 150);
  auto slow = client.map(nap, naps);
  futures.insert(futures.end(), slow.begin(), slow.end());
  std::ostringstream out;
  const auto sum = herd::progress(futures, herd::ProgressOptions{}.out(out).interval(100ms).label("map"));
  CHECK(sum.total == 28);
  CHECK(sum.finished == 24);
  CHECK(sum.failed == 4);
  const std::string text = out.str();
  CHECK(text.find('\r') == std::string::npos);  // not a terminal: plain lines
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  REQUIRE(lines.size() >= 3);  // first, at least one in between (the naps take ~600 ms), last
  CHECK(lines.front().rfind("map: ", 0) == 0);
  CHECK(lines[1].find("ETA") != std::string::npos);
  CHECK(lines.back().find("map: 28/28 (100%), 4 failed, ") == 0);
  CHECK(lines.back().find("/s") != std::string::npos);
}

TEST_CASE("Progress.Text.Format" * doctest::timeout(10)) {
  CHECK(herd::detail::progress_text(5, 0, 10, 2.0, true, 10) == "[#####-----] 5/10 (50%), 2.5/s, ETA 2 s");
  CHECK(herd::detail::progress_text(10, 1, 10, 4.0, false) == "10/10 (100%), 1 failed, 2.5/s, 4 s");
  CHECK(herd::detail::progress_text(0, 0, 3, 1.0, false) == "0/3 (0%), 0.0/s, ETA ?");
}

TEST_CASE("Explain.ClientAndCli.ResourcesInputsAndRunning" * doctest::timeout(90)) {
  herd::Client client{herd::LocalCluster{1}};
  client.wait_for_workers(1);
  auto big = client.submit(herd::TaskOptions{}.key("needs-bigmem").resource("bigmem", 1), square, 3);
  auto slow = client.submit(herd::TaskOptions{}.key("slow-one"), nap, 4000);
  auto after = client.submit(herd::TaskOptions{}.key("after-slow"), square, slow);
  // Nothing present or to come offers bigmem: flagged, with each worker's and pool's reason.
  herd::TaskExplanation e;
  REQUIRE(herd::testing::eventually([&] { return (e = client.explain(big)).state == "ready"; }, 20s));
  INFO(e.to_text());
  CHECK(e.found);
  CHECK(e.key == "needs-bigmem");
  CHECK(e.never);
  CHECK(e.summary.find("no connected worker offers {bigmem: 1}") != std::string::npos);
  REQUIRE(e.workers.size() == 1);
  // Every worker offers its cores and memory (issue 45), not bigmem.
  CHECK(e.workers[0].find("offers {cpus: ") != std::string::npos);
  CHECK(e.workers[0].find(", the task needs {bigmem: 1}") != std::string::npos);
  REQUIRE(e.pools.size() == 1);
  CHECK(e.pools[0].find("pool local: cannot run it: the task needs bigmem 1 (its workers offer 0)") == 0);
  // Running, and a task waiting for it.
  REQUIRE(herd::testing::eventually([&] { return client.explain(slow).state == "processing"; }, 20s));
  CHECK(client.explain(slow).summary.find("running on worker") == 0);
  e = client.explain(after);
  CHECK(e.state == "waiting");
  REQUIRE(e.inputs.size() == 1);
  CHECK(e.inputs[0] == "slow-one (processing)");
  CHECK_FALSE(e.never);
  // The command line: the same text; an unknown key is an error that says so.
  int rc = -1;
  const std::string text =
      run_command(std::string(HERD_CLI_PATH) + " explain needs-bigmem --scheduler " + client.scheduler_address(), &rc);
  CHECK(rc == 0);
  CHECK(text.find("task needs-bigmem (function square): ready") == 0);
  CHECK(text.find("NOTHING CAN RUN IT") != std::string::npos);
  const std::string none =
      run_command(std::string(HERD_CLI_PATH) + " explain no-such-task --scheduler " + client.scheduler_address(), &rc);
  CHECK(rc == 1);
  CHECK(none.find("no task 'no-such-task'") != std::string::npos);
  CHECK(after.result() == 16000000);
  big.cancel();
}
