// The worker's inline-run policy with no threads and no clock: run times and times of day in,
// decisions out (which task runs on the I/O thread, when the loop goes to a fresh thread).
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include "worker/inline_policy.hpp"

using namespace herd::worker;
using Slow = InlinePolicy::Verdict::Slow;
using namespace std::chrono_literals;

namespace {

constexpr std::uint64_t kLimit = 100;  // HERD_INLINE_US's default
const std::string kF = "f";

std::vector<Run> one(const std::string& function = kF) {
  Run r;
  r.task.id = 1;
  r.task.key = "t1";
  r.task.function = function;
  return {r};
}

/// `n` runs of `function` on executors, each quicker than the limit.
void quick(InlinePolicy& p, int n, const std::string& function = kF) {
  for (int i = 0; i < n; ++i) p.ran(function, kLimit - 1);
}

/// A policy under which `kF` runs inline.
InlinePolicy eligible_policy() {
  InlinePolicy p(kLimit);
  quick(p, 8);
  REQUIRE(p.eligible(kF));
  return p;
}

/// `n` quick runs of `kF` on the I/O thread, each judged not slow.
void quick_inline(InlinePolicy& p, int n) {
  for (int i = 0; i < n; ++i) CHECK(p.ran_inline(kF, 1, false).slow == Slow::no);
}

}  // namespace

TEST_CASE("InlinePolicy.Rules.Values") {
  CHECK(InlinePolicy::kQuickRunsToInline == 8);
  CHECK(InlinePolicy::kSlowFactor == 10);
  CHECK(InlinePolicy::kSlowRunsWindow == 64);
  CHECK(InlinePolicy::kSlowRunsForGood == 4);
  CHECK(ReliefPolicy::kReliefAfter == 100ms);
  CHECK(ReliefPolicy::kLookEvery == 50ms);
}

TEST_CASE("InlinePolicy.Quick.EightInARowMakeItEligible") {
  InlinePolicy p(kLimit);
  CHECK(p.enabled());
  CHECK_FALSE(p.eligible(kF));  // never seen
  CHECK_FALSE(p.take(one()));
  quick(p, 7);
  CHECK_FALSE(p.eligible(kF));
  CHECK_FALSE(p.take(one()));
  quick(p, 1);
  CHECK(p.eligible(kF));
  CHECK(p.take(one()));
  // Another function is counted apart.
  CHECK_FALSE(p.eligible("g"));
}

TEST_CASE("InlinePolicy.Quick.ARunAtTheLimitStartsTheCountAgain") {
  InlinePolicy p(kLimit);
  quick(p, 7);
  p.ran(kF, kLimit);  // not quicker than the limit
  quick(p, 7);
  CHECK_FALSE(p.eligible(kF));
  quick(p, 1);
  CHECK(p.eligible(kF));
  p.ran(kF, 5 * kLimit);  // an eligible function's slow run on an executor: not eligible again...
  CHECK_FALSE(p.eligible(kF));
  CHECK_FALSE(p.barred(kF));  // ...but not barred
  quick(p, 8);
  CHECK(p.eligible(kF));
}

TEST_CASE("InlinePolicy.Slow.OnceSendsTheNextEightToExecutors") {
  InlinePolicy p = eligible_policy();
  const InlinePolicy::Verdict v = p.ran_inline(kF, 10 * kLimit, false);  // 10x the limit: slow
  CHECK(v.slow == Slow::once);
  CHECK(v.slow_runs == 1);
  CHECK_FALSE(p.barred(kF));
  for (int i = 0; i < 8; ++i) {
    CHECK_FALSE(p.take(one()));  // to an executor
    p.new_turn();
    quick(p, 1);
  }
  CHECK(p.take(one()));
}

TEST_CASE("InlinePolicy.Slow.UnderTenTimesIsNotSlowButStartsTheCountAgain") {
  InlinePolicy p = eligible_policy();
  CHECK(p.ran_inline(kF, 10 * kLimit - 1, false).slow == Slow::no);
  CHECK_FALSE(p.eligible(kF));
  quick(p, 8);
  CHECK(p.eligible(kF));
  quick_inline(p, 1);
  CHECK(p.eligible(kF));  // a quick run there counts as one
}

TEST_CASE("InlinePolicy.Slow.TwiceWithin64RunsMeansNever") {
  SUBCASE("the second slow run next to the first") {
    InlinePolicy p = eligible_policy();
    CHECK(p.ran_inline(kF, 10 * kLimit, false).slow == Slow::once);
    quick(p, 8);
    const InlinePolicy::Verdict v = p.ran_inline(kF, 10 * kLimit, false);
    CHECK(v.slow == Slow::twice);
    CHECK(v.within == 2);
    CHECK(p.barred(kF));
  }
  SUBCASE("64 runs after the first (its 65th run there) is still within") {
    InlinePolicy p = eligible_policy();
    CHECK(p.ran_inline(kF, 10 * kLimit, false).slow == Slow::once);  // its run 1 there
    quick_inline(p, 63);                                                // runs 2..64
    const InlinePolicy::Verdict v = p.ran_inline(kF, 10 * kLimit, false);  // run 65
    CHECK(v.slow == Slow::twice);
    CHECK(v.within == 65);
    CHECK(p.barred(kF));
  }
  SUBCASE("65 runs after the first is a new first") {
    InlinePolicy p = eligible_policy();
    CHECK(p.ran_inline(kF, 10 * kLimit, false).slow == Slow::once);  // run 1
    quick_inline(p, 64);                                                // runs 2..65
    const InlinePolicy::Verdict v = p.ran_inline(kF, 10 * kLimit, false);  // run 66
    CHECK(v.slow == Slow::once);
    CHECK(v.slow_runs == 2);
    CHECK_FALSE(p.barred(kF));
  }
  SUBCASE("barred however many quick runs follow") {
    InlinePolicy p = eligible_policy();
    p.ran_inline(kF, 10 * kLimit, false);
    p.ran_inline(kF, 10 * kLimit, false);
    quick(p, 100);
    CHECK_FALSE(p.eligible(kF));
    CHECK_FALSE(p.take(one()));
  }
}

TEST_CASE("InlinePolicy.Slow.FourTimesInAllMeansNever") {
  InlinePolicy p = eligible_policy();
  for (std::uint32_t n = 1; n <= 3; ++n) {
    const InlinePolicy::Verdict v = p.ran_inline(kF, 10 * kLimit, false);
    CHECK(v.slow == Slow::once);
    CHECK(v.slow_runs == n);
    quick_inline(p, 64);  // each slow run out of the window of the one before
    CHECK(p.eligible(kF));
  }
  const InlinePolicy::Verdict v = p.ran_inline(kF, 10 * kLimit, false);
  CHECK(v.slow == Slow::too_often);
  CHECK(v.slow_runs == 4);
  CHECK(p.barred(kF));
  quick(p, 8);
  CHECK_FALSE(p.take(one()));
}

TEST_CASE("InlinePolicy.Never.SecededFunction") {
  SUBCASE("on the I/O thread") {
    InlinePolicy p = eligible_policy();
    // Its run there is barred, not judged slow, however long it took.
    CHECK(p.ran_inline(kF, 1000 * kLimit, true).slow == Slow::no);
    CHECK(p.barred(kF));
  }
  SUBCASE("on an executor") {
    InlinePolicy p = eligible_policy();
    p.seceded(kF);
    CHECK(p.barred(kF));
  }
  SUBCASE("before it was ever timed") {
    InlinePolicy p(kLimit);
    p.seceded(kF);
    quick(p, 8);
    CHECK_FALSE(p.eligible(kF));
  }
}

TEST_CASE("InlinePolicy.Never.RelievedFunction") {
  InlinePolicy p = eligible_policy();
  p.relieved(kF);
  CHECK(p.barred(kF));
  quick(p, 8);
  CHECK_FALSE(p.take(one()));
}

TEST_CASE("InlinePolicy.Off.LimitZero") {
  InlinePolicy p(0);
  CHECK_FALSE(p.enabled());
  quick(p, 100);
  p.ran(kF, 0);
  CHECK_FALSE(p.eligible(kF));
  CHECK_FALSE(p.take(one()));
  CHECK(p.ran_inline(kF, 1'000'000, false).slow == Slow::no);
  CHECK_FALSE(p.barred(kF));
}

TEST_CASE("InlinePolicy.Turn.OnlyTaskOneATurn") {
  InlinePolicy p = eligible_policy();
  std::vector<Run> two = one();
  two.push_back(two.front());
  CHECK_FALSE(p.take({}));
  CHECK_FALSE(p.take(two));
  CHECK(p.take(one()));
  CHECK_FALSE(p.take(one()));  // this turn had its inline run
  p.new_turn();
  CHECK(p.take(one()));
}

TEST_CASE("InlinePolicy.Turn.TimeLimitIsolatedGangGpuNeverInline") {
  InlinePolicy p = eligible_policy();
  std::vector<Run> r = one();
  SUBCASE("time limit") { r.front().task.timeout_ms = 1000; }
  SUBCASE("isolated") { r.front().task.isolated = true; }
  SUBCASE("gang member") {
    r.front().task.gang = 7;
    r.front().task.gang_size = 2;
  }
  SUBCASE("GPUs") { r.front().devices = {0}; }
  CHECK_FALSE(p.take(r));
  CHECK(p.take(one()));  // the turn's inline run is still to take
}

TEST_CASE("ReliefPolicy.HeldFor100MsIsRelievedOnce") {
  using Clock = ReliefPolicy::Clock;
  ReliefPolicy r;
  const Clock::time_point t0 = Clock::time_point{} + 5s;
  CHECK_FALSE(r.look(t0));  // nothing runs there
  const std::string function = "slow_fn";
  const std::uint64_t run = r.started(&function, t0);
  CHECK_FALSE(r.look(t0 + 50ms));
  CHECK_FALSE(r.look(t0 + 99ms));
  CHECK_FALSE(r.look(t0 + 100ms - 1us));
  const auto relief = r.look(t0 + 100ms);
  REQUIRE(relief);
  CHECK(relief->function == "slow_fn");
  CHECK(relief->held == 100ms);
  CHECK_FALSE(r.look(t0 + 150ms));  // relieved already
  CHECK(r.ended(run));              // its thread no longer has the loop
  CHECK_FALSE(r.look(t0 + 1s));

  // A run that ends in time keeps its thread's loop; the next one is timed from its own start.
  const std::uint64_t quick_run = r.started(&function, t0 + 2s);
  CHECK(quick_run != run);
  CHECK_FALSE(r.look(t0 + 2s + 60ms));
  CHECK_FALSE(r.ended(quick_run));
  CHECK_FALSE(r.look(t0 + 3s));  // nothing runs there now
  const std::uint64_t third = r.started(&function, t0 + 4s);
  CHECK_FALSE(r.look(t0 + 4s + 99ms));
  const auto late = r.look(t0 + 4s + 250ms);
  REQUIRE(late);
  CHECK(late->held == 250ms);
  CHECK(r.ended(third));
}
