#include "worker/inline_policy.hpp"

namespace herd::worker {

void InlinePolicy::count(FunctionTimes& t, std::uint64_t duration_us) const {
  if (duration_us < limit_us_) {
    if (t.quick_runs < kQuickRunsToInline) ++t.quick_runs;
  } else {
    t.quick_runs = 0;
  }
}

void InlinePolicy::ran(const std::string& function, std::uint64_t duration_us) {
  if (!enabled()) return;
  count(times_[function], duration_us);
}

InlinePolicy::Verdict InlinePolicy::ran_inline(const std::string& function, std::uint64_t duration_us, bool seceded) {
  Verdict v;
  if (!enabled()) return v;
  FunctionTimes& t = times_[function];
  if (seceded) t.never = true;
  ++t.inline_runs;
  if (duration_us >= kSlowFactor * limit_us_ && !t.never) {
    // Its quick runs did not tell. Once may be the thread preempted on a busy host (a noop
    // that would otherwise never come back here): its next runs go to executors until its quick
    // runs count up again (count() below resets them). A second slow run within kSlowRunsWindow
    // of its runs here, or the kSlowRunsForGood-th in all, sends it to executors for good, where
    // it blocks no I/O: so slow runs hold the I/O thread a bounded number of times per function.
    ++t.slow_runs;
    v.slow_runs = t.slow_runs;
    const bool close = t.slow_at != 0 && t.inline_runs - t.slow_at <= kSlowRunsWindow;
    if (close || t.slow_runs >= kSlowRunsForGood) {
      t.never = true;
      v.slow = close ? Verdict::Slow::twice : Verdict::Slow::too_often;
      if (close) v.within = t.inline_runs - t.slow_at + 1;
    } else {
      t.slow_at = t.inline_runs;
      v.slow = Verdict::Slow::once;
    }
  }
  count(t, duration_us);
  return v;
}

bool InlinePolicy::eligible(const std::string& function) const {
  if (!enabled()) return false;
  auto it = times_.find(function);
  return it != times_.end() && !it->second.never && it->second.quick_runs >= kQuickRunsToInline;
}

bool InlinePolicy::barred(const std::string& function) const {
  auto it = times_.find(function);
  return it != times_.end() && it->second.never;
}

bool InlinePolicy::take(const std::vector<Run>& runs) {
  if (runs.size() != 1 || !enabled() || inlined_this_turn_) return false;
  const Run& r = runs.front();
  if (r.task.timeout_ms > 0 || r.task.isolated || r.task.gang != 0 || !r.devices.empty() ||
      r.task.resources.count("cpus") != 0) return false;  // pinned to cores of its own: an executor
  if (!eligible(r.task.function)) return false;
  inlined_this_turn_ = true;
  return true;
}

std::uint64_t ReliefPolicy::started(const std::string* function, Clock::time_point now) {
  running_ = ++count_;
  since_ = now;
  function_ = function;
  return running_;
}

bool ReliefPolicy::ended(std::uint64_t run) {
  const bool relieved = relieved_ == run;
  running_ = 0;
  function_ = nullptr;
  return relieved;
}

std::optional<ReliefPolicy::Relief> ReliefPolicy::look(Clock::time_point now) {
  if (running_ == 0 || relieved_ == running_) return std::nullopt;
  const auto held = std::chrono::duration_cast<std::chrono::milliseconds>(now - since_);
  if (held < kReliefAfter) return std::nullopt;
  relieved_ = running_;
  return Relief{*function_, held};
}

}  // namespace herd::worker
