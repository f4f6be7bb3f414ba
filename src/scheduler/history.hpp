// The dashboard's history: the last hour of each worker's CPU and memory and of each pool's
// size, kept in memory (the run record keeps whole nights; this is what the dashboard draws
// without reading it). The event loop adds points; the dashboard's threads read them as JSON.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>

namespace herd::scheduler {

class History {
 public:
  static constexpr std::int64_t kSpanMs = 3600 * 1000;  // what is kept
  static constexpr std::int64_t kStepMs = 10 * 1000;    // at most one point a series this often

  /// A worker's load at `t_ms` (unix milliseconds); kept when its last point is kStepMs old.
  void worker(const std::string& name, std::int64_t t_ms, double cpu, std::uint64_t memory);
  /// A pool's size at `t_ms`; kept when it changed or its last point is kStepMs old.
  void pool(const std::string& name, std::int64_t t_ms, std::uint32_t target, std::uint32_t workers,
            std::uint32_t running, std::uint32_t pending);
  /// {"now_ms":..,"workers":{name:[[t,cpu,memory],...]},"pools":{name:[[t,target,workers,running,pending],...]}}
  /// with the last hour before `now_ms`.
  std::string json(std::int64_t now_ms) const;

 private:
  struct WorkerPoint {
    std::int64_t t;
    double cpu;
    std::uint64_t memory;
  };
  struct PoolPoint {
    std::int64_t t;
    std::uint32_t target, workers, running, pending;
  };
  void trim(std::int64_t now_ms);
  mutable std::mutex mu_;
  std::map<std::string, std::deque<WorkerPoint>> workers_;
  std::map<std::string, std::deque<PoolPoint>> pools_;
  std::int64_t last_trim_ = 0;
};

}  // namespace herd::scheduler
