// herd::Sweep: the driver. One thread submits runs lazily (at most max_running in flight),
// takes them back in completion order (Client::as_completed), writes each to the results files
// the moment it ends, and feeds early stopping; a second thread only redraws the progress bar
// and cancels function trials past their timeout, which is what wakes the first one.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <iostream>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include "herd/sweep.hpp"
#include "sweep/command.hpp"
#include "sweep/halving.hpp"
#include "common/progress_bar.hpp"
#include "common/util.hpp"
#include "sweep/progress.hpp"
#include "sweep/results.hpp"
#include "sweep/trial_task.hpp"
#include "common/env.hpp"

namespace herd {

using sweep::Counts;
using sweep::RunRecord;
using sweep::TrialOutput;
using sweep::TrialRequest;

namespace {

using Clock = std::chrono::steady_clock;

/// 16 hex digits of FNV-1a over "name=value\n" in name order: the same parameters give the
/// same id in every run of the sweep, which is what resuming matches on.
std::string trial_id(const Params& params) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  auto feed = [&](const std::string& s) {
    for (const unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  };
  for (const auto& [k, v] : params) {
    feed(k);
    feed("=");
    feed(v);
    feed("\n");
  }
  // FNV-1a alone changes few bits between texts that differ in one character; this finalizer
  // (splitmix64's) spreads them, so ids that look alike are rare.
  h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ULL;
  h = (h ^ (h >> 27)) * 0x94D049BB133111EBULL;
  h ^= h >> 31;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

double parse_memory_mb(const std::string& text) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    throw std::invalid_argument("memory '" + text + "': expected e.g. 512M, 4G or a number of megabytes");
  }
  std::string unit = text.substr(used);
  if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b')) unit.pop_back();
  if (unit.size() > 1 && unit.back() == 'i') unit.pop_back();
  double scale = 1;
  if (unit.empty() || unit == "M" || unit == "m") {
    scale = 1;
  } else if (unit == "K" || unit == "k") {
    scale = 1.0 / 1024;
  } else if (unit == "G" || unit == "g") {
    scale = 1024;
  } else if (unit == "T" || unit == "t") {
    scale = 1024.0 * 1024;
  } else {
    throw std::invalid_argument("memory '" + text + "': unknown unit '" + unit + "' (K, M, G or T)");
  }
  if (!(v > 0)) throw std::invalid_argument("memory '" + text + "' must be positive");
  return v * scale;
}

bool better_value(double a, double b, bool maximize) {
  if (std::isnan(a) != std::isnan(b)) return std::isnan(b);
  return maximize ? a > b : a < b;
}

}  // namespace

struct Sweep::Impl {
  SearchSpace space;
  std::string script;
  std::vector<std::string> argv;
  std::string function;
  std::string objective;
  bool maximize = false;
  int max_running = 0;
  double timeout_s = 0;
  int retries = 0;
  std::map<std::string, double> resources;
  std::map<std::string, std::string> env;
  std::string cwd;
  std::size_t output_limit = 1 << 20;
  std::string results;
  bool rerun_failed = false;
  std::optional<SuccessiveHalving> halving;
  Progress progress = Progress::automatic;
  std::size_t top = 10;

  bool is_command() const { return !script.empty() || !argv.empty(); }
  void validate() const;
  /// Placeholder values of one run: the parameters, {trial}, {index}, and the budget.
  Params values(const std::string& id, std::size_t index, const Params& params, const std::string& budget) const;
  TrialRequest request(const std::string& id, std::size_t index, const Params& params,
                       const std::string& budget) const;
  std::string describe(const std::string& id, std::size_t index, const Params& params,
                       const std::string& budget) const;
  class Driver;  // one run(); nested for access to the settings
};

void Sweep::Impl::validate() const {
  const int kinds = (!script.empty() ? 1 : 0) + (!argv.empty() ? 1 : 0) + (!function.empty() ? 1 : 0);
  if (kinds == 0) throw std::invalid_argument("herd::Sweep: no command and no function to run");
  if (kinds > 1) throw std::invalid_argument("herd::Sweep: give a command or a function, not both");
  if (space.empty()) throw std::invalid_argument("herd::Sweep: the search space is empty");
  if (halving) {
    (void)halving->rungs();  // throws for bad settings
    if (objective.empty()) {
      throw std::invalid_argument("herd::Sweep: early stopping needs an objective (minimize/maximize)");
    }
    for (const auto& n : space.names()) {
      if (n == halving->parameter()) {
        throw std::invalid_argument("herd::Sweep: the budget parameter '" + n + "' is also a search-space parameter");
      }
    }
  }
  if (is_command()) {
    std::set<std::string> used;
    for (const std::string& part : argv.empty() ? std::vector<std::string>{script} : argv) {
      for (const auto& p : sweep::placeholders(part)) used.insert(p);
    }
    // Fills a dummy trial to name an unknown placeholder in the error.
    Params dummy;
    for (const auto& n : space.names()) dummy[n] = "x";
    dummy["trial"] = dummy["index"] = "x";
    if (halving) dummy[halving->parameter()] = "x";
    for (const auto& p : used) {
      if (dummy.count(p) == 0) (void)sweep::fill_template("{" + p + "}", dummy, false);
    }
    if (halving && used.count(halving->parameter()) == 0) {
      throw std::invalid_argument("herd::Sweep: early stopping runs each trial at growing budgets, but the command "
                                  "has no {" + halving->parameter() + "} placeholder");
    }
  }
}

Params Sweep::Impl::values(const std::string& id, std::size_t index, const Params& params,
                           const std::string& budget) const {
  Params v = params;
  v["trial"] = id;
  v["index"] = std::to_string(index);
  if (halving) v[halving->parameter()] = budget;
  return v;
}

TrialRequest Sweep::Impl::request(const std::string& id, std::size_t index, const Params& params,
                                  const std::string& budget) const {
  TrialRequest r;
  if (!is_command()) {
    r.function = function;
    r.params = params;
    if (halving) r.params[halving->parameter()] = budget;
    r.objective = objective;
    return r;
  }
  const Params v = values(id, index, params, budget);
  r.command.env = env;
  if (!argv.empty()) {
    for (const auto& a : argv) r.command.argv.push_back(sweep::fill_template(a, v, false));
  } else {
    r.command.script = sweep::fill_script(script, v, r.command.env);  // values in HERD_P_<name>
  }
  r.command.env[env::name(env::Var::trial_id)] = id;
  r.command.env[env::name(env::Var::trial_index)] = std::to_string(index);
  for (const auto& [k, val] : params) r.command.env[env::name(env::Var::param) + k] = val;
  if (halving) r.command.env[env::name(env::Var::trial_budget)] = budget;
  r.command.cwd = cwd;
  r.command.timeout_s = timeout_s;
  r.command.tail_bytes = output_limit;
  return r;
}

std::string Sweep::Impl::describe(const std::string& id, std::size_t index, const Params& params,
                                  const std::string& budget) const {
  const TrialRequest r = request(id, index, params, budget);
  if (!r.function.empty()) {
    std::string s = r.function + "(";
    bool first = true;
    for (const auto& [k, v] : r.params) {
      s += (first ? "" : ", ") + k + "=" + v;
      first = false;
    }
    return s + ")";
  }
  // What a user would type (values quoted); what runs takes them from the environment.
  if (!r.command.script.empty()) return sweep::fill_template(script, values(id, index, params, budget), true);
  std::string s;
  for (const auto& a : r.command.argv) s += (s.empty() ? "" : " ") + util::shell_quote(a);
  return s;
}

Sweep::Sweep(SearchSpace space) : impl_(std::make_unique<Impl>()) { impl_->space = std::move(space); }
Sweep::~Sweep() = default;
Sweep::Sweep(const Sweep& other) : impl_(std::make_unique<Impl>(*other.impl_)) {}
Sweep& Sweep::operator=(const Sweep& other) {
  if (this != &other) impl_ = std::make_unique<Impl>(*other.impl_);
  return *this;
}
Sweep::Sweep(Sweep&&) noexcept = default;
Sweep& Sweep::operator=(Sweep&&) noexcept = default;

Sweep& Sweep::command(std::string script) {
  impl_->script = std::move(script);
  impl_->argv.clear();
  impl_->function.clear();
  return *this;
}
Sweep& Sweep::command(std::vector<std::string> argv) {
  impl_->argv = std::move(argv);
  impl_->script.clear();
  impl_->function.clear();
  return *this;
}
Sweep& Sweep::function(std::string registered_name) {
  impl_->function = std::move(registered_name);
  impl_->script.clear();
  impl_->argv.clear();
  return *this;
}
Sweep& Sweep::minimize(std::string metric) {
  impl_->objective = std::move(metric);
  impl_->maximize = false;
  return *this;
}
Sweep& Sweep::maximize(std::string metric) {
  impl_->objective = std::move(metric);
  impl_->maximize = true;
  return *this;
}
Sweep& Sweep::max_running(int n) {
  if (n < 0) throw std::invalid_argument("herd::Sweep: max_running must be >= 0");
  impl_->max_running = n;
  return *this;
}
Sweep& Sweep::timeout(double seconds) {
  if (!(seconds >= 0)) throw std::invalid_argument("herd::Sweep: timeout must be >= 0");
  impl_->timeout_s = seconds;
  return *this;
}
Sweep& Sweep::retries(int n) {
  if (n < 0) throw std::invalid_argument("herd::Sweep: retries must be >= 0");
  impl_->retries = n;
  return *this;
}
Sweep& Sweep::resource(const std::string& name, double amount) {
  if (name.empty() || !(amount > 0)) throw std::invalid_argument("herd::Sweep: resource needs a name and an amount > 0");
  impl_->resources[name] = amount;
  return *this;
}
Sweep& Sweep::memory(const std::string& amount) { return resource("memory", parse_memory_mb(amount)); }
Sweep& Sweep::env(std::string name, std::string value) {
  impl_->env[std::move(name)] = std::move(value);
  return *this;
}
Sweep& Sweep::working_directory(std::string path) {
  impl_->cwd = std::move(path);
  return *this;
}
Sweep& Sweep::output_limit(std::size_t bytes) {
  impl_->output_limit = std::max<std::size_t>(bytes, 1024);
  return *this;
}
Sweep& Sweep::results(std::string prefix) {
  impl_->results = std::move(prefix);
  return *this;
}
Sweep& Sweep::rerun_failed(bool yes) {
  impl_->rerun_failed = yes;
  return *this;
}
Sweep& Sweep::early_stopping(SuccessiveHalving rule) {
  impl_->halving = std::move(rule);
  return *this;
}
Sweep& Sweep::progress(Progress mode) {
  impl_->progress = mode;
  return *this;
}
Sweep& Sweep::top(std::size_t k) {
  impl_->top = k;
  return *this;
}

std::vector<std::string> Sweep::describe() const {
  impl_->validate();
  const std::string budget = impl_->halving ? util::format_double(impl_->halving->rungs().front()) : "";
  std::vector<std::string> out;
  const std::vector<Params> trials = impl_->space.expand();
  for (std::size_t i = 0; i < trials.size(); ++i) {
    out.push_back(impl_->describe(trial_id(trials[i]), i, trials[i], budget));
  }
  return out;
}

namespace {

/// One task: a trial at a budget, one attempt.
struct Run {
  std::size_t trial = 0;
  std::size_t rung = 0;
  int attempt = 1;
};

struct InFlight {
  Run run;
  Future<TrialOutput> future;
  Clock::time_point deadline = Clock::time_point::max();  // function trials with a timeout
  bool timed_out = false;                                 // cancelled at the deadline
};

}  // namespace

/// The state of one sweep run(); lives for the call.
class Sweep::Impl::Driver {
 public:
  Driver(const Sweep::Impl& s, Client& client) : s_(s), client_(client) {}
  SweepReport run();

 private:
  void submit(const Run& run);
  void take(const Run& run, RunRecord record, bool from_cache);
  RunRecord record_of(InFlight& job);
  void finish_trial(std::size_t t, bool resumed);
  std::string budget_text(std::size_t rung) const {
    return rungs_.empty() ? std::string{} : util::format_double(rungs_[rung]);
  }
  TrialResult fresh(std::size_t t) const {
    TrialResult r;
    r.id = ids_[t];
    r.index = t;
    r.params = trials_[t];
    return r;
  }
  void monitor_loop();

  const Sweep::Impl& s_;
  Client& client_;
  std::vector<Params> trials_;
  std::vector<std::string> ids_;
  std::vector<double> rungs_;
  std::optional<sweep::Halving> halving_;
  std::unique_ptr<sweep::ResultsStore> store_;
  // Earlier outcomes by (trial id, budget): the run records a resumed sweep need not repeat.
  std::map<std::pair<std::string, std::string>, RunRecord> cache_;
  // Latest final record per trial id in the file, so a resumed decision is not written twice.
  std::map<std::string, RunRecord> last_final_;
  std::vector<TrialResult> latest_;  // per trial: the outcome so far
  std::vector<bool> final_;          // per trial: outcome reached
  std::vector<bool> ran_now_;        // per trial: something was run for it in this call
  std::deque<Run> pending_;
  std::size_t runs_ = 0;
  std::uint64_t submitted_ = 0;
  std::uint32_t duration_s_ = 0;  // TaskOptions::duration of each trial (0 = none)
  /// With a timeout: the duration trials ask for, bounded by the pools' walltimes; a warning
  /// when it had to be (a trial asking for more than any worker has would wait for ever).
  std::string bound_duration();

  // Shared with the monitor thread.
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_monitor_ = false;
  // By future: the driver's as_completed says which finished (no list rebuilt per trial).
  std::unordered_map<const detail::FutureState*, InFlight> in_flight_;
  std::optional<AsCompleted<TrialOutput>> completed_;  // driver thread only
  Counts counts_;
  std::unique_ptr<sweep::ProgressView> view_;
};

void Sweep::Impl::Driver::monitor_loop() {
  std::unique_lock lock(mu_);
  while (!stop_monitor_) {
    cv_.wait_for(lock, std::chrono::milliseconds(250));
    if (stop_monitor_) break;
    const auto now = Clock::now();
    for (auto& [state, job] : in_flight_) {
      if (!job.timed_out && now >= job.deadline && !job.future.done()) {
        job.timed_out = true;
        job.future.cancel();  // wakes as_completed in the driver thread
      }
    }
    counts_.running = in_flight_.size();
    view_->tick(counts_);
  }
}

std::string Sweep::Impl::Driver::bound_duration() {
  duration_s_ = s_.timeout_s > 0 ? static_cast<std::uint32_t>(std::ceil(s_.timeout_s)) : 0;
  if (duration_s_ == 0) return {};
  std::vector<PoolInfo> pools;
  try {
    pools = client_.status().pools;
  } catch (const std::exception&) {
    return {};  // the scheduler did not answer: the trials ask for their timeout
  }
  long longest = -1;  // usable walltime of the pool that has most (-1 = every pool has none)
  std::string names;
  for (const auto& p : pools) {
    if (p.walltime_s <= 0) return {};  // a pool without a time limit fits any timeout
    longest = std::max(longest, p.walltime_s - p.retire_before_s);
    names += (names.empty() ? "" : ", ") + p.name + " " + std::to_string(p.walltime_s) + " s less " +
             std::to_string(p.retire_before_s) + " s";
  }
  if (longest < 0 || duration_s_ <= longest) return {};
  if (longest < 1) {
    throw std::invalid_argument("herd sweep: no pool's workers have any time for a trial: walltime less "
                                "retire_before is at most 0 (" + names + ")");
  }
  const std::string asked = util::format_double(s_.timeout_s);
  duration_s_ = static_cast<std::uint32_t>(longest);
  return "warning: the timeout (" + asked + " s) is longer than any worker's time (walltime less the retirement "
         "margin: " + names + "); trials ask for " + std::to_string(longest) + " s, and one still running when its "
         "worker retires is cut short and retried elsewhere. Raise the pools' walltime, or lower the timeout.";
}

void Sweep::Impl::Driver::submit(const Run& run) {
  const std::size_t t = run.trial;
  TrialRequest request = s_.request(ids_[t], t, trials_[t], budget_text(run.rung));
  TaskOptions options;
  options.key("trial-" + ids_[t].substr(0, 8) + (rungs_.empty() ? "" : "-b" + budget_text(run.rung)) + "-" +
              std::to_string(++submitted_));
  for (const auto& [name, amount] : s_.resources) options.resource(name, amount);
  // With a timeout, the scheduler avoids a Slurm worker whose job would end first.
  if (duration_s_ > 0) options.duration(duration_s_);
  InFlight job;
  job.run = run;
  job.future = client_.submit_by_name<TrialOutput>(sweep::kRunTrialTask, options, std::move(request));
  if (!s_.is_command() && s_.timeout_s > 0) {
    job.deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s_.timeout_s));
  }
  ++runs_;
  ran_now_[t] = true;
  completed_->add(job.future);
  std::lock_guard lock(mu_);
  const detail::FutureState* state = job.future.state().get();
  in_flight_.emplace(state, std::move(job));
  counts_.running = in_flight_.size();
}

RunRecord Sweep::Impl::Driver::record_of(InFlight& job) {
  RunRecord rec;
  rec.result = fresh(job.run.trial);
  TrialResult& r = rec.result;
  r.budget = budget_text(job.run.rung);
  r.attempts = job.run.attempt;
  rec.finished_at = sweep::utc_now();
  try {
    TrialOutput out = job.future.result();
    r.exit_code = out.exit_code;
    r.wall_time_s = out.wall_time_s;
    r.metrics = std::move(out.metrics);
    r.history = std::move(out.history);
    r.worker = std::move(out.worker);
    r.job_id = std::move(out.job_id);
    r.host = std::move(out.host);
    r.error = std::move(out.error);
    if (out.timed_out) {
      r.status = TrialStatus::timeout;
    } else if (!r.error.empty()) {
      r.status = TrialStatus::failed;
    } else if (!s_.objective.empty() && r.metrics.count(s_.objective) == 0) {
      r.status = TrialStatus::failed;
      r.error = "no metric '" + s_.objective + "' reported";
    } else {
      r.status = TrialStatus::ok;
    }
    if (r.status != TrialStatus::ok) rec.stderr_tail = std::move(out.stderr_tail);
  } catch (const CancelledError& e) {
    bool timed_out = false;
    {
      std::lock_guard lock(mu_);
      timed_out = job.timed_out;
    }
    r.status = timed_out ? TrialStatus::timeout : TrialStatus::failed;
    char buf[128];
    std::snprintf(buf, sizeof buf, "timed out after %g s (a C++ function cannot be interrupted: it runs on)",
                  s_.timeout_s);
    r.error = timed_out ? std::string(buf) : std::string(e.what());
    r.wall_time_s = timed_out ? s_.timeout_s : 0;
  } catch (const TaskError& e) {
    r.status = TrialStatus::failed;
    r.error = e.type() + ": " + e.message();
    r.worker = e.worker();
  } catch (const WorkerLostError& e) {
    r.status = TrialStatus::failed;
    r.error = e.what();
  }
  // ConnectionError (the scheduler is gone) ends the sweep; what finished is on disk.
  return rec;
}

void Sweep::Impl::Driver::finish_trial(std::size_t t, bool resumed) {
  final_[t] = true;
  const TrialResult& r = latest_[t];
  switch (r.status) {
    case TrialStatus::ok: ++counts_.ok; break;
    case TrialStatus::failed: ++counts_.failed; break;
    case TrialStatus::timeout: ++counts_.timed_out; break;
    case TrialStatus::stopped: ++counts_.stopped; break;
  }
  if (resumed) ++counts_.resumed;
  latest_[t].resumed = resumed;
  view_->trial_done(r, counts_, resumed);
}

void Sweep::Impl::Driver::take(const Run& run, RunRecord rec, bool from_cache) {
  const std::size_t t = run.trial;
  const bool ok = rec.result.status == TrialStatus::ok;
  const bool top = rungs_.empty() || run.rung + 1 == rungs_.size();
  if (!from_cache && !ok && run.attempt <= s_.retries) {
    // Logged, but not final: a resumed sweep runs this trial again.
    rec.final = false;
    store_->append(rec);
    std::lock_guard lock(mu_);
    view_->note("retry " + std::to_string(run.attempt) + "/" + std::to_string(s_.retries) + " of trial " +
                    ids_[t].substr(0, 8) + ": " + rec.result.error, counts_);
    pending_.push_front(Run{t, run.rung, run.attempt + 1});
    return;
  }
  rec.final = !ok || top;
  if (!from_cache) store_->append(rec);
  rec.result.resumed = from_cache;
  latest_[t] = rec.result;
  std::lock_guard lock(mu_);
  if (!halving_) {
    finish_trial(t, from_cache);
    return;
  }
  // A result from the file may lack the objective (it was run under another one): it ranks last.
  const auto found = rec.result.metrics.find(s_.objective);
  const double value = ok && found != rec.result.metrics.end() ? found->second : std::nan("");
  const sweep::Halving::Decision d = halving_->report(t, ok, value);
  if (rec.final) finish_trial(t, !ran_now_[t]);
  // Promotions go first: deeper rungs finish the trials that are already the most promising.
  for (auto it = d.promote.rbegin(); it != d.promote.rend(); ++it) pending_.push_front(Run{*it, halving_->rung_of(*it), 1});
  for (const std::size_t s : d.stop) {
    RunRecord stop;
    stop.result = latest_[s];
    stop.result.status = TrialStatus::stopped;
    stop.result.error = "not in the best 1/" + util::format_double(s_.halving->eta()) + " at budget " +
                        stop.result.budget;
    stop.final = true;
    stop.finished_at = sweep::utc_now();
    // Written unless the file already ends this trial the same way (a resumed sweep).
    const auto prev = last_final_.find(ids_[s]);
    const bool known = prev != last_final_.end() && prev->second.result.status == TrialStatus::stopped &&
                       prev->second.result.budget == stop.result.budget;
    if (!known) store_->append(stop);
    stop.result.resumed = !ran_now_[s];
    latest_[s] = stop.result;
    finish_trial(s, !ran_now_[s]);
  }
}

SweepReport Sweep::Impl::Driver::run() {
  s_.validate();
  const auto started = Clock::now();
  trials_ = s_.space.expand();
  for (const auto& p : trials_) ids_.push_back(trial_id(p));
  if (s_.halving) {
    rungs_ = s_.halving->rungs();
    halving_.emplace(trials_.size(), rungs_.size(), s_.halving->eta(), s_.halving->asynchronous(), s_.maximize);
  }
  store_ = s_.results.empty() ? std::make_unique<sweep::ResultsStore>()
                              : std::make_unique<sweep::ResultsStore>(s_.results, s_.space.names(), s_.objective,
                                                                      s_.halving.has_value());
  for (const RunRecord& r : store_->previous()) {
    if (r.final) last_final_[r.result.id] = r;
    // Stop decisions and failed attempts that were retried are no run outcomes to reuse.
    if (r.result.status == TrialStatus::stopped || (!r.final && r.result.status != TrialStatus::ok)) continue;
    cache_[{r.result.id, r.result.budget}] = r;
  }
  latest_.resize(trials_.size());
  for (std::size_t t = 0; t < trials_.size(); ++t) latest_[t] = fresh(t);
  final_.assign(trials_.size(), false);
  ran_now_.assign(trials_.size(), false);
  for (std::size_t t = 0; t < trials_.size(); ++t) pending_.push_back(Run{t, 0, 1});
  counts_.total = trials_.size();

  view_ = std::make_unique<sweep::ProgressView>(s_.progress, std::cout, util::is_terminal(std::cout), s_.space.names(),
                                                s_.objective);
  {
    std::size_t known = 0;
    for (std::size_t t = 0; t < trials_.size(); ++t) {
      if (cache_.count({ids_[t], budget_text(0)}) != 0) ++known;
    }
    std::string head = "sweep: " + std::to_string(trials_.size()) + " trials";
    if (!rungs_.empty()) {
      head += ", budgets";
      for (double b : rungs_) head += " " + util::format_double(b);
      head += s_.halving->asynchronous() ? " (ASHA" : " (successive halving";
      head += ", eta " + util::format_double(s_.halving->eta()) + ")";
    }
    if (!s_.results.empty()) head += "; results: " + store_->csv_path() + ", " + store_->jsonl_path();
    if (known > 0) head += "; " + std::to_string(known) + " found there";
    if (store_->unreadable_lines() > 0) {
      head += "; " + std::to_string(store_->unreadable_lines()) + " unreadable line(s) ignored";
    }
    view_->note(head, counts_);
    if (const std::string warning = bound_duration(); !warning.empty()) view_->note(warning, counts_);
  }
  std::thread monitor([this] { monitor_loop(); });
  struct Joiner {
    Driver* d;
    std::thread& t;
    ~Joiner() {
      {
        std::lock_guard lock(d->mu_);
        d->stop_monitor_ = true;
      }
      d->cv_.notify_all();
      t.join();
    }
  } joiner{this, monitor};

  completed_.emplace(client_.as_completed(std::vector<Future<TrialOutput>>{}));
  try {
    for (;;) {
      // Fill up to max_running, answering from the results file where it has the answer.
      while (!pending_.empty() && (s_.max_running == 0 || in_flight_.size() < static_cast<std::size_t>(s_.max_running))) {
        const Run run = pending_.front();
        pending_.pop_front();
        const auto hit = cache_.find({ids_[run.trial], budget_text(run.rung)});
        if (hit != cache_.end() && (hit->second.result.status == TrialStatus::ok || !s_.rerun_failed)) {
          RunRecord rec = hit->second;
          rec.result.index = run.trial;
          take(run, std::move(rec), true);
          continue;
        }
        submit(run);
      }
      if (in_flight_.empty()) {
        if (pending_.empty()) break;
        continue;
      }
      // Everything done by now is taken in one go, before the next round of submissions.
      std::vector<InFlight> done;
      {
        const std::vector<Future<TrialOutput>> batch = completed_->next_batch();
        std::lock_guard lock(mu_);
        for (const auto& f : batch) {
          auto it = in_flight_.find(f.state().get());
          if (it == in_flight_.end()) continue;
          done.push_back(std::move(it->second));
          in_flight_.erase(it);
        }
        counts_.running = in_flight_.size();
      }
      for (auto& job : done) take(job.run, record_of(job), false);
    }
  } catch (...) {
    // The scheduler is gone, or a results file cannot be written: end the bar's line first, so
    // that the error is readable. What finished is on disk.
    std::lock_guard lock(mu_);
    view_->finish(counts_);
    throw;
  }
  {
    std::lock_guard lock(mu_);
    view_->finish(counts_);
  }

  SweepReport report;
  report.trials = latest_;
  report.metric = s_.objective;
  report.parameters = s_.space.names();
  report.maximize = s_.maximize;
  report.ok = counts_.ok;
  report.failed = counts_.failed;
  report.timed_out = counts_.timed_out;
  report.stopped = counts_.stopped;
  report.resumed = counts_.resumed;
  report.runs = runs_;
  report.wall_time_s = std::chrono::duration<double>(Clock::now() - started).count();
  if (view_->mode() != Progress::none && s_.top > 0) {
    std::cout << report.table(s_.top);
    if (!s_.results.empty()) std::cout << "results: " << store_->csv_path() << ", " << store_->jsonl_path() << "\n";
    std::cout.flush();
  }
  return report;
}

SweepReport Sweep::run(Client& client) { return Impl::Driver(*impl_, client).run(); }

// ---- SweepReport ----

std::vector<const TrialResult*> SweepReport::best(std::size_t k) const {
  std::vector<const TrialResult*> out;
  for (const auto& t : trials) out.push_back(&t);
  if (!metric.empty()) {
    // Ranked: ok before stopped before the rest; then by the metric (NaN and missing last);
    // then by position.
    auto rank = [](TrialStatus s) { return s == TrialStatus::ok ? 0 : s == TrialStatus::stopped ? 1 : 2; };
    std::stable_sort(out.begin(), out.end(), [&](const TrialResult* a, const TrialResult* b) {
      if (rank(a->status) != rank(b->status)) return rank(a->status) < rank(b->status);
      const double va = a->metric(metric).value_or(std::nan(""));
      const double vb = b->metric(metric).value_or(std::nan(""));
      if (better_value(va, vb, maximize)) return true;
      if (better_value(vb, va, maximize)) return false;
      return a->index < b->index;
    });
  }
  if (out.size() > k) out.resize(k);
  return out;
}

const TrialResult* SweepReport::best() const {
  if (metric.empty()) return nullptr;
  const auto b = best(1);
  if (b.empty() || b[0]->status != TrialStatus::ok) return nullptr;
  const auto v = b[0]->metric(metric);
  return v && !std::isnan(*v) ? b[0] : nullptr;
}

std::string SweepReport::table(std::size_t k) const {
  const std::vector<const TrialResult*> rows = best(k);
  // Columns: #, trial, the parameters, budget, the objective then up to 3 more metrics,
  // status, time, worker.
  std::vector<std::string> params = parameters, metrics;
  bool budget = false;
  for (const auto& t : trials) {
    for (const auto& [name, v] : t.params) {
      if (std::find(params.begin(), params.end(), name) == params.end()) params.push_back(name);
    }
    budget = budget || !t.budget.empty();
  }
  if (!metric.empty()) metrics.push_back(metric);
  for (const auto* t : rows) {
    for (const auto& [name, v] : t->metrics) {
      if (metrics.size() < 4 && std::find(metrics.begin(), metrics.end(), name) == metrics.end()) metrics.push_back(name);
    }
  }
  std::vector<std::string> head = {"#", "trial"};
  head.insert(head.end(), params.begin(), params.end());
  if (budget) head.push_back("budget");
  head.insert(head.end(), metrics.begin(), metrics.end());
  head.insert(head.end(), {"status", "time", "worker"});
  std::vector<std::vector<std::string>> cells;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const TrialResult& t = *rows[i];
    std::vector<std::string> row = {std::to_string(i + 1), t.id.substr(0, 8)};
    for (const auto& p : params) {
      const auto it = t.params.find(p);
      row.push_back(it == t.params.end() ? "" : it->second);
    }
    if (budget) row.push_back(t.budget);
    for (const auto& m : metrics) {
      const auto v = t.metric(m);
      char buf[32] = "";
      if (v) std::snprintf(buf, sizeof buf, "%.6g", *v);
      row.push_back(buf);
    }
    row.push_back(to_string(t.status));
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f s", t.wall_time_s);
    row.push_back(buf);
    row.push_back(t.worker.empty() && t.resumed ? "(earlier)" : t.worker);
    cells.push_back(std::move(row));
  }
  std::vector<std::size_t> width(head.size());
  for (std::size_t c = 0; c < head.size(); ++c) {
    width[c] = head[c].size();
    for (const auto& row : cells) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& row) {
    std::string s;
    for (std::size_t c = 0; c < row.size(); ++c) {
      std::string cell = row[c];
      if (c == 0) cell = std::string(width[c] - cell.size(), ' ') + cell;  // right-align the rank
      else if (c + 1 < row.size()) cell.resize(width[c], ' ');
      s += (c ? "  " : "") + cell;
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s + "\n";
  };
  std::string out;
  char summary[256];
  std::snprintf(summary, sizeof summary, "%zu trials: %zu ok, %zu failed, %zu timeout, %zu stopped", trials.size(), ok,
                failed, timed_out, stopped);
  out += summary;
  if (resumed > 0) out += " (" + std::to_string(resumed) + " from an earlier run)";
  out += "; " + std::to_string(runs) + " runs in " + util::format_duration(wall_time_s) + "\n";
  if (rows.empty()) return out;
  out += metric.empty() ? "first " + std::to_string(rows.size()) + " trials:\n"
                        : "best " + std::to_string(rows.size()) + " by " + metric + " (" +
                              (maximize ? "max" : "min") + "):\n";
  out += line(head);
  for (const auto& row : cells) out += line(row);
  return out;
}

}  // namespace herd
