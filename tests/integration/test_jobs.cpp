// Jobs of shell commands from the `herd` command (issue 44): `herd submit` arrays, --each-line,
// job files, --after, cancel, resubmit --failed, output in files and streamed, --wait's exit
// code, a journal's jobs across a scheduler SIGKILL, a million-task array as one message.
// Each test runs `herd scheduler --local-workers 2` and the `herd` command as a user would;
// tasks leave marker files (one line per run) so that counts say how often each one ran.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <herd/herd.hpp>

#include "support/process_util.hpp"

using namespace std::chrono_literals;
using herd::testing::eventually;
using herd::testing::read_file;
using herd::testing::run_command;

namespace {

std::string fresh_dir(const std::string& name) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("herd-jobs-" + name + "-" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::size_t lines_in(const std::string& path) {
  std::size_t n = 0;
  for (char c : read_file(path)) n += c == '\n';
  return n;
}

/// A `herd scheduler --local-workers 2 --nthreads 1` (with a journal when given), stopped at the end.
struct Scheduler {
  pid_t pid = -1;
  std::string address;
  Scheduler(const std::string& dir, const std::string& journal = {}, const std::string& log_name = "scheduler.log") {
    std::vector<std::string> argv = {HERD_CLI_PATH, "scheduler", "--local-workers", "2", "--nthreads", "1", "--no-dashboard"};
    if (!journal.empty()) argv.insert(argv.end(), {"--journal", journal});
    std::tie(pid, address) = herd::testing::start_scheduler(argv, dir + "/" + log_name);
  }
  ~Scheduler() { stop(SIGTERM); }
  void stop(int sig) {
    if (pid <= 0) return;
    ::kill(pid, sig);
    int status = 0;
    ::waitpid(pid, &status, 0);
    pid = -1;
  }
  /// `herd ARGS` (HERD_SCHEDULER=ADDRESS: the command may end with `-- CMD`) through the shell,
  /// from `cwd`; stdout and stderr back, the exit status in `rc`.
  std::string herd(const std::string& args, int* rc = nullptr, const std::string& cwd = {}) const {
    const std::string cd = cwd.empty() ? "" : "cd '" + cwd + "' && ";
    return run_command(cd + "HERD_SCHEDULER=" + address + " " + HERD_CLI_PATH + " " + args + " 2>&1", rc);
  }
  /// Submits; returns the job id it printed.
  std::uint64_t submit(const std::string& args, const std::string& cwd = {}) const {
    int rc = -1;
    const std::string cd = cwd.empty() ? "" : "cd '" + cwd + "' && ";
    const std::string out =
        run_command(cd + HERD_CLI_PATH + " submit --scheduler " + address + " " + args, &rc);
    INFO("herd submit " << args << ": " << out);
    REQUIRE(rc == 0);
    return std::stoull(out);
  }
  int wait(std::uint64_t job) const {
    int rc = -1;
    (void)herd("job wait " + std::to_string(job), &rc);
    return rc;
  }
};

}  // namespace

TEST_CASE("Jobs.Array.EachIndexRunsOnceWithItsJobAndTaskIds") {
  const std::string dir = fresh_dir("array");
  Scheduler s(dir);
  // One word with shell syntax is a /bin/sh script.
  const std::uint64_t job = s.submit("--array 1-20,30-40:5 --stdout none --stderr none -- 'echo \"$HERD_JOB_ID "
                                     "$HERD_TASK_ID\" >> " + dir + "/m-$HERD_TASK_ID'");
  CHECK(s.wait(job) == 0);
  std::set<int> expected;
  for (int i = 1; i <= 20; ++i) expected.insert(i);
  expected.insert({30, 35, 40});
  std::set<int> seen;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("m-", 0) != 0) continue;
    const int id = std::stoi(name.substr(2));
    seen.insert(id);
  }
  CHECK(seen == expected);
  for (int id : expected) {
    const std::string text = read_file(dir + "/m-" + std::to_string(id));
    CHECK(lines_in(dir + "/m-" + std::to_string(id)) == 1u);
    CHECK(text.rfind(std::to_string(job) + " " + std::to_string(id) + "\n", 0) == 0);
  }
  const std::string list = s.herd("jobs");
  CHECK(list.find("finished") != std::string::npos);
  CHECK(list.find("23") != std::string::npos);  // 20 + 3 tasks
}

TEST_CASE("Jobs.EachLine.EachTaskGetsItsLineArgumentsRunWithoutAShell") {
  const std::string dir = fresh_dir("each");
  Scheduler s(dir);
  std::ofstream(dir + "/lines.txt") << "alpha\nbeta gamma\n$HOME\n";
  const std::uint64_t job = s.submit("--each-line " + dir + "/lines.txt --stderr none -- printenv HERD_ENTRY", dir);
  CHECK(s.wait(job) == 0);
  // The default output: a file per task under the submit directory.
  const std::string base = dir + "/job-" + std::to_string(job) + "/";
  CHECK(read_file(base + "0.stdout") == "alpha\n");
  CHECK(read_file(base + "1.stdout") == "beta gamma\n");
  CHECK(read_file(base + "2.stdout") == "$HOME\n");  // not expanded: no shell
  CHECK_FALSE(std::filesystem::exists(base + "0.stderr"));
}

TEST_CASE("Jobs.Wait.NonZeroWhenATaskFailedInfoGivesExitCodeAndStderr") {
  const std::string dir = fresh_dir("wait");
  Scheduler s(dir);
  int rc = -1;
  (void)s.herd("submit --wait --stdout none -- true", &rc);
  CHECK(rc == 0);
  const std::string out = s.herd("submit --wait --array 1-4 -- 'echo oops-$HERD_TASK_ID >&2; exit $HERD_TASK_ID'", &rc, dir);
  CHECK(rc == 1);
  const std::uint64_t job = std::stoull(out);
  const std::string info = s.herd("job info " + std::to_string(job), &rc);
  INFO(info);
  CHECK(rc == 0);
  CHECK(info.find("4 failed") != std::string::npos);
  CHECK(info.find("task 3: exit code 3") != std::string::npos);
  CHECK(info.find("| oops-3") != std::string::npos);
  CHECK(s.wait(job) == 1);
  // An unknown job is an error naming it.
  const std::string none = s.herd("job info 999", &rc);
  CHECK(rc == 1);
  CHECK(none.find("no job 999") != std::string::npos);
}

TEST_CASE("Jobs.After.StartsOnceItsJobsSucceededCancelledWhenOneDidNot") {
  const std::string dir = fresh_dir("after");
  Scheduler s(dir);
  const std::uint64_t first = s.submit("--stdout none -- 'sleep 1; touch " + dir + "/first-done'");
  const std::uint64_t second =
      s.submit("--stdout none --after " + std::to_string(first) + " -- 'test -f " + dir + "/first-done && touch " + dir +
               "/second-ok'");
  CHECK(s.wait(second) == 0);
  CHECK(std::filesystem::exists(dir + "/second-ok"));
  const std::uint64_t failing = s.submit("--stdout none --stderr none -- false");
  const std::uint64_t blocked = s.submit("--stdout none --after " + std::to_string(failing) + " -- touch " + dir + "/never");
  CHECK(s.wait(blocked) == 1);
  int rc = -1;
  const std::string info = s.herd("job info " + std::to_string(blocked), &rc);
  CHECK(info.find("cancelled") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir + "/never"));
  const std::string bad = s.herd("submit --after 4242 -- true", &rc);
  CHECK(rc == 2);
  CHECK(bad.find("--after 4242: no job of that id") != std::string::npos);
}

TEST_CASE("Jobs.File.NamedTasksWithDependenciesBadLineNamesLineAndColumn") {
  const std::string dir = fresh_dir("file");
  Scheduler s(dir);
  std::ofstream(dir + "/job.toml") << "name = \"pipeline\"\n"
                                   << "[[task]]\nid = 1\ncommand = \"echo one >> " << dir << "/order\"\n"
                                   << "[[task]]\nid = 2\ndeps = [1]\ncommand = [\"sh\", \"-c\", \"echo two >> " << dir
                                   << "/order\"]\npriority = 1\n"
                                   << "[[task]]\nid = 3\ndeps = [1, 2]\ncommand = \"echo three >> " << dir << "/order\"\n";
  const std::uint64_t job = s.submit("--file " + dir + "/job.toml --stdout none");
  CHECK(s.wait(job) == 0);
  CHECK(read_file(dir + "/order") == "one\ntwo\nthree\n");
  // Line 4, column 1: an unknown key.
  std::ofstream(dir + "/bad.toml") << "[[task]]\nid = 1\ncommand = \"true\"\ncomand = \"typo\"\n";
  int rc = -1;
  std::string err = s.herd("submit --file " + dir + "/bad.toml", &rc);
  CHECK(rc == 2);
  CHECK(err.find("bad.toml:4:1") != std::string::npos);
  CHECK(err.find("unknown key 'comand'") != std::string::npos);
  // A dependency on a task the file does not have: where it is written.
  std::ofstream(dir + "/dep.toml") << "[[task]]\nid = 1\ncommand = \"true\"\ndeps = [7]\n";
  err = s.herd("submit --file " + dir + "/dep.toml", &rc);
  CHECK(rc == 2);
  CHECK(err.find("dep.toml:4:9") != std::string::npos);
  CHECK(err.find("no task has the id 7") != std::string::npos);
}

TEST_CASE("Jobs.Cancel.RunningStopWaitingNeverStart") {
  const std::string dir = fresh_dir("cancel");
  Scheduler s(dir);
  const std::uint64_t job =
      s.submit("--array 1-10 --stdout none -- 'echo start >> " + dir + "/started-$HERD_TASK_ID; sleep 60; touch " + dir +
               "/finished-$HERD_TASK_ID'");
  REQUIRE(eventually([&] {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir)) n += e.path().filename().string().rfind("started-", 0) == 0;
    return n >= 2;
  }, 30s));
  int rc = -1;
  const std::string out = s.herd("job cancel " + std::to_string(job), &rc);
  INFO(out);
  CHECK(rc == 0);
  CHECK(s.wait(job) == 1);
  const std::string info = s.herd("job info " + std::to_string(job), &rc);
  INFO(info);
  CHECK(info.find("0 ok, 0 failed, 10 cancelled") != std::string::npos);
  int started = 0, finished = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    started += e.path().filename().string().rfind("started-", 0) == 0;
    finished += e.path().filename().string().rfind("finished-", 0) == 0;
  }
  CHECK(started <= 2);  // 2 workers of one thread: only what had started
  CHECK(finished == 0);
}

TEST_CASE("Jobs.Resubmit.FailedOnlyTheFailedRunAgain") {
  const std::string dir = fresh_dir("resubmit");
  Scheduler s(dir);
  // Tasks 3, 6 and 9 fail until the file `fixed` exists.
  const std::string script = "'echo run >> " + dir + "/m-$HERD_TASK_ID; test $((HERD_TASK_ID % 3)) -ne 0 || test -f " +
                             dir + "/fixed'";
  const std::uint64_t job = s.submit("--array 1-10 --stdout none --stderr none -- " + script);
  CHECK(s.wait(job) == 1);
  std::ofstream(dir + "/fixed") << "yes\n";
  int rc = -1;
  const std::string again = s.herd("job resubmit " + std::to_string(job) + " --failed", &rc);
  REQUIRE(rc == 0);
  const std::uint64_t job2 = std::stoull(again);
  CHECK(job2 != job);
  CHECK(s.wait(job2) == 0);
  const std::string info = s.herd("job info " + std::to_string(job2), &rc);
  INFO(info);
  CHECK(info.find("tasks: 3 (3 ok, 0 failed") != std::string::npos);
  for (int i = 1; i <= 10; ++i) {
    CHECK(lines_in(dir + "/m-" + std::to_string(i)) == (i % 3 == 0 ? 2u : 1u));
  }
}

TEST_CASE("Jobs.Output.FilePerTaskOrStreamedJobOutputReadsATaskBack") {
  const std::string dir = fresh_dir("output");
  Scheduler s(dir);
  const std::string cmd = "-- 'echo out-$HERD_TASK_ID; echo err-$HERD_TASK_ID >&2'";
  const std::uint64_t files = s.submit("--array 1-6 --stdout " + dir + "/o/%{TASK_ID}.out --stderr " + dir +
                                       "/o/%{TASK_ID}.err " + cmd);
  CHECK(s.wait(files) == 0);
  CHECK(read_file(dir + "/o/4.out") == "out-4\n");
  CHECK(read_file(dir + "/o/4.err") == "err-4\n");
  int rc = -1;
  CHECK(run_command(std::string(HERD_CLI_PATH) + " job output " + std::to_string(files) + " --task 4 --scheduler " +
                    s.address + " 2>/dev/null", &rc) == "out-4\n");
  CHECK(rc == 0);
  CHECK(run_command(std::string(HERD_CLI_PATH) + " job output " + std::to_string(files) + " --task 4 --stderr --scheduler " +
                    s.address + " 2>&1 >/dev/null", &rc) == "err-4\n");

  const std::uint64_t streamed = s.submit("--array 1-50 --stream " + dir + "/stream " + cmd);
  CHECK(s.wait(streamed) == 0);
  std::size_t stream_files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/stream")) {
    CHECK(e.path().extension() == ".hstream");
    ++stream_files;
  }
  CHECK(stream_files >= 1);
  CHECK(stream_files <= 2);  // one per worker, not one per task
  CHECK_FALSE(std::filesystem::exists(dir + "/job-" + std::to_string(streamed)));
  for (int task : {1, 17, 50}) {
    CHECK(run_command(std::string(HERD_CLI_PATH) + " job output " + std::to_string(streamed) + " --task " +
                      std::to_string(task) + " --scheduler " + s.address + " 2>/dev/null", &rc) ==
          "out-" + std::to_string(task) + "\n");
    CHECK(rc == 0);
  }
  CHECK(run_command(std::string(HERD_CLI_PATH) + " job output " + std::to_string(streamed) +
                    " --task 17 --stderr --scheduler " + s.address + " 2>&1 >/dev/null", &rc) == "err-17\n");
  // Every task's stdout, in task order.
  const std::string all = run_command(std::string(HERD_CLI_PATH) + " job output " + std::to_string(streamed) +
                                      " --stdout --scheduler " + s.address, &rc);
  CHECK(lines_in(dir + "/o/4.out") == 1u);
  std::size_t n = 0;
  for (char c : all) n += c == '\n';
  CHECK(n == 50u);
  CHECK(all.rfind("out-1\nout-2\n", 0) == 0);
}

TEST_CASE("Jobs.Durable.SchedulerSigkilledFinishedKeepOutcomeRestRunAgain") {
  const std::string dir = fresh_dir("durable");
  const std::string journal = dir + "/herd.journal";
  // Tasks 1-3 end at once (2 fails with exit code 3); 4-6 wait for the file `go`.
  const std::string script = "'echo run >> " + dir + "/m-$HERD_TASK_ID; if [ $HERD_TASK_ID -le 3 ]; then exit "
                             "$(( HERD_TASK_ID == 2 ? 3 : 0 )); fi; while [ ! -f " + dir + "/go ]; do sleep 0.05; done'";
  std::uint64_t job = 0;
  {
    Scheduler s(dir, journal, "first.log");
    job = s.submit("--array 1-6 --stdout none --stderr none -- " + script);
    REQUIRE(eventually([&] {
      int rc = -1;
      const std::string info = s.herd("job info " + std::to_string(job), &rc);
      return info.find("tasks: 6 (2 ok, 1 failed") != std::string::npos;
    }, 60s));
    s.stop(SIGKILL);
  }
  Scheduler s(dir, journal, "second.log");
  int rc = -1;
  std::string list = s.herd("jobs", &rc);
  INFO(list);
  CHECK(rc == 0);
  const bool listed = list.find("\n" + std::to_string(job) + " ") != std::string::npos;
  CHECK(listed);
  std::string info = s.herd("job info " + std::to_string(job), &rc);
  INFO(info);
  CHECK(info.find("2 ok, 1 failed") != std::string::npos);
  CHECK(info.find("task 2: exit code 3") != std::string::npos);
  std::ofstream(dir + "/go") << "go\n";
  CHECK(s.wait(job) == 1);  // task 2 failed
  info = s.herd("job info " + std::to_string(job), &rc);
  CHECK(info.find("5 ok, 1 failed, 0 cancelled") != std::string::npos);
  for (int i = 1; i <= 3; ++i) CHECK(lines_in(dir + "/m-" + std::to_string(i)) == 1u);  // not run again
  // A new job after the restart gets a new id.
  const std::uint64_t next = s.submit("--stdout none -- true");
  CHECK(next == job + 1);
}

TEST_CASE("Jobs.MaxFails.CancelsTheRestOnceMoreFailed") {
  const std::string dir = fresh_dir("maxfails");
  Scheduler s(dir);
  const std::uint64_t job = s.submit("--array 1-2000 --max-fails 2 --stdout none --stderr none -- false");
  CHECK(s.wait(job) == 1);
  int rc = -1;
  const std::string info = s.herd("job info " + std::to_string(job), &rc);
  INFO(info);
  CHECK(info.find(": cancelled") == std::string::npos);  // it says failed: tasks failed
  CHECK(info.find("0 ok, ") != std::string::npos);
  CHECK(info.find("2000 cancelled") == std::string::npos);
  CHECK(info.find(" cancelled") != std::string::npos);
}

TEST_CASE("Jobs.Array.AMillionTasksIsOneMessageAcceptedCountedCancelled") {
  const std::string dir = fresh_dir("million");
  Scheduler s(dir);
  const std::uint64_t job = s.submit("--array 1-1000000 --stdout none --stderr none -- true");
  int rc = -1;
  const std::string list = s.herd("jobs", &rc);
  INFO(list);
  CHECK(list.find("1000000") != std::string::npos);
  (void)s.herd("job cancel " + std::to_string(job), &rc);
  CHECK(rc == 0);
  CHECK(s.wait(job) == 1);
  // The scheduler holds it in little memory (bench/jobs.sh measures it): a loose bound here.
  CHECK(herd::testing::rss_bytes(s.pid) < (std::uint64_t{600} << 20));
}

TEST_CASE("Jobs.BadInput.NoCommandUnknownPlaceholderBadArray") {
  const std::string dir = fresh_dir("bad");
  Scheduler s(dir);
  int rc = -1;
  std::string out = s.herd("submit", &rc);
  CHECK(rc == 2);
  CHECK(out.find("no command") != std::string::npos);
  out = s.herd("submit --stdout '%{TASK}.out' -- true", &rc);
  CHECK(rc == 2);
  CHECK(out.find("unknown placeholder %{TASK}") != std::string::npos);
  out = s.herd("submit --array 5-1 -- true", &rc);
  CHECK(rc == 2);
  CHECK(out.find("ends before it starts") != std::string::npos);
  out = s.herd("submit --nodes 0 -- true", &rc);
  CHECK(rc == 2);
  CHECK(out.find("--nodes") != std::string::npos);
  // Line 3, column 9: a task of no nodes (whole nodes of an allocation: 1 or more).
  std::ofstream(dir + "/nodes.toml") << "[[task]]\ncommand = \"true\"\nnodes = 0\n";
  out = s.herd("submit --file " + dir + "/nodes.toml", &rc);
  CHECK(rc == 2);
  CHECK(out.find("nodes.toml:3:9") != std::string::npos);
  CHECK(out.find("1 or more") != std::string::npos);
}
