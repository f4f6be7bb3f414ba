// HERD_LOG(info) << "..."; the level is checked before the message is built.
// Level from HERD_LOG_LEVEL (error, warning, info, debug); default: warning.
#pragma once
#include <chrono>
#include <cstdint>
#include <sstream>
#include <string>

namespace herd::log {

enum class Level { error = 0, warning = 1, info = 2, debug = 3 };

Level threshold();
void set_process_name(std::string name);  // "scheduler", "worker local-2", ...

/// A process may also keep recent lines in memory (a worker does, for `herd logs`): `sink`
/// gets each formatted line (no newline) of `level` or more severe that stderr's threshold
/// does not print; lines that stderr prints reach such a process through its captured stderr.
using Sink = void (*)(const std::string& line);
void set_sink(Sink sink, Level level);

class Line {
 public:
  explicit Line(Level level) : level_(level) {}
  ~Line();
  template <typename T>
  Line& operator<<(const T& v) {
    out_ << v;
    return *this;
  }

 private:
  Level level_;
  std::ostringstream out_;
};

/// At most one line per `every` for one kind of event, so that a flood (strays at a port, a
/// peer that keeps failing) writes a line now and then, not one per event. Not thread-safe: one
/// owner's.
class Throttle {
 public:
  explicit Throttle(std::chrono::steady_clock::duration every) : every_(every) {}
  /// True when a line may be written now; `suppressed` is then how many were held back since
  /// the last one written (say so in the line).
  bool allow(std::chrono::steady_clock::time_point now, std::uint64_t& suppressed) {
    if (written_ && now - last_ < every_) {
      ++held_;
      return false;
    }
    written_ = true;
    last_ = now;
    suppressed = held_;
    held_ = 0;
    return true;
  }

 private:
  std::chrono::steady_clock::duration every_;
  std::chrono::steady_clock::time_point last_{};
  bool written_ = false;
  std::uint64_t held_ = 0;
};

/// Makes `cond ? (void)0 : Voidify() & line << ...` well-typed (the glog idiom).
struct Voidify {
  void operator&(const Line&) {}
};

}  // namespace herd::log

#define HERD_LOG(level)                                                   \
  (::herd::log::Level::level > ::herd::log::threshold())                  \
      ? (void)0                                                           \
      : ::herd::log::Voidify() & ::herd::log::Line(::herd::log::Level::level)
