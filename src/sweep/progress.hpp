// What a running sweep shows: a bar redrawn in place on a terminal (counts, rate, ETA), or a
// line per finished trial when stdout is a file or a pipe. The bar is common/progress_bar's,
// the one herd::progress draws too.
#pragma once

#include <chrono>
#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

#include "common/progress_bar.hpp"
#include "herd/sweep.hpp"

namespace herd::sweep {

struct Counts {
  std::size_t total = 0;     // trials in the sweep
  std::size_t ok = 0, failed = 0, timed_out = 0, stopped = 0;
  std::size_t resumed = 0;   // of the finished ones, taken from the results file
  std::size_t running = 0;   // runs submitted and not finished
  std::size_t finished() const { return ok + failed + timed_out + stopped; }
};

class ProgressView {
 public:
  /// `mode` automatic becomes bar or lines by whether `out` is a terminal (`is_tty`).
  /// `params` orders the parameters in trial lines; `objective` comes first among metrics.
  ProgressView(Progress mode, std::ostream& out, bool is_tty, std::vector<std::string> params = {},
               std::string objective = {});
  Progress mode() const { return mode_; }
  /// A trial reached its outcome (`resumed`: read from the results file, not run now).
  void trial_done(const TrialResult& r, const Counts& c, bool resumed);
  /// A note for the user (a retry, a skipped line...): above the bar, or as a line.
  void note(const std::string& text, const Counts& c);
  /// Redraws the bar (bar mode only; cheap to call often).
  void tick(const Counts& c);
  /// Leaves the bar's line.
  void finish(const Counts& c);

  /// "[####------] 12/40 ok 10, failed 2, running 4, 1.3/s, ETA 0:25" (no newline).
  std::string bar_text(const Counts& c, std::size_t width) const;
  /// "ok      lr=0.01 batch=32  loss=0.123  1.2 s  worker-1" (no newline).
  static std::string trial_line(const TrialResult& r, const std::string& objective,
                                const std::vector<std::string>& params = {});

 private:
  Progress mode_;
  util::ProgressBar bar_;
  std::vector<std::string> params_;
  std::string objective_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::size_t done_now_ = 0;  // trials finished by this run (what the rate is measured on)
};

}  // namespace herd::sweep
