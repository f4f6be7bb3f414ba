// The scheduler's dashboard page in a real headless Chromium (Debian's `chromium`, installed by
// scripts/test.sh): after a map, the page's own script must have fetched api/status and show
// the worker count and the finished-task count. HERD_DASHBOARD_SCREENSHOT=path.png also saves
// a screenshot (the README's docs/dashboard.png is made this way).
#include <doctest/doctest.h>

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <regex>
#include <thread>

#include <herd/herd.hpp>

#include "support/chromium.hpp"
#include "support/http_get.hpp"

using namespace std::chrono_literals;

namespace {
int cube(int x) { return x * x * x; }
HERD_TASK(cube);
int doze(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}
HERD_TASK(doze);

using herd::test::run;
std::string chromium_command(const std::string& profile) { return herd::test::chromium_command(profile, "1200,800"); }

/// Text of the element with this id in the dumped DOM ("" if absent).
std::string element_text(const std::string& dom, const std::string& id) {
  std::smatch m;
  if (std::regex_search(dom, m, std::regex("id=\"" + id + "\"[^>]*>([^<]*)<"))) return m[1];
  return "";
}
}  // namespace

TEST_CASE("Dashboard.Chromium.ShowsWorkersAndFinishedTasks" * doctest::timeout(120)) {
  REQUIRE_MESSAGE(std::system("command -v chromium > /dev/null 2>&1") == 0,
                  "chromium is not installed (scripts/test.sh installs it)");
  herd::Client client{herd::LocalCluster{3}};
  std::vector<int> xs(60);
  for (int i = 0; i < 60; ++i) xs[static_cast<std::size_t>(i)] = i;
  auto futures = client.map(cube, xs);
  std::vector<int> naps(12, 40);
  auto more = client.map(doze, naps);
  client.wait(futures);
  client.wait(more);
  const std::string url = client.status().dashboard;
  REQUIRE(!url.empty());
  // The scheduler has seen every result before the futures completed; this only guards a slow turn.
  for (int i = 0; i < 40; ++i) {
    if (herd::test::http_get(url, "/metrics").find("herd_tasks_finished_total 72\n") != std::string::npos) break;
    std::this_thread::sleep_for(100ms);
  }
  char tmpl[] = "/tmp/herd-chromium-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string profile = tmpl;
  int rc = -1;
  const std::string dom = run(chromium_command(profile) + "--dump-dom " + url + " 2>/dev/null", &rc);
  CHECK(rc == 0);
  INFO(dom.substr(0, 2000));
  CHECK(dom.find("<title>herd dashboard</title>") != std::string::npos);
  CHECK(element_text(dom, "n-workers") == "3");
  CHECK(element_text(dom, "n-finished") == "72");
  CHECK(element_text(dom, "n-failed") == "0");
  CHECK(element_text(dom, "error") == "");
  CHECK(dom.find(">cube<") != std::string::npos);   // tasks by function
  CHECK(dom.find(">doze<") != std::string::npos);
  CHECK(dom.find(">local-0<") != std::string::npos);  // the workers table
  CHECK(dom.find("<rect") != std::string::npos);     // the task stream drew task runs
  if (const char* shot = std::getenv("HERD_DASHBOARD_SCREENSHOT")) {
    const std::string path = std::filesystem::absolute(shot).string();
    (void)run(chromium_command(profile) + "--hide-scrollbars --screenshot=" + path + " " + url + " 2>/dev/null", &rc);
    CHECK(std::filesystem::exists(path));
  }
  std::filesystem::remove_all(profile);
}
