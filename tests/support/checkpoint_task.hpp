// A long checkpointable task for the preemption tests (local pool shrinking, scancel --signal on
// Slurm), and reading back the marker files it leaves. Include it in one file of a test
// executable and register the task there: HERD_TASK(ckpt_sum).
//
// Marker files in `dir`, one line each, so that a test counts what ran where:
//   <key>.runs       "<worker> <step>"    a run started, resuming at <step> (0 = from scratch)
//   <key>.intervals  "<worker> <step>"    an interval started
//   <key>.drained    "<worker> <seconds>" a run saw draining(), with seconds_left()
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <herd/herd.hpp>

namespace herd::testing {

/// One line of a marker file.
struct Mark {
  std::string worker;
  std::int64_t value = 0;
};

inline std::vector<Mark> marks(const std::string& path) {
  std::vector<Mark> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    Mark m;
    if (fields >> m.worker >> m.value) out.push_back(m);
  }
  return out;
}

inline std::size_t count_on(const std::vector<Mark>& ms, const std::string& worker) {
  std::size_t n = 0;
  for (const auto& m : ms) n += (m.worker == worker);
  return n;
}

/// What sum_of_squares(steps) must return: sum of i*i for i in [0, steps).
inline std::int64_t sum_of_squares(std::int64_t steps) {
  std::int64_t s = 0;
  for (std::int64_t i = 0; i < steps; ++i) s += i * i;
  return s;
}

}  // namespace herd::testing

/// Sum of i*i for i in [0, steps), one interval of `interval_ms` per i, a checkpoint after each
/// (written whole, then renamed over the last). When its worker drains it gives up the interval
/// it is in and throws; its retry resumes from this_task().checkpoint_path().
inline std::int64_t ckpt_sum(std::string dir, std::int64_t steps, int interval_ms) {
  const herd::TaskInfo& me = herd::this_task();
  const std::string checkpoint = me.checkpoint_path(dir + "/checkpoints");
  const std::string base = dir + "/" + me.key;
  std::int64_t step = 0, sum = 0;
  {
    std::ifstream in(checkpoint);
    if (!(in >> step >> sum)) step = sum = 0;
  }
  std::ofstream(base + ".runs", std::ios::app) << me.worker << " " << step << "\n";
  const int slices = std::max(1, interval_ms / 5);
  while (step < steps) {
    std::ofstream(base + ".intervals", std::ios::app) << me.worker << " " << step << "\n";
    for (int i = 0; i < slices; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (me.draining()) {
        const long left = me.seconds_left();
        std::ofstream(base + ".drained", std::ios::app) << me.worker << " " << left << "\n";
        throw std::runtime_error("preempted at step " + std::to_string(step) + " (" + std::to_string(left) +
                                 " s left); resuming from the checkpoint");
      }
    }
    sum += step * step;
    ++step;
    {
      std::ofstream out(checkpoint + ".tmp");
      out << step << " " << sum << "\n";
    }
    std::filesystem::rename(checkpoint + ".tmp", checkpoint);
  }
  return sum;
}
