// MPI programs as herd tasks across nodes (TaskOptions::nodes) on the multi-node test bed
// (label multinode; scripts/local-slurm.sh start --nodes 3), with Debian's OpenMPI. The
// scheduler runs on the login host in this test's own SlurmCluster; its pool's jobs span the
// three compute hosts (nodes = 3), one worker on each. The MPI program is
// tests/multinode/mpi_allreduce.cpp: rank 0 prints "rank R of N on HOST sum S check C" for
// every rank.
//
//   TwoAndThreeNodes  one shell task of 2 nodes and one of 3, submitted together: each ran
//                     once, with one rank on each of the hosts it held (HERD_NODES, the node
//                     file), and MPI_Allreduce's values are right; they never ran at the same
//                     time (a node is held for one task alone); then a 2-node job of
//                     `herd submit --nodes 2 --wait` to the same scheduler, its values right.
//   NodeKilled        two 2-node runs share a host; it is killed (local-slurm.sh crash) while
//                     their ranks wait: the task without retries fails with an error naming
//                     that host, the one with retries(1) runs again on two healthy hosts and
//                     its values are right.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>
#include <sstream>
#include <thread>

#include <herd/herd.hpp>

#include "common/util.hpp"
#include "support/multinode_util.hpp"
#include "support/process_util.hpp"

#ifndef HERD_MPI_ALLREDUCE
#error "HERD_MPI_ALLREDUCE (the path of the MPI test program) must be defined by the build"
#endif

using namespace std::chrono_literals;
using namespace herd::testing;
namespace fs = std::filesystem;

namespace {

/// One line of the MPI program's output.
struct RankLine {
  int rank = -1, size = 0;
  std::string host;
  long sum = 0;
  int check = 0;
};

std::vector<RankLine> rank_lines(const std::string& out) {
  std::vector<RankLine> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream w(line);
    std::string rank_word, of, on, sum_word, check_word;
    RankLine r;
    if (w >> rank_word >> r.rank >> of >> r.size >> on >> r.host >> sum_word >> r.sum >> check_word >> r.check &&
        rank_word == "rank" && sum_word == "sum") {
      lines.push_back(r);
    }
  }
  return lines;
}

/// The words after "nodes" on the line the task's command printed first: $HERD_NUM_NODES and
/// $HERD_NODES, then the node file's lines.
struct NodesLine {
  int count = 0;
  std::vector<std::string> hosts, file;
};

NodesLine nodes_line(const std::string& out) {
  NodesLine n;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("nodes ", 0) != 0) continue;
    std::istringstream w(line);
    std::string word;
    w >> word >> n.count;
    bool file = false;
    while (w >> word) {
      if (word == "file") file = true;
      else (file ? n.file : n.hosts).push_back(word);
    }
    break;
  }
  return n;
}

/// OpenMPI refuses to run as root without these (the bed runs everything as root).
std::map<std::string, std::string> mpi_env() {
  return {{"OMPI_ALLOW_RUN_AS_ROOT", "1"}, {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}, {"PROG", HERD_MPI_ALLREDUCE}};
}

/// The command of every MPI task here: what it holds, then the program over its nodes, one
/// rank per host; `extra` goes to the program.
std::string mpi_command(const std::string& extra = "") {
  return "echo \"nodes $HERD_NUM_NODES $HERD_NODES file $(tr '\\n' ' ' < \"$HERD_NODE_FILE\")\"; "
         "echo \"start $(date +%s%N)\"; "
         "mpirun --hostfile \"$HERD_NODE_FILE\" -np \"$HERD_NUM_NODES\" \"$PROG\" --len 4096 " + extra + "; rc=$?; "
         "echo \"end $(date +%s%N)\"; exit $rc";
}

/// A C++ task around the MPI run: appends what it holds to `log` (one line a run), fails
/// (throws, with the command's output) when mpirun does, returns the output otherwise.
std::string mpi_run(std::string log, std::string extra) {
  herd::ShellCommand c{"echo \"$HERD_NODES\" >> " + herd::util::shell_quote(log, herd::util::Quote::always) + "; " +
                       mpi_command(extra)};
  c.env = mpi_env();
  const herd::ShellResult r = herd::shell(c);
  if (!r.ok()) {
    throw std::runtime_error("mpirun failed (exit " + std::to_string(r.exit_code) + "): " + r.stderr_tail + r.stdout_tail);
  }
  return r.stdout_tail;
}
HERD_TASK(mpi_run);

std::vector<std::string> file_lines(const std::string& path) {
  std::vector<std::string> out;
  std::istringstream in(read_file(path));
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

/// Files every host sees (/tmp is shared on the bed, as a cluster's home is).
struct Scratch {
  std::string dir;
  explicit Scratch(const std::string& name) : dir("/tmp/" + name) {
    fs::remove_all(dir);
    fs::create_directories(dir + "/logs");
  }
  ~Scratch() {
    if (std::getenv("HERD_KEEP_SCRATCH") != nullptr) return;
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

/// A pool whose jobs span three nodes, one worker (one core) on each.
herd::SlurmCluster three_node_pool(const std::string& name, const Scratch& s) {
  herd::SlurmCluster cluster{herd::SlurmOptions{}
                                 .job_name(name)
                                 .partition("cpu")
                                 .cores(1)
                                 .processes(1)
                                 .nodes(3)
                                 .memory("400M")
                                 .walltime("00:15:00")
                                 .log_directory(s.dir + "/logs")};
  cluster.scheduler_env("HERD_TIMEOUT_MS", "10000");
  return cluster;
}

std::int64_t stamp(const std::string& out, const std::string& word) {
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(word + " ", 0) == 0) return std::stoll(line.substr(word.size() + 1));
  }
  return -1;
}

}  // namespace

TEST_CASE("MultinodeMpi.TwoAndThreeNodesOneRankPerHostAllreduceRight" * doctest::timeout(240)) {
  bed::require_whole_bed(3);
  const auto bed_nodes = bed::nodes();
  const std::string name = unique("mpi-nodes");
  Scratch s(name);
  herd::Client client{three_node_pool(name, s)};
  client.scale(herd::ScaleTo{}.jobs(1));
  client.wait_for_workers(3, 120s);

  herd::ShellCommand cmd{mpi_command()};
  cmd.env = mpi_env();
  auto two = client.submit(herd::TaskOptions{}.nodes(2).key("mpi-two"), herd::shell, cmd);
  auto three = client.submit(herd::TaskOptions{}.nodes(3).key("mpi-three"), herd::shell, cmd);
  const herd::ShellResult r2 = two.result(120s);
  const herd::ShellResult r3 = three.result(120s);
  INFO("2 nodes: " << r2.stdout_tail << r2.stderr_tail);
  INFO("3 nodes: " << r3.stdout_tail << r3.stderr_tail);
  REQUIRE(r2.ok());
  REQUIRE(r3.ok());

  for (const auto& [r, n] : {std::pair{&r2, 2}, std::pair{&r3, 3}}) {
    CAPTURE(n);
    const NodesLine held = nodes_line(r->stdout_tail);
    CHECK(held.count == n);
    CHECK(held.hosts.size() == static_cast<std::size_t>(n));
    CHECK(held.file == held.hosts);  // the node file lists the same hosts, in the same order
    const std::set<std::string> distinct(held.hosts.begin(), held.hosts.end());
    CHECK(distinct.size() == static_cast<std::size_t>(n));
    for (const auto& h : held.hosts) CHECK(std::count(bed_nodes.begin(), bed_nodes.end(), h) == 1);
    const auto lines = rank_lines(r->stdout_tail);
    REQUIRE(lines.size() == static_cast<std::size_t>(n));
    std::set<std::string> rank_hosts;
    for (int k = 0; k < n; ++k) {
      const RankLine& l = lines[static_cast<std::size_t>(k)];
      CHECK(l.rank == k);
      CHECK(l.size == n);
      CHECK(l.sum == n * (n + 1) / 2);  // MPI_Allreduce of rank + 1
      CHECK(l.check == 1);              // and of the 4096-element vector
      rank_hosts.insert(l.host);
    }
    CHECK(rank_hosts == distinct);               // one rank on each host it held
    CHECK(lines[0].host == held.hosts.front());  // rank 0 where the task ran: the first node
  }
  // A node is held for one task alone: the two runs did not overlap.
  const std::int64_t s2 = stamp(r2.stdout_tail, "start"), e2 = stamp(r2.stdout_tail, "end");
  const std::int64_t s3 = stamp(r3.stdout_tail, "start"), e3 = stamp(r3.stdout_tail, "end");
  REQUIRE(s2 > 0);
  REQUIRE(s3 > 0);
  CHECK((e2 <= s3 || e3 <= s2));

  // The same from the shell: `herd submit --nodes 2 --wait` to this scheduler, the output in a
  // file every host sees.
  const std::string herd_cli = herd_cli_path();
  std::string env_args;
  for (const auto& [k, v] : mpi_env()) env_args += " --env " + herd::util::shell_quote(k + "=" + v);
  int rc = -1;
  const std::string said = run_command(herd::util::shell_quote(herd_cli) + " submit --scheduler " +
                                           herd::util::shell_quote(client.scheduler_address()) + " --nodes 2 --wait" +
                                           env_args + " --stdout " + s.dir + "/cli.out --stderr " + s.dir +
                                           "/cli.err -- " + herd::util::shell_quote(mpi_command()) + " 2>&1",
                                       &rc);
  INFO("herd submit: " << said << "\nstdout: " << read_file(s.dir + "/cli.out") << "\nstderr: " << read_file(s.dir + "/cli.err"));
  REQUIRE(rc == 0);
  const std::string cli_out = read_file(s.dir + "/cli.out");
  const NodesLine cli_held = nodes_line(cli_out);
  CHECK(cli_held.count == 2);
  CHECK(std::set<std::string>(cli_held.hosts.begin(), cli_held.hosts.end()).size() == 2);
  const auto cli_lines = rank_lines(cli_out);
  REQUIRE(cli_lines.size() == 2);
  for (const auto& l : cli_lines) CHECK(l.sum == 3);
}

TEST_CASE("MultinodeMpi.NodeKilledMidRunFailsNamingItRetryRunsOnHealthyNodes" * doctest::timeout(280)) {
  bed::require_whole_bed(3);
  const std::string name = unique("mpi-crash");
  Scratch s(name);
  herd::Client client{three_node_pool(name, s)};
  // Two 3-node jobs: two allocations, one worker of each on every host.
  client.scale(herd::ScaleTo{}.jobs(2));
  client.wait_for_workers(6, 150s);

  // Two 2-node runs (two of three hosts each, so they share one at least); their ranks wait
  // 60 s before the reduction the first time (a marker file says they started), not on a retry.
  auto args = [&](const std::string& tag) { return "--sleep-ms 60000 --sleep-file " + s.dir + "/slept-" + tag; };
  auto no_retry = client.submit(herd::TaskOptions{}.nodes(2).key("mpi-a"), mpi_run, s.dir + "/held-a", args("a"));
  auto retried = client.submit(herd::TaskOptions{}.nodes(2).retries(1).key("mpi-b"), mpi_run, s.dir + "/held-b", args("b"));
  const auto deadline = std::chrono::steady_clock::now() + 90s;
  while (!(fs::exists(s.dir + "/slept-a") && fs::exists(s.dir + "/slept-b")) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(200ms);
  }
  REQUIRE_MESSAGE(fs::exists(s.dir + "/slept-a"), "the first run of mpi-a never started its ranks");
  REQUIRE_MESSAGE(fs::exists(s.dir + "/slept-b"), "the first run of mpi-b never started its ranks");
  std::istringstream held_a(file_lines(s.dir + "/held-a").at(0)), held_b(file_lines(s.dir + "/held-b").at(0));
  std::vector<std::string> a_hosts, b_hosts;
  for (std::string h; held_a >> h;) a_hosts.push_back(h);
  for (std::string h; held_b >> h;) b_hosts.push_back(h);
  REQUIRE(a_hosts.size() == 2);
  REQUIRE(b_hosts.size() == 2);
  // The host to kill: one both hold, the second of one's list if that can be.
  std::string victim;
  for (const auto& h : a_hosts) {
    if (std::count(b_hosts.begin(), b_hosts.end(), h) == 1 && (victim.empty() || h != a_hosts.front())) victim = h;
  }
  REQUIRE_MESSAGE(!victim.empty(), "two 2-node runs on 3 hosts share none?");
  MESSAGE("runs on " << a_hosts[0] << "," << a_hosts[1] << " and " << b_hosts[0] << "," << b_hosts[1] << "; killing "
                     << victim);
  auto crashed = bed::crash(victim);

  // No retries: it fails, and the error names the host.
  try {
    (void)no_retry.result(90s);
    FAIL("mpi-a succeeded although " << victim << " was killed under it");
  } catch (const herd::TaskError& e) {
    MESSAGE("mpi-a: " << e.what());
    CHECK(std::string(e.what()).find(victim) != std::string::npos);
  }
  // retries(1): it ran again, on two hosts that are alive, and its values are right.
  const std::string out = retried.result(90s);
  INFO(out);
  const auto runs = file_lines(s.dir + "/held-b");
  REQUIRE(runs.size() == 2);
  std::istringstream second(runs[1]);
  std::set<std::string> again;
  for (std::string h; second >> h;) again.insert(h);
  CHECK(again.size() == 2);
  CHECK(again.count(victim) == 0);
  const auto lines = rank_lines(out);
  REQUIRE(lines.size() == 2);
  std::set<std::string> rank_hosts;
  for (const auto& l : lines) {
    CHECK(l.sum == 3);
    CHECK(l.check == 1);
    rank_hosts.insert(l.host);
  }
  CHECK(rank_hosts == again);
  crashed.undo();
}
