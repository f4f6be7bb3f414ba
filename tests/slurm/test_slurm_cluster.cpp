// SlurmCluster against a real Slurm: the project's one-machine cluster (scripts/local-slurm.sh),
// which scripts/test.sh starts before the suite and stops after it. Every test names its jobs
// uniquely and checks the queue itself with squeue.
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <thread>

#include <herd/herd.hpp>

#include "support/slurm_util.hpp"

using namespace std::chrono_literals;
using namespace herd::testing;

namespace {

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

std::string job_of(int) { return env_or("HERD_JOB_ID", "none") + "|" + env_or("HERD_POOL", "none"); }
HERD_TASK(job_of);

int nap(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}
HERD_TASK(nap);

std::string pool_of(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return env_or("HERD_POOL", "none") + "|" + env_or("SLURM_JOB_PARTITION", "none");
}
HERD_TASK(pool_of);

/// "<CUDA ordinals the task holds>|<CUDA_VISIBLE_DEVICES>".
std::string gpus_held() {
  std::string ids;
  for (int g : herd::this_task().gpus) ids += (ids.empty() ? "" : ",") + std::to_string(g);
  return ids + "|" + env_or("CUDA_VISIBLE_DEVICES", "unset");
}
HERD_TASK(gpus_held);

std::string gpus_held_after(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return gpus_held();
}
HERD_TASK(gpus_held_after);

}  // namespace

TEST_CASE("Slurm.JobScript.AcceptedBySbatchTestOnly" * doctest::timeout(60)) {
  if (!slurm_up()) return;
  const std::string name = unique("testonly");
  herd::SlurmCluster cluster{options(name).job_script_prologue({"echo prologue"}).job_extra_directives({"--comment=herd"})};
  cluster.start();
  const std::string script = cluster.job_script();
  CHECK(script.find("#SBATCH --job-name=" + name + "\n") != std::string::npos);
  CHECK(script.find("--scheduler " + cluster.start()) != std::string::npos);
  const std::string path = "/tmp/" + name + ".sbatch";
  std::ofstream(path) << script;
  auto r = run({"sbatch", "--test-only", path});
  INFO(r.stderr_tail);
  CHECK(r.exit_code == 0);
  CHECK(r.stderr_tail.find("to start at") != std::string::npos);
  std::filesystem::remove(path);
  cluster.close();
  CHECK(queued(name).empty());
}

TEST_CASE("Slurm.Scale.UpRunDownClose" * doctest::timeout(180)) {
  if (!slurm_up()) return;
  const std::string name = unique("scale");
  const std::string logs = "/tmp/" + name + "-logs/nested";  // does not exist yet
  std::filesystem::remove_all("/tmp/" + name + "-logs");
  {
    herd::Client client{herd::SlurmCluster{options(name).log_directory(logs)}};
    const auto t0 = std::chrono::steady_clock::now();
    client.scale(4);
    CHECK(std::filesystem::is_directory(logs));  // created before sbatch ran
    client.wait_for_workers(4, 120s);
    MESSAGE("scale(4) to 4 connected workers: "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s");
    CHECK(count_state(queued(name), "RUNNING") == 4);
    // One job array, not four sbatch calls: all four ids share the array id.
    std::set<std::string> arrays;
    for (const auto& [id, state] : queued(name)) arrays.insert(id.substr(0, id.find('_')));
    CHECK(arrays.size() == 1);

    std::vector<int> xs(40);
    std::iota(xs.begin(), xs.end(), 0);
    std::set<std::string> jobs;
    for (const auto& j : client.gather(client.map(job_of, xs))) {
      CHECK(j.find("|default") != std::string::npos);
      jobs.insert(j);
    }
    CHECK(jobs.size() >= 2);  // the work spread over the jobs

    client.scale(1);
    CHECK(eventually([&] { return queued(name).size() == 1; }, 60s));
    CHECK(eventually([&] { return client.n_workers() == 1; }, 30s));
    CHECK(client.submit(job_of, 1).result().find("|default") != std::string::npos);
    const auto t1 = std::chrono::steady_clock::now();
    client.close();
    MESSAGE("close() to an empty queue: "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count() << " s");
  }
  CHECK(queued(name).empty());
  // Output files carry the job id.
  bool named = false;
  for (const auto& f : std::filesystem::directory_iterator(logs)) {
    named = named || f.path().filename().string().rfind(name + "-", 0) == 0;
  }
  CHECK(named);
  std::filesystem::remove_all("/tmp/" + name + "-logs");
}

TEST_CASE("Slurm.Errors.InvalidPartitionAndAccount" * doctest::timeout(60)) {
  if (!slurm_up()) return;
  const std::string name = unique("bad");
  {
    herd::Client client{herd::SlurmCluster{options(name).partition("nope")}};
    const auto t0 = std::chrono::steady_clock::now();
    try {
      client.scale(2);
      FAIL("expected JobQueueError");
    } catch (const herd::JobQueueError& e) {
      CHECK(std::string(e.what()).find("nope") != std::string::npos);
      CHECK(std::string(e.what()).find("invalid partition") != std::string::npos);
    }
    CHECK(std::chrono::steady_clock::now() - t0 < 10s);
    // Waiting for workers that cannot come fails fast with the same reason.
    CHECK_THROWS_WITH_AS(client.wait_for_workers(1, 30s), doctest::Contains("nope"), herd::JobQueueError);
    auto pools = client.pools();
    REQUIRE(pools.size() == 1);
    CHECK(pools[0].last_error.find("nope") != std::string::npos);
  }
  {
    herd::Client client{herd::SlurmCluster{options(name).account("no_such_account")}};
    CHECK_THROWS_WITH_AS(client.scale(1), doctest::Contains("Invalid account"), herd::JobQueueError);
  }
  CHECK(queued(name).empty());
}

TEST_CASE("Slurm.Adapt.GrowsToMaximumShrinksToMinimum" * doctest::timeout(180)) {
  if (!slurm_up()) return;
  const std::string name = unique("adapt");
  herd::Client client{herd::SlurmCluster{options(name)}};
  client.adapt(0, 3, "", 3s);
  CHECK(queued(name).empty());  // no backlog, minimum 0: nothing submitted
  std::vector<int> ms(24, 1000);
  auto fs = client.map(nap, ms);
  int most = 0;
  CHECK(eventually([&] {
    most = std::max(most, client.n_workers());
    return most == 3;
  }, 90s));
  client.wait(fs);
  for (int v : client.gather(fs)) CHECK(v == 1000);
  CHECK(queued(name).size() <= 3);  // never more jobs than the maximum
  // Idle for longer than the idle timeout: back to the minimum, jobs gone.
  CHECK(eventually([&] { return client.n_workers() == 0 && queued(name).empty(); }, 60s));
}

TEST_CASE("Slurm.Adapt.TargetDurationAndWaitCount" * doctest::timeout(180)) {
  // Dask's Adaptive knobs: with tasks of 500 ms known, 12 of them to clear in about 4 s of work
  // per slot make 2 workers, not the maximum of 6; after the work, the pool shrinks back to its
  // minimum once 2 decisions in a row asked for it.
  if (!slurm_up()) return;
  const std::string name = unique("adaptpace");
  herd::Client client{herd::SlurmCluster{options(name)}};
  client.adapt(herd::AdaptOptions{}.minimum(1).maximum(6).idle_timeout(2s).interval(500ms).target_duration(4s).wait_count(2));
  client.wait_for_workers(1, 120s);
  for (int v : client.gather(client.map(nap, std::vector<int>(2, 500)))) CHECK(v == 500);  // the task time is known
  auto fs = client.map(nap, std::vector<int>(12, 500));  // 6 s of work: 1.5 slots of 4 s
  int most = 0;
  CHECK(eventually([&] {
    most = std::max(most, client.n_workers());
    return most >= 2 || client.wait(fs, 0ms);
  }, 90s));
  for (int v : client.gather(fs)) CHECK(v == 500);
  most = std::max(most, client.n_workers());
  CHECK(most == 2);
  CHECK(queued(name).size() <= 2);
  CHECK(eventually([&] { return client.n_workers() == 1 && queued(name).size() == 1; }, 60s));
  CHECK_THROWS_AS(client.adapt(herd::AdaptOptions{}.minimum(3).maximum(1)), std::invalid_argument);
  CHECK_THROWS_AS(client.adapt(herd::AdaptOptions{}.maximum(2).wait_count(-1)), std::invalid_argument);
}

TEST_CASE("Slurm.Scancel.WorkerReplacedTasksRerun" * doctest::timeout(180)) {
  if (!slurm_up()) return;
  const std::string name = unique("scancel");
  herd::Client client{herd::SlurmCluster{options(name)}};
  client.scale(2);
  client.wait_for_workers(2, 120s);
  const auto before = queued(name);
  REQUIRE(before.size() == 2);
  std::vector<int> ms(30, 200);
  auto fs = client.map(nap, ms);
  // Kill one worker's job from outside, as an administrator or preemption would.
  REQUIRE(run({"scancel", before.begin()->first}).exit_code == 0);
  for (int v : client.gather(fs)) CHECK(v == 200);
  // The pool notices the job is gone and submits a replacement.
  CHECK(eventually([&] {
    const auto now = queued(name);
    return now.size() == 2 && !now.count(before.begin()->first) && count_state(now, "RUNNING") == 2;
  }, 90s));
  CHECK(eventually([&] { return client.n_workers() == 2; }, 60s));
}

TEST_CASE("Slurm.Walltime.RetireAndReplaceBeforeTheLimit" * doctest::timeout(300)) {
  if (!slurm_up()) return;
  const std::string name = unique("walltime");
  // 1-minute jobs; workers retire 25 s before the end; the run lasts longer than a walltime.
  herd::Client client{herd::SlurmCluster{options(name).walltime("1").retire_before(25).warning_seconds(10)}};
  client.scale(2);
  client.wait_for_workers(2, 120s);
  const auto first = queued(name);
  // 240 s of work: on 2 workers, with up to 2 more while replacements overlap, it spans more
  // than one walltime whatever the timing.
  std::vector<int> ms(240, 1000);
  const auto t0 = std::chrono::steady_clock::now();
  auto fs = client.map(herd::TaskOptions{}.duration(2), nap, ms);
  const auto results = client.gather(fs);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("240 one-second tasks over 1-minute jobs took " << took << " s");
  CHECK(took > 60);
  for (int v : results) CHECK(v == 1000);
  // The first generation of jobs is gone, and ended on its own terms: not by the time limit.
  for (const auto& [id, state] : first) {
    CHECK_FALSE(queued(name).count(id));
    auto r = run({"sacct", "--noheader", "--parsable2", "--allocations", "--format=State", "--jobs=" + id});
    INFO(id << " " << r.stdout_tail);
    CHECK(r.stdout_tail.find("TIMEOUT") == std::string::npos);
  }
  CHECK(eventually([&] { return client.n_workers() == 2; }, 90s));  // the pool kept its size
}

TEST_CASE("Slurm.TwoPools.GpuTasksOnlyOnGpuWorkers" * doctest::timeout(180)) {
  if (!slurm_up()) return;
  const std::string name = unique("pools");
  herd::Client client{herd::SlurmCluster{options(name + "-cpu").pool("cpu")}.add_pool(
      options(name + "-gpu").pool("gpu").partition("gpu").gpus(1))};
  client.scale(1, "cpu");
  client.scale(1, "gpu");
  client.wait_for_workers(2, 120s);
  std::vector<herd::Future<std::string>> gpu, any;
  for (int i = 0; i < 20; ++i) {
    gpu.push_back(client.submit(herd::TaskOptions{}.resource("gpu", 1), pool_of, 50));
    any.push_back(client.submit(pool_of, 50));
  }
  for (const auto& where : client.gather(gpu)) CHECK(where == "gpu|gpu");
  // The gpu pool's worker found its GPU where Slurm put it (CUDA_VISIBLE_DEVICES of the job),
  // and a gpus(1) task is told which device it holds.
  bool found = false;
  for (const auto& w : client.status().workers) {
    if (w.pool != "gpu") continue;
    found = true;
    REQUIRE(w.gpus.size() == 1);
    CHECK(w.gpus[0].id == "0");
    CHECK(w.resources.at("gpu") == 1);
  }
  CHECK(found);
  CHECK(client.submit(herd::TaskOptions{}.gpus(1), gpus_held).result() == "0|0");
  std::set<std::string> seen;
  for (const auto& where : client.gather(any)) seen.insert(where);
  CHECK(seen.count("cpu|cpu") == 1);  // untagged tasks also use the cpu pool
  CHECK_THROWS_WITH_AS(client.scale(1, "tpu"), doctest::Contains("no pool named 'tpu'"), herd::JobQueueError);
  client.close();
  CHECK(queued(name + "-cpu").empty());
  CHECK(queued(name + "-gpu").empty());
}

TEST_CASE("Slurm.JobScript.ProcessesNodesAndExtrasAcceptedBySbatchTestOnly" * doctest::timeout(60)) {
  if (!slurm_up()) return;
  const std::string name = unique("testonly-shape");
  for (const auto& o : {options(name).cores(2).processes(2).job_script_epilogue({"echo bye"}),
                        options(name).cores(2).nodes(1).processes(2).shebang("#!/bin/bash -l"),
                        options(name).partition("gpu").cores(2).gpus(4).processes(2),
                        options(name).job_directives_skip({"--mem"}).job_extra_directives({"--mem=200M"})}) {
    const std::string script = herd::job_script(o, "tcp://127.0.0.1:1");
    const std::string path = "/tmp/" + name + ".sbatch";
    std::ofstream(path) << script;
    auto r = run({"sbatch", "--test-only", "--comment=herd-extra", path});
    INFO(script);
    INFO(r.stderr_tail);
    CHECK(r.exit_code == 0);
    CHECK(r.stderr_tail.find("to start at") != std::string::npos);
    std::filesystem::remove(path);
  }
}

TEST_CASE("Slurm.Processes.TwoWorkersPerJobAndScaleByCores" * doctest::timeout(240)) {
  if (!slurm_up()) return;
  const std::string name = unique("procs");
  herd::Client client{herd::SlurmCluster{
      options(name).cores(2).memory("600M").processes(2).submit_command_extra({"--comment=herd-extra-" + name})}};
  client.scale(2);  // two workers: one job of two processes
  client.wait_for_workers(2, 120s);
  auto jobs = queued(name);
  CHECK(jobs.size() == 1);
  // sbatch got the extra argument.
  auto comment = run({"squeue", "--noheader", "--name=" + name, "--format=%k"});
  CHECK(std::string(comment.stdout_tail).find("herd-extra-" + name) != std::string::npos);
  auto status = client.status();
  REQUIRE(status.workers.size() == 2);
  std::set<std::string> names;
  for (const auto& w : status.workers) {
    names.insert(w.name);
    CHECK(w.job_id == status.workers[0].job_id);  // both registered with the job's id
    CHECK(w.nthreads == 1);                        // the job's 2 cores split
  }
  CHECK(names.size() == 2);
  REQUIRE(status.pools.size() == 1);
  CHECK(status.pools[0].workers_per_job == 2);
  CHECK(status.pools[0].target == 2);
  // Tasks run on both.
  std::vector<herd::Future<int>> naps;
  for (int i = 0; i < 8; ++i) naps.push_back(client.submit(nap, 300));
  for (auto& f : naps) CHECK(f.result() == 300);
  // scale(cores=4): two jobs of 2 cores, four workers.
  client.scale(herd::ScaleTo{}.cores(4));
  client.wait_for_workers(4, 120s);
  CHECK(queued(name).size() == 2);
  client.scale(0);
  CHECK(eventually([&] { return queued(name).empty(); }, 60s));
  client.close();
  CHECK(queued(name).empty());
}

TEST_CASE("Slurm.Explain.PendingJobsGiveSlurmsReason" * doctest::timeout(120)) {
  if (!slurm_up()) return;
  const std::string name = unique("explain");
  // A job that may not start for an hour: it pends with Slurm's reason BeginTime.
  herd::Client client{herd::SlurmCluster{options(name).job_extra_directives({"--begin=now+3600"})}};
  client.scale(1);
  auto f = client.submit(herd::TaskOptions{}.key("waits-for-a-job"), nap, 10);
  herd::TaskExplanation e;
  const bool explained = eventually(
      [&] {
        e = client.explain(f);
        return !e.pools.empty() && e.pools[0].find("BeginTime") != std::string::npos;
      },
      60s);
  INFO(e.to_text());
  REQUIRE(explained);
  CHECK(e.state == "ready");
  CHECK_FALSE(e.never);
  CHECK(e.summary.find("no worker is connected") == 0);
  CHECK(e.pools[0].find("pool default: its workers can run it; 0 connected, 1 wanted, 1 job(s) pending "
                        "(Slurm's reasons: BeginTime: 1)") == 0);
  CHECK(e.summary.find("BeginTime") != std::string::npos);
  f.cancel();
  client.close();
  CHECK(queued(name).empty());
}

TEST_CASE("Slurm.Processes.GpusSharedOutOneSliceEachWorker" * doctest::timeout(180)) {
  if (!slurm_up()) return;
  const std::string name = unique("gpu-procs");
  // What Slurm gave the job, seen by the batch script before any worker starts.
  const std::string job_gpus = "/tmp/" + name + ".job-gpus";
  std::filesystem::remove(job_gpus);
  herd::Client client{herd::SlurmCluster{options(name).partition("gpu").cores(2).memory("600M").gpus(2).processes(2)
      .job_script_prologue({"echo \"${CUDA_VISIBLE_DEVICES-unset}\" > " + job_gpus})}};
  client.scale(2);  // two workers: one job of two processes sharing its 2 GPUs
  client.wait_for_workers(2, 120s);
  const auto jobs = queued(name);
  REQUIRE(jobs.size() == 1);
  const std::string job = jobs.begin()->first;
  std::string visible = read_file(job_gpus);
  if (!visible.empty() && visible.back() == '\n') visible.pop_back();
  std::vector<std::string> given;  // the job's CUDA_VISIBLE_DEVICES, e.g. 0,1
  {
    std::istringstream in(visible);
    for (std::string id; std::getline(in, id, ',');) given.push_back(id);
  }
  INFO("the job's CUDA_VISIBLE_DEVICES: " << visible);
  REQUIRE(given.size() == 2);

  auto status = client.status();
  REQUIRE(status.workers.size() == 2);
  REQUIRE(status.pools.size() == 1);
  CHECK(status.pools[0].workers_per_job == 2);
  std::set<std::string> slices;
  for (const auto& w : status.workers) {
    CAPTURE(w.name);
    CHECK(w.job_id == job);
    // "<job>.<index on the node>": worker i holds GPU i of the job, one each, and offers gpu=1.
    REQUIRE(w.name.size() == job.size() + 2);
    const int index = w.name.back() - '0';
    REQUIRE((index == 0 || index == 1));
    CHECK(w.resources.at("gpu") == 1);
    REQUIRE(w.gpus.size() == 1);
    CHECK(w.gpus[0].id == given[static_cast<std::size_t>(index)]);
    // A task that holds the worker's GPU sees ordinal 0 and CUDA_VISIBLE_DEVICES = that one GPU.
    const std::string held = client.submit(herd::TaskOptions{}.workers({w.name}).gpus(1), gpus_held).result();
    CHECK(held == "0|" + given[static_cast<std::size_t>(index)]);
    slices.insert(held);
  }
  CHECK(slices.size() == 2);  // two workers, two different GPUs
  // One GPU each: two gpus(1) tasks at once take one worker each, i.e. both GPUs.
  std::vector<herd::Future<std::string>> both;
  for (int i = 0; i < 2; ++i) both.push_back(client.submit(herd::TaskOptions{}.gpus(1), gpus_held_after, 1500));
  std::set<std::string> held_at_once;
  for (const auto& held : client.gather(both)) held_at_once.insert(held);
  CHECK(held_at_once == slices);
  // No worker of the pool has 2 GPUs: a gpus(2) task waits, and explain says what they offer.
  auto too_big = client.submit(herd::TaskOptions{}.gpus(2), gpus_held);
  std::vector<std::string> why;
  INFO("explain: " << (why.empty() ? std::string("nothing") : why[0]));
  CHECK(eventually([&] {
    why = client.explain(too_big).pools;
    return why.size() == 1 && why[0] == "pool default: cannot run it: the task needs gpu 2 (its workers offer 1)";
  }, 20s));
  too_big.cancel();
  client.close();
  CHECK(queued(name).empty());
  std::filesystem::remove(job_gpus);
}

TEST_CASE("Slurm.Processes.GpuSliceMissingIsNamedInTheJobsErrorFile" * doctest::timeout(120)) {
  if (!slurm_up()) return;
  const std::string name = unique("gpu-short");
  const std::string logs = "/tmp/" + name + "-logs";
  std::filesystem::remove_all(logs);
  // The job is given 2 GPUs but its environment names only one: worker 0 takes it, worker 1
  // has none left and says so in the job's error file instead of sharing worker 0's.
  herd::Client client{herd::SlurmCluster{options(name).partition("gpu").cores(2).memory("600M").gpus(2).processes(2)
      .log_directory(logs).env({{"CUDA_VISIBLE_DEVICES", "0"}})}};
  client.scale(2);
  client.wait_for_workers(1, 120s);
  const auto jobs = queued(name);
  REQUIRE(jobs.size() == 1);
  const std::string job = jobs.begin()->first;
  const std::string err = logs + "/" + name + "-" + job + ".err";
  const std::string want = "herd worker: GPUs: worker 1 of its node takes GPUs 1..1 (1 per worker, HERD_WORKER_INDEX=1) "
                           "of the node's list, but CUDA_VISIBLE_DEVICES names 1 (0)";
  CHECK_MESSAGE(eventually([&] { return read_file(err).find(want) != std::string::npos; }, 30s), read_file(err));
  const auto workers = client.status().workers;
  REQUIRE(workers.size() == 1);
  CHECK(workers[0].name == job + ".0");
  REQUIRE(workers[0].gpus.size() == 1);
  CHECK(workers[0].gpus[0].id == "0");
  client.close();
  CHECK(queued(name).empty());
  std::filesystem::remove_all(logs);
}
