// What the files of the Worker (worker.cpp, worker_tasks.cpp, worker_execute.cpp,
// worker_memory.cpp) share beside worker.hpp. Nothing outside src/worker/ includes it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace herd::worker {

/// Set by Worker::request_stop (a signal handler may call it): every loop of this process ends.
extern std::atomic<bool> g_stop;

// The lists kept from one message to the next (execute_tasks decoded, results to send) keep
// storage for this many entries at most: ~1,000 a message is what batches of tiny tasks bring
// (HERD_BATCH_US), and a burst far bigger should not stay on every worker's heap.
inline constexpr std::size_t kKeptEntries = 2048;

/// The steady clock in microseconds (the run record's durations on the worker).
std::uint64_t steady_us();

/// This process's CPU use between two calls, in percent of one core (/proc/self/stat's user
/// and system time over the wall time between them).
class CpuMeter {
 public:
  double percent();

 private:
  std::uint64_t last_cpu_us_ = 0, last_wall_us_ = 0;
};

/// This thread's executor number (1, 2, ...; 0 on the I/O thread), for the run record.
std::uint32_t& executor_index();

}  // namespace herd::worker
