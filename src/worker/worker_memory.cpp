// The worker's memory: its limit (Slurm's, or --memory-limit), the monitor thread that samples
// the resident memory, spills results to disk, pauses the worker and kills the largest isolated
// child, the leaving of a worker over its limit, and the private spill directory.
#include "worker/worker.hpp"

#include <malloc.h>
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/logging.hpp"
#include "common/process.hpp"
#include "common/util.hpp"
#include "worker/worker_internal.hpp"
#include "common/env.hpp"

namespace herd::worker {

void Worker::make_spill_directory() {
  if (options_.memory_limit == 0 || options_.config.memory_target_percent + options_.config.memory_spill_percent == 0) return;
  // As Dask: the local directory the user chose, else the job's own scratch space, else the
  // system's temporary directory; a private directory inside, as several workers may share it.
  std::string base = options_.local_directory;
  const bool chosen = !base.empty();
  if (base.empty()) {
    if (const char* t = env::get("SLURM_TMPDIR"); t != nullptr && *t != '\0') base = t;
  }
  if (base.empty()) {
    std::error_code ec;
    base = std::filesystem::temp_directory_path(ec).string();
    if (ec) base = "/tmp";
  }
  std::error_code ec;
  std::filesystem::create_directories(base, ec);
  std::string dir = base + "/herd-worker-XXXXXX";
  if (ec || ::mkdtemp(dir.data()) == nullptr) {
    const std::string why = "cannot make a spill directory in " + base + ": " +
                            (ec ? ec.message() : std::string(std::strerror(errno)));
    if (chosen) throw std::runtime_error(why + " (--local-directory)");
    HERD_LOG(warning) << why << "; results will not spill to disk (the worker pauses when memory is short)";
    return;
  }
  store_.set_spill_directory(dir);
  HERD_LOG(info) << "results spill to " << dir << " past " << options_.config.memory_target_percent
                 << "% of the memory limit of " << util::format_bytes(options_.memory_limit);
}

void Worker::spill_to_target() {
  if (options_.memory_limit == 0 || options_.config.memory_target_percent == 0) return;
  const std::uint64_t keep = options_.memory_limit / 100 * options_.config.memory_target_percent;
  if (store_.memory_bytes() <= keep) return;
  if (store_.spill_until(keep) > 0) ::malloc_trim(0);  // give the freed pages back to the system
}

void Worker::memory_monitor() {
  // A task can allocate gigabytes between two heartbeats: sample often (a few small /proc reads).
  // Past the spill share of the limit, results go to disk (least recently used first) until
  // the process is back at the target share; past the pause share, the worker starts nothing
  // new until it is back under (as Dask's memory.spill and memory.pause).
  const Config& c = options_.config;
  const std::uint64_t limit = options_.memory_limit;
  const std::uint64_t target = limit / 100 * (c.memory_target_percent > 0 ? c.memory_target_percent : c.memory_spill_percent);
  while (!g_stop.load() && over_limit_rss_.load() == 0) {
    const std::uint64_t rss = rss_bytes();
    if (rss > limit) {
      // An isolated task's child is what can be stopped: the largest goes, its task fails,
      // and the worker stays (while none is left to kill, it leaves as before).
      const pid_t killed = kill_largest_isolated_child([&](std::uint64_t child_rss) {
        return "it had " + util::format_bytes(child_rss) + " resident when the worker reached " + util::format_bytes(rss) +
               ", over its memory limit of " + util::format_bytes(limit);
      });
      if (killed != 0) {
        HERD_LOG(warning) << "over the memory limit of " << util::format_bytes(limit) << ": killed isolated child " << killed;
        // Its memory is gone once it is reaped; till then it would still be counted.
        for (int i = 0; i < 200 && ::kill(killed, 0) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      over_limit_rss_.store(rss);
      wake_io();
      return;
    }
    if (c.memory_spill_percent > 0 && rss > limit / 100 * c.memory_spill_percent) {
      const std::uint64_t over = rss - std::min(rss, target);
      const std::uint64_t in_memory = store_.memory_bytes();
      if (store_.spill_until(in_memory > over ? in_memory - over : 0) > 0) ::malloc_trim(0);
    }
    update_pause();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void Worker::update_pause() {
  const Config& c = options_.config;
  const std::uint64_t limit = options_.memory_limit;
  // Sampled under the lock: the monitor and an executor decide in turn, each on a fresh figure
  // (an older sample must not undo a pause that a newer one decided).
  std::lock_guard lock(pause_mu_);
  const std::uint64_t rss = rss_bytes();
  const bool want_pause = c.memory_pause_percent > 0 && rss > limit / 100 * c.memory_pause_percent;
  std::string why;
  if (want_pause) {  // kept current while paused: `herd status` shows it
    const std::string error = store_.spill_error();
    why = "memory " + util::format_bytes(rss) + " is past " + std::to_string(c.memory_pause_percent) +
          "% of its limit of " + util::format_bytes(limit) + "; " +
          (!error.empty() ? error
           : store_.spill_directory().empty() ? std::string("it has no spill directory")
           : store_.memory_bytes() == 0 ? std::string("no result is left in memory to spill")
                                        : std::string("spilling"));
  }
  pause_reason_ = why;
  if (want_pause == pause_.load()) return;
  if (want_pause) {
    HERD_LOG(warning) << "pausing: " << why;
  } else {
    HERD_LOG(info) << "resuming: memory " << util::format_bytes(rss) << " is back under " << c.memory_pause_percent
                   << "% of its limit";
  }
  pause_.store(want_pause);
  wake_io();
}

void Worker::over_memory_limit(std::uint64_t rss) {
  // The running task(s) pushed us over: they fail with a clear error; tasks not started are
  // handed back; then the worker leaves (its threads cannot be stopped, its memory is gone)
  // and the pool replaces it.
  {
    std::lock_guard lock(run_mu_);
    stopping_ = true;
    for (const auto& r : handoff_) state_->not_started(r.task.id);  // no executor took it yet
    handoff_.clear();
  }
  const std::string figures = "worker " + options_.name + " reached " + std::to_string(rss >> 20) +
                              " MiB resident, over its memory limit of " + std::to_string(options_.memory_limit >> 20) + " MiB";
  HERD_LOG(error) << figures << "; failing " << state_->executing() << " running task(s) and leaving";
  state_->over_memory(figures);
  carry_out();
  goodbye(figures);
}

std::uint64_t Worker::rss_bytes() const {
  // With the commands its tasks started; less its own file-backed pages (the program's text,
  // spilled results mapped while they are served): clean page cache, not its memory.
  const std::uint64_t all = process::tree_rss_bytes(::getpid());
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("RssFile:", 0) == 0) {
      const std::uint64_t file = std::strtoull(line.c_str() + 8, nullptr, 10) * 1024;  // "NNN kB"
      return all > file ? all - file : 0;
    }
  }
  return all;
}

}  // namespace herd::worker
