#include "common/allocation.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include "common/env.hpp"
#include "common/util.hpp"

namespace herd::allocation {

std::optional<std::vector<int>> parse_cpu_list(const std::string& text) {
  std::set<int> out;
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  if (t.empty()) return std::vector<int>{};
  std::stringstream in(t);
  for (std::string part; std::getline(in, part, ',');) {
    if (part.empty()) return std::nullopt;
    const auto dash = part.find('-');
    char* end = nullptr;
    const long a = std::strtol(part.c_str(), &end, 10);
    if (end == part.c_str() || a < 0) return std::nullopt;
    long b = a;
    if (dash != std::string::npos) {
      const char* rest = part.c_str() + dash + 1;
      b = std::strtol(rest, &end, 10);
      if (end == rest || b < a) return std::nullopt;
    }
    if (*end != '\0' || b - a > 65536) return std::nullopt;
    for (long c = a; c <= b; ++c) out.insert(static_cast<int>(c));
  }
  return std::vector<int>(out.begin(), out.end());
}

std::string format_cpu_list(const std::vector<int>& cpus) {
  std::vector<int> v = cpus;
  std::sort(v.begin(), v.end());
  std::string out;
  for (std::size_t i = 0; i < v.size();) {
    std::size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(v[i]);
    if (j > i) out += "-" + std::to_string(v[j]);
    i = j + 1;
  }
  return out;
}

std::optional<std::uint32_t> parse_slurm_cpus_per_node(const std::string& text, std::size_t node) {
  // "72(x2),36": two nodes with 72, then one with 36.
  std::stringstream in(text);
  std::size_t seen = 0;
  for (std::string part; std::getline(in, part, ',');) {
    char* end = nullptr;
    const long n = std::strtol(part.c_str(), &end, 10);
    if (end == part.c_str() || n <= 0) return std::nullopt;
    long times = 1;
    if (*end == '(') {
      if (end[1] != 'x') return std::nullopt;
      char* end2 = nullptr;
      times = std::strtol(end + 2, &end2, 10);
      if (end2 == end + 2 || *end2 != ')' || times <= 0) return std::nullopt;
    } else if (*end != '\0') {
      return std::nullopt;
    }
    if (node < seen + static_cast<std::size_t>(times)) return static_cast<std::uint32_t>(n);
    seen += static_cast<std::size_t>(times);
  }
  return std::nullopt;
}

std::optional<std::uint64_t> parse_memory_max(const std::string& text) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  if (t.empty() || t == "max") return std::nullopt;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(t.c_str(), &end, 10);
  if (end == t.c_str() || *end != '\0' || v == 0) return std::nullopt;
  // cgroup v1 says "no limit" with a page-rounded LLONG_MAX.
  if (v >= (1ull << 62)) return std::nullopt;
  return static_cast<std::uint64_t>(v);
}

std::optional<std::string> cgroup_path(const std::string& proc_self_cgroup, const std::string& controller) {
  std::stringstream in(proc_self_cgroup);
  for (std::string line; std::getline(in, line);) {
    // hierarchy-ID:controller-list:path
    const auto a = line.find(':');
    const auto b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const std::string path = line.substr(b + 1);
    if (controller.empty()) {
      if (line.compare(0, a, "0") == 0 && controllers.empty()) return path;
      continue;
    }
    std::stringstream cs(controllers);
    for (std::string c; std::getline(cs, c, ',');) {
      if (c == controller) return path;
    }
  }
  return std::nullopt;
}

namespace {

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// The file `name` in the cgroup at `path` under `root`, or, when a container shows its own
/// cgroup as the root, under `root` itself.
std::optional<std::pair<std::string, std::string>> cgroup_file(const std::string& root, const std::string& path,
                                                              const std::string& name) {
  for (const std::string& dir : {root + path, root}) {
    if (auto t = read_text(dir + "/" + name)) return std::make_pair(dir + "/" + name, *t);
  }
  return std::nullopt;
}

/// The tightest memory.max of the cgroup and its ancestors (v2).
std::optional<std::uint64_t> v2_memory_max(const std::string& path) {
  std::optional<std::uint64_t> best;
  std::string p = path;
  while (true) {
    if (auto t = read_text("/sys/fs/cgroup" + p + "/memory.max")) {
      if (auto v = parse_memory_max(*t); v && (!best || *v < *best)) best = v;
    }
    if (p.empty() || p == "/") break;
    const auto slash = p.rfind('/');
    p = slash == 0 || slash == std::string::npos ? "" : p.substr(0, slash);
  }
  return best;
}

}  // namespace

Allocation discover_allocation(std::uint32_t share, std::uint32_t index) {
  Allocation a;
  share = std::max<std::uint32_t>(1, share);
  index = std::min(index, share - 1);
  // The cores: the affinity mask, within the cgroup's cpuset.
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (::sched_getaffinity(0, sizeof mask, &mask) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &mask)) a.cpuset.push_back(c);
    }
    a.cpus_from = "affinity " + format_cpu_list(a.cpuset);
  }
  const std::string self = read_text("/proc/self/cgroup").value_or("");
  std::optional<std::vector<int>> cg;
  std::string cg_file;
  if (auto p = cgroup_path(self); p && std::ifstream("/sys/fs/cgroup/cgroup.controllers")) {
    if (auto f = cgroup_file("/sys/fs/cgroup", *p, "cpuset.cpus.effective")) {
      cg = parse_cpu_list(f->second);
      cg_file = f->first;
    }
  } else if (auto p1 = cgroup_path(self, "cpuset")) {
    if (auto f = cgroup_file("/sys/fs/cgroup/cpuset", *p1, "cpuset.effective_cpus")) {
      cg = parse_cpu_list(f->second);
      cg_file = f->first;
    }
  }
  if (cg && !cg->empty()) {
    if (a.cpuset.empty()) {
      a.cpuset = *cg;
    } else {
      std::vector<int> both;
      std::set_intersection(a.cpuset.begin(), a.cpuset.end(), cg->begin(), cg->end(), std::back_inserter(both));
      if (!both.empty()) a.cpuset = both;
    }
    a.cpus_from = "cgroup " + cg_file + " and affinity: " + format_cpu_list(a.cpuset);
  }
  if (a.cpuset.empty()) {
    const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
    for (long c = 0; c < std::max(1L, n); ++c) a.cpuset.push_back(static_cast<int>(c));
    a.cpus_from = "the machine";
  }
  // Slurm's count for this node, when the mask is wider (no cgroup confinement).
  std::optional<std::uint32_t> slurm_cpus;
  std::string slurm_from;
  if (const char* on = env::get("SLURM_CPUS_ON_NODE"); on != nullptr && std::atoi(on) > 0) {
    slurm_cpus = static_cast<std::uint32_t>(std::atoi(on));
    slurm_from = "SLURM_CPUS_ON_NODE=" + std::string(on);
  } else if (const char* per = env::get("SLURM_JOB_CPUS_PER_NODE")) {
    const char* node = env::get("SLURM_NODEID");
    slurm_cpus = parse_slurm_cpus_per_node(per, node != nullptr ? static_cast<std::size_t>(std::atoi(node)) : 0);
    slurm_from = "SLURM_JOB_CPUS_PER_NODE=" + std::string(per);
  }
  if (slurm_cpus && *slurm_cpus < a.cpuset.size()) {
    a.cpuset.resize(*slurm_cpus);
    a.cpus_from = slurm_from + " of " + a.cpus_from;
  }
  if (share > 1) {
    // Workers of one job on one node: slice `index` of the cores.
    const std::size_t per = std::max<std::size_t>(1, a.cpuset.size() / share);
    const std::size_t from = std::min(a.cpuset.size() - 1, per * index);
    std::vector<int> mine(a.cpuset.begin() + static_cast<std::ptrdiff_t>(from),
                          a.cpuset.begin() + static_cast<std::ptrdiff_t>(std::min(a.cpuset.size(), from + per)));
    a.cpuset = std::move(mine);
    a.cpus_from += " (share " + std::to_string(index + 1) + " of " + std::to_string(share) + ")";
  }
  a.cpus = static_cast<std::uint32_t>(a.cpuset.size());

  // Memory: the tightest of Slurm's figure, the cgroup's limit and the machine.
  auto consider = [&](std::optional<std::uint64_t> v, const std::string& from) {
    if (v && *v > 0 && (a.memory == 0 || *v < a.memory)) {
      a.memory = *v;
      a.memory_from = from;
    }
  };
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) consider(static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page), "the machine");
  if (auto p = cgroup_path(self); p && std::ifstream("/sys/fs/cgroup/cgroup.controllers")) {
    consider(v2_memory_max(*p), "cgroup memory.max");
  } else if (auto p1 = cgroup_path(self, "memory")) {
    if (auto f = cgroup_file("/sys/fs/cgroup/memory", *p1, "memory.limit_in_bytes")) {
      consider(parse_memory_max(f->second), "cgroup " + f->first);
    }
  }
  if (const char* mb = env::get("SLURM_MEM_PER_NODE"); mb != nullptr && std::atoll(mb) > 0) {
    consider(static_cast<std::uint64_t>(std::atoll(mb)) << 20, "SLURM_MEM_PER_NODE");
  } else if (const char* per_cpu = env::get("SLURM_MEM_PER_CPU"); per_cpu != nullptr && std::atoll(per_cpu) > 0) {
    const std::uint64_t cpus = slurm_cpus ? *slurm_cpus : a.cpus * share;
    consider((static_cast<std::uint64_t>(std::atoll(per_cpu)) << 20) * cpus, "SLURM_MEM_PER_CPU");
  }
  if (share > 1) {
    a.memory /= share;
    a.memory_from += " (1/" + std::to_string(share) + ")";
  }
  return a;
}

}  // namespace herd::allocation
