// Job output files: the --output/--error patterns of a batch script, expanded for one array
// task, and the last lines of a file.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <herd/herd.hpp>

#include "jobqueue/job_output.hpp"

using namespace herd::jobqueue;

namespace {
struct TempDir {
  std::string path = "/tmp/herd-test-job-output-" + std::to_string(::getpid());
  TempDir() { std::filesystem::create_directories(path); }
  ~TempDir() { std::filesystem::remove_all(path); }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path + "/" + name) << text; }
};
}  // namespace

TEST_CASE("JobOutput.Patterns.FromTheJobScript") {
  const std::string script = herd::job_script(herd::SlurmOptions{}.job_name("sim").log_directory("/shared/logs"),
                                              "tcp://login1:8786");
  const auto p = sbatch_output_patterns(script);
  CHECK(p.output == "/shared/logs/sim-%A_%a.out");
  CHECK(p.error == "/shared/logs/sim-%A_%a.err");
  // Extra directives come later and win; short forms too. Lines after the first command are
  // not #SBATCH directives any more.
  const auto q = sbatch_output_patterns("#!/bin/bash\n#SBATCH --output=a-%j.out\n#SBATCH -o b-%x.out\n"
                                        "#SBATCH -e /x/%u/err\necho hi\n#SBATCH --error=ignored\n");
  CHECK(q.output == "b-%x.out");
  CHECK(q.error == "/x/%u/err");
}

TEST_CASE("JobOutput.Files.ExpandedForAnArrayTask") {
  TempDir d;
  const auto files = slurm_output_files({d.path + "/sim-%A_%a.out", d.path + "/sim-%A_%4a.err"}, "123_7", "sim", "/");
  REQUIRE(files.size() == 2);
  CHECK(files[0] == d.path + "/sim-123_7.out");
  CHECK(files[1] == d.path + "/sim-123_0007.err");
  // Relative to where sbatch ran; stderr with stdout when no --error; %x and %%.
  const auto rel = slurm_output_files({"logs/%x-%%-%A.out", ""}, "55_0", "job", "/work");
  REQUIRE(rel.size() == 1);
  CHECK(rel[0] == "/work/logs/job-%-55.out");
  // Slurm's default
  CHECK(slurm_output_files({"", ""}, "9_1", "x", "/w") == std::vector<std::string>{"/w/slurm-9_1.out"});
  // An array task's own %j is not known here: the newest matching file is taken.
  d.write("j-999.out", "old\n");
  d.write("j-1000.out", "new\n");
  const auto j = slurm_output_files({d.path + "/j-%j.out", ""}, "77_2", "x", "/");
  REQUIRE(j.size() == 1);
  CHECK_MESSAGE((j[0] == d.path + "/j-999.out" || j[0] == d.path + "/j-1000.out"), j[0]);
  // A plain job's %j is its id.
  CHECK(slurm_output_files({"/l/%j.out", ""}, "4242", "x", "/") == std::vector<std::string>{"/l/4242.out"});
}

TEST_CASE("JobOutput.LastLines") {
  TempDir d;
  d.write("f", "one\ntwo\nthree\nfour\n");
  std::size_t dropped = 0;
  CHECK(last_lines(d.path + "/f", 2, 1 << 20, &dropped) == std::vector<std::string>{"three", "four"});
  CHECK(dropped == 2);
  CHECK(last_lines(d.path + "/f", 10).size() == 4);
  // Reading only the end: the cut first line is not returned half.
  CHECK(last_lines(d.path + "/f", 10, 12) == std::vector<std::string>{"three", "four"});
  d.write("g", "no newline at the end");
  CHECK(last_lines(d.path + "/g", 5) == std::vector<std::string>{"no newline at the end"});
  CHECK(last_lines(d.path + "/missing", 5).empty());
}
