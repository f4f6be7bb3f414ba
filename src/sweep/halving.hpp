// The decisions of successive halving (synchronous) and ASHA (asynchronous), apart from running
// anything: the driver reports each trial's outcome at its rung and runs what comes back. Pure,
// so the tests can check exactly which trials go on and which stop.
#pragma once

#include <cstddef>
#include <vector>

namespace herd::sweep {

class Halving {
 public:
  /// `n_trials` all start at rung 0; `n_rungs` >= 1; smaller values are better unless maximize.
  Halving(std::size_t n_trials, std::size_t n_rungs, double eta, bool asynchronous, bool maximize);

  struct Decision {
    std::vector<std::size_t> promote;  // trials to run at their next rung (rung_of() tells it)
    std::vector<std::size_t> stop;     // trials that end here, stopped
  };

  /// The run of trial `t` at its current rung ended: ok with the objective's value (NaN ranks
  /// last), or not ok (the trial ends as failed, and takes no place in the next rung).
  Decision report(std::size_t t, bool ok, double value);

  /// The rung a trial is at (its next run's rung once promoted).
  std::size_t rung_of(std::size_t t) const { return trials_[t].rung; }
  std::size_t n_rungs() const { return rungs_.size(); }

 private:
  struct Result {
    std::size_t trial;
    double value;
  };
  struct Rung {
    std::size_t entrants = 0;          // trials that were sent to this rung
    std::size_t results = 0;           // of them, finished (ok or not)
    std::vector<Result> ok;            // the ok ones, with their values
    std::vector<bool> promoted;        // by trial
    std::size_t n_promoted = 0;
    bool finalized = false;
  };
  struct Trial {
    std::size_t rung = 0;
    bool reported = false;  // its run at `rung` has ended
  };

  bool better(const Result& a, const Result& b) const;
  std::vector<Result> ranked(const Rung& r) const;
  void promote(std::size_t rung, std::size_t t, Decision& d);
  bool closed(std::size_t rung) const;

  std::vector<Trial> trials_;
  std::vector<Rung> rungs_;
  double eta_;
  bool asynchronous_, maximize_;
};

}  // namespace herd::sweep
