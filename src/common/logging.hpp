// HERD_LOG(info) << "..."; the level is checked before the message is built.
// Level from HERD_LOG_LEVEL (error, warning, info, debug); default: warning.
#pragma once
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

/// Makes `cond ? (void)0 : Voidify() & line << ...` well-typed (the glog idiom).
struct Voidify {
  void operator&(const Line&) {}
};

}  // namespace herd::log

#define HERD_LOG(level)                                                   \
  (::herd::log::Level::level > ::herd::log::threshold())                  \
      ? (void)0                                                           \
      : ::herd::log::Voidify() & ::herd::log::Line(::herd::log::Level::level)
