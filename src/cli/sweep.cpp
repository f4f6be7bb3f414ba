// `herd sweep`: a hyperparameter sweep over a command, from options or a sweep file.
//
//   herd sweep --grid lr=0.1,0.01 --grid batch=32,64 --metric loss -- python train.py --lr {lr} --batch {batch}
//   herd sweep --file sweep.toml [options that override the file]
//
// Everything after `--` is the command: one word is a /bin/sh script (quote it to use pipes,
// redirections or `&&`); several words are a program and its arguments, run without a shell.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "cli/commands.hpp"
#include "common/toml_file.hpp"
#include "common/util.hpp"
#include "herd/herd.hpp"
#include "herd/sweep.hpp"
#include "sweep/config_cluster.hpp"

namespace herd::detail {
namespace {

const char* kFooter = R"(Search space:
  --grid NAME=V1,V2,...           every value (all grids combine)
  --random NAME=uniform:LO:HI     or loguniform:LO:HI, int:LO:HI, choice:A,B,C;
                                  --samples draws, combined with every grid point
Command placeholders: {NAME} (shell-quoted), {trial}, {index}, {budget} (early stopping);
  ${VAR} is the shell's; {{ and }} are literal braces.
Metrics: stdout lines `herd-metric loss=0.3 acc=0.9` (the last value of each is final, the
  earlier ones its history) or a JSON object on the last line of stdout.
Early stopping: --early-stop sh|asha runs trials at budgets min, min*eta, ... max
  ({budget} in the command) and keeps the best 1/eta at each.
Results: PREFIX.csv (one row per trial) and PREFIX.jsonl (every run), written as trials
  finish. Running the same sweep again skips what is there (--rerun-failed: not failures).
Sweep file (TOML; options given on the command line win):
  command = "python train.py --lr {lr} --batch {batch}"    # or ["prog", "arg", ...]
  metric = "loss"
  mode = "min"
  samples = 20
  seed = 1
  max_running = 4      # also: timeout, retries, results, rerun_failed, cpus, gpus,
                       #       memory, top, output_limit, working_directory
  [grid]
  batch = [32, 64]
  [random]
  lr = "loguniform:1e-4:1e-1"
  [early_stop]
  kind = "asha"        # or "sh"; parameter, min_budget, max_budget, eta
  [resources]
  bigmem = 1
  [env]
  OMP_NUM_THREADS = "1"
  [cluster]
  local_workers = 4    # or scheduler = "tcp://...", or config = "cluster.toml";
                       # worker_resources = "cpus=4,gpu=1" for local workers
Exit status: 0 when every trial is ok (or stopped by early stopping), 3 when some failed or
  timed out, 1 on errors, 2 on usage errors.)";

struct Options {
  std::vector<std::string> grid, random, command;
  int samples = 1;
  std::uint64_t seed = 0;
  std::string metric, mode = "min";
  int max_running = -1;
  double timeout = 0;
  int retries = 0;
  std::string results = "sweep";
  bool rerun_failed = false;
  double cpus = 0, gpus = 0;
  std::string memory;
  std::vector<std::string> resources, env;
  std::string early_stop, budget_param = "budget";
  double min_budget = 1, max_budget = 9, eta = 3;
  std::string scheduler, config, worker_resources;
  int local_workers = 0;
  std::size_t top = 10, output_limit = 1 << 20;
  std::string workdir, progress = "auto";
  bool quiet = false, dry_run = false;
};

/// Reads a sweep file into `o`; only keys the command line did not give are taken.
void read_sweep_file(const std::string& path, Options& o, const CLI::App& app) {
  const tomlfile::Document doc = tomlfile::load(path);
  auto given = [&](const char* flag) { return app.count(flag) > 0; };
  auto read = [&](const std::string& section, const toml::key& key, const toml::node& v) {
    const std::string k(key.str());
    const std::string where = tomlfile::where(doc, v.source()) + ": " + (section.empty() ? "" : "[" + section + "] ") + k;
    auto fail = [&](const std::string& what) { throw std::invalid_argument(where + ": " + what); };
    auto got = [&]() {
      const auto t = v.is_string() ? tomlfile::scalar_text(doc, v) : std::nullopt;
      return t ? "the string \"" + *t + "\"" : tomlfile::type_name(v);
    };
    // A scalar as text: strings as they are, numbers as written.
    auto one = [&]() {
      const auto t = v.is_array() || v.is_table() ? std::nullopt : tomlfile::scalar_text(doc, v);
      if (!t) fail("expected one value, got " + got());
      return *t;
    };
    auto number = [&]() {
      const auto d = v.is_boolean() ? std::nullopt : v.value<double>();
      if (!d) fail("expected a number, got " + got());
      return *d;
    };
    auto whole = [&]() {
      const double d = number();
      if (d != std::floor(d) || d < 0 || d > 9e15) fail("expected a whole number >= 0");
      return static_cast<long long>(d);
    };
    auto flag = [&]() {
      if (!v.is_boolean()) fail("expected true or false, got " + got());
      return v.as_boolean()->get();
    };
    // A list of values: an array, or one value.
    auto values = [&]() {
      std::vector<std::string> out;
      if (const auto* a = v.as_array()) {
        for (const toml::node& item : *a) {
          const auto t = item.is_array() || item.is_table() ? std::nullopt : tomlfile::scalar_text(doc, item);
          if (!t) fail("expected an array of values, but it holds " + tomlfile::type_name(item));
          out.push_back(*t);
        }
      } else {
        out.push_back(one());
      }
      return out;
    };
    if (section.empty()) {
      if (k == "command") {
        if (o.command.empty()) o.command = values();  // a string: a script; an array: argv
      } else if (k == "metric") {
        if (!given("--metric")) o.metric = one();
      } else if (k == "mode") {
        if (!given("--mode")) o.mode = one();
      } else if (k == "samples") {
        if (!given("--samples")) o.samples = static_cast<int>(whole());
      } else if (k == "seed") {
        if (!given("--seed")) o.seed = static_cast<std::uint64_t>(whole());
      } else if (k == "max_running") {
        if (!given("--max-running")) o.max_running = static_cast<int>(whole());
      } else if (k == "timeout") {
        if (!given("--timeout")) o.timeout = number();
      } else if (k == "retries") {
        if (!given("--retries")) o.retries = static_cast<int>(whole());
      } else if (k == "results") {
        if (!given("--results")) o.results = one();
      } else if (k == "rerun_failed") {
        if (!given("--rerun-failed")) o.rerun_failed = flag();
      } else if (k == "cpus") {
        if (!given("--cpus")) o.cpus = number();
      } else if (k == "gpus") {
        if (!given("--gpus")) o.gpus = number();
      } else if (k == "memory") {
        if (!given("--memory")) o.memory = one();
      } else if (k == "top") {
        if (!given("--top")) o.top = static_cast<std::size_t>(whole());
      } else if (k == "output_limit") {
        if (!given("--output-limit")) o.output_limit = static_cast<std::size_t>(whole());
      } else if (k == "working_directory") {
        if (!given("--workdir")) o.workdir = one();
      } else {
        fail("unknown key");
      }
    } else if (section == "grid") {
      o.grid.push_back(k + "=" + util::join(values(), ","));
    } else if (section == "random") {
      o.random.push_back(k + "=" + one());
    } else if (section == "resources") {
      o.resources.push_back(k + "=" + one());
    } else if (section == "env") {
      o.env.push_back(k + "=" + one());
    } else if (section == "early_stop") {
      if (k == "kind") {
        if (!given("--early-stop")) o.early_stop = one();
      } else if (k == "parameter") {
        if (!given("--budget-param")) o.budget_param = one();
      } else if (k == "min_budget") {
        if (!given("--min-budget")) o.min_budget = number();
      } else if (k == "max_budget") {
        if (!given("--max-budget")) o.max_budget = number();
      } else if (k == "eta") {
        if (!given("--eta")) o.eta = number();
      } else {
        fail("unknown key");
      }
    } else if (section == "cluster") {
      const bool cluster_given = given("--scheduler") || given("--config") || given("--local-workers");
      if (k == "scheduler") {
        if (!cluster_given) o.scheduler = one();
      } else if (k == "config") {
        // Relative to the sweep file, like a path in any other configuration file.
        if (!cluster_given) {
          const std::filesystem::path p = one();
          o.config = p.is_absolute() ? p.string() : (std::filesystem::path(path).parent_path() / p).string();
        }
      } else if (k == "local_workers") {
        if (!cluster_given) o.local_workers = static_cast<int>(whole());
      } else if (k == "worker_resources") {
        if (!given("--worker-resources")) o.worker_resources = one();
      } else {
        fail("unknown key");
      }
    }
  };
  for (const auto& [key, v] : doc.root) {
    const std::string k(key.str());
    if (!v.is_table()) {
      read("", key, v);
      continue;
    }
    if (k != "grid" && k != "random" && k != "early_stop" && k != "resources" && k != "env" && k != "cluster") {
      throw std::invalid_argument(tomlfile::where(doc, key.source()) + ": unknown section [" + k +
                                  "] (grid, random, early_stop, resources, env, cluster)");
    }
    for (const auto& [inner, value] : *v.as_table()) {
      if (value.is_table()) {
        throw std::invalid_argument(tomlfile::where(doc, inner.source()) + ": [" + k + "] " +
                                    std::string(inner.str()) + ": unexpected nested section");
      }
      read(k, inner, value);
    }
  }
}

}  // namespace

int sweep_main(const std::vector<std::string>& all_args) {
  CLI::App app{"herd sweep: run a command or a task over a grid or random sample of parameters"};
  app.name("herd sweep");
  Options o;
  std::string file;
  app.add_option("--file", file, "sweep file (TOML)")->check(CLI::ExistingFile);
  app.add_option("--grid", o.grid, "NAME=V1,V2,... (repeatable)")->allow_extra_args(false);
  app.add_option("--random", o.random, "NAME=KIND:ARGS (repeatable)")->allow_extra_args(false);
  app.add_option("--samples", o.samples, "random draws")->check(CLI::PositiveNumber);
  app.add_option("--seed", o.seed, "seed of the random draws");
  app.add_option("--metric", o.metric, "the objective; trials that do not report it fail");
  app.add_option("--mode", o.mode, "min or max")->check(CLI::IsMember({"min", "max"}));
  app.add_option("--max-running", o.max_running,
                 "trials submitted at once (default: the local workers, else no limit)")->check(CLI::NonNegativeNumber);
  app.add_option("--timeout", o.timeout, "seconds before a trial is killed (0 = never)")->check(CLI::NonNegativeNumber);
  app.add_option("--retries", o.retries, "runs again a failed or timed-out trial up to N times")->check(CLI::NonNegativeNumber);
  app.add_option("--results", o.results, "results prefix: PREFIX.csv and PREFIX.jsonl")->capture_default_str();
  app.add_flag("--rerun-failed", o.rerun_failed, "run again trials recorded as failed or timed out");
  app.add_option("--cpus", o.cpus, "cores per trial (resource cpus; every worker offers its own, and a trial is pinned to them)");
  app.add_option("--gpus", o.gpus, "resource gpu=N per trial (a Slurm pool's gpus)");
  app.add_option("--memory", o.memory, "resource memory per trial, e.g. 4G (in MB)");
  app.add_option("--resource", o.resources, "NAME=AMOUNT per trial (repeatable)")->allow_extra_args(false);
  app.add_option("--env", o.env, "NAME=VALUE for the command (repeatable)")->allow_extra_args(false);
  app.add_option("--workdir", o.workdir, "working directory of the command on the workers");
  app.add_option("--output-limit", o.output_limit, "bytes of the end of stdout searched for metrics");
  app.add_option("--early-stop", o.early_stop, "sh (successive halving) or asha")->check(CLI::IsMember({"sh", "asha"}));
  app.add_option("--budget-param", o.budget_param, "placeholder of the budget")->capture_default_str();
  app.add_option("--min-budget", o.min_budget, "first rung's budget")->capture_default_str();
  app.add_option("--max-budget", o.max_budget, "last rung's budget")->capture_default_str();
  app.add_option("--eta", o.eta, "1/eta of each rung goes on")->capture_default_str();
  app.add_option("--scheduler", o.scheduler, "connect to this scheduler, e.g. tcp://login1:8786");
  app.add_option("--config", o.config, "start a scheduler with these pools (herd scheduler's TOML)")->check(CLI::ExistingFile);
  app.add_option("--local-workers", o.local_workers, "a local cluster of N workers (default: one per core)")
      ->check(CLI::PositiveNumber);
  app.add_option("--worker-resources", o.worker_resources, "what each local worker offers, e.g. cpus=4,gpu=1");
  app.add_option("--top", o.top, "rows of the table of best trials")->capture_default_str();
  app.add_option("--progress", o.progress, "auto, bar, lines or none")->check(CLI::IsMember({"auto", "bar", "lines", "none"}));
  app.add_flag("-q,--quiet", o.quiet, "no progress, only the table");
  app.add_flag("--dry-run", o.dry_run, "print each trial's command and exit");
  app.footer(kFooter);

  // The command is everything after the first `--`, taken verbatim (CLI11 never sees it).
  std::vector<std::string> args = all_args;
  const auto dashes = std::find(args.begin(), args.end(), "--");
  if (dashes != args.end()) {
    o.command.assign(dashes + 1, args.end());
    args.erase(dashes, args.end());
  }
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return util::usage_exit(app.exit(e));
  }
  try {
    if (!file.empty()) read_sweep_file(file, o, app);
    if (o.command.empty()) {
      std::cerr << "herd sweep: no command: give it after `--`, or `command =` in a sweep file\n";
      return 2;
    }
    SearchSpace space;
    for (const auto& g : o.grid) space.parse(g, true);
    for (const auto& r : o.random) space.parse(r, false);
    if (space.empty()) {
      std::cerr << "herd sweep: no parameters: give --grid or --random\n";
      return 2;
    }
    space.samples(o.samples).seed(o.seed);

    Sweep sweep{space};
    if (o.command.size() == 1) {
      sweep.command(o.command[0]);
    } else {
      sweep.command(o.command);
    }
    if (!o.metric.empty()) {
      if (o.mode == "max") {
        sweep.maximize(o.metric);
      } else if (o.mode == "min") {
        sweep.minimize(o.metric);
      } else {
        throw std::invalid_argument("mode must be min or max, got '" + o.mode + "'");
      }
    }
    sweep.timeout(o.timeout).retries(o.retries).rerun_failed(o.rerun_failed).top(o.top).output_limit(o.output_limit);
    sweep.results(o.results).working_directory(o.workdir);
    if (o.cpus > 0) sweep.cpus(o.cpus);
    if (o.gpus > 0) sweep.gpus(o.gpus);
    if (!o.memory.empty()) sweep.memory(o.memory);
    for (const auto& r : o.resources) {
      const auto [name, amount] = split_pair(r, "--resource");
      try {
        sweep.resource(name, std::stod(amount));
      } catch (const std::invalid_argument&) {
        throw std::invalid_argument("--resource " + r + ": the amount is not a number");
      }
    }
    for (const auto& e : o.env) {
      const auto [name, value] = split_pair(e, "--env");
      sweep.env(name, value);
    }
    if (!o.early_stop.empty()) {
      if (o.early_stop != "sh" && o.early_stop != "asha") {
        throw std::invalid_argument("early stopping kind must be sh or asha, got '" + o.early_stop + "'");
      }
      sweep.early_stopping(SuccessiveHalving{}
                               .parameter(o.budget_param)
                               .budgets(o.min_budget, o.max_budget)
                               .eta(o.eta)
                               .asynchronous(o.early_stop == "asha"));
    }
    if (o.dry_run) {
      for (const auto& line : sweep.describe()) std::cout << line << "\n";
      return 0;
    }
    const Progress progress = o.quiet                   ? Progress::none
                              : o.progress == "bar"     ? Progress::bar
                              : o.progress == "lines"   ? Progress::lines
                              : o.progress == "none"    ? Progress::none
                                                        : Progress::automatic;
    sweep.progress(progress);

    const int n_cluster_kinds = (!o.scheduler.empty()) + (!o.config.empty()) + (o.local_workers > 0);
    if (n_cluster_kinds > 1) throw std::invalid_argument("give one of --scheduler, --config and --local-workers");
    std::unique_ptr<Client> client;
    if (!o.scheduler.empty()) {
      client = std::make_unique<Client>(o.scheduler);
    } else if (!o.config.empty()) {
      client = std::make_unique<Client>(std::make_unique<sweep::ConfigCluster>(o.config), ClientOptions{});
    } else {
      const int n = o.local_workers > 0 ? o.local_workers
                                        : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
      LocalCluster cluster{n};
      if (!o.worker_resources.empty()) cluster.worker_args({"--resources", o.worker_resources});
      if (o.max_running < 0) o.max_running = n;  // no deeper queue than the workers can take
      client = std::make_unique<Client>(std::move(cluster));
    }
    sweep.max_running(std::max(0, o.max_running));
    const SweepReport report = sweep.run(*client);
    if (progress == Progress::none && o.top > 0) std::cout << report.table(o.top);
    client->close();
    return report.failed + report.timed_out > 0 ? 3 : 0;
  } catch (const std::invalid_argument& e) {
    std::cerr << "herd sweep: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "herd sweep: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace herd::detail
