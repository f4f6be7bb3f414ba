#pragma once
/// @file progress.hpp
/// @brief herd::progress: a progress bar (or plain lines) while futures finish.
///
/// @code
/// auto futures = client.map(simulate, params);
/// herd::progress(futures);                 // [#########-----] 612/1000 (61%), 3 failed, 41.2/s, ETA 9 s
/// auto results = client.gather(futures);
/// @endcode

#include <chrono>
#include <cstddef>
#include <iosfwd>
#include <string>
#include <vector>

#include "herd/future.hpp"

namespace herd {

/// @brief How herd::progress shows itself.
struct ProgressOptions {
  enum class Mode { automatic, bar, lines };
  /// automatic: a bar redrawn with '\r' when the stream is a terminal, else plain lines.
  Mode mode_ = Mode::automatic;
  std::ostream* out_ = nullptr;                      ///< nullptr = std::cout
  std::chrono::milliseconds interval_{5000};         ///< between plain lines
  std::string label_;                                ///< printed before the counts
  ProgressOptions& mode(Mode m) { mode_ = m; return *this; }
  ProgressOptions& out(std::ostream& o) { out_ = &o; return *this; }
  ProgressOptions& interval(std::chrono::milliseconds i) { interval_ = i; return *this; }
  ProgressOptions& label(std::string l) { label_ = std::move(l); return *this; }
};

/// @brief What herd::progress saw once every future was done.
struct ProgressSummary {
  std::size_t total = 0;
  std::size_t finished = 0;   ///< succeeded
  std::size_t failed = 0;     ///< raised, or lost with their worker or the scheduler
  std::size_t cancelled = 0;
  double seconds = 0;         ///< time spent waiting
};

namespace detail {
ProgressSummary run_progress(const std::vector<FutureState*>& states, const ProgressOptions& options);
/// "[####------] 4/10 (40%), 1 failed, 2.0/s, ETA 3 s" (bar) or without the bar (lines).
std::string progress_text(std::size_t done, std::size_t failed, std::size_t total, double seconds,
                          bool with_bar, std::size_t bar_width = 30);
}  // namespace detail

/// @brief Blocks until every future is done, showing done / total, failures, rate and ETA.
/// Does not throw for failed tasks: their futures rethrow when asked.
template <typename T>
ProgressSummary progress(const std::vector<Future<T>>& futures, const ProgressOptions& options = {}) {
  std::vector<detail::FutureState*> states;
  states.reserve(futures.size());
  for (const auto& f : futures) {
    if (f.valid()) states.push_back(f.state().get());
  }
  return detail::run_progress(states, options);
}

}  // namespace herd
