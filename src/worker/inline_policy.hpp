// Whether a task runs on the worker's I/O thread itself ("inline", Worker::run_inline) rather
// than on an executor, and when a run there has held the I/O thread so long that the loop goes
// to a fresh thread (a relief, Worker::relief_watch). Pure, as WorkerState is: the runs and the
// times come in as events, the decisions go out as answers; no clock, no thread and no mutex
// inside. The Worker keeps the threads and the locks: InlinePolicy is under its state_mu_,
// ReliefPolicy under its relief_mu_ (the watch thread looks while the I/O thread runs a task).
//
// Why inline: a round trip of a tiny task then has no hand-off from the I/O thread to an
// executor and back. Why so careful: a task on the I/O thread stops heartbeats, the data port and
// every other slot while it runs, so only functions known to be quick go there, one task a turn,
// and a function that turns out slow there goes to executors, for good once it repeats.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "worker/worker_state.hpp"

namespace herd::worker {

/// Which functions' tasks may run on the I/O thread, from their past run times.
class InlinePolicy {
 public:
  /// A function is inline-eligible once this many of its runs in a row (its last ones) each took
  /// less than the limit; any run that did not resets the count.
  static constexpr std::uint32_t kQuickRunsToInline = 8;
  /// A run on the I/O thread of at least this many times the limit is slow there.
  static constexpr std::uint64_t kSlowFactor = 10;
  /// A second slow run there within this many of the function's runs there: never again...
  static constexpr std::uint32_t kSlowRunsWindow = 64;
  /// ...nor after this many slow runs there in all.
  static constexpr std::uint32_t kSlowRunsForGood = 4;

  /// What one run on the I/O thread taught, for the log.
  struct Verdict {
    enum class Slow {
      no,        // not slow there (or the function was already barred)
      once,      // slow: its next kQuickRunsToInline runs go to executors
      twice,     // slow again within kSlowRunsWindow of its runs there: never again
      too_often  // its kSlowRunsForGood-th slow run there: never again
    };
    Slow slow = Slow::no;
    std::uint32_t within = 0;     // twice: its runs there from the earlier slow one to this, both counted
    std::uint32_t slow_runs = 0;  // its slow runs there, this one included
  };

  /// `limit_us`: HERD_INLINE_US, the run time under which a run is quick; 0 turns inline runs
  /// (and reliefs) off.
  explicit InlinePolicy(std::uint64_t limit_us) : limit_us_(limit_us) {}
  bool enabled() const { return limit_us_ != 0; }
  std::uint64_t limit_us() const { return limit_us_; }

  // ---- events ------------------------------------------------------------------------------
  /// The I/O thread starts a turn of its loop (inline runs are counted per turn).
  void new_turn() { inlined_this_turn_ = false; }
  /// A run of `function` on an executor took `duration_us`.
  void ran(const std::string& function, std::uint64_t duration_us);
  /// A run of `function` on the I/O thread took `duration_us`; `seceded`: it called secede()
  /// there (which does nothing there). Counts it as ran() does, and judges it.
  Verdict ran_inline(const std::string& function, std::uint64_t duration_us, bool seceded);
  /// A task of `function` seceded (on an executor): one that may wait that long never runs inline.
  void seceded(const std::string& function) { times_[function].never = true; }
  /// A run of `function` held the I/O thread until a relief took the loop (ReliefPolicy): its
  /// next tasks would block the new loop too, before that run ends and says so.
  void relieved(const std::string& function) { times_[function].never = true; }

  // ---- decisions ---------------------------------------------------------------------------
  /// The runs a turn starts (the state's out().run): true when the only one runs on the I/O
  /// thread, which this turn then counts as its inline run (one a turn: the task after it goes
  /// to an executor, so the I/O thread is back at its sockets after one quick task, not a batch).
  /// Never one that needs an executor: a time limit (enforced by abandoning its thread), a child
  /// process (isolated), a gang's collectives, a GPU stream.
  bool take(const std::vector<Run>& runs);
  /// Whether a task of `function` would run inline now, were it the turn's only one (tests).
  bool eligible(const std::string& function) const;
  /// Never inline again (seceded, relieved, or slow there too often).
  bool barred(const std::string& function) const;

 private:
  struct FunctionTimes {
    std::uint32_t quick_runs = 0;   // consecutive runs under the limit (at most kQuickRunsToInline)
    std::uint32_t inline_runs = 0;  // its runs on the I/O thread
    std::uint32_t slow_at = 0;      // inline_runs at its last slow one there; 0: none
    std::uint32_t slow_runs = 0;    // its slow runs there
    bool never = false;             // it seceded, was relieved, or was slow there too often
  };
  void count(FunctionTimes& t, std::uint64_t duration_us) const;

  std::uint64_t limit_us_;
  std::unordered_map<std::string, FunctionTimes> times_;
  bool inlined_this_turn_ = false;
};

/// When a run on the I/O thread has held it long enough that the loop goes to a fresh thread:
/// its quick runs cannot tell that the next one blocks (a cache miss, a slow file system), and on
/// the I/O thread it would stop heartbeats, the data port and every other slot; past
/// HERD_TIMEOUT_MS the scheduler would count the worker lost and run its tasks again.
class ReliefPolicy {
 public:
  using Clock = std::chrono::steady_clock;
  /// How long one run may hold the I/O thread (a fifth of the default heartbeat: heartbeats, the
  /// data port and the other slots barely notice).
  static constexpr auto kReliefAfter = std::chrono::milliseconds(100);
  /// How often the watch looks: a run is relieved within kReliefAfter + kLookEvery.
  static constexpr auto kLookEvery = kReliefAfter / 2;

  /// What look() decided: hand the loop to a fresh thread now.
  struct Relief {
    std::string function;  // whose run holds the I/O thread (its tasks go to executors from now)
    std::chrono::milliseconds held{};
  };

  /// The I/O thread starts a run of `*function` at `now`; `function` lives until ended(). The
  /// run's number, for ended().
  std::uint64_t started(const std::string* function, Clock::time_point now);
  /// Run `run` ended on its thread: true when it was relieved meanwhile (that thread no longer
  /// has the loop).
  bool ended(std::uint64_t run);
  /// The watch looks at `now`: a run on the I/O thread for kReliefAfter or more, not relieved
  /// yet, is relieved now (once).
  std::optional<Relief> look(Clock::time_point now);

 private:
  std::uint64_t running_ = 0;  // the run on the I/O thread now; 0: none
  std::uint64_t count_ = 0;    // runs started so far (numbers them)
  Clock::time_point since_{};
  const std::string* function_ = nullptr;
  std::uint64_t relieved_ = 0;  // that run's thread no longer has the loop
};

}  // namespace herd::worker
