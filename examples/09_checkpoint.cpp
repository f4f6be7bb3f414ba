// 09_checkpoint: a long computation that survives preemption. The task works in intervals and
// saves a checkpoint after each one (on a cluster: a directory on the shared filesystem). When
// its worker drains (Slurm's warning signal, `scancel --signal=TERM`, preemption, the walltime's
// retirement margin) herd::this_task().draining() turns true: the task gives up the interval it
// is in and throws, and its retry (TaskOptions::checkpointable), on another worker, resumes from
// the last checkpoint, at this_task().checkpoint_path(): the same path for every run.
//
// Here the "preemptions" are SIGTERMs sent to the worker running the task, twice, as Slurm
// would send them. The example counts every interval started (one marker line each) and checks
// that at most one interval was lost per preemption, and that the result is exact.
#include <herd/herd.hpp>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

namespace fs = std::filesystem;

namespace {

struct Checkpoint {
  std::int64_t step = 0;  // intervals done
  std::int64_t sum = 0;   // their result so far
};

Checkpoint load(const std::string& path) {
  Checkpoint c;
  std::ifstream in(path);
  in >> c.step >> c.sum;
  return in ? c : Checkpoint{};
}

// Written whole, then renamed over the old one: a preemption mid-write leaves the old one.
void save(const std::string& path, const Checkpoint& c) {
  {
    std::ofstream out(path + ".tmp");
    out << c.step << " " << c.sum << "\n";
  }
  fs::rename(path + ".tmp", path);
}

void append(const std::string& path, const std::string& line) {
  std::ofstream(path, std::ios::app) << line << "\n";
}

}  // namespace

/// Sum of i*i for i in [0, steps): one interval per i, each ~50 ms of "work".
std::int64_t long_sum(std::string dir, std::int64_t steps) {
  // The same path for every run of this task (its key), on the shared filesystem.
  const std::string checkpoint = herd::this_task().checkpoint_path(dir + "/checkpoints");
  Checkpoint c = load(checkpoint);
  append(dir + "/runs", std::to_string(::getpid()) + " " + std::to_string(c.step));  // who runs it now
  while (c.step < steps) {
    append(dir + "/intervals", std::to_string(c.step));  // an interval started
    for (int slice = 0; slice < 10; ++slice) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (herd::this_task().draining()) {
        // The interval in progress is lost; everything before it is in the checkpoint.
        throw std::runtime_error("preempted at step " + std::to_string(c.step) + " (" +
                                 std::to_string(herd::this_task().seconds_left()) + " s left); resuming from the checkpoint");
      }
    }
    c.sum += c.step * c.step;
    ++c.step;
    save(checkpoint, c);
  }
  return c.sum;
}
HERD_TASK(long_sum);

namespace {

std::vector<std::string> lines(const std::string& path) {
  std::vector<std::string> out;
  std::ifstream in(path);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

/// Waits until the task has started `n` intervals; returns the pid of the worker running it.
pid_t wait_for_intervals(const std::string& dir, std::size_t n) {
  for (int i = 0; i < 6000 && lines(dir + "/intervals").size() < n; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const auto runs = lines(dir + "/runs");
  if (runs.empty()) throw std::runtime_error("the task never started");
  return static_cast<pid_t>(std::stol(runs.back()));
}

}  // namespace

int main(int argc, char** argv) {
  herd::init(argc, argv);
  const std::string dir = (fs::temp_directory_path() / ("herd-checkpoint-" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  herd::Client client{herd::LocalCluster{3}};
  client.wait_for_workers(3);

  constexpr std::int64_t kSteps = 60;
  // Checkpointable: up to 3 preemptions, each run resuming from the last checkpoint.
  auto f = client.submit(herd::TaskOptions{}.key("long-sum").checkpointable(3), long_sum, dir, kSteps);
  // Two preemptions: SIGTERM to the worker running the task, as Slurm sends it.
  const pid_t first = wait_for_intervals(dir, 15);
  ::kill(first, SIGTERM);
  std::cout << "preempted worker " << first << " after ~15 intervals\n";
  pid_t second = first;
  for (int i = 0; i < 6000 && second == first; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    second = wait_for_intervals(dir, 0);
  }
  wait_for_intervals(dir, lines(dir + "/intervals").size() + 15);
  second = wait_for_intervals(dir, 0);
  ::kill(second, SIGTERM);
  std::cout << "preempted worker " << second << " after ~15 more intervals\n";

  const std::int64_t sum = f.result();
  std::int64_t expected = 0;
  for (std::int64_t i = 0; i < kSteps; ++i) expected += i * i;
  const auto runs = lines(dir + "/runs");
  const auto started = lines(dir + "/intervals").size();
  const bool saved = fs::exists(dir + "/checkpoints/long-sum.ckpt");
  std::cout << "sum " << sum << " (expected " << expected << "); " << runs.size() << " runs, " << started
            << " intervals started for " << kSteps << " (lost: " << started - kSteps << ")\n";
  fs::remove_all(dir);
  // Exact, resumed twice (three runs on three workers), at most one interval lost per preemption.
  const bool ok = saved && sum == expected && runs.size() == 3 && started >= static_cast<std::size_t>(kSteps) &&
                  started <= static_cast<std::size_t>(kSteps) + 2 && first != second;
  return ok ? 0 : 1;
}
