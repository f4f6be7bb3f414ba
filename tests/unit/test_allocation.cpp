// Reading a worker's allocation: the parsers of CPU lists, Slurm's per-node counts and cgroup
// files, and the discovery on this machine.
#include <doctest/doctest.h>

#include <sched.h>

#include <algorithm>

#include "common/allocation.hpp"

using namespace herd::allocation;

TEST_CASE("Allocation.CpuLists") {
  CHECK(parse_cpu_list("0-3,8,10-11\n") == std::vector<int>{0, 1, 2, 3, 8, 10, 11});
  CHECK(parse_cpu_list("5") == std::vector<int>{5});
  CHECK(parse_cpu_list("") == std::vector<int>{});
  CHECK_FALSE(parse_cpu_list("3-1").has_value());
  CHECK_FALSE(parse_cpu_list("a").has_value());
  CHECK_FALSE(parse_cpu_list("1,,2").has_value());
  CHECK(format_cpu_list({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11");
  CHECK(format_cpu_list({}) == "");
}

TEST_CASE("Allocation.SlurmCpusPerNode") {
  CHECK(parse_slurm_cpus_per_node("4") == 4u);
  CHECK(parse_slurm_cpus_per_node("72(x2),36", 0) == 72u);
  CHECK(parse_slurm_cpus_per_node("72(x2),36", 1) == 72u);
  CHECK(parse_slurm_cpus_per_node("72(x2),36", 2) == 36u);
  CHECK_FALSE(parse_slurm_cpus_per_node("72(x2),36", 3).has_value());
  CHECK_FALSE(parse_slurm_cpus_per_node("x").has_value());
}

TEST_CASE("Allocation.CgroupFiles") {
  CHECK_FALSE(parse_memory_max("max\n").has_value());
  CHECK(parse_memory_max("1073741824\n") == 1073741824ull);
  CHECK_FALSE(parse_memory_max("9223372036854771712").has_value());  // v1's "no limit"
  const std::string v2 = "0::/system.slice/slurmstepd.scope/job_42/step_batch/user/task_0\n";
  CHECK(cgroup_path(v2) == "/system.slice/slurmstepd.scope/job_42/step_batch/user/task_0");
  const std::string v1 = "12:memory:/slurm/uid_0/job_7\n4:cpuset,cpu:/slurm/uid_0/job_7/step_0\n0::/\n";
  CHECK(cgroup_path(v1, "memory") == "/slurm/uid_0/job_7");
  CHECK(cgroup_path(v1, "cpuset") == "/slurm/uid_0/job_7/step_0");
  CHECK_FALSE(cgroup_path(v1, "pids").has_value());
  CHECK(memory_resource(1) == 1);
  CHECK(memory_resource(4ull << 30) == 4096);
}

TEST_CASE("Allocation.ThisProcessOffersItsMask") {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  REQUIRE(::sched_getaffinity(0, sizeof mask, &mask) == 0);
  const Allocation a = discover_allocation();
  CHECK(a.cpus >= 1);
  CHECK(a.cpus == a.cpuset.size());
  CHECK(a.cpus <= static_cast<std::uint32_t>(CPU_COUNT(&mask)));
  for (int c : a.cpuset) CHECK(CPU_ISSET(c, &mask));
  CHECK(a.memory > 0);
  CHECK_FALSE(a.memory_from.empty());
  // Two workers of one job on this node share it: disjoint halves (or one core each).
  const Allocation first = discover_allocation(2, 0), second = discover_allocation(2, 1);
  if (a.cpus >= 2) {
    for (int c : first.cpuset) CHECK(std::find(second.cpuset.begin(), second.cpuset.end(), c) == second.cpuset.end());
  }
  CHECK(first.memory == a.memory / 2);
}
