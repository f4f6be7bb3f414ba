#include "common/logging.hpp"
#include "common/env.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>

namespace herd::log {
namespace {
std::string& process_name() {
  static std::string name = "client";
  return name;
}
Level parse_level() {
  const char* v = env::get(env::Var::log_level);
  if (v == nullptr) return Level::warning;
  if (std::strcmp(v, "error") == 0) return Level::error;
  if (std::strcmp(v, "info") == 0) return Level::info;
  if (std::strcmp(v, "debug") == 0) return Level::debug;
  return Level::warning;
}

Level stderr_threshold() {
  static const Level level = parse_level();
  return level;
}
std::atomic<Sink> g_sink{nullptr};
std::atomic<int> g_sink_level{0};
}  // namespace

Level threshold() {
  return std::max(stderr_threshold(), static_cast<Level>(g_sink_level.load(std::memory_order_relaxed)));
}

void set_sink(Sink sink, Level level) {
  g_sink.store(sink);
  g_sink_level.store(sink != nullptr ? static_cast<int>(level) : 0);
}

void set_process_name(std::string name) { process_name() = std::move(name); }

Line::~Line() {
  static std::mutex mu;
  static const char* names[] = {"ERROR", "WARN", "INFO", "DEBUG"};
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()) % 1000;
  std::tm tm{};
  localtime_r(&t, &tm);
  char stamp[32];
  std::snprintf(stamp, sizeof stamp, "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms.count()));
  if (level_ > stderr_threshold()) {
    if (Sink sink = g_sink.load(); sink != nullptr) {
      sink(std::string("[herd ") + process_name() + " " + stamp + " " + names[static_cast<int>(level_)] + "] " +
           out_.str());
    }
    return;
  }
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(stderr, "[herd %s %s %s] %s\n", process_name().c_str(), stamp,
               names[static_cast<int>(level_)], out_.str().c_str());
}

}  // namespace herd::log
