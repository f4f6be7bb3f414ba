// The one progress bar of herd: what herd::progress (futures) and a running sweep show. On a
// terminal it is one line redrawn in place, with the lines that need attention printed above
// it; in a file or a pipe, every update is a plain line of its own, so logs stay readable.
// What the line says (counts, rate, ETA) is each caller's; how it is drawn is here.
#pragma once

#include <cstddef>
#include <ostream>
#include <string>
#include <string_view>

namespace herd::util {

/// Whether `out` is std::cout, std::cerr or std::clog on a terminal (other streams never are).
bool is_terminal(const std::ostream& out);

class ProgressBar {
 public:
  /// `redraw`: a terminal (redraw the line in place); else every update is a line.
  ProgressBar(std::ostream& out, bool redraw) : out_(out), redraw_(redraw) {}
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  bool redraws() const { return redraw_; }
  /// The bar's line: drawn over the previous one on a terminal, a new line elsewhere.
  void update(std::string_view text);
  /// A line of its own: above the bar on a terminal (the bar comes back with the next update).
  void print(std::string_view line);
  /// Leaves the bar's line, so that what follows starts on a fresh one.
  void finish();

  /// "[#####-----] " (with the space): `done` of `total` in `width` cells; full when total is 0.
  static std::string cells(std::size_t done, std::size_t total, std::size_t width);

 private:
  std::ostream& out_;
  bool redraw_;
  bool shown_ = false;  // the bar is on the terminal's current line
};

}  // namespace herd::util
