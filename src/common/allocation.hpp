// What a worker may use of its node: CPU ids (its cpuset) and memory, read from its allocation.
// Inside a Slurm job: Slurm's variables (SLURM_CPUS_ON_NODE, SLURM_JOB_CPUS_PER_NODE,
// SLURM_MEM_PER_NODE / SLURM_MEM_PER_CPU) and the job's cgroup (v2: cpuset.cpus.effective,
// memory.max of the process's own cgroup from /proc/self/cgroup and its ancestors; v1: the
// cpuset and memory controllers' cpuset.effective_cpus / memory.limit_in_bytes); always the
// process's affinity mask (sched_getaffinity). Outside a job: the machine.
//
// The parsers are pure (unit-tested); discover_allocation() does the reading.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace herd::allocation {

/// "0-3,8,10-11" -> {0,1,2,3,8,10,11}; nullopt when it is not such a list.
std::optional<std::vector<int>> parse_cpu_list(const std::string& text);
/// The inverse, compacted: {0,1,2,3,8} -> "0-3,8".
std::string format_cpu_list(const std::vector<int>& cpus);
/// SLURM_JOB_CPUS_PER_NODE ("4", "4(x2),2", ...): the figure for the node at index `node`
/// (0 = the first); nullopt when unreadable.
std::optional<std::uint32_t> parse_slurm_cpus_per_node(const std::string& text, std::size_t node = 0);
/// A cgroup memory limit as the file says it ("max", or bytes): nullopt for none.
std::optional<std::uint64_t> parse_memory_max(const std::string& text);
/// From /proc/self/cgroup's text: the cgroup v2 path ("0::/path"), or v1's for `controller`.
std::optional<std::string> cgroup_path(const std::string& proc_self_cgroup, const std::string& controller = "");

/// What a worker offers, and where each figure came from (for its log and `herd status`).
struct Allocation {
  std::vector<int> cpuset;       // CPU ids it may run on, ascending (its share on a shared node)
  std::uint32_t cpus = 0;        // cores it offers (cpuset.size() unless a count said fewer)
  std::uint64_t memory = 0;      // bytes it offers (0 = unknown)
  std::string cpus_from;         // e.g. "cgroup cpuset 0-7", "SLURM_CPUS_ON_NODE"
  std::string memory_from;       // e.g. "cgroup memory.max", "SLURM_MEM_PER_NODE", "the machine"
};

/// Reads this process's allocation. `share` workers of one job share the node (its processes
/// per node): each gets slice `index` of the cpuset and 1/share of the memory.
Allocation discover_allocation(std::uint32_t share = 1, std::uint32_t index = 0);

/// Memory as the resource "memory" counts it: MiB, rounded up.
inline double memory_resource(std::uint64_t bytes) {
  return static_cast<double>((bytes + (1ull << 20) - 1) >> 20);
}
/// The resource's name for cores, and for memory (in MiB).
inline constexpr const char* kCpus = "cpus";
inline constexpr const char* kMemory = "memory";

}  // namespace herd::allocation
