#pragma once
/// @file client.hpp
/// @brief herd::Client: submit tasks, get futures, gather results (Dask's words).
///
/// @code
/// herd::Client client{herd::LocalCluster{4}};
/// auto x = client.submit(add, 1, 2);                 // Future<int>
/// auto y = client.submit(add, x, 10);                // a future argument is a graph edge
/// auto zs = client.gather(client.map(add, xs, ys));  // std::vector<int>
/// @endcode

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "herd/cluster.hpp"
#include "herd/detail/client_core.hpp"
#include "herd/future.hpp"
#include "herd/options.hpp"
#include "herd/remote.hpp"
#include "herd/logs.hpp"
#include "herd/status.hpp"

namespace herd {

/// @brief How a client connects.
struct ClientOptions {
  /// How long to wait for the scheduler's answer before throwing ConnectionError.
  std::chrono::milliseconds connect_timeout{10000};
  /// How long the constructor waits for a cluster's workers to connect.
  std::chrono::milliseconds workers_timeout{60000};
  /// Name shown in the scheduler's logs ("" = host:pid).
  std::string name;
};

template <typename T>
class AsCompleted;

// PoolInfo is in herd/status.hpp, with the rest of what the scheduler reports.

/// @brief What Client::scale(ScaleTo) asks for, e.g. `herd::ScaleTo{}.cores(64)`; several
/// given: the largest number of jobs wins. -1 / "" = not given.
class ScaleTo {
 public:
  ScaleTo& jobs(int n) { jobs_ = n; return *this; }
  ScaleTo& workers(int n) { workers_ = n; return *this; }
  ScaleTo& cores(int n) { cores_ = n; return *this; }
  /// A Slurm memory size: "256G", "512M", "4000" (megabytes).
  ScaleTo& memory(std::string m) { memory_ = std::move(m); return *this; }
  int jobs() const { return jobs_; }
  int workers() const { return workers_; }
  int cores() const { return cores_; }
  const std::string& memory() const { return memory_; }

 private:
  int jobs_ = -1, workers_ = -1, cores_ = -1;
  std::string memory_;
};

/// @brief adapt() with Dask's Adaptive knobs, e.g.
/// `client.adapt(herd::AdaptOptions{}.minimum(0).maximum(50).interval(1s).target_duration(5s).wait_count(3))`.
class AdaptOptions {
 public:
  AdaptOptions& minimum(int n) { minimum_ = n; return *this; }
  AdaptOptions& maximum(int n) { maximum_ = n; return *this; }
  /// Workers idle this long may go (default: the pool's, 60 s).
  AdaptOptions& idle_timeout(std::chrono::seconds s) { idle_timeout_ = s; return *this; }
  /// Time between two decisions (default 0: every scheduler turn, so a backlog is seen at once).
  AdaptOptions& interval(std::chrono::milliseconds t) { interval_ = t; return *this; }
  /// The backlog should take about this long per slot (default 10 s): with tasks of known
  /// length, workers = backlog x mean task time / (slots per worker x target_duration).
  AdaptOptions& target_duration(std::chrono::milliseconds t) { target_duration_ = t; return *this; }
  /// Decisions in a row that must ask for fewer workers before any goes (default 1).
  AdaptOptions& wait_count(int n) { wait_count_ = n; return *this; }
  int minimum() const { return minimum_; }
  int maximum() const { return maximum_; }
  std::chrono::seconds idle_timeout() const { return idle_timeout_; }
  std::chrono::milliseconds interval() const { return interval_; }
  std::chrono::milliseconds target_duration() const { return target_duration_; }
  int wait_count() const { return wait_count_; }

 private:
  int minimum_ = 0, maximum_ = 0, wait_count_ = 0;
  std::chrono::seconds idle_timeout_{0};
  std::chrono::milliseconds interval_{-1}, target_duration_{0};
};

/// @brief Which workers Client::run() runs on, by name (WorkerInfo::name, e.g. "local-3"):
/// `client.run(herd::RunOn{"local-1", "local-2"}, fn)`. Empty = every connected worker.
class RunOn {
 public:
  RunOn() = default;
  RunOn(std::initializer_list<std::string> names) : names_(names) {}
  explicit RunOn(std::vector<std::string> names) : names_(std::move(names)) {}
  const std::vector<std::string>& names() const { return names_; }

 private:
  std::vector<std::string> names_;
};

namespace detail {
template <typename T>
struct is_future_vector : std::false_type {};
template <typename T>
struct is_future_vector<std::vector<Future<T>>> : std::true_type {};

template <typename T>
struct future_value;
template <typename T>
struct future_value<Future<T>> {
  using type = T;
};

/// Packs argument `a` into parameter slot `index` of type P; futures become graph edges.
template <typename P, typename A>
void pack_arg(msgpack::packer<VectorWriter>& pk, A&& a, std::uint32_t index,
              std::vector<ArgRefSpec>& refs, const ClientCore* core) {
  using D = std::remove_cvref_t<A>;
  if constexpr (is_future<D>::value) {
    static_assert(std::is_convertible_v<typename future_value<D>::type, P> ||
                      std::is_same_v<typename future_value<D>::type, P>,
                  "a Future<T> argument must hold a type the parameter accepts");
    if (future_owner(*a.state()) != core) throw_foreign_future();
    pk.pack_nil();
    refs.push_back({future_id(*a.state()), index, -1});
  } else if constexpr (is_future_vector<D>::value) {
    pk.pack_array(static_cast<std::uint32_t>(a.size()));
    for (std::size_t j = 0; j < a.size(); ++j) {
      if (future_owner(*a[j].state()) != core) throw_foreign_future();
      pk.pack_nil();
      refs.push_back({future_id(*a[j].state()), index, static_cast<std::int32_t>(j)});
    }
  } else if constexpr (std::is_same_v<D, P>) {
    pk.pack(a);
  } else {
    static_assert(std::is_constructible_v<P, A>,
                  "argument type does not convert to the task's parameter type");
    pk.pack(P(std::forward<A>(a)));
  }
}
}  // namespace detail

/// @brief A connection to a scheduler, and the owner of a cluster if given one.
class Client;

/// What Client::report asks for.
struct ReportRequestOptions {
  std::string format = "html";  ///< "html" or "trace" (Chrome trace JSON, for Perfetto)
  /// Runs that ended at or after this (the scheduler's clock; the epoch = from the start) ...
  std::chrono::system_clock::time_point since{};
  /// ... and up to this (the epoch = now).
  std::chrono::system_clock::time_point until{};
  std::string campaign;         ///< only this campaign's runs
  std::string job;              ///< only runs on the workers of this batch job (a prefix)
  std::string title;            ///< the report's title ("" = herd report)
};

/// Client::performance_report's scope: its end (destructor, or write()) writes the report of
/// the runs that ended since it began. A destructor cannot throw: a failure there is logged;
/// call write() to get it as an exception.
class PerformanceReport {
 public:
  PerformanceReport(const Client& client, std::string path, std::string format);
  PerformanceReport(PerformanceReport&& other) noexcept;
  PerformanceReport& operator=(PerformanceReport&&) = delete;
  PerformanceReport(const PerformanceReport&) = delete;
  PerformanceReport& operator=(const PerformanceReport&) = delete;
  ~PerformanceReport();
  /// Writes the report now (once). @throws Error (the scheduler's reason, or the file's)
  void write();
  const std::string& path() const { return path_; }

 private:
  const Client* client_;
  std::string path_, format_;
  std::chrono::system_clock::time_point since_;
  bool done_ = false;
};

class Client {
 public:
  /// Starts a LocalCluster with default sizes and connects to it.
  Client();
  /// Connects to a running scheduler, e.g. "tcp://login1:8786".
  /// @throws ConnectionError naming the address when no scheduler answers in time.
  explicit Client(const std::string& scheduler_address, ClientOptions options = {});
  /// Starts `cluster`, connects, waits for its workers; closes it when the client ends.
  template <std::derived_from<Cluster> C>
  explicit Client(C&& cluster, ClientOptions options = {})
      : Client(std::unique_ptr<Cluster>(new std::remove_cvref_t<C>(std::forward<C>(cluster))),
               std::move(options)) {}
  Client(std::unique_ptr<Cluster> cluster, ClientOptions options);
  ~Client();
  Client(Client&&) noexcept;
  Client& operator=(Client&&) noexcept;
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  /// @brief Runs fn(args...) on a worker. Futures among the args are waited for and their
  /// values passed (a dependency edge); a std::vector<Future<T>> fills a vector parameter.
  /// @return Future of fn's result type.
  template <typename F, typename... A>
    requires detail::function_pointer<F>
  auto submit(F fn, A&&... args) {
    return submit(TaskOptions{}, fn, std::forward<A>(args)...);
  }

  /// @brief submit() with per-task options (key, priority, retries, resources).
  template <typename F, typename... A>
    requires detail::function_pointer<F>
  auto submit(const TaskOptions& options, F fn, A&&... args) {
    using Traits = detail::fn_traits<std::decay_t<F>>;
    using R = typename Traits::result;
    const std::string& name = detail::function_name(reinterpret_cast<const void*>(fn),
                                                    typeid(std::remove_pointer_t<F>).name());
    return submit_packed<R, typename Traits::args>(name, options, std::forward<A>(args)...);
  }

  /// @brief Submits by registered name, for functions this process does not link (e.g. from
  /// a task library loaded by the workers). R is the result type.
  template <typename R, typename... A>
  Future<R> submit_by_name(const std::string& function, const TaskOptions& options, A&&... args) {
    return submit_packed<R, std::tuple<std::remove_cvref_t<A>...>>(function, options,
                                                                   std::forward<A>(args)...);
  }

  /// @brief A gang: `n` copies of fn(args...) started together on `n` distinct workers, one
  /// slot each (all or nothing: it waits until `n` fit). Inside, herd::gang() gives each
  /// member its rank and a communicator (herd/collective.hpp). One future per rank, in rank
  /// order; if one rank fails, all fail with its error, and options.retries() retries the
  /// whole gang. options.gpus(1) gives every rank a GPU (and NCCL, when built in).
  template <typename F, typename... A>
    requires detail::function_pointer<F>
  auto submit_gang(int n, F fn, A&&... args) {
    return submit_gang(n, TaskOptions{}, fn, std::forward<A>(args)...);
  }

  template <typename F, typename... A>
    requires detail::function_pointer<F>
  auto submit_gang(int n, const TaskOptions& options, F fn, A&&... args) {
    using Traits = detail::fn_traits<std::decay_t<F>>;
    using R = typename Traits::result;
    const std::string& name = detail::function_name(reinterpret_cast<const void*>(fn),
                                                    typeid(std::remove_pointer_t<F>).name());
    std::vector<detail::ArgRefSpec> refs;
    std::vector<char> buffer = pack_args<typename Traits::args>(refs, std::forward<A>(args)...);
    std::vector<Future<R>> out;
    for (auto& state : detail::core_submit_gang(*core_, name, std::move(buffer), std::move(refs), options, n)) {
      out.push_back(Future<R>(std::move(state)));
    }
    return out;
  }

  /// @brief fn applied to each element (several ranges are zipped; they must be the same size).
  template <typename F, typename... Ranges>
    requires detail::function_pointer<F>
  auto map(F fn, const Ranges&... ranges) {
    return map(TaskOptions{}, fn, ranges...);
  }

  template <typename F, typename... Ranges>
    requires detail::function_pointer<F>
  auto map(const TaskOptions& options, F fn, const Ranges&... ranges) {
    static_assert(sizeof...(Ranges) > 0, "map needs at least one range");
    using R = typename detail::fn_traits<std::decay_t<F>>::result;
    const std::size_t sizes[] = {static_cast<std::size_t>(std::size(ranges))...};
    for (std::size_t s : sizes) {
      if (s != sizes[0]) throw std::invalid_argument("herd::Client::map: ranges differ in size");
    }
    std::vector<Future<R>> out;
    out.reserve(sizes[0]);
    auto iters = std::make_tuple(std::begin(ranges)...);
    TaskOptions each = options;
    for (std::size_t i = 0; i < sizes[0]; ++i) {
      if (!options.key().empty()) each.key(options.key() + "-" + std::to_string(i));
      std::apply([&](auto&... it) { out.push_back(submit(each, fn, *it...)); }, iters);
      std::apply([](auto&... it) { (++it, ...); }, iters);
    }
    return out;
  }

  /// @brief The values of `futures`, in order. Rethrows the first failure.
  template <typename T>
  std::vector<T> gather(const std::vector<Future<T>>& futures) {
    std::vector<detail::FutureState*> states = raw_states(futures);
    detail::core_prefetch(*core_, states);
    std::vector<T> out;
    out.reserve(futures.size());
    for (const auto& f : futures) out.push_back(f.result());
    return out;
  }

  /// @brief The value of one future.
  template <typename T>
  T gather(const Future<T>& future) {
    return future.result();
  }

  /// @brief Blocks until every future is done (finished, failed or cancelled).
  template <typename T>
  void wait(const std::vector<Future<T>>& futures) {
    (void)detail::core_wait_all(*core_, raw_states(futures), -1);
  }

  /// @brief As wait(), giving up after `timeout`; returns true when all are done.
  template <typename T, typename Rep, typename Period>
  bool wait(const std::vector<Future<T>>& futures, std::chrono::duration<Rep, Period> timeout) {
    return detail::core_wait_all(
        *core_, raw_states(futures),
        std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count());
  }

  /// @brief Iterates over `futures` in the order they complete.
  /// @code
  /// for (herd::Future<int> f : client.as_completed(futures)) use(f.result());
  /// @endcode
  template <typename T>
  AsCompleted<T> as_completed(std::vector<Future<T>> futures);

  /// @brief as_completed with a deadline: next() throws TimeoutError when nothing is done
  /// `timeout` after this call (Dask's as_completed(timeout=)).
  template <typename T, typename Rep, typename Period>
  AsCompleted<T> as_completed(std::vector<Future<T>> futures, std::chrono::duration<Rep, Period> timeout);

  /// @brief Places `value` on a worker once, so that many tasks can take it as an argument.
  template <typename T>
  Future<std::remove_cvref_t<T>> scatter(T&& value) {
    std::vector<char> bytes;
    detail::VectorWriter writer{bytes};
    msgpack::pack(writer, value);
    return Future<std::remove_cvref_t<T>>(detail::core_scatter(*core_, std::move(bytes)));
  }

  /// @brief As scatter(value); with `broadcast`, copies go to every connected worker (tree-wise:
  /// each worker that has it serves the next ones), so tasks anywhere find it at hand.
  template <typename T>
  Future<std::remove_cvref_t<T>> scatter(T&& value, bool broadcast) {
    auto f = scatter(std::forward<T>(value));
    if (broadcast) replicate(std::vector<Future<std::remove_cvref_t<T>>>{f}, 0);
    return f;
  }

  /// @brief Copies of each result on `n` workers (0 = every connected worker), as Dask's
  /// replicate: placement prefers workers that hold an input, and losing a copy costs nothing
  /// while another is left. Returns at once; results not computed yet are copied once they are.
  template <typename T>
  void replicate(const std::vector<Future<T>>& futures, int n = 0) {
    detail::core_replicate(*core_, raw_states(futures), n < 0 ? 0u : static_cast<std::uint32_t>(n));
  }

  /// @brief The task runs to its end even when every future of it is dropped, or this client
  /// leaves (Dask's fire_and_forget): for side effects (files, databases). Its inputs are
  /// kept until it ran; its result is dropped once nobody holds a future.
  template <typename T>
  void fire_and_forget(const Future<T>& future) {
    if (!future.valid()) throw Error("fire_and_forget: empty future");
    detail::core_fire_and_forget(*core_, {future.state().get()});
  }
  template <typename T>
  void fire_and_forget(const std::vector<Future<T>>& futures) {
    detail::core_fire_and_forget(*core_, raw_states(futures));
  }

  /// @brief Detached campaigns: the futures of the tasks submitted under campaign `name`
  /// (TaskOptions::campaign), by any client of this scheduler, in submission order. Each
  /// resolves as a future does: a result, the task's error, or pending until it finishes. This
  /// client gets the campaign's updates from now on (the last client to attach gets them).
  /// `R` is the tasks' result type; a wrong one fails in result() with a decode error.
  /// @code
  /// // yesterday, from a login node: the work goes on after the ssh session drops
  /// client.map(herd::TaskOptions{}.campaign("nightly"), simulate, seeds);
  /// // today, from a new client of the same scheduler
  /// auto results = client.gather(client.campaign_futures<double>("nightly"));
  /// client.release_campaign("nightly");
  /// @endcode
  /// @throws Error when the scheduler has no campaign of that name
  template <typename R>
  std::vector<Future<R>> campaign_futures(const std::string& name) {
    std::vector<Future<R>> out;
    for (auto& state : detail::core_attach_campaign(*core_, name)) out.push_back(Future<R>(std::move(state)));
    return out;
  }
  /// @brief Every campaign of the scheduler with its counts (total, done, failed, pending), by name.
  std::vector<CampaignInfo> campaigns() const;
  /// @brief Jobs of shell commands (`herd submit`): every job of the scheduler with its counts,
  /// by id. Jobs are the scheduler's, not a client's: any client sees them.
  std::vector<ShellJob> shell_jobs() const;
  /// @brief Job `id` with its failed tasks (each with its exit code and the end of its stderr).
  /// @throws Error when the scheduler has no job of that id
  ShellJob shell_job(std::uint64_t id) const;
  /// @brief Waits until job `id` has finished (every task ok, failed or cancelled), or
  /// `timeout` passed (negative: no limit); returns it as shell_job() does.
  /// @throws TimeoutError when it has not finished by then
  ShellJob wait_shell_job(std::uint64_t id, std::chrono::milliseconds timeout = std::chrono::milliseconds(-1)) const;
  /// @brief Forgets campaign `name`: its unfinished tasks are cancelled and its results freed
  /// (futures of it already resolved keep their values).
  /// @throws Error when the scheduler has no campaign of that name
  void release_campaign(const std::string& name);

  /// @brief Cancels every future that has not finished (`force`: see Future::cancel).
  template <typename T>
  void cancel(const std::vector<Future<T>>& futures, bool force = false) {
    detail::core_cancel(*core_, raw_states(futures), force);
  }

  /// @brief Waits until at least `n` workers are connected.
  /// @throws TimeoutError naming how many are there; JobQueueError if a pool cannot submit.
  void wait_for_workers(int n, std::chrono::milliseconds timeout = std::chrono::seconds(60));
  /// @brief Restarts the cluster, as Dask's Client.restart: every worker is told to stop and
  /// its process is replaced through its pool (LocalCluster, SlurmCluster, cluster.toml pools:
  /// the job is cancelled, a worker stuck in a task that never returns is killed within
  /// seconds, and a new job starts); every future of every client fails with CancelledError
  /// ("... cancelled: the cluster was restarted by client NAME"), finished ones too; the
  /// scheduler forgets every task and result, and the journal its recorded results. Returns
  /// once as many pool workers as before are connected again (an adaptive pool: at most its
  /// minimum), so the client can submit at once. A worker connected by hand (`herd worker`,
  /// no pool) is told to stop and is not replaced, nor waited for.
  /// @throws TimeoutError naming how many workers came back within `timeout` (the tasks are
  /// cancelled and the state empty all the same); ConnectionError.
  void restart(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  /// @brief Runs fn(args...) once on every connected worker (or on `on`'s), as Dask's
  /// Client.run, for setup such as warming a cache or checking a GPU; returns each worker's
  /// result by worker name. Each call is a task pinned to its worker (TaskOptions::workers,
  /// no other worker allowed), of the highest priority and never retried: it runs in one of
  /// the worker's task slots, so it starts once a slot is free (not beside running tasks, as
  /// Dask's does). For a function returning void: the names of the workers it ran on.
  /// For the scheduler's side (Dask's run_on_scheduler), Client::status() is the way: workers,
  /// tasks, pools and jobs as the scheduler sees them.
  /// @throws Error naming a worker of `on` that is not connected; WorkerLostError naming the
  /// worker when one leaves before its call finished (the other calls are cancelled); the
  /// function's own exception (TaskError) as result() does.
  template <typename F, typename... A>
    requires detail::function_pointer<F>
  auto run(F fn, const A&... args) {
    return run(RunOn{}, fn, args...);
  }
  template <typename F, typename... A>
    requires detail::function_pointer<F>
  auto run(const RunOn& on, F fn, const A&... args) {
    using Fut = decltype(submit(TaskOptions{}, fn, args...));
    using R = typename detail::future_value<Fut>::type;
    const std::vector<std::string> names = run_targets(on);
    std::vector<Fut> futures;
    futures.reserve(names.size());
    for (const std::string& name : names) futures.push_back(submit(run_options(name), fn, args...));
    run_wait(raw_states(futures), names);
    if constexpr (std::is_void_v<R>) {
      for (auto& f : futures) f.result();
      return names;
    } else {
      std::map<std::string, R> out;
      for (std::size_t i = 0; i < names.size(); ++i) out.emplace(names[i], futures[i].result());
      return out;
    }
  }
  /// @brief Sizes a worker pool to `n` workers ("" = the first pool). Jobs are submitted in
  /// bulk; surplus workers retire gracefully (no new tasks, results copied) before scancel.
  /// @throws JobQueueError with the batch system's own message if it refuses.
  PoolChange scale(int n, const std::string& pool = "");
  /// @brief Sizes a pool in other units, as dask-jobqueue's scale(jobs=, cores=, memory=):
  /// `client.scale(herd::ScaleTo{}.cores(64))` asks for enough jobs to hold 64 cores,
  /// `.memory("256G")` enough for 256 GiB (the pool's memory option per job), `.jobs(4)` four
  /// jobs of processes x nodes workers each. Given several, the largest number of jobs wins.
  /// @throws std::invalid_argument (nothing given, a negative count, a bad memory size),
  /// JobQueueError (e.g. memory of a pool that asks for none).
  PoolChange scale(const ScaleTo& to, const std::string& pool = "");
  /// @brief Lets a pool follow the backlog between `minimum` and `maximum` workers; workers
  /// idle for `idle_timeout` are released.
  PoolChange adapt(int minimum, int maximum, const std::string& pool = "",
                   std::chrono::seconds idle_timeout = std::chrono::seconds(0));
  /// @brief adapt() with its pace: interval, target_duration, wait_count (Dask's Adaptive).
  /// @throws std::invalid_argument for bounds out of order or a negative knob.
  PoolChange adapt(const AdaptOptions& options, const std::string& pool = "");
  /// @brief Pauses a pool (`herd pool pause POOL`): it submits no job until resume_pool(); its
  /// workers stay, and it still shrinks. scale() and adapt() change its size, not the pause.
  /// @throws JobQueueError naming the known pools when there is no pool `pool`.
  PoolChange pause_pool(const std::string& pool);
  /// @brief Resumes a paused pool: it submits jobs again for its size.
  PoolChange resume_pool(const std::string& pool);
  /// @brief Retires one worker by name (WorkerInfo::name; `herd worker retire NAME`): it takes
  /// no new task, its unstarted tasks go elsewhere, its running ones finish, the results only it
  /// holds are copied to a worker that stays, and it leaves. A fixed-size pool shrinks by its
  /// job, so it is not replaced. @throws JobQueueError naming the connected workers when none
  /// is called `name`.
  PoolChange retire_worker(const std::string& name);
  /// The scheduler's pools, as of its last report (about once a second); asked for when no
  /// report has come yet.
  std::vector<PoolInfo> pools() const;
  /// Workers connected now (as last told by the scheduler).
  int n_workers() const;
  /// @brief Asks the scheduler for a snapshot: workers, tasks by state and function,
  /// throughput, pools and their jobs, and the newest `max_events` task runs.
  /// @throws ConnectionError, TimeoutError (no answer within 30 s)
  /// @code
  /// std::cout << client.status().to_text();
  /// @endcode
  ClusterStatus status(int max_events = 0) const;
  /// @brief Why a task is not running, as `herd explain KEY` prints it: its state, the inputs
  /// it waits for, each connected worker's reason (resources, walltime left against its
  /// duration, memory pause, busy, retiring, suspect isolation, gang) and each pool's (what its
  /// workers offer, walltime, paused and why, Slurm's reasons for pending jobs).
  /// @throws ConnectionError, TimeoutError (no answer within 30 s)
  template <typename T>
  TaskExplanation explain(const Future<T>& future) const {
    return explain(future.key());
  }
  /// @brief The same by key: a TaskOptions::key, or the key a future shows.
  TaskExplanation explain(const std::string& key) const;
  /// @brief A report of the scheduler's run record (what `herd report` writes): one
  /// self-contained HTML page (format "html") or Chrome trace JSON ("trace"), of the runs that
  /// ended within [since, until], of one campaign or of one job's workers when given. Built by
  /// the scheduler off its loop.
  /// @throws Error with the scheduler's reason (no record: HERD_RECORD=0; an unknown format),
  /// ConnectionError, TimeoutError (no answer within 5 minutes)
  std::string report(const ReportRequestOptions& options = {}) const;
  /// @brief Dask's performance_report: a scope whose end writes the report of the runs that
  /// ended within it to `path` (format "html", or "trace" for Chrome trace JSON).
  /// @code
  /// {
  ///   auto scope = client.performance_report("run.html");
  ///   client.gather(client.map(work, inputs));
  /// }  // run.html written here
  /// @endcode
  PerformanceReport performance_report(std::string path, std::string format = "html");
  /// @brief The newest `lines` of a worker's log ("" = every connected worker), as Dask's
  /// Client.get_worker_logs: herd's own lines and what the worker process printed.
  /// @throws LogsNotFound naming the worker when it is not connected (or gone)
  /// @code
  /// for (const herd::Logs& w : client.worker_logs()) std::cout << w.to_text();
  /// @endcode
  std::vector<Logs> worker_logs(const std::string& worker = "", int lines = 100) const;
  /// @brief What a task printed (its newest `lines`), from the worker(s) that ran it; while it
  /// runs, what it printed so far. See herd/logs.hpp for what is attributed to a task.
  /// @throws LogsNotFound when it has not run, or no connected worker holds its output
  template <typename T>
  Logs task_output(const Future<T>& future, int lines = 1000) const {
    return task_output_of(detail::future_id(*future.state()), future.key(), lines);
  }
  /// @brief task_output() by task key, e.g. "train-3".
  Logs task_output(const std::string& key, int lines = 1000) const;
  /// @brief What `herd logs NAME` shows: a worker's log, else a batch job's output file(s)
  /// (a job that failed before its worker connected, too), else a task's output.
  /// @throws LogsNotFound when nothing has that name
  std::vector<Logs> logs(const std::string& name, int lines = 100) const;
  /// Address of the scheduler this client talks to.
  const std::string& scheduler_address() const;
  /// Disconnects, and closes the owned cluster. Pending futures fail with ConnectionError.
  void close();

 private:
  Logs task_output_of(std::uint64_t id, const std::string& key, int lines) const;
  template <typename R, typename ParamTuple, typename... A>
  Future<R> submit_packed(const std::string& name, const TaskOptions& options, A&&... args) {
    std::vector<detail::ArgRefSpec> refs;
    std::vector<char> buffer = pack_args<ParamTuple>(refs, std::forward<A>(args)...);
    return Future<R>(
        detail::core_submit(*core_, name, std::move(buffer), std::move(refs), options));
  }

  /// The arguments as one msgpack array; futures among them become `refs`.
  template <typename ParamTuple, typename... A>
  std::vector<char> pack_args(std::vector<detail::ArgRefSpec>& refs, A&&... args) {
    static_assert(std::tuple_size_v<ParamTuple> == sizeof...(A),
                  "wrong number of arguments for this task function");
    std::vector<char> buffer;
    buffer.reserve(16 + 8 * sizeof...(A));
    detail::VectorWriter writer{buffer};
    msgpack::packer<detail::VectorWriter> pk(writer);
    pk.pack_array(static_cast<std::uint32_t>(sizeof...(A)));
    pack_all<ParamTuple>(pk, refs, std::index_sequence_for<A...>{}, std::forward<A>(args)...);
    return buffer;
  }

  template <typename ParamTuple, std::size_t... I, typename... A>
  void pack_all(msgpack::packer<detail::VectorWriter>& pk, std::vector<detail::ArgRefSpec>& refs,
                std::index_sequence<I...>, A&&... args) {
    (detail::pack_arg<std::tuple_element_t<I, ParamTuple>>(pk, std::forward<A>(args),
                                                           static_cast<std::uint32_t>(I), refs,
                                                           core_.get()),
     ...);
  }

  template <typename T>
  static std::vector<detail::FutureState*> raw_states(const std::vector<Future<T>>& futures) {
    std::vector<detail::FutureState*> states;
    states.reserve(futures.size());
    for (const auto& f : futures) {
      if (!f.valid()) throw Error("herd: empty future in a list");
      states.push_back(f.state().get());
    }
    return states;
  }

  std::unique_ptr<Cluster> cluster_;
  // Client::run (client.cpp): the workers named (checked) or every connected one, the options
  // of one call, and the wait that notices a worker that left.
  std::vector<std::string> run_targets(const RunOn& on) const;
  static TaskOptions run_options(const std::string& worker);
  void run_wait(const std::vector<detail::FutureState*>& states, const std::vector<std::string>& names) const;
  std::shared_ptr<detail::ClientCore> core_;
  friend struct detail::ClientAccess;  // the `herd` command's job requests (src/client/jobs.hpp)
};

/// @brief Inside a task: a client of the scheduler the task's worker serves, as Dask's
/// `get_client()`, for tasks that submit tasks. One per worker process, shared by its tasks
/// (a Client may be used from several threads); its futures are its own, so a task gathers
/// what it submitted before it returns. A task that waits on others should herd::secede()
/// first (and may herd::rejoin() after), or it holds a slot the tasks it waits for may need.
/// @throws std::logic_error outside a task on a worker.
Client& get_client();

/// @brief Futures in completion order; a single pass, as Dask's as_completed.
///
/// Futures can be added while iterating (add(), from any thread), and each is yielded once,
/// when it is done; the iteration ends when every future added so far has been yielded. A
/// yielded future is no longer held here, so a long-running loop keeps only what is in flight.
/// With a timeout (Client::as_completed(futures, timeout)), next() throws TimeoutError once that
/// long has passed since the call and nothing is done, as Dask's.
/// @code
/// auto ac = client.as_completed(futures);
/// for (const herd::Future<int>& f : ac) if (more(f)) ac.add(client.submit(work, f));
/// for (auto& [f, value] : client.as_completed(futures).with_results()) use(value);
/// @endcode
template <typename T>
class AsCompleted {
 public:
  using Clock = std::chrono::steady_clock;

  AsCompleted(detail::ClientCore& core, std::vector<Future<T>> futures,
              std::optional<Clock::time_point> deadline = std::nullopt)
      : core_(&core), queue_(std::make_shared<detail::CompletionQueue>()), deadline_(deadline) {
    add_all(std::move(futures));
  }

  /// @brief Watches one more future: it is yielded when done (at once if it already is).
  void add(Future<T> future) {
    std::vector<Future<T>> one;
    one.push_back(std::move(future));
    add_all(std::move(one));
  }

  /// @brief Watches several more futures.
  void update(std::vector<Future<T>> futures) { add_all(std::move(futures)); }

  /// Futures added and not yet yielded.
  std::size_t count() const {
    std::lock_guard lock(queue_->mu);
    return added_ - taken_;
  }
  bool empty() const { return count() == 0; }

  /// @brief The next future to complete; nullopt when every added one has been returned.
  /// @throws TimeoutError past the deadline given to Client::as_completed
  std::optional<Future<T>> next() {
    std::unique_lock<std::mutex> lock(queue_->mu);
    if (taken_ == added_) return std::nullopt;
    auto ready = [&] { return !queue_->ready.empty(); };
    if (!deadline_) {
      queue_->cv.wait(lock, ready);
    } else if (!queue_->cv.wait_until(lock, *deadline_, ready)) {
      throw TimeoutError("as_completed: " + std::to_string(added_ - taken_) +
                         " future(s) still not done at the deadline");
    }
    const std::size_t i = queue_->ready.front();
    queue_->ready.pop_front();
    ++taken_;
    Future<T> out = std::move(futures_.at(i));
    futures_.erase(i);
    return out;
  }

  /// @brief Every future done by now (Dask's next_batch): with `block`, waits for at least
  /// one first. Empty when every added future has been returned (or, without `block`, when
  /// none is done yet).
  /// @throws TimeoutError past the deadline given to Client::as_completed (with `block`)
  std::vector<Future<T>> next_batch(bool block = true) {
    std::vector<Future<T>> out;
    if (block) {
      std::optional<Future<T>> first = next();
      if (!first) return out;
      out.push_back(std::move(*first));
    }
    std::lock_guard lock(queue_->mu);
    while (!queue_->ready.empty()) {
      const std::size_t i = queue_->ready.front();
      queue_->ready.pop_front();
      ++taken_;
      out.push_back(std::move(futures_.at(i)));
      futures_.erase(i);
    }
    return out;
  }

  /// @brief As next(), with the value: (future, result()). A failed or cancelled future throws
  /// its error here (it counts as yielded, so iteration can go on after a catch).
  std::optional<std::pair<Future<T>, T>> next_with_result()
    requires(!std::is_void_v<T>)
  {
    std::optional<Future<T>> f = next();
    if (!f) return std::nullopt;
    T value = f->result();
    return std::make_optional(std::make_pair(std::move(*f), std::move(value)));
  }

  class iterator {
   public:
    using value_type = Future<T>;
    using difference_type = std::ptrdiff_t;
    iterator() = default;
    explicit iterator(AsCompleted* owner) : owner_(owner) { advance(); }
    const Future<T>& operator*() const { return *current_; }
    iterator& operator++() {
      advance();
      return *this;
    }
    void operator++(int) { advance(); }
    bool operator==(std::default_sentinel_t) const { return !current_.has_value(); }

   private:
    void advance() { current_ = owner_->next(); }
    AsCompleted* owner_ = nullptr;
    std::optional<Future<T>> current_;
  };

  iterator begin() { return iterator(this); }
  std::default_sentinel_t end() { return {}; }

  /// @brief A range of (future, value) pairs, as Dask's with_results=True (see
  /// next_with_result). On a temporary it takes the AsCompleted along; on a named one it
  /// iterates that one, so add() still works.
  class Results {
   public:
    class iterator {
     public:
      using value_type = std::pair<Future<T>, T>;
      using difference_type = std::ptrdiff_t;
      iterator() = default;
      explicit iterator(AsCompleted* owner) : owner_(owner) { advance(); }
      std::pair<Future<T>, T>& operator*() { return *current_; }
      iterator& operator++() {
        advance();
        return *this;
      }
      void operator++(int) { advance(); }
      bool operator==(std::default_sentinel_t) const { return !current_.has_value(); }

     private:
      void advance() { current_ = owner_->next_with_result(); }
      AsCompleted* owner_ = nullptr;
      std::optional<std::pair<Future<T>, T>> current_;
    };
    explicit Results(AsCompleted* of) : of_(of) {}
    explicit Results(AsCompleted&& owned) : owned_(std::make_unique<AsCompleted>(std::move(owned))), of_(owned_.get()) {}
    iterator begin() { return iterator(of_); }
    std::default_sentinel_t end() { return {}; }

   private:
    std::unique_ptr<AsCompleted> owned_;
    AsCompleted* of_;
  };
  Results with_results() & requires(!std::is_void_v<T>) { return Results(this); }
  Results with_results() && requires(!std::is_void_v<T>) { return Results(std::move(*this)); }

 private:
  void add_all(std::vector<Future<T>> futures) {
    if (futures.empty()) return;
    std::vector<detail::FutureState*> states;
    states.reserve(futures.size());
    for (const auto& f : futures) {
      if (!f.valid()) throw Error("herd::AsCompleted: empty future");
      if (detail::future_owner(*f.state()) != core_) throw Error("herd::AsCompleted: a future of another client");
    }
    std::size_t first;
    {
      std::lock_guard lock(queue_->mu);
      first = next_index_;
      for (auto& f : futures) {
        states.push_back(f.state().get());
        futures_.emplace(next_index_++, std::move(f));
      }
      added_ += states.size();
    }
    detail::core_watch(*core_, states, queue_, first);
  }

  detail::ClientCore* core_;
  std::shared_ptr<detail::CompletionQueue> queue_;
  std::optional<Clock::time_point> deadline_;
  // Guarded by queue_->mu: the futures not yet yielded, by the index core_watch reports.
  std::unordered_map<std::size_t, Future<T>> futures_;
  std::size_t next_index_ = 0, added_ = 0, taken_ = 0;
};

template <typename T>
AsCompleted<T> Client::as_completed(std::vector<Future<T>> futures) {
  return AsCompleted<T>(*core_, std::move(futures));
}

template <typename T, typename Rep, typename Period>
AsCompleted<T> Client::as_completed(std::vector<Future<T>> futures, std::chrono::duration<Rep, Period> timeout) {
  return AsCompleted<T>(*core_, std::move(futures),
                        std::chrono::steady_clock::now() +
                            std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout));
}

/// When herd::wait returns (Dask's return_when).
enum class ReturnWhen { first_completed, all_completed };
inline constexpr ReturnWhen FIRST_COMPLETED = ReturnWhen::first_completed;
inline constexpr ReturnWhen ALL_COMPLETED = ReturnWhen::all_completed;

/// What herd::wait returns: the futures that are done and those that are not, each in the
/// order given (Dask's DoneAndNotDoneFutures; herd keeps them as vectors, without duplicates'
/// removal).
template <typename T>
struct WaitResult {
  std::vector<Future<T>> done;
  std::vector<Future<T>> not_done;
};

/// @brief Waits until the first of `futures` is done (FIRST_COMPLETED) or all are
/// (ALL_COMPLETED), or `timeout` passes; returns which are done then. Unlike Dask's wait, a
/// timeout does not throw: what is still running is in not_done.
/// @code
/// auto [done, not_done] = herd::wait(futures, 10s, herd::FIRST_COMPLETED);
/// @endcode
template <typename T, typename Rep, typename Period>
WaitResult<T> wait(const std::vector<Future<T>>& futures, std::chrono::duration<Rep, Period> timeout,
                   ReturnWhen return_when = ALL_COMPLETED) {
  std::vector<detail::FutureState*> states;
  states.reserve(futures.size());
  for (const auto& f : futures) {
    if (!f.valid()) throw Error("herd::wait: empty future in the list");
    states.push_back(f.state().get());
  }
  const std::int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count();
  WaitResult<T> out;
  if (states.empty()) return out;
  if (return_when == FIRST_COMPLETED) {
    (void)detail::core_wait_any(states, ms < 0 ? 0 : ms);
  } else {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    for (const auto& f : futures) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (!f.wait_for(std::max(left, std::chrono::milliseconds(0)))) break;  // not all in time
    }
  }
  const std::vector<bool> done = detail::core_done(states);
  for (std::size_t i = 0; i < futures.size(); ++i) (done[i] ? out.done : out.not_done).push_back(futures[i]);
  return out;
}

/// @brief herd::wait with no time limit.
template <typename T>
WaitResult<T> wait(const std::vector<Future<T>>& futures, ReturnWhen return_when = ALL_COMPLETED) {
  std::vector<detail::FutureState*> states;
  for (const auto& f : futures) {
    if (!f.valid()) throw Error("herd::wait: empty future in the list");
    states.push_back(f.state().get());
  }
  WaitResult<T> out;
  if (states.empty()) return out;
  if (return_when == FIRST_COMPLETED) {
    (void)detail::core_wait_any(states, -1);
  } else {
    for (const auto& f : futures) f.wait();
  }
  const std::vector<bool> done = detail::core_done(states);
  for (std::size_t i = 0; i < futures.size(); ++i) (done[i] ? out.done : out.not_done).push_back(futures[i]);
  return out;
}

}  // namespace herd
