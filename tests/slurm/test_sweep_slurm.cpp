// Sweeps on the project's one-machine Slurm (scripts/local-slurm.sh; scripts/test.sh starts it):
// trials run in batch jobs, and the results files name the job each trial ran in.
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <herd/herd.hpp>

#include "support/process_util.hpp"
#include "common/util.hpp"
#include "sweep/results.hpp"

using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

bool slurm_up() {
  static const bool up = herd::shell(herd::ShellCommand{std::vector<std::string>{"sinfo", "--noheader"}}).exit_code == 0;
  if (!up && std::getenv("HERD_REQUIRE_SLURM") != nullptr) FAIL("Slurm is not reachable");
  return up;
}

std::string unique(const std::string& what) { return "herd-t-" + what + "-" + std::to_string(::getpid()); }

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// A job array task's id, as Slurm and HERD_JOB_ID write it: 123_4.
bool is_array_job_id(const std::string& id) { return std::regex_match(id, std::regex("[0-9]+_[0-9]+")); }

herd::Metrics square(herd::Params p) {
  const double x = herd::param<double>(p, "x");
  return {{"loss", x * x}};
}

}  // namespace

HERD_TASK(square);

TEST_CASE("Sweep.Slurm.TrialsRunInJobsAndNameThem" * doctest::timeout(300)) {
  if (!slurm_up()) return;
  const std::string name = unique("sweep");
  const std::string dir = "/tmp/" + name;
  fs::remove_all(dir);
  {
    herd::Client client{herd::SlurmCluster{herd::SlurmOptions{}
                                               .job_name(name)
                                               .partition("cpu")
                                               .cores(1)
                                               .memory("300M")
                                               .walltime("00:10:00")
                                               .log_directory(dir + "/logs")
                                               .jobs(2)}};
    const auto report = herd::Sweep{herd::SearchSpace{}.grid("x", {"-2", "0.5", "3", "1"})}
                            .command("echo herd-metric loss=$(awk 'BEGIN { print {x} * {x} }'); "
                                     "echo \"{\\\"job\\\": \\\"$SLURM_JOB_ID\\\"}\" >&2")
                            .minimize("loss")
                            .timeout(120)
                            .results(dir + "/cmd")
                            .progress(herd::Progress::lines)
                            .run(client);
    CHECK(report.ok == 4);
    CHECK(report.best()->params.at("x") == "0.5");
    std::set<std::string> jobs;
    for (const auto& t : report.trials) {
      CHECK_MESSAGE(is_array_job_id(t.job_id), t.job_id);
      jobs.insert(t.job_id);
    }
    CHECK(!jobs.empty());
    CHECK(jobs.size() <= 2);
    // The CSV carries the job of each trial.
    const std::string csv = read_file(dir + "/cmd.csv");
    for (const auto& j : jobs) CHECK(csv.find("," + j + ",") != std::string::npos);

    const auto functions = herd::Sweep{herd::SearchSpace{}.uniform("x", -1, 1).samples(6).seed(2)}
                               .function(square)
                               .minimize("loss")
                               .progress(herd::Progress::none)
                               .run(client);
    CHECK(functions.ok == 6);
    for (const auto& t : functions.trials) CHECK(is_array_job_id(t.job_id));
  }
  fs::remove_all(dir);
}

TEST_CASE("Sweep.Slurm.CommandLineWithAConfigurationFile" * doctest::timeout(300)) {
  if (!slurm_up()) return;
  const std::string name = unique("sweepcli");
  const std::string dir = "/tmp/" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir + "/cluster.toml") << "[pool.cpu]\npartition = \"cpu\"\ncores = 1\nmemory = \"300M\"\n"
                                       << "walltime = \"00:10:00\"\njob_name = \"" << name << "\"\n"
                                       << "log_directory = \"" << dir << "/logs\"\njobs = 2\n";
  const std::string cli = herd::testing::herd_cli_path();
  const std::string line = "cd " + herd::util::shell_quote(dir) + " && " + herd::util::shell_quote(cli) +
                           // --cpus: the pool's workers offer their cores on their own (issue 45), and
                           // each trial runs on one of its own, with OMP_NUM_THREADS=1.
                           " sweep --config cluster.toml --cpus 1 --grid x=3,1,2 --metric loss --progress lines "
                           "-- 'echo herd-metric loss={x} omp=$OMP_NUM_THREADS' 2>&1";
  const herd::ShellResult r = herd::shell(herd::ShellCommand{line});
  INFO(r.stdout_tail);
  CHECK(r.exit_code == 0);
  CHECK(r.stdout_tail.find("3 trials: 3 ok") != std::string::npos);
  std::istringstream log(read_file(dir + "/sweep.jsonl"));
  int rows = 0;
  for (std::string l; std::getline(log, l);) {
    const auto rec = herd::sweep::from_json_line(l);
    CHECK(is_array_job_id(rec.result.job_id));
    CHECK(rec.result.metrics.at("omp") == 1);
    ++rows;
  }
  CHECK(rows == 3);
  fs::remove_all(dir);
}

TEST_CASE("Sweep.Slurm.TimeoutLongerThanTheWalltimeRunsWithAWarning" * doctest::timeout(300)) {
  // Trials ask for a duration equal to their timeout: 600 s on jobs of 120 s less a 60 s
  // retirement margin would fit no worker and wait for ever. The sweep says so at the start
  // and asks for 60 s.
  if (!slurm_up()) return;
  const std::string name = unique("sweepwall");
  const std::string dir = "/tmp/" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir + "/cluster.toml") << "[pool.cpu]\npartition = \"cpu\"\ncores = 1\nmemory = \"300M\"\n"
                                       << "walltime = \"00:02:00\"\nretire_before = 60\njob_name = \"" << name
                                       << "\"\nlog_directory = \"" << dir << "/logs\"\njobs = 1\n";
  const std::string cli = herd::testing::herd_cli_path();
  const std::string line = "cd " + herd::util::shell_quote(dir) + " && timeout 200 " +
                           herd::util::shell_quote(cli) +
                           " sweep --config cluster.toml --grid x=3,1 --metric loss --timeout 600 --progress lines "
                           "-- 'echo herd-metric loss={x}' 2>&1";
  const herd::ShellResult r = herd::shell(herd::ShellCommand{line});
  INFO(r.stdout_tail);
  CHECK(r.exit_code == 0);
  CHECK(r.stdout_tail.find("warning: the timeout (600 s) is longer than any worker's time (walltime less the "
                           "retirement margin: cpu 120 s less 60 s); trials ask for 60 s") != std::string::npos);
  CHECK(r.stdout_tail.find("2 trials: 2 ok") != std::string::npos);
  fs::remove_all(dir);
}
