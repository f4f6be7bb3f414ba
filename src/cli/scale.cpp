// Scaling from the shell: `herd pools`, `herd scale POOL N`, `herd adapt POOL --min A --max B`,
// `herd pool pause|resume POOL` and `herd worker retire NAME`. Each connects to a running
// scheduler as a client (found as `herd status` finds it), asks, and prints what changed, as
// the scheduler answered it (herd::PoolChange). An unknown pool or worker is the scheduler's
// error, which names the known ones.
#include <iostream>

#include "cli/commands.hpp"
#include "cli/connect.hpp"
#include "common/util.hpp"
#include "herd/client.hpp"
#include "herd/error.hpp"

namespace herd::detail {
namespace {

/// Runs `ask` against the scheduler, prints its PoolChange; exit code 0, or 1 with the error.
template <typename Ask>
int change(const SchedulerArgs& scheduler, const char* command, Ask ask) {
  try {
    Client client = scheduler.connect(command);
    const PoolChange c = ask(client);
    std::cout << c.to_text() << std::flush;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << command << ": " << e.what() << "\n";
    return 1;
  }
}

std::string pool_table(const std::vector<PoolInfo>& pools) {
  std::vector<std::vector<std::string>> rows = {
      {"pool", "kind", "size", "wanted", "workers", "jobs running", "pending", "per job", "state"}};
  for (const auto& p : pools) {
    std::string size = p.adaptive ? "adapt " + std::to_string(p.minimum) + "-" + std::to_string(p.maximum) : "fixed";
    std::string per_job = std::to_string(p.workers_per_job) + (p.workers_per_job == 1 ? " worker" : " workers");
    if (p.cores_per_job > 0) per_job += ", " + std::to_string(p.cores_per_job) + (p.cores_per_job == 1 ? " core" : " cores");
    if (p.memory_per_job > 0) per_job += ", " + util::format_bytes(static_cast<std::uint64_t>(p.memory_per_job));
    std::string state;
    const auto add = [&](const std::string& s) { state += (state.empty() ? "" : "; ") + s; };
    if (p.user_paused) add("paused (herd pool resume " + p.name + ")");
    else if (!p.paused.empty()) add("paused: " + p.paused);
    if (!p.kept_for_data.empty()) add(std::to_string(p.kept_for_data.size()) + " kept for data");
    if (!p.last_error.empty()) add("error: " + p.last_error);
    if (!p.batch_error.empty()) add("batch system: " + p.batch_error);
    rows.push_back({p.name, p.kind, size, std::to_string(p.target), std::to_string(p.workers), std::to_string(p.running),
                    std::to_string(p.pending), per_job, state.empty() ? "ok" : state});
  }
  // Columns padded to their widest cell.
  std::vector<std::size_t> width(rows.front().size(), 0);
  for (const auto& r : rows) {
    for (std::size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (std::size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line += std::string(width[i] - r[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  for (const auto& p : pools) {
    for (const auto& k : p.kept_for_data) out += "pool " + p.name + " keeps " + k + "\n";
  }
  return out;
}

}  // namespace

int pools_main(const std::vector<std::string>& args) {
  CLI::App app{"herd pools: a running scheduler's worker pools, their size and state (herd status --json has them too)"};
  app.name("herd pools");
  SchedulerArgs scheduler(app);
  if (const int rc = scheduler.parse(app, args); rc >= 0) return rc;
  try {
    Client client = scheduler.connect("herd-pools");
    const ClusterStatus status = client.status();
    if (status.pools.empty()) {
      std::cout << "this scheduler has no worker pool\n";
    } else {
      std::cout << pool_table(status.pools);
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "herd pools: " << e.what() << "\n";
    return 1;
  }
}

int scale_main(const std::vector<std::string>& args) {
  CLI::App app{"herd scale: size a pool to N workers, or to enough jobs for C cores or M memory"};
  app.name("herd scale");
  SchedulerArgs scheduler(app);
  std::string pool;
  int workers = -1, jobs = -1, cores = -1;
  std::string memory;
  app.add_option("pool", pool, "the pool (herd pools lists them)")->required();
  auto* n = app.add_option("workers", workers, "workers wanted (whole jobs of the pool's workers per job)")
                ->check(CLI::NonNegativeNumber);
  auto* j = app.add_option("--jobs", jobs, "batch jobs wanted")->check(CLI::NonNegativeNumber);
  auto* c = app.add_option("--cores", cores, "enough jobs for this many cores (the pool's cores per job)")
                ->check(CLI::NonNegativeNumber);
  auto* m = app.add_option("--memory", memory, "enough jobs for this much memory, e.g. 256G (the pool's memory per job)");
  n->excludes(j, c, m);
  if (const int rc = scheduler.parse(app, args); rc >= 0) return rc;
  if (workers < 0 && jobs < 0 && cores < 0 && memory.empty()) {
    std::cerr << "herd scale: give a number of workers, or --jobs, --cores or --memory\n" << app.help();
    return 2;
  }
  return change(scheduler, "herd scale", [&](Client& client) {
    if (workers >= 0) return client.scale(workers, pool);
    ScaleTo to;
    if (jobs >= 0) to.jobs(jobs);
    if (cores >= 0) to.cores(cores);
    if (!memory.empty()) to.memory(memory);
    return client.scale(to, pool);
  });
}

int adapt_main(const std::vector<std::string>& args) {
  CLI::App app{"herd adapt: let a pool follow the backlog between a minimum and a maximum of workers"};
  app.name("herd adapt");
  SchedulerArgs scheduler(app);
  std::string pool;
  int minimum = 0, maximum = -1, wait_count = 0;
  double idle_timeout = 0, interval = -1, target_duration = 0;
  app.add_option("pool", pool, "the pool (herd pools lists them)")->required();
  app.add_option("--min,--minimum", minimum, "fewest workers")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--max,--maximum", maximum, "most workers")->required()->check(CLI::NonNegativeNumber);
  app.add_option("--idle-timeout", idle_timeout, "seconds a worker stays idle before it may go (default: the pool's, 60)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--interval", interval, "seconds between two decisions (default 0: every scheduler turn)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--target-duration", target_duration, "seconds of work per slot the backlog should take (default 10)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--wait-count", wait_count, "decisions in a row that must ask for fewer workers before any goes")
      ->check(CLI::NonNegativeNumber);
  if (const int rc = scheduler.parse(app, args); rc >= 0) return rc;
  if (maximum < minimum) {
    std::cerr << "herd adapt: --max (" << maximum << ") is below --min (" << minimum << ")\n";
    return 2;
  }
  return change(scheduler, "herd adapt", [&](Client& client) {
    using std::chrono::milliseconds;
    AdaptOptions o;
    o.minimum(minimum).maximum(maximum).wait_count(wait_count);
    o.idle_timeout(std::chrono::seconds(static_cast<long>(idle_timeout + 0.5)));
    if (interval >= 0) o.interval(milliseconds(static_cast<long>(interval * 1000)));
    if (target_duration > 0) o.target_duration(milliseconds(static_cast<long>(target_duration * 1000)));
    return client.adapt(o, pool);
  });
}

int pool_main(const std::vector<std::string>& args) {
  CLI::App app{"herd pool pause|resume POOL: stop a pool submitting jobs (its workers stay), or let it again"};
  app.name("herd pool");
  SchedulerArgs scheduler(app);
  std::string action, pool;
  app.add_option("action", action, "pause or resume")->required()->check(CLI::IsMember({"pause", "resume"}));
  app.add_option("pool", pool, "the pool (herd pools lists them)")->required();
  if (const int rc = scheduler.parse(app, args); rc >= 0) return rc;
  return change(scheduler, "herd pool", [&](Client& client) {
    return action == "pause" ? client.pause_pool(pool) : client.resume_pool(pool);
  });
}

int worker_retire_main(const std::vector<std::string>& args) {
  CLI::App app{"herd worker retire NAME: the worker drains its tasks, hands on the results only it holds, and leaves"};
  app.name("herd worker retire");
  SchedulerArgs scheduler(app);
  std::string name;
  app.add_option("name", name, "the worker's name (herd status lists them)")->required();
  if (const int rc = scheduler.parse(app, args); rc >= 0) return rc;
  return change(scheduler, "herd worker retire", [&](Client& client) { return client.retire_worker(name); });
}

}  // namespace herd::detail
