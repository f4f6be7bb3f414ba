// The run record's reports and the dashboard's history in a real headless Chromium (Debian's
// `chromium`): the report of a performance_report scope draws one stream rectangle per task run
// and its per-function totals are the sums of those runs; a run with a killed worker, a retried
// task and a pool that grew shows each of them where it happened; the dashboard draws its
// history charts and links the report. HERD_REPORT_SCREENSHOTS=DIR also saves report.png and
// dashboard.png there (the README's docs/img/ are made this way).
#include <doctest/doctest.h>

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include <herd/herd.hpp>

#include "support/chromium.hpp"
#include "support/http_get.hpp"

using namespace std::chrono_literals;

namespace {
int square(int x) { return x * x; }
HERD_TASK(square);
int nap(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}
HERD_TASK(nap);
int always_fails(int x) { throw std::runtime_error("always fails: " + std::to_string(x)); }
HERD_TASK(always_fails);
/// Fails its first run (a marker file counts them), then succeeds.
int fails_once(std::string marker) {
  std::ofstream(marker, std::ios::app) << "run\n";
  std::ifstream in(marker);
  int runs = 0;
  for (std::string l; std::getline(in, l);) ++runs;
  if (runs == 1) throw std::runtime_error("first run fails on purpose");
  return runs;
}
HERD_TASK(fails_once);
/// Kills its worker on its first run, then succeeds.
int kills_worker_once(std::string marker) {
  const bool first = !std::filesystem::exists(marker);
  std::ofstream(marker, std::ios::app) << "run\n";
  if (first) {
    std::this_thread::sleep_for(200ms);  // a visible run before the worker dies
    ::kill(::getpid(), SIGKILL);
  }
  return 7;
}
HERD_TASK(kills_worker_once);

using herd::test::run;
std::string chromium(const std::string& profile) { return herd::test::chromium_command(profile, "1400,1800"); }

struct Profile {
  std::string path;
  Profile() {
    char tmpl[] = "/tmp/herd-chromium-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~Profile() { std::filesystem::remove_all(path); }
};

/// Every start tag with this class in the dumped DOM, as its attributes' text.
std::vector<std::string> tags_with_class(const std::string& dom, const std::string& tag, const std::string& cls) {
  std::vector<std::string> out;
  const std::regex re("<" + tag + "\\b[^>]*class=\"" + cls + "\"[^>]*>");
  for (auto it = std::sregex_iterator(dom.begin(), dom.end(), re); it != std::sregex_iterator(); ++it) out.push_back(it->str());
  return out;
}

std::string attr(const std::string& tag, const std::string& name) {
  std::smatch m;
  if (std::regex_search(tag, m, std::regex("\\s" + name + "=\"([^\"]*)\""))) return m[1];
  return "";
}

std::string dump(const std::string& url_or_file, const Profile& profile) {
  int rc = -1;
  const std::string dom = run(chromium(profile.path) + "--dump-dom '" + url_or_file + "' 2>/dev/null", &rc);
  CHECK(rc == 0);
  return dom;
}

void screenshot(const std::string& url_or_file, const Profile& profile, const std::string& name) {
  const char* dir = std::getenv("HERD_REPORT_SCREENSHOTS");
  if (dir == nullptr) return;
  const std::string path = std::filesystem::absolute(std::filesystem::path(dir) / name).string();
  int rc = -1;
  (void)run(chromium(profile.path) + "--hide-scrollbars --screenshot=" + path + " '" + url_or_file + "' 2>/dev/null", &rc);
  CHECK(std::filesystem::exists(path));
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("herd-report-" + std::to_string(::getpid()) + "-" + name)).string();
}
}  // namespace

TEST_CASE("Report.Chromium.OneRectanglePerRunAndTotalsAreTheirSums" * doctest::timeout(120)) {
  REQUIRE_MESSAGE(std::system("command -v chromium > /dev/null 2>&1") == 0,
                  "chromium is not installed (scripts/test.sh installs it)");
  herd::Client client{herd::LocalCluster{2, 2}};
  client.wait(client.map(square, std::vector<int>{1, 2, 3}));  // before the scope: not in the report
  const std::string html = temp_path("scope.html");
  {
    auto scope = client.performance_report(html);
    std::vector<int> xs(30), naps(8, 30);
    for (int i = 0; i < 30; ++i) xs[static_cast<std::size_t>(i)] = i;
    auto squares = client.map(square, xs);
    auto naps_f = client.map(nap, naps);
    auto bad = client.submit(herd::TaskOptions{}.retries(1), always_fails, 5);  // two runs, both failed
    client.wait(squares);
    client.wait(naps_f);
    CHECK_THROWS(bad.result());
  }
  REQUIRE(std::filesystem::exists(html));
  Profile profile;
  const std::string dom = dump("file://" + html, profile);
  INFO(dom.substr(0, 3000));
  CHECK(dom.find("<title>herd performance report</title>") != std::string::npos);
  const auto rects = tags_with_class(dom, "rect", "run");
  CHECK(rects.size() == 30 + 8 + 2);  // one per run, the scope's only
  // Per function: the table's run count and running time are the rectangles' count and sum.
  std::map<std::string, std::pair<int, long long>> by_f;  // data-f -> (runs, microseconds)
  int failed = 0;
  for (const auto& r : rects) {
    auto& t = by_f[attr(r, "data-f")];
    ++t.first;
    t.second += std::stoll(attr(r, "data-us"));
    failed += attr(r, "data-status") == "failed";
  }
  CHECK(failed == 2);
  const std::regex row_re("<tr><td class=\"fn\">.*?</tr>");
  const std::regex runs_re("data-runs=\"(\\d+)\"");
  const std::regex running_re("data-us=\"(\\d+)\" data-phase=\"running\"");
  std::vector<std::pair<int, long long>> table;
  for (auto it = std::sregex_iterator(dom.begin(), dom.end(), row_re); it != std::sregex_iterator(); ++it) {
    const std::string row = it->str();
    std::smatch a, b;
    REQUIRE(std::regex_search(row, a, runs_re));
    REQUIRE(std::regex_search(row, b, running_re));
    table.emplace_back(std::stoi(a[1]), std::stoll(b[1]));
  }
  REQUIRE(table.size() == 3);  // always_fails, nap, square: in name order, as data-f numbers them
  for (std::size_t f = 0; f < table.size(); ++f) {
    CHECK(table[f].first == by_f[std::to_string(f)].first);
    CHECK(table[f].second == by_f[std::to_string(f)].second);
  }
  CHECK(dom.find("always fails: 5") != std::string::npos);  // the failed runs' table
  screenshot("file://" + html, profile, "report.png");
  std::filesystem::remove(html);
}

TEST_CASE("Report.Chromium.KilledWorkerRetriedTaskPoolGrowth" * doctest::timeout(180)) {
  REQUIRE_MESSAGE(std::system("command -v chromium > /dev/null 2>&1") == 0,
                  "chromium is not installed (scripts/test.sh installs it)");
  const std::string killed = temp_path("killed.marker"), retried = temp_path("retried.marker");
  std::filesystem::remove(killed);
  std::filesystem::remove(retried);
  herd::Client client{herd::LocalCluster{2}.env("HERD_TIMEOUT_MS", "2000").env("HERD_HEARTBEAT_MS", "100")};
  client.wait_for_workers(2);
  client.scale(3);  // the pool grows
  client.wait_for_workers(3, std::chrono::seconds(60));
  auto k = client.submit(kills_worker_once, killed);  // its worker dies; it runs again elsewhere
  CHECK(k.result() == 7);
  auto r = client.submit(herd::TaskOptions{}.retries(1), fails_once, retried);  // fails, retried
  CHECK(r.result() == 2);
  client.wait(client.map(nap, std::vector<int>(6, 20)));
  const std::string html = temp_path("events.html");
  {
    std::ofstream(html) << client.report();
  }
  Profile profile;
  const std::string dom = dump("file://" + html, profile);
  INFO(dom.substr(0, 3000));
  // The killed worker: a lost run, and a 'lost' mark on that worker's row at the loss.
  const auto rects = tags_with_class(dom, "rect", "run");
  std::vector<std::string> lost_runs;
  for (const auto& t : rects) {
    if (attr(t, "data-status") == "lost") lost_runs.push_back(t);
  }
  REQUIRE(lost_runs.size() == 1);
  const auto marks = tags_with_class(dom, "line", "worker-lost");
  REQUIRE(marks.size() == 1);
  CHECK(attr(marks[0], "data-w") == attr(lost_runs[0], "data-w"));
  const double lost_end_ms = std::stod(attr(lost_runs[0], "data-s")) + std::stod(attr(lost_runs[0], "data-us")) / 1000;
  CHECK(std::abs(std::stod(attr(marks[0], "data-t")) - lost_end_ms) < 1500);  // where it happened
  // The retried task: a failed run, then its attempt 2 that succeeded.
  CHECK(dom.find("first run fails on purpose") != std::string::npos);
  int fails_once_runs = 0;
  for (const auto& t : rects) fails_once_runs += attr(t, "data-key").rfind("fails_once", 0) == 0;
  CHECK(fails_once_runs == 2);
  // The pool grew: its size went from 2 to 3, and a job started for it.
  CHECK(dom.find(">scaled<") != std::string::npos);
  CHECK(dom.find("scale: 3 workers wanted") != std::string::npos);
  CHECK(dom.find(">started<") != std::string::npos);
  CHECK(dom.find(">lost<") != std::string::npos);  // the workers' table
  screenshot("file://" + html, profile, "report-events.png");
  std::filesystem::remove(html);
  std::filesystem::remove(killed);
  std::filesystem::remove(retried);
}

TEST_CASE("Dashboard.Chromium.HistoryChartsAndReportLink" * doctest::timeout(120)) {
  REQUIRE_MESSAGE(std::system("command -v chromium > /dev/null 2>&1") == 0,
                  "chromium is not installed (scripts/test.sh installs it)");
  herd::Client client{herd::LocalCluster{2}.env("HERD_HEARTBEAT_MS", "100")};
  client.wait(client.map(nap, std::vector<int>(10, 20)));
  const std::string url = client.status().dashboard;
  REQUIRE(!url.empty());
  // The history holds a point per worker once each has sent a heartbeat.
  std::string history;
  for (int i = 0; i < 50; ++i) {
    history = herd::test::http_get(url, "/api/history");
    if (history.find("\"local-0\"") != std::string::npos && history.find("\"local-1\"") != std::string::npos) break;
    std::this_thread::sleep_for(100ms);
  }
  CHECK(history.find("\"local-1\"") != std::string::npos);
  CHECK(history.find("\"pools\":{\"local\"") != std::string::npos);
  Profile profile;
  const std::string dom = dump(url, profile);
  INFO(dom.substr(0, 3000));
  CHECK(dom.find("id=\"report-link\"") != std::string::npos);
  for (const char* chart : {"history-cpu", "history-memory", "history-pools"}) {
    const auto at = dom.find(std::string("id=\"") + chart + "\"");
    REQUIRE(at != std::string::npos);
    CHECK(dom.find("class=\"series\"", at) < dom.find("</svg>", at));  // it drew a series
  }
  // The report of the run so far, built by the scheduler on request.
  const std::string report = herd::test::http_get(url, "/report");
  CHECK(report.find("<!DOCTYPE html>") == 0);
  CHECK(report.find("\"runs_total\":10") != std::string::npos);
  const std::string trace = herd::test::http_get(url, "/report?format=trace");
  CHECK(trace.find("\"traceEvents\"") != std::string::npos);
  screenshot(url, profile, "dashboard.png");
}
