#include "sweep/halving.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace herd::sweep {

Halving::Halving(std::size_t n_trials, std::size_t n_rungs, double eta, bool asynchronous, bool maximize)
    : trials_(n_trials), rungs_(std::max<std::size_t>(1, n_rungs)), eta_(eta), asynchronous_(asynchronous),
      maximize_(maximize) {
  for (auto& r : rungs_) r.promoted.assign(n_trials, false);
  rungs_[0].entrants = n_trials;
}

bool Halving::better(const Result& a, const Result& b) const {
  const bool a_nan = std::isnan(a.value), b_nan = std::isnan(b.value);
  if (a_nan != b_nan) return b_nan;
  if (!a_nan && a.value != b.value) return maximize_ ? a.value > b.value : a.value < b.value;
  return a.trial < b.trial;  // ties: the earlier trial, so that decisions are reproducible
}

std::vector<Halving::Result> Halving::ranked(const Rung& r) const {
  std::vector<Result> out = r.ok;
  std::sort(out.begin(), out.end(), [&](const Result& a, const Result& b) { return better(a, b); });
  return out;
}

void Halving::promote(std::size_t rung, std::size_t t, Decision& d) {
  rungs_[rung].promoted[t] = true;
  ++rungs_[rung].n_promoted;
  ++rungs_[rung + 1].entrants;
  trials_[t].rung = rung + 1;
  trials_[t].reported = false;
  d.promote.push_back(t);
}

bool Halving::closed(std::size_t rung) const {
  // No more trials can arrive at a rung once the rung below it is finalized; it is complete
  // when all that arrived have finished.
  if (rung > 0 && !rungs_[rung - 1].finalized) return false;
  return rungs_[rung].results == rungs_[rung].entrants;
}

Halving::Decision Halving::report(std::size_t t, bool ok, double value) {
  if (t >= trials_.size() || trials_[t].reported) throw std::logic_error("Halving: unexpected report");
  Decision d;
  Trial& trial = trials_[t];
  trial.reported = true;
  Rung& at = rungs_[trial.rung];
  ++at.results;
  if (ok) at.ok.push_back({t, value});
  const std::size_t top = rungs_.size() - 1;
  // Decisions cascade: finalizing one rung can complete the next (e.g. when every promoted
  // trial had already failed), so walk all rungs below the top each time.
  for (std::size_t k = 0; k < top; ++k) {
    Rung& r = rungs_[k];
    if (r.finalized) continue;
    if (asynchronous_) {
      // ASHA: the top floor(results/eta) of what has finished so far go on now.
      const auto quota = static_cast<std::size_t>(std::floor(static_cast<double>(r.results) / eta_ + 1e-9));
      const std::vector<Result> order = ranked(r);
      for (std::size_t i = 0; i < std::min(quota, order.size()); ++i) {
        if (!r.promoted[order[i].trial]) promote(k, order[i].trial, d);
      }
    }
    if (!closed(k)) continue;
    // Complete: the best go on until max(1, floor(n/eta)) have, the other ok ones stop.
    const auto keep = std::max<std::size_t>(
        1, static_cast<std::size_t>(std::floor(static_cast<double>(r.entrants) / eta_ + 1e-9)));
    for (const Result& res : ranked(r)) {
      if (r.promoted[res.trial]) continue;
      if (r.n_promoted < keep) {
        promote(k, res.trial, d);
      } else {
        d.stop.push_back(res.trial);
      }
    }
    r.finalized = true;
  }
  return d;
}

}  // namespace herd::sweep
