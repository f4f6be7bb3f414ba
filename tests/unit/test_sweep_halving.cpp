// Successive halving and ASHA decisions (src/sweep/halving.hpp), apart from running anything:
// which trials go on to the next rung and which stop, exactly.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "sweep/halving.hpp"

using herd::sweep::Halving;

namespace {

/// Runs a whole halving with runs finishing in the order of a queue (promotions first, as the
/// sweep driver does); `loss(t, rung)` gives each run's value (NaN = failed). Returns the
/// (trial, rung) pairs run and the trials stopped.
struct Outcome {
  std::set<std::pair<std::size_t, std::size_t>> runs;
  std::set<std::size_t> stopped, top;
};

template <typename Loss>
Outcome simulate(std::size_t n, std::size_t rungs, double eta, bool async, Loss loss) {
  Halving h(n, rungs, eta, async, false);
  std::vector<std::size_t> queue;
  for (std::size_t t = 0; t < n; ++t) queue.push_back(t);
  Outcome out;
  while (!queue.empty()) {
    const std::size_t t = queue.front();
    queue.erase(queue.begin());
    const std::size_t rung = h.rung_of(t);
    out.runs.insert({t, rung});
    const double v = loss(t, rung);
    if (rung + 1 == rungs && !std::isnan(v)) out.top.insert(t);
    const auto d = h.report(t, !std::isnan(v), v);
    queue.insert(queue.begin(), d.promote.begin(), d.promote.end());
    for (auto s : d.stop) {
      CHECK(out.stopped.insert(s).second);  // stopped once
    }
  }
  return out;
}

}  // namespace

TEST_CASE("Sweep.Halving.SynchronousKeepsExactlyTheBestThird" * doctest::timeout(10)) {
  // 9 trials, values 0.9, 0.1, 0.5, ... ; rungs 1, 3, 9: 9 -> 3 -> 1.
  const std::vector<double> x = {0.9, 0.1, 0.5, 0.3, 0.7, 0.2, 0.8, 0.6, 0.4};
  const Outcome o = simulate(9, 3, 3, false, [&](std::size_t t, std::size_t) { return x[t]; });
  std::set<std::pair<std::size_t, std::size_t>> expected;
  for (std::size_t t = 0; t < 9; ++t) expected.insert({t, 0});
  for (std::size_t t : {1, 5, 3}) expected.insert({t, 1});  // 0.1, 0.2, 0.3
  expected.insert({1, 2});                                   // 0.1
  CHECK(o.runs == expected);
  CHECK(o.top == std::set<std::size_t>{1});
  CHECK(o.stopped == std::set<std::size_t>{0, 2, 3, 4, 5, 6, 7, 8});
}

TEST_CASE("Sweep.Halving.SynchronousWaitsForTheWholeRung" * doctest::timeout(10)) {
  Halving h(4, 2, 2, false, false);
  CHECK(h.report(0, true, 1.0).promote.empty());
  CHECK(h.report(1, true, 0.5).promote.empty());
  CHECK(h.report(2, true, 3.0).promote.empty());
  const auto d = h.report(3, true, 2.0);  // the rung is complete: the best 4/2 = 2 go on
  CHECK(std::set<std::size_t>(d.promote.begin(), d.promote.end()) == std::set<std::size_t>{0, 1});
  CHECK(std::set<std::size_t>(d.stop.begin(), d.stop.end()) == std::set<std::size_t>{2, 3});
  CHECK(h.rung_of(0) == 1);
  CHECK(h.rung_of(2) == 0);
}

TEST_CASE("Sweep.Halving.MaximizeAndNaN" * doctest::timeout(10)) {
  Halving h(3, 2, 3, false, true);
  (void)h.report(0, true, std::nan(""));  // a diverged run ranks last
  (void)h.report(1, true, 0.7);
  const auto d = h.report(2, true, 0.9);
  CHECK(d.promote == std::vector<std::size_t>{2});
  CHECK(std::set<std::size_t>(d.stop.begin(), d.stop.end()) == std::set<std::size_t>{0, 1});
}

TEST_CASE("Sweep.Halving.FailedTrialsTakeNoPlace" * doctest::timeout(10)) {
  // 6 trials, eta 3: 2 go on. Trial 0 would be best but fails; trial 4 fails at rung 1.
  const std::vector<double> x = {0.0, 0.5, 0.2, 0.9, 0.1, 0.8};
  const Outcome o = simulate(6, 3, 3, false, [&](std::size_t t, std::size_t rung) {
    if (t == 0 && rung == 0) return std::nan("");
    if (t == 4 && rung == 1) return std::nan("");
    return x[t];
  });
  CHECK(o.runs.count({0, 1}) == 0);
  CHECK(o.runs.count({4, 1}) == 1);
  CHECK(o.runs.count({2, 1}) == 1);
  CHECK(o.runs.count({4, 2}) == 0);
  CHECK(o.top == std::set<std::size_t>{2});        // of rung 1's two, only 2 is left
  CHECK(o.stopped == std::set<std::size_t>{1, 3, 5});  // failed trials are not "stopped"
}

TEST_CASE("Sweep.Halving.EverythingFailsAtRungZero" * doctest::timeout(10)) {
  const Outcome o = simulate(4, 3, 2, false, [](std::size_t, std::size_t) { return std::nan(""); });
  CHECK(o.runs.size() == 4);
  CHECK(o.stopped.empty());
  CHECK(o.top.empty());
}

TEST_CASE("Sweep.Halving.AsynchronousPromotesWithoutWaiting" * doctest::timeout(10)) {
  // ASHA, eta 3: after 3 results the best of them goes on at once.
  Halving h(9, 3, 3, true, false);
  CHECK(h.report(0, true, 0.5).promote.empty());
  CHECK(h.report(1, true, 0.9).promote.empty());
  const auto d = h.report(2, true, 0.1);
  CHECK(d.promote == std::vector<std::size_t>{2});
  CHECK(d.stop.empty());  // nothing stops before the rung is complete
  CHECK(h.rung_of(2) == 1);
}

TEST_CASE("Sweep.Halving.AsynchronousEndToEnd" * doctest::timeout(10)) {
  // Runs one at a time, promotions first: the sequence is fixed, so the outcome is too.
  const std::vector<double> x = {0.5, 0.9, 0.1, 0.7, 0.3, 0.8, 0.2, 0.6, 0.4};
  const Outcome o = simulate(9, 3, 3, true, [&](std::size_t t, std::size_t rung) { return x[t] / (rung + 1); });
  std::set<std::pair<std::size_t, std::size_t>> expected;
  for (std::size_t t = 0; t < 9; ++t) expected.insert({t, 0});
  for (std::size_t t : {2, 4, 6}) expected.insert({t, 1});
  expected.insert({2, 2});
  CHECK(o.runs == expected);
  CHECK(o.top == std::set<std::size_t>{2});
  CHECK(o.stopped.size() == 8);
}

TEST_CASE("Sweep.Halving.AsynchronousCanPromoteAnEarlyLuckyTrial" * doctest::timeout(10)) {
  // ASHA's known trade: trial 0 is promoted on the first three results, although the rung's
  // later results are all better; synchronous halving would not have promoted it.
  const std::vector<double> x = {0.5, 0.9, 0.8, 0.1, 0.2, 0.3};
  const Outcome a = simulate(6, 2, 3, true, [&](std::size_t t, std::size_t) { return x[t]; });
  const Outcome s = simulate(6, 2, 3, false, [&](std::size_t t, std::size_t) { return x[t]; });
  CHECK(a.runs.count({0, 1}) == 1);
  CHECK(s.runs.count({0, 1}) == 0);
  CHECK(s.top == std::set<std::size_t>{3, 4});
  CHECK(a.top.count(3) == 1);  // the best still gets through
}
