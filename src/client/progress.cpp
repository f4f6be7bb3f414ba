// herd::progress: watches futures and redraws a bar on a terminal, or prints a plain line every
// few seconds (and one at the end) when the output is a file or a pipe, so logs stay readable.
// The drawing is common/progress_bar's (the sweep's bar is the same one).
#include "herd/progress.hpp"

#include <cmath>
#include <cstdio>
#include <iostream>
#include <thread>

#include "common/progress_bar.hpp"
#include "common/util.hpp"

namespace herd::detail {

std::string progress_text(std::size_t done, std::size_t failed, std::size_t total, double seconds,
                          bool with_bar, std::size_t bar_width) {
  std::string out = with_bar ? util::ProgressBar::cells(done, total, bar_width) : std::string();
  const double pct = total == 0 ? 100.0 : 100.0 * static_cast<double>(done) / static_cast<double>(total);
  char buf[160];
  std::snprintf(buf, sizeof buf, "%zu/%zu (%.0f%%)", done, total, std::floor(pct));
  out += buf;
  if (failed > 0) out += ", " + std::to_string(failed) + " failed";
  const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0;
  std::snprintf(buf, sizeof buf, ", %.1f/s", rate);
  out += buf;
  if (done < total) {
    out += ", ETA " + (rate > 0 ? util::format_duration(static_cast<double>(total - done) / rate) : std::string("?"));
  } else {
    out += ", " + util::format_duration(seconds);
  }
  return out;
}

ProgressSummary run_progress(const std::vector<FutureState*>& states, const ProgressOptions& options) {
  using Clock = std::chrono::steady_clock;
  std::ostream& out = options.out_ != nullptr ? *options.out_ : std::cout;
  const bool bar = options.mode_ == ProgressOptions::Mode::automatic ? util::is_terminal(out)
                                                                      : options.mode_ == ProgressOptions::Mode::bar;
  util::ProgressBar line(out, bar);
  const std::string prefix = options.label_.empty() ? std::string() : options.label_ + ": ";
  const auto start = Clock::now();
  ProgressSummary sum;
  sum.total = states.size();
  std::vector<FutureState*> pending = states;
  auto last_line = start;
  std::size_t last_shown = static_cast<std::size_t>(-1);
  auto show = [&](bool final) {
    const double secs = std::chrono::duration<double>(Clock::now() - start).count();
    const std::size_t done = sum.finished + sum.failed + sum.cancelled;
    const std::string text = progress_text(done, sum.failed + sum.cancelled, sum.total, secs, bar);
    line.update(prefix + text);
    if (final) line.finish();
    last_shown = done;
  };
  if (!bar) show(false);
  while (true) {
    std::vector<FutureState*> still;
    still.reserve(pending.size());
    for (FutureState* s : pending) {
      if (!future_done(*s)) {
        still.push_back(s);
        continue;
      }
      const std::string st = future_status(*s);
      if (st == "finished") ++sum.finished;
      else if (st == "cancelled") ++sum.cancelled;
      else ++sum.failed;
    }
    pending.swap(still);
    if (pending.empty()) break;
    const auto now = Clock::now();
    if (bar) {
      const std::size_t done = sum.finished + sum.failed + sum.cancelled;
      if (done != last_shown || now - last_line >= std::chrono::seconds(1)) {
        show(false);
        last_line = now;
      }
    } else if (now - last_line >= options.interval_) {
      show(false);
      last_line = now;
    }
    // Blocks on the oldest unfinished future; wakes at least every 100 ms to redraw.
    (void)future_wait(*pending.front(), 100);
  }
  sum.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  show(true);
  return sum;
}

}  // namespace herd::detail
