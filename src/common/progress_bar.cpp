#include "common/progress_bar.hpp"

#include <unistd.h>

#include <iostream>

namespace herd::util {

bool is_terminal(const std::ostream& out) {
  const int fd = &out == &std::cout ? STDOUT_FILENO : (&out == &std::cerr || &out == &std::clog) ? STDERR_FILENO : -1;
  return fd >= 0 && ::isatty(fd) == 1;
}

void ProgressBar::update(std::string_view text) {
  if (redraw_) {
    // \r to the line's start, the text, then erase what a longer previous text left behind.
    out_ << '\r' << text << "\033[K" << std::flush;
    shown_ = true;
  } else {
    out_ << text << '\n' << std::flush;
  }
}

void ProgressBar::print(std::string_view line) {
  if (shown_) out_ << "\r\033[K";
  shown_ = false;
  out_ << line << '\n' << std::flush;
}

void ProgressBar::finish() {
  if (shown_) out_ << '\n';
  shown_ = false;
  out_.flush();
}

std::string ProgressBar::cells(std::size_t done, std::size_t total, std::size_t width) {
  const std::size_t filled = total == 0 || done >= total ? width : done * width / total;
  return "[" + std::string(filled, '#') + std::string(width - filled, '-') + "] ";
}

}  // namespace herd::util
