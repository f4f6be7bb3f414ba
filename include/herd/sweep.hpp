#pragma once
/// @file sweep.hpp
/// @brief Hyperparameter sweeps: a search space (grids, random samples, both), trials that are
/// shell commands or registered C++ functions, metrics, early stopping by successive halving,
/// results written as they arrive (CSV + JSON lines), resumable.
///
/// @code
/// herd::SearchSpace space = herd::SearchSpace{}
///     .grid("batch", {"32", "64"})
///     .log_uniform("lr", 1e-4, 1e-1).samples(8).seed(1);          // 2 x 8 = 16 trials
/// herd::SweepReport report = herd::Sweep{space}
///     .command("python train.py --lr {lr} --batch {batch}")       // prints `herd-metric loss=...`
///     .minimize("loss").max_running(4).timeout(600).retries(1)
///     .results("runs/sweep1")                                     // runs/sweep1.csv, .jsonl
///     .run(client);
/// std::cout << report.table(5);                                   // the 5 best trials
/// @endcode
///
/// Conventions, in one place:
/// - **Parameters are text.** A trial's parameters are a `herd::Params` (name -> value as text):
///   exactly what a command line receives, what the results files record, and what a resumed
///   sweep matches on. Random values are rounded to 6 significant digits when drawn, so the
///   recorded value is the value the trial saw.
/// - **Commands.** `{name}` in a command stands for the parameter's value. In a shell command
///   it becomes a reference to the environment variable `HERD_P_<name>` holding the value, quoted
///   for where it stands (`"${HERD_P_lr}"`, or `${HERD_P_lr}` inside the command's own double
///   quotes), so the value is one word and the shell never evaluates it (`$(...)`, backquotes and
///   quotes in a value stay text); `{trial}` is the trial's id, `{index}` its position, and the
///   early-stopping budget parameter (default `{budget}`) its budget. `${VAR}` is left to the
///   shell, `{{`/`}}` are literal braces. A command given as an argv (several words after `--`
///   on the command line) runs without a shell and its words are filled in verbatim. Every trial
///   also gets `HERD_TRIAL_ID`, `HERD_TRIAL_INDEX` and `HERD_PARAM_<name>` in its environment.
/// - **Metrics of a command.** Lines of stdout of the form `herd-metric loss=0.31 acc=0.82`
///   (any number of `name=number` pairs); a metric reported several times has a history, its
///   last value is the final one. Or a JSON object on the last line of stdout, whose numeric
///   members are final metrics. A malformed metric line or JSON object makes the trial fail
///   with the reason; so does a missing objective metric. The metric lines must lie within
///   the last `Sweep::output_limit()` bytes of stdout (1 MiB by default).
/// - **Metrics of a C++ function.** Its return value: `herd::Metrics` (name -> number), or a
///   plain number, recorded under the objective's name. Intermediate values can be reported
///   with herd::report_metric() and are recorded as the history.
/// - **Status.** `ok`, `failed` (exit code != 0, an exception, malformed or missing metrics, a
///   lost worker), `timeout`, `stopped` (by early stopping, with its metrics at the budget it
///   reached).

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "herd/client.hpp"
#include "herd/remote.hpp"

namespace herd {

/// @brief A trial's parameters: name -> value as text (what a command line gets).
using Params = std::map<std::string, std::string>;
/// @brief What a trial reports: name -> value.
using Metrics = std::map<std::string, double>;

/// @brief A parameter of a trial, parsed as T (double, float, int, long, bool, std::string...).
/// @throws std::invalid_argument naming the parameter when it is missing or does not parse.
/// @code
/// herd::Metrics train(herd::Params p) {
///   const double lr = herd::param<double>(p, "lr");
///   const int epochs = herd::param<int>(p, "epochs");
///   ...
/// }
/// @endcode
template <typename T>
T param(const Params& params, const std::string& name);

/// @brief From inside a C++ trial: reports an intermediate value of a metric (e.g. the loss after
/// each epoch). The values are recorded, in order, as the metric's history; a metric only
/// reported this way ends at its last value. Call it from the thread that runs the trial;
/// elsewhere (outside a sweep trial, or from a thread the trial started) it does nothing.
/// @code
/// for (int e = 0; e < epochs; ++e) herd::report_metric("loss", train_one_epoch());
/// @endcode
void report_metric(const std::string& name, double value);

/// @brief The parameters a sweep explores: a grid (every combination of the listed values) times
/// `samples()` random draws.
///
/// With both grid and random dimensions, each of the random draws is combined with each grid
/// point (the same draws for every grid point, so grid points are compared fairly). Draws are a
/// pure function of the seed, the draw's number and the dimension's name, so raising
/// `samples()` keeps the earlier draws (a resumed sweep reuses their results) and adding a
/// dimension does not change the others. Duplicate trials (e.g. from a small integer range)
/// are run once.
/// @code
/// auto space = herd::SearchSpace{}.grid("batch", {"32", "64"}).grid("opt", {"sgd", "adam"})
///                  .log_uniform("lr", 1e-4, 1e-1).integer("layers", 1, 4).samples(10).seed(7);
/// std::vector<herd::Params> trials = space.expand();   // 2 * 2 * 10 = 40 (or fewer: duplicates)
/// @endcode
class SearchSpace {
 public:
  /// A grid dimension: these values, in this order.
  SearchSpace& grid(const std::string& name, std::vector<std::string> values);
  /// A grid of numbers (written in the shortest form that reads back the same): `{0.1, 0.01}`.
  SearchSpace& grid(const std::string& name, std::initializer_list<double> values) {
    return grid_numbers(name, std::vector<double>(values));
  }
  /// The same from a vector (a template, so that `{"a", "b"}` is never taken for one).
  template <typename V>
    requires std::is_same_v<V, std::vector<double>>
  SearchSpace& grid(const std::string& name, const V& values) {
    return grid_numbers(name, values);
  }
  /// Uniform in [low, high].
  SearchSpace& uniform(const std::string& name, double low, double high);
  /// Log-uniform in [low, high] (low > 0): as many draws per decade.
  SearchSpace& log_uniform(const std::string& name, double low, double high);
  /// A whole number in [low, high], both included.
  SearchSpace& integer(const std::string& name, long low, long high);
  /// One of `values`, each as likely.
  SearchSpace& choice(const std::string& name, std::vector<std::string> values);
  /// Number of random draws (default 1; ignored without random dimensions).
  SearchSpace& samples(int n);
  /// Seed of the draws (default 0).
  SearchSpace& seed(std::uint64_t s);

  /// @brief Parses one dimension from the command-line form: `"lr=0.1,0.01"` with
  /// `grid = true`; `"lr=loguniform:1e-4:1e-1"`, `"x=uniform:0:1"`, `"n=int:1:8"`,
  /// `"act=choice:relu,tanh"` otherwise.
  /// @throws std::invalid_argument naming the dimension.
  SearchSpace& parse(const std::string& spec, bool grid);

  /// @brief Every trial's parameters: grid points in row-major order (the first dimension
  /// varies slowest), each with draws 0..samples-1.
  std::vector<Params> expand() const;
  /// Names of the dimensions, in the order they were added.
  std::vector<std::string> names() const;
  bool empty() const { return dims_.empty(); }
  int samples() const { return samples_; }
  std::uint64_t seed() const { return seed_; }

  /// One dimension (public for the command line and the tests; use the setters).
  struct Dimension {
    enum class Kind { grid, uniform, log_uniform, integer, choice };
    std::string name;
    Kind kind = Kind::grid;
    std::vector<std::string> values;  // grid, choice
    double low = 0, high = 0;         // uniform, log_uniform, integer
  };
  const std::vector<Dimension>& dimensions() const { return dims_; }

 private:
  SearchSpace& add(Dimension d);
  SearchSpace& grid_numbers(const std::string& name, const std::vector<double>& values);
  std::vector<Dimension> dims_;
  int samples_ = 1;
  std::uint64_t seed_ = 0;
};

/// @brief Early stopping by successive halving, in stages ("rungs") of growing budget.
///
/// A trial's program or function takes its budget (epochs, steps, data fraction...) as a
/// parameter, `{budget}` by default (`parameter()`), and is run once per rung it reaches:
/// every trial at `min_budget`, then the best 1/eta of those again at min_budget*eta, and so on
/// up to `max_budget`. Trials not promoted end as `stopped`, with their metrics at the budget
/// they reached. A program that can continue from a checkpoint (keyed by `{trial}`) pays only
/// for the extra budget; one that cannot simply starts over.
///
/// This needs no streaming of intermediate metrics from a running trial (a shell task only
/// returns when it ends): each stage is a complete task.
///
/// - synchronous (default): a rung is judged when all its trials have finished; exactly the top
///   max(1, floor(n/eta)) of its n trials go on. Deterministic.
/// - asynchronous (ASHA): a trial goes on as soon as it is in the top floor(k/eta) of the k
///   results its rung has so far, so workers never wait for a rung to fill; when the rung is
///   complete, the best are topped up to max(1, floor(n/eta)) promotions.
///
/// Rung budgets: min_budget * eta^i while below max_budget, then max_budget.
/// @code
/// sweep.early_stopping(herd::SuccessiveHalving{}.parameter("epochs").budgets(1, 27).eta(3));
/// // rungs 1, 3, 9, 27 epochs: 81 trials -> 27 -> 9 -> 3 trials at 27 epochs
/// @endcode
class SuccessiveHalving {
 public:
  /// Name of the budget parameter (`{budget}` in a command; params["budget"] in a function).
  SuccessiveHalving& parameter(std::string name) { parameter_ = std::move(name); return *this; }
  /// Smallest and largest budget (0 < min <= max).
  SuccessiveHalving& budgets(double min_budget, double max_budget) {
    min_budget_ = min_budget;
    max_budget_ = max_budget;
    return *this;
  }
  /// Reduction factor (> 1; default 3): 1/eta of a rung goes on to the next.
  SuccessiveHalving& eta(double e) { eta_ = e; return *this; }
  /// ASHA: promote without waiting for the rung to fill.
  SuccessiveHalving& asynchronous(bool a = true) { asynchronous_ = a; return *this; }

  const std::string& parameter() const { return parameter_; }
  double min_budget() const { return min_budget_; }
  double max_budget() const { return max_budget_; }
  double eta() const { return eta_; }
  bool asynchronous() const { return asynchronous_; }
  /// The rung budgets. @throws std::invalid_argument for inconsistent settings.
  std::vector<double> rungs() const;

 private:
  std::string parameter_ = "budget";
  double min_budget_ = 1, max_budget_ = 9, eta_ = 3;
  bool asynchronous_ = false;
};

/// @brief How a trial ended.
enum class TrialStatus { ok, failed, timeout, stopped };
/// "ok", "failed", "timeout", "stopped".
const char* to_string(TrialStatus status);

/// @brief One trial's outcome, as written to the results files.
struct TrialResult {
  std::string id;           ///< stable id: a hash of the parameters (16 hex digits)
  std::size_t index = 0;    ///< position in SearchSpace::expand()
  Params params;            ///< the search-space parameters (not the budget)
  TrialStatus status = TrialStatus::failed;
  std::string error;        ///< why it failed, timed out or was stopped ("" when ok)
  Metrics metrics;          ///< final values
  std::map<std::string, std::vector<double>> history;  ///< every reported value, in order
  std::string budget;       ///< budget of the run these metrics come from ("" without early stopping)
  int exit_code = 0;        ///< the command's exit code (128+N: signal N); 0 for functions
  double wall_time_s = 0;   ///< wall time of that run
  int attempts = 0;         ///< runs it took (retries + 1), for the last budget
  std::string worker;       ///< worker that ran it
  std::string job_id;       ///< the worker's batch job (HERD_JOB_ID / SLURM_JOB_ID)
  std::string host;         ///< host of that worker
  bool resumed = false;     ///< taken from the results file of an earlier run, not run now

  /// The value of `metric`, or nullopt.
  std::optional<double> metric(const std::string& name) const;
};

/// @brief What Sweep::run returns: every trial of the sweep, and the counts.
struct SweepReport {
  std::vector<TrialResult> trials;  ///< in SearchSpace::expand() order
  std::vector<std::string> parameters;  ///< parameter names, in the search space's order
  std::string metric;               ///< the objective ("" = none)
  bool maximize = false;
  std::size_t ok = 0, failed = 0, timed_out = 0, stopped = 0;
  std::size_t resumed = 0;          ///< trials taken from the results file
  std::size_t runs = 0;             ///< tasks run by this call (rungs and retries included)
  double wall_time_s = 0;

  /// @brief The `k` best trials by the objective (status ok or stopped, best first; a trial
  /// without the metric, or with NaN, ranks last). Without an objective: the first k trials.
  std::vector<const TrialResult*> best(std::size_t k) const;
  /// @brief The best trial, if any has the metric.
  const TrialResult* best() const;
  /// @brief A text table of the `k` best trials, with a summary line.
  std::string table(std::size_t k = 10) const;
};

/// @brief Where progress goes while a sweep runs.
enum class Progress {
  automatic,  ///< a live bar when stdout is a terminal, else one line per finished trial
  bar,        ///< the live bar (counts, rate, ETA), redrawn in place
  lines,      ///< one line per finished trial
  none,
};

/// @brief A sweep: a search space, what each trial runs, and how; run() on any Client (a
/// LocalCluster, a SlurmCluster, or a remote scheduler).
///
/// Trials are submitted lazily, at most max_running() at a time, and each is written to the
/// results files as it finishes (one `write` per line, so a killed sweep loses no finished
/// trial). Running the same sweep again with the same results prefix skips trials already
/// finished (matched by their parameters, and budget under early stopping); failed and
/// timed-out ones are skipped too unless rerun_failed(). The command is not part of the match:
/// give a changed program a new results prefix.
///
/// Results files (`results("runs/a")`):
/// - `runs/a.jsonl`: the log, one JSON object per finished run (every rung and retry outcome
///   that counts) and per early-stopping decision: `trial`, `index`, `params`, `budget`,
///   `status`, `final` (this row is the trial's outcome), `metrics`, `history`, `exit_code`,
///   `wall_time_s`, `attempts`, `worker`, `job_id`, `host`, `error`, `stderr_tail`,
///   `finished_at`. Resuming reads this file.
/// - `runs/a.csv`: one row per trial, its latest final outcome: `trial,index,status,<params>,
///   [budget,]<metrics>,exit_code,wall_time_s,attempts,worker,job_id,host,error,finished_at`.
///   Appended to as trials finish; rewritten (atomically) when a new metric column appears or a
///   rerun replaces a row.
///
/// @code
/// herd::Metrics fit(herd::Params p);            // HERD_TASK(fit);
/// auto report = herd::Sweep{herd::SearchSpace{}.grid("lr", {0.1, 0.01})}
///                   .function(fit).minimize("loss").results("fit").run(client);
/// @endcode
class Sweep {
 public:
  explicit Sweep(SearchSpace space);
  ~Sweep();
  /// A Sweep is a value: copies are independent (`auto s = herd::Sweep{space}.command(...)`).
  Sweep(const Sweep& other);
  Sweep& operator=(const Sweep& other);
  Sweep(Sweep&&) noexcept;
  Sweep& operator=(Sweep&&) noexcept;

  /// Each trial runs this /bin/sh script, placeholders filled in and shell-quoted.
  Sweep& command(std::string script);
  /// Each trial runs this program with these arguments, no shell, placeholders filled in.
  Sweep& command(std::vector<std::string> argv);
  /// Each trial calls `fn(params)` on a worker; fn is registered with HERD_TASK and returns
  /// herd::Metrics or a number.
  template <typename R>
  Sweep& function(R (*fn)(Params)) {
    static_assert(std::is_same_v<R, Metrics> || std::is_arithmetic_v<R>,
                  "a sweep function returns herd::Metrics or a number");
    return function(detail::function_name(reinterpret_cast<const void*>(fn), typeid(R(Params)).name()));
  }
  /// As above, by registered name (for functions only the workers have).
  Sweep& function(std::string registered_name);

  /// The objective: smaller is better. Trials that do not report it fail.
  Sweep& minimize(std::string metric);
  /// The objective: larger is better.
  Sweep& maximize(std::string metric);

  /// At most n trials submitted at once (0 = no limit; default 0).
  Sweep& max_running(int n);
  /// Kills a command (its whole process group) after this many seconds: status timeout. A C++
  /// function cannot be interrupted: the sweep stops waiting for it (status timeout) and its
  /// worker slot stays busy until it returns. 0 = none.
  Sweep& timeout(double seconds);
  /// Runs a failed or timed-out trial up to n more times.
  Sweep& retries(int n);
  /// Per-trial resources, held on the worker while the trial runs; the workers must offer them
  /// (`--resources cpus=8,memory=32000`, a Slurm pool's gpus/resources).
  Sweep& resource(const std::string& name, double amount);
  /// resource("cpus", n): cores each trial holds, pinned (TaskOptions::cpus); every worker
  /// offers its own.
  Sweep& cpus(double n) { return resource("cpus", n); }
  /// resource("gpu", n): what a Slurm pool with `.gpus(N)` offers.
  Sweep& gpus(double n) { return resource("gpu", n); }
  /// resource("memory", megabytes): "512M", "4G", "1T" or a number of megabytes (every worker
  /// offers its own; a command trial is killed past it, as TaskOptions::memory).
  Sweep& memory(const std::string& amount);
  /// Extra environment variables for command trials.
  Sweep& env(std::string name, std::string value);
  /// Working directory of command trials ("" = the worker's).
  Sweep& working_directory(std::string path);
  /// How much of a command's stdout is searched for metrics (the end of it; default 1 MiB).
  Sweep& output_limit(std::size_t bytes);

  /// Results files: `prefix.csv` and `prefix.jsonl` (a trailing .csv/.jsonl is dropped).
  /// "" = keep results in memory only.
  Sweep& results(std::string prefix);
  /// When resuming: run again trials whose recorded outcome is failed or timeout.
  Sweep& rerun_failed(bool yes = true);
  /// Early stopping by (asynchronous) successive halving; needs an objective.
  Sweep& early_stopping(SuccessiveHalving rule);
  /// Progress display (default: automatic).
  Sweep& progress(Progress mode);
  /// Rows of the table printed at the end (0 = no table; default 10; only with progress).
  Sweep& top(std::size_t k);

  /// The trials this sweep would run, as text (the command, or the function and parameters),
  /// one per line, without running anything.
  std::vector<std::string> describe() const;

  /// @brief Runs the sweep to the end on `client` and returns every trial's outcome.
  /// @throws std::invalid_argument for an inconsistent sweep (no command or function,
  ///   a placeholder that is no parameter, early stopping without an objective...);
  ///   herd::Error if the results file is locked by another sweep or cannot be written;
  ///   herd::ConnectionError when the scheduler is lost (finished trials are on disk).
  SweepReport run(Client& client);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- implementation of param<T> ----
namespace detail {
[[noreturn]] void throw_bad_param(const std::string& name, const std::string& value, const char* type);
[[noreturn]] void throw_missing_param(const std::string& name);
bool parse_param(const std::string& text, double& out);
bool parse_param(const std::string& text, long long& out);
bool parse_param(const std::string& text, bool& out);
}  // namespace detail

template <typename T>
T param(const Params& params, const std::string& name) {
  const auto it = params.find(name);
  if (it == params.end()) detail::throw_missing_param(name);
  if constexpr (std::is_same_v<T, std::string>) {
    return it->second;
  } else if constexpr (std::is_same_v<T, bool>) {
    bool v = false;
    if (!detail::parse_param(it->second, v)) detail::throw_bad_param(name, it->second, "bool");
    return v;
  } else if constexpr (std::is_integral_v<T>) {
    long long v = 0;
    if (!detail::parse_param(it->second, v) || v < static_cast<long long>(std::numeric_limits<T>::min()) ||
        (v > 0 && static_cast<unsigned long long>(v) > static_cast<unsigned long long>(std::numeric_limits<T>::max()))) {
      detail::throw_bad_param(name, it->second, "an integer");
    }
    return static_cast<T>(v);
  } else if constexpr (std::is_floating_point_v<T>) {
    double v = 0;
    if (!detail::parse_param(it->second, v)) detail::throw_bad_param(name, it->second, "a number");
    return static_cast<T>(v);
  } else {
    static_assert(std::is_constructible_v<T, std::string>, "herd::param: unsupported type");
    return T(it->second);
  }
}

}  // namespace herd
