// Logs against a real LocalCluster (worker processes): a worker's log holds herd's own lines
// and what the process printed; a task's output holds what it printed (stdout, stderr,
// herd::task_log, a shell command's streams); clear errors for unknown names and tasks that
// have not run; `herd logs` on a running scheduler; a crashed worker's last words reach its
// log file and the pool's last_failure.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include <herd/herd.hpp>

#include "support/process_util.hpp"

using namespace std::chrono_literals;

namespace {
int shout(int x) {
  std::cout << "stdout-line-" << x << std::endl;
  std::fprintf(stderr, "stderr-line-%d\n", x);
  return x;
}
HERD_TASK(shout);

int shout_buffered(int x) {
  std::printf("printf-no-flush-%d\n", x);  // line-buffered on a worker: no flush needed
  return x;
}
HERD_TASK(shout_buffered);

int chatty(int x) {
  herd::task_log("task-log-", x, " begins");
  std::this_thread::sleep_for(300ms);  // the tasks overlap on one worker's four slots
  // One write per line: pieces written with several << from several threads interleave.
  std::cout << ("overlapping-stdout-" + std::to_string(x) + "\n") << std::flush;
  herd::task_log("task-log-", x, " ends");
  return x;
}
HERD_TASK(chatty);

int nap(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}
HERD_TASK(nap);

int after(int x) { return x; }
HERD_TASK(after);

int crash(int x) {
  std::fprintf(stderr, "last-words-before-abort-%d\n", x);
  std::abort();
}
HERD_TASK(crash);

std::string run(const std::string& command, int* rc = nullptr) {
  return herd::testing::run_command(command + " 2>&1", rc);
}

bool contains(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

using herd::testing::eventually;

std::string whole(const std::vector<herd::Logs>& logs) {
  std::string out;
  for (const auto& l : logs) out += l.to_text();
  return out;
}
}  // namespace

TEST_CASE("Logs.Worker.HerdLinesAndWhatItPrinted" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{2}};
  auto f = client.submit(shout, 7);
  CHECK(f.result() == 7);
  const auto all = client.worker_logs();
  REQUIRE(all.size() == 2);
  CHECK(all[0].kind == "worker");
  CHECK(all[0].name == "local-0");
  CHECK(all[1].name == "local-1");
  const std::string text = whole(all);
  // herd's own info line (not shown on stderr at the default level, kept in the ring anyway)
  CHECK_MESSAGE(contains(text, "serving data at"), text);
  // what the task printed, through the worker process's stdout and stderr
  CHECK_MESSAGE(contains(text, "stdout-line-7"), text);
  CHECK_MESSAGE(contains(text, "stderr-line-7"), text);
  // one worker by name (the one that ran the task: it has more than one line), and the limit
  const std::string ran_on = client.task_output(f).worker;
  const auto one = client.worker_logs(ran_on, 1);
  REQUIRE(one.size() == 1);
  CHECK(one[0].lines.size() == 1);
  CHECK(one[0].dropped > 0);
  // logs(NAME) takes a worker name first
  const auto by_name = client.logs("local-1");
  REQUIRE(by_name.size() == 1);
  CHECK(by_name[0].kind == "worker");
}

TEST_CASE("Logs.Task.StdoutAndStderrOfTheOnlyRunningTask" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{1}};
  auto fs = client.map(shout, std::vector<int>{1, 2, 3});
  client.wait(fs);
  for (int i = 0; i < 3; ++i) {
    const herd::Logs out = client.task_output(fs[static_cast<std::size_t>(i)]);
    CHECK(out.kind == "task");
    CHECK(out.name == fs[static_cast<std::size_t>(i)].key());
    CHECK(out.worker == "local-0");
    // Its own lines, and no other task's.
    REQUIRE_MESSAGE(out.lines.size() == 2, out.to_text());
    CHECK(out.lines[0].text == "stdout-line-" + std::to_string(i + 1));
    CHECK(out.lines[0].stream == "stdout");
    CHECK(out.lines[1].text == "stderr-line-" + std::to_string(i + 1));
    CHECK(out.lines[1].stream == "stderr");
    CHECK(out.note.empty());
  }
  // printf without a flush: the worker's stdout is line-buffered
  auto g = client.submit(shout_buffered, 5);
  g.wait();
  CHECK_MESSAGE(contains(client.task_output(g).text(), "printf-no-flush-5"), client.task_output(g).to_text());
  // by key, as `herd logs KEY` asks
  CHECK(contains(client.task_output(fs[1].key()).text(), "stdout-line-2"));
}

TEST_CASE("Logs.Task.TaskLogIsAttributedWhenTasksOverlap" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{1, 4}};
  auto fs = client.map(chatty, std::vector<int>{0, 1, 2, 3});
  client.wait(fs);
  for (int i = 0; i < 4; ++i) {
    const herd::Logs out = client.task_output(fs[static_cast<std::size_t>(i)]);
    const std::string text = out.text();
    CHECK_MESSAGE(contains(text, "task-log-" + std::to_string(i) + " begins"), out.to_text());
    CHECK_MESSAGE(contains(text, "task-log-" + std::to_string(i) + " ends"), out.to_text());
    for (int j = 0; j < 4; ++j) {
      if (j != i) CHECK_MESSAGE(!contains(text, "task-log-" + std::to_string(j) + " "), out.to_text());
    }
    // stdout printed while others ran cannot be attributed: the output says so
    CHECK_MESSAGE(contains(out.note, "other tasks ran on this worker at the same time"), out.to_text());
  }
  // ... and it is in the worker log, as are the task_log lines
  const std::string worker = whole(client.worker_logs("local-0", 1000));
  for (int i = 0; i < 4; ++i) {
    CHECK_MESSAGE(contains(worker, "overlapping-stdout-" + std::to_string(i)), worker);
    CHECK_MESSAGE(contains(worker, "task-log-" + std::to_string(i) + " ends"), worker);
  }
}

TEST_CASE("Logs.Task.ShellCommandStreams" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{1, 2}};
  auto f = client.submit(herd::shell, herd::ShellCommand{"echo shell-out-1; echo shell-err-1 >&2; echo shell-out-2"});
  const herd::ShellResult r = f.result();
  CHECK(r.ok());
  const herd::Logs out = client.task_output(f);
  std::string out_lines, err_lines;
  for (const auto& l : out.lines) (l.stream == "stdout" ? out_lines : err_lines) += l.text + "\n";
  CHECK_MESSAGE(out_lines == "shell-out-1\nshell-out-2\n", out.to_text());
  CHECK_MESSAGE(err_lines == "shell-err-1\n", out.to_text());
  // a shell task's output is its own, not the worker's log
  CHECK(!contains(whole(client.worker_logs()), "shell-out-1"));
}

TEST_CASE("Logs.Errors.UnknownNamesAndTasksThatDidNotRun" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{1}};
  try {
    (void)client.worker_logs("no-such-worker");
    FAIL("expected LogsNotFound");
  } catch (const herd::LogsNotFound& e) {
    CHECK_MESSAGE(contains(e.what(), "no worker named 'no-such-worker'"), e.what());
  }
  try {
    (void)client.task_output("no-such-task");
    FAIL("expected LogsNotFound");
  } catch (const herd::LogsNotFound& e) {
    CHECK_MESSAGE(contains(e.what(), "no-such-task"), e.what());
  }
  try {
    (void)client.logs("nothing-by-this-name");
    FAIL("expected LogsNotFound");
  } catch (const herd::LogsNotFound& e) {
    CHECK_MESSAGE(contains(e.what(), "no worker, job or task named 'nothing-by-this-name'"), e.what());
  }
  // A task waiting for its input has not run: said so, not "not found"
  auto slow = client.submit(nap, 3000);
  auto later = client.submit(after, slow);
  try {
    (void)client.task_output(later);
    FAIL("expected LogsNotFound");
  } catch (const herd::LogsNotFound& e) {
    CHECK_MESSAGE(contains(e.what(), "has not started yet (waiting for its inputs)"), e.what());
  }
  // A running task: what it printed so far, and that it still runs (until it starts on the
  // worker: that it has not started yet)
  herd::Logs running;
  std::string not_yet;
  CHECK(eventually([&] {
    try {
      running = client.task_output(slow);
      return true;
    } catch (const herd::LogsNotFound& e) {
      not_yet = e.what();
      CHECK_MESSAGE(contains(not_yet, "has not started yet"), not_yet);
      return false;
    }
  }, 2500ms));
  CHECK_MESSAGE(contains(running.note, "still running"), running.to_text());
  // A task that ran and printed nothing
  CHECK(later.result() == 3000);
  const herd::Logs quiet = client.task_output(later);
  CHECK(quiet.lines.empty());
  CHECK_MESSAGE(contains(quiet.note, "printed nothing"), quiet.to_text());
}

TEST_CASE("Logs.Cli.WorkersTasksAndErrors" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{2}};
  auto f = client.submit(herd::TaskOptions{}.key("cli-shout"), shout, 42);
  CHECK(f.result() == 42);
  const std::string cli = std::string(HERD_CLI_PATH) + " logs --scheduler " + client.scheduler_address();
  int rc = -1;
  const std::string all = run(cli, &rc);
  CHECK(rc == 0);
  CHECK_MESSAGE(contains(all, "==> worker local-0 <=="), all);
  CHECK_MESSAGE(contains(all, "==> worker local-1 <=="), all);
  CHECK_MESSAGE(contains(all, "serving data at"), all);
  const std::string task = run(cli + " cli-shout", &rc);
  CHECK(rc == 0);
  CHECK_MESSAGE(contains(task, "==> task cli-shout (on local-"), task);
  CHECK_MESSAGE(contains(task, "stdout-line-42"), task);
  CHECK_MESSAGE(contains(task, "stderr-line-42"), task);
  const std::string forced = run(cli + " --task cli-shout -n 1", &rc);
  CHECK(rc == 0);
  CHECK_MESSAGE(contains(forced, "stderr-line-42"), forced);
  CHECK_MESSAGE(!contains(forced, "stdout-line-42"), forced);  // -n 1: the last line only
  const std::string one = run(cli + " local-1 -n 3", &rc);
  CHECK(rc == 0);
  CHECK_MESSAGE(contains(one, "==> worker local-1 <=="), one);
  CHECK(!contains(one, "local-0 <=="));
  const std::string missing = run(cli + " --worker ghost", &rc);
  CHECK(rc == 1);
  CHECK_MESSAGE(contains(missing, "herd logs: no worker named 'ghost' is connected"), missing);
}

TEST_CASE("Logs.Job.CrashedWorkersLastWordsReachItsFileAndThePool" * doctest::timeout(90)) {
  const std::string dir = "/tmp/herd-test-logs-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  {
    herd::Client client{herd::LocalCluster{1}.log_directory(dir)};
    auto f = client.submit(crash, 9);
    // The worker aborts; the pool sees its job end, unasked, and reads its log file.
    std::string failure;
    const bool seen = eventually([&] {
      for (const auto& p : client.pools()) failure += p.last_failure;
      return contains(failure, "last-words-before-abort-9");
    }, 30s);
    CHECK_MESSAGE(seen, failure);
    CHECK_MESSAGE(contains(failure, "job local-0 EXITED (killed by signal 6"), failure);
    // In the file itself: the capture pipe was emptied before the abort took its course.
    std::ifstream in(dir + "/local-0.log");
    std::stringstream file;
    file << in.rdbuf();
    CHECK_MESSAGE(contains(file.str(), "last-words-before-abort-9"), file.str());
    // `herd status`: the failed job, with the end of its output
    const herd::ClusterStatus s = client.status();
    bool listed = false;
    for (const auto& j : s.jobs) {
      if (j.id != "local-0") continue;
      listed = j.state == "ended" && j.output == dir + "/local-0.log";
      std::string tail;
      for (const auto& l : j.output_tail) tail += l + "\n";
      CHECK_MESSAGE(contains(tail, "last-words-before-abort-9"), tail);
    }
    CHECK_MESSAGE(listed, s.to_text());
    CHECK_MESSAGE(contains(s.to_text(), "| last-words-before-abort-9"), s.to_text());
    // `herd logs local-0`: the worker is gone, so its job's file
    const auto logs = client.logs("local-0");
    REQUIRE(!logs.empty());
    CHECK(logs[0].kind == "job");
    CHECK_MESSAGE(contains(logs[0].text(), "last-words-before-abort-9"), logs[0].to_text());
    CHECK_MESSAGE(contains(logs[0].note, "worker local-0 is gone"), logs[0].to_text());
    f.cancel();
  }
  std::filesystem::remove_all(dir);
}
