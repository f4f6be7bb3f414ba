// What the files of the Worker (worker.cpp, worker_tasks.cpp, worker_execute.cpp,
// worker_memory.cpp) share beside worker.hpp. Nothing outside src/worker/ includes it.
#pragma once

#include <atomic>
#include <cstddef>

namespace herd::worker {

/// Set by Worker::request_stop (a signal handler may call it): every loop of this process ends.
extern std::atomic<bool> g_stop;

// The lists kept from one message to the next (execute_tasks decoded, results to send) keep
// storage for this many entries at most: ~1,000 a message is what batches of tiny tasks bring
// (HERD_BATCH_US), and a burst far bigger should not stay on every worker's heap.
inline constexpr std::size_t kKeptEntries = 2048;

}  // namespace herd::worker
