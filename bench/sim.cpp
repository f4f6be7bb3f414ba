// herd_sim: the scheduler's IO-free core (scheduler/state.hpp) driven by thousands of virtual
// workers in one process, with no socket and no process per worker (as HyperQueue benchmarks
// its core with a null comm). It measures what the core costs per task, and how that grows
// with workers and tasks (bench/README.md, "The scheduler core, simulated").
//
//   herd_sim --workers 10,100,1000,10000 --tasks 1000000 --workload independent,tree,mix
//   herd_sim --pending 1000000 --workers "" --tasks ""    bytes per pending task only
//   herd_sim --small                                      tiny grid (the ctest smoke test)
//
// One run per (workload, workers, tasks), each in a forked child so that its peak RSS is its
// own. A run is a loop of turns, as the server's: the client's messages (a batch of submitted
// specs, the releases of futures it gathered), the workers' results and heartbeats, then
// tick(now) and schedule(now); the outbox is read back (executes go to the virtual workers'
// queues, task updates to the client), and each virtual worker runs `step_us` of its queue:
// `slots` tasks at a time, `task_us` each, their results back in one task_results next turn.
// The virtual clock advances `step_us` per turn.
//
// What is timed is the core only: each phase of core calls (submit, release, task_results,
// heartbeats, tick, schedule, the outbox's clear) is wrapped in a wall clock and this thread's
// CPU clock; building the specs and results and reading the outbox (the simulation's own
// bookkeeping) happens outside those brackets and is reported apart (`sim_s`). Dropping each
// worker's messages right after reading them (as the server does after sending) is timed with
// the wall clock alone and counted in `clear`.
#include <malloc.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <queue>
#include <sstream>
#include <string>
#include <vector>

#include "scheduler/state.hpp"

using namespace herd::scheduler;
namespace protocol = herd::protocol;

namespace {

using SteadyClock = std::chrono::steady_clock;

double cpu_now() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double wall_now() { return std::chrono::duration<double>(SteadyClock::now().time_since_epoch()).count(); }

/// Wall and thread-CPU seconds spent inside one kind of core call.
struct Meter {
  double wall = 0, cpu = 0;
  template <typename F>
  void operator()(F&& f) {
    const double w0 = wall_now(), c0 = cpu_now();
    f();
    cpu += cpu_now() - c0;
    wall += wall_now() - w0;
  }
};

std::uint64_t rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

std::uint64_t peak_rss_bytes() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<std::uint64_t>(ru.ru_maxrss) * 1024;
}

std::uint64_t malloc_in_use() {
  const struct mallinfo2 mi = ::mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

/// msgpack of [i] (a fixarray of one uint32): the args of a no-op task, as a client packs them.
void pack_index(std::vector<char>& out, std::uint32_t i) {
  out.resize(6);
  out[0] = static_cast<char>(0x91);
  out[1] = static_cast<char>(0xce);
  for (int b = 0; b < 4; ++b) out[static_cast<std::size_t>(2 + b)] = static_cast<char>((i >> (24 - 8 * b)) & 0xff);
}

struct Config {
  std::string workload = "independent";  // independent | tree | mix
  std::uint32_t workers = 10;
  std::uint64_t tasks = 1'000'000;
  std::uint32_t slots = 8;
  std::uint32_t task_us = 100;     // virtual run time of one task
  std::uint32_t batch_us = StateOptions{}.batch_us;  // tiny tasks go this much work at a time (0 = off)
  std::uint32_t step_us = 1000;    // virtual time per turn
  std::uint32_t batch = 65536;     // specs the client submits per turn
  std::uint64_t window = 0;        // most tasks submitted and not gathered (0 = no bound)
  double gpu_fraction = 0.02;      // mix: share of tasks that need {"gpu": 1}
  double gpu_workers = 0.25;       // mix: share of workers that offer {"gpu": 1}
  bool validate_end = true;        // validate() once at the end
};

struct Result {
  std::uint64_t tasks = 0, turns = 0, placements = 0, cancels = 0, handed_back = 0, acquired = 0;
  Meter submit, release, results, heartbeat, tick, schedule, clear;
  double drop_wall = 0;  // dropping each worker's sent messages (counted in `clear`, wall clock)
  double sim_s = 0, total_wall_s = 0;
  std::uint64_t peak_rss = 0, rss_end = 0;
  std::size_t peak_pending = 0;
  std::string error;  // "" = every task finished and the graph ended empty
};

/// The tasks of one workload, made one spec at a time in submission order.
class Workload {
 public:
  Workload(const Config& c, ClientId client) : c_(c), client_(client) {
    if (c.workload == "tree") {
      // A binary reduction: leaves, then pairs of the level below, down to one root. A level of
      // odd size passes its last task up alone (a one-input task).
      std::uint64_t leaves = std::max<std::uint64_t>(1, (c.tasks + 1) / 2);
      level_sizes_.push_back(leaves);
      while (level_sizes_.back() > 1) level_sizes_.push_back((level_sizes_.back() + 1) / 2);
      total_ = 0;
      for (auto n : level_sizes_) total_ += n;
    } else {
      total_ = c.tasks;
    }
  }
  std::uint64_t total() const { return total_; }
  /// The task that takes task `i` as input (tree only; kNone: none). A client keeps a future
  /// until it has submitted what uses it, so it releases `i` only once that is submitted.
  static constexpr std::uint64_t kNone = ~std::uint64_t{0};
  std::uint64_t dependent_of(std::uint64_t i) const {
    if (c_.workload != "tree") return kNone;
    std::uint64_t start = 0;
    for (std::size_t k = 0; k + 1 < level_sizes_.size(); ++k) {
      if (i < start + level_sizes_[k]) return start + level_sizes_[k] + (i - start) / 2;
      start += level_sizes_[k];
    }
    return kNone;  // the root
  }
  TaskId id_of(std::uint64_t index) const { return (static_cast<TaskId>(client_) << 40) | (index + 1); }
  static std::uint64_t index_of(TaskId id) { return (id & ((TaskId{1} << 40) - 1)) - 1; }

  /// Fills `s` with task number `i` (0-based, submission order).
  void make(std::uint64_t i, protocol::TaskSpec& s) {
    s.id = id_of(i);
    s.refs.clear();
    s.resources.clear();
    if (c_.workload == "tree") {
      while (i >= level_start_ + level_sizes_[level_]) {
        level_start_ += level_sizes_[level_];
        ++level_;
      }
      if (level_ == 0) {
        s.function = "leaf";
        pack_index(s.args, static_cast<std::uint32_t>(i));
        return;
      }
      const std::uint64_t below = level_start_ - level_sizes_[level_ - 1];
      const std::uint64_t k = i - level_start_;
      const std::uint64_t a = below + 2 * k, b = a + 1;
      s.function = "add";
      s.args.assign({static_cast<char>(0x92), static_cast<char>(0xc0), static_cast<char>(0xc0)});
      s.refs.push_back({id_of(a), 0, -1});
      if (b < level_start_) {
        s.refs.push_back({id_of(b), 1, -1});
      } else {  // the odd one out of its level: passed up alone
        s.function = "pass";
        s.args.assign({static_cast<char>(0x91), static_cast<char>(0xc0)});
      }
      return;
    }
    pack_index(s.args, static_cast<std::uint32_t>(i));
    if (c_.workload == "mix" && gpu_every() > 0 && i % gpu_every() == gpu_every() - 1) {
      s.function = "train";
      s.resources["gpu"] = 1;
    } else {
      s.function = c_.workload == "mix" ? "prep" : "noop";
    }
  }

 private:
  std::uint64_t gpu_every() const {
    return c_.gpu_fraction <= 0 ? 0 : std::max<std::uint64_t>(1, static_cast<std::uint64_t>(1.0 / c_.gpu_fraction + 0.5));
  }
  const Config& c_;
  ClientId client_;
  std::uint64_t total_ = 0;
  std::vector<std::uint64_t> level_sizes_;
  std::size_t level_ = 0;
  std::uint64_t level_start_ = 0;
};

/// What the server does with a worker's messages once sent (a function of its own so that
/// bench/sim_callgrind.sh can count it with the core).
__attribute__((noinline)) void drop_sent(WorkerOut& wo) { wo = WorkerOut{}; }

/// A virtual worker: a queue of received tasks, `slots` run at a time, `task_us` each.
struct VWorker {
  WorkerId id = 0;
  std::string address;
  struct Entry {
    TaskId id;
    std::uint16_t epoch;
  };
  std::vector<Entry> queue;
  std::size_t head = 0;                        // queue[head..] not finished
  protocol::TaskResultsEvent pending;          // results to send next turn
  bool active = false;                         // in the active list
};

Result run(const Config& c) {
  Result res;
  const double t_start = wall_now();
  StateOptions opts;
  opts.validate = false;
  opts.batch_us = c.batch_us;
  SchedulerState state(opts);
  Now now{Clock::time_point{} + std::chrono::hours(1), 1'700'000'000'000};
  auto advance = [&](std::uint32_t us) {
    now.mono += std::chrono::microseconds(us);
    now.unix_ms = 1'700'000'000'000 + std::chrono::duration_cast<std::chrono::milliseconds>(now.mono.time_since_epoch()).count();
  };

  protocol::HelloRequest client_hello;
  client_hello.name = "sim-client";
  const ClientId client = state.add_client(client_hello, now);

  // Workers; in the mix, the first gpu_workers of them also offer {"gpu": 1}.
  std::vector<VWorker> vws(c.workers);
  std::unordered_map<WorkerId, std::size_t> vw_index;
  const std::uint32_t n_gpu =
      c.workload == "mix" ? std::max<std::uint32_t>(1, static_cast<std::uint32_t>(c.workers * c.gpu_workers)) : 0;
  for (std::uint32_t i = 0; i < c.workers; ++i) {
    protocol::HelloRequest hello;
    hello.role = static_cast<std::uint8_t>(protocol::Role::worker);
    hello.name = "sim-" + std::to_string(i);
    hello.host = "node" + std::to_string(i / 4);
    hello.nthreads = c.slots;
    hello.data_address = "tcp://10.0." + std::to_string(i / 250) + "." + std::to_string(i % 250) + ":7000";
    if (i < n_gpu) hello.resources["gpu"] = 1;
    vws[i].id = state.add_worker(hello, now);
    vws[i].address = hello.data_address;
    vw_index[vws[i].id] = i;
  }
  state.outbox().clear();

  Workload wl(c, client);
  const std::uint64_t total = wl.total();
  res.tasks = total;
  std::vector<std::uint16_t> epoch(total, 0);   // bumped when a task is handed back
  std::vector<std::uint32_t> pos(total, 0);     // its place in its worker's queue
  std::vector<protocol::TaskSpec> specs;
  std::vector<TaskId> to_release;
  // Gathered futures kept until what uses them is submitted: (that task's index, id).
  std::priority_queue<std::pair<std::uint64_t, TaskId>, std::vector<std::pair<std::uint64_t, TaskId>>, std::greater<>> held;
  std::vector<std::size_t> active;              // workers with a queue
  std::uint64_t submitted = 0, gathered = 0;
  const std::uint32_t per_turn = std::max<std::uint32_t>(1, c.slots * c.step_us / std::max<std::uint32_t>(1, c.task_us));
  // Heartbeats: every worker once per heartbeat_ms of virtual time, spread over the turns.
  const double beats_per_turn = static_cast<double>(c.workers) * c.step_us / (opts.heartbeat_ms * 1000.0);
  double beats_due = 0;
  std::size_t beat_cursor = 0;
  protocol::HeartbeatEvent hb;
  std::string error;
  double sim = 0;
  const std::uint64_t max_turns = 50'000'000;

  while (gathered < total) {
    if (++res.turns > max_turns) {
      res.error = "no progress after " + std::to_string(max_turns) + " turns";
      break;
    }
    // ---- the client's messages: a batch of specs, then the futures it gathered -----------
    if (submitted < total && (c.window == 0 || submitted - gathered < c.window)) {
      std::uint64_t n = std::min<std::uint64_t>(c.batch, total - submitted);
      if (c.window != 0) n = std::min<std::uint64_t>(n, c.window - (submitted - gathered));
      double s0 = wall_now();
      specs.resize(n);
      for (std::uint64_t k = 0; k < n; ++k) wl.make(submitted + k, specs[k]);
      sim += wall_now() - s0;
      res.submit([&] {
        state.heard_from_client(client, now);
        for (const auto& s : specs) {
          if (!state.submit(client, s, nullptr, error)) std::abort();
        }
      });
      submitted += n;
    }
    while (!held.empty() && held.top().first < submitted) {
      to_release.push_back(held.top().second);
      held.pop();
    }
    res.release([&] {
      state.heard_from_client(client, now);  // the client sends something every turn, at least a heartbeat
      if (!to_release.empty()) state.release(client, to_release);
    });
    to_release.clear();
    // ---- the workers' messages ----------------------------------------------------------
    res.results([&] {
      for (std::size_t i : active) {
        VWorker& w = vws[i];
        if (w.pending.results.empty() && w.pending.acquired.empty()) continue;
        state.task_results(w.id, w.pending, now);
      }
    });
    double s0 = wall_now();
    for (std::size_t i : active) {
      vws[i].pending.results.clear();
      vws[i].pending.acquired.clear();
    }
    sim += wall_now() - s0;
    beats_due += beats_per_turn;
    if (beats_due >= 1) {
      const auto beats = static_cast<std::size_t>(beats_due);
      beats_due -= static_cast<double>(beats);
      res.heartbeat([&] {
        for (std::size_t k = 0; k < beats && !vws.empty(); ++k) {
          state.heartbeat(vws[beat_cursor].id, hb, now);
          beat_cursor = (beat_cursor + 1) % vws.size();
        }
      });
    }
    // ---- the server's turn --------------------------------------------------------------
    res.tick([&] { state.tick(now); });
    res.schedule([&] { state.schedule(now); });
    res.peak_pending = std::max<std::size_t>(res.peak_pending, state.graph().size());
    // ---- what it sent -------------------------------------------------------------------
    s0 = wall_now();
    Outbox& out = state.outbox();
    for (auto& [wid, wo] : out.workers) {
      if (wo.execute.empty() && wo.cancel.empty()) continue;
      auto found = vw_index.find(wid);
      if (found == vw_index.end()) continue;
      VWorker& w = vws[found->second];
      for (const auto& e : wo.execute) {
        const std::uint64_t idx = Workload::index_of(e.id);
        pos[idx] = static_cast<std::uint32_t>(w.queue.size());
        w.queue.push_back({e.id, epoch[idx]});
        ++res.placements;
        for (const auto& in : e.inputs) {
          // An input no copy of which is here is fetched from a peer before the task runs.
          if (std::find(in.holders.begin(), in.holders.end(), w.address) == in.holders.end()) {
            w.pending.acquired.push_back(in.id);
            ++res.acquired;
          }
        }
      }
      res.cancels += wo.cancel.size();
      for (TaskId t : wo.cancel) {
        // Not started (beyond the first `slots` of the queue): handed back.
        const std::uint64_t idx = Workload::index_of(t);
        if (idx >= total || pos[idx] < w.head + c.slots || pos[idx] >= w.queue.size()) continue;
        auto& q = w.queue[pos[idx]];
        if (q.id != t || q.epoch != epoch[idx]) continue;
        ++epoch[idx];
        protocol::TaskResult r;
        r.id = t;
        r.handed_back = true;
        w.pending.results.push_back(std::move(r));
        ++res.handed_back;
      }
      if (!w.active && w.head < w.queue.size()) {
        w.active = true;
        active.push_back(found->second);
      }
      // The server sends a worker's messages and drops them at once (WorkerOut{}), while they
      // are in cache; so does this, timed as the core's. Wall clock only: this thread's CPU
      // clock is a system call here (~0.8 us), too dear per worker.
      const double d0 = wall_now();
      drop_sent(wo);
      res.drop_wall += wall_now() - d0;
    }
    if (auto cl = out.clients.find(client); cl != out.clients.end()) {
      for (const auto& u : cl->second.updates.updates) {
        const auto st = static_cast<protocol::TaskState>(u.state);
        if (st == protocol::TaskState::memory) {
          ++gathered;
          const std::uint64_t dep = wl.dependent_of(Workload::index_of(u.id));
          if (dep == Workload::kNone || dep < submitted) to_release.push_back(u.id);
          else held.push({dep, u.id});
        } else if (st == protocol::TaskState::erred || st == protocol::TaskState::cancelled) {
          res.error = "task " + std::to_string(u.id) + " failed: " + u.error.type + ": " + u.error.message;
        }
      }
    }
    sim += wall_now() - s0;
    res.clear([&] { out.clear(); });
    if (!res.error.empty()) break;
    // ---- the workers run step_us of their queues ----------------------------------------
    s0 = wall_now();
    std::size_t kept = 0;
    for (std::size_t i : active) {
      VWorker& w = vws[i];
      std::uint32_t ran = 0;
      while (w.head < w.queue.size() && ran < per_turn) {
        const auto e = w.queue[w.head++];
        if (e.epoch != epoch[Workload::index_of(e.id)]) continue;  // handed back
        protocol::TaskResult r;
        r.id = e.id;
        r.ok = true;
        r.nbytes = 8;
        r.inline_data.assign(8, '\0');
        r.duration_us = c.task_us;
        w.pending.results.push_back(std::move(r));
        ++ran;
      }
      if (w.head == w.queue.size()) {
        w.queue.clear();
        w.head = 0;
      }
      if (w.head < w.queue.size() || !w.pending.results.empty() || !w.pending.acquired.empty()) {
        active[kept++] = i;
      } else {
        w.active = false;
      }
    }
    active.resize(kept);
    sim += wall_now() - s0;
    advance(c.step_us);
  }
  while (!held.empty()) {
    to_release.push_back(held.top().second);
    held.pop();
  }
  if (!to_release.empty()) res.release([&] { state.release(client, to_release); });
  state.outbox().clear();
  res.sim_s = sim - res.drop_wall;
  res.clear.wall += res.drop_wall;
  res.clear.cpu += res.drop_wall;
  res.peak_rss = peak_rss_bytes();
  res.rss_end = rss_bytes();
  if (res.error.empty() && state.graph().size() != 0) {
    res.error = std::to_string(state.graph().size()) + " tasks left in the graph after every future was released";
  }
  if (res.error.empty() && c.validate_end) {
    if (std::string broken = state.validate(); !broken.empty()) res.error = "validate(): " + broken;
  }
  res.total_wall_s = wall_now() - t_start;
  return res;
}

/// Bytes the core holds per pending task: `n` independent no-op tasks (6-byte args) submitted
/// with no worker connected, malloc's bytes in use and the RSS read before and after.
struct Pending {
  std::uint64_t n = 0;
  double malloc_per_task = 0, rss_per_task = 0;
  double submit_us_per_task = 0;
};

Pending pending_memory(std::uint64_t n, std::uint32_t batch) {
  Pending p;
  p.n = n;
  StateOptions opts;
  SchedulerState state(opts);
  Now now{Clock::time_point{} + std::chrono::hours(1), 1'700'000'000'000};
  protocol::HelloRequest hello;
  hello.name = "sim-client";
  const ClientId client = state.add_client(hello, now);
  Config c;
  c.workload = "independent";
  c.tasks = n;
  Workload wl(c, client);
  std::vector<protocol::TaskSpec> specs(std::min<std::uint64_t>(batch, n));
  for (std::uint64_t k = 0; k < specs.size(); ++k) wl.make(k, specs[k]);  // the batch's own memory first
  ::malloc_trim(0);
  const std::uint64_t m0 = malloc_in_use(), r0 = rss_bytes();
  std::string error;
  Meter m;
  for (std::uint64_t done = 0; done < n;) {
    const std::uint64_t k = std::min<std::uint64_t>(specs.size(), n - done);
    for (std::uint64_t j = 0; j < k; ++j) wl.make(done + j, specs[j]);
    m([&] {
      for (std::uint64_t j = 0; j < k; ++j) (void)state.submit(client, specs[j], nullptr, error);
    });
    done += k;
  }
  const std::uint64_t m1 = malloc_in_use(), r1 = rss_bytes();
  if (state.graph().size() != n) std::fprintf(stderr, "herd_sim: %zu of %llu tasks pending\n", state.graph().size(), static_cast<unsigned long long>(n));
  p.malloc_per_task = static_cast<double>(m1 - m0) / static_cast<double>(n);
  p.rss_per_task = static_cast<double>(r1 - r0) / static_cast<double>(n);
  p.submit_us_per_task = m.cpu * 1e6 / static_cast<double>(n);
  return p;
}

std::string json_run(const Config& c, const Result& r) {
  std::ostringstream o;
  o.precision(6);
  const double core_cpu = r.submit.cpu + r.release.cpu + r.results.cpu + r.heartbeat.cpu + r.tick.cpu + r.schedule.cpu + r.clear.cpu;
  const double core_wall = r.submit.wall + r.release.wall + r.results.wall + r.heartbeat.wall + r.tick.wall + r.schedule.wall + r.clear.wall;
  const double n = static_cast<double>(std::max<std::uint64_t>(1, r.tasks));
  o << "{\"system\":\"herd\",\"bench\":\"sim\",\"workload\":\"" << c.workload << "\",\"workers\":" << c.workers
    << ",\"slots\":" << c.slots << ",\"tasks\":" << r.tasks << ",\"task_us\":" << c.task_us << ",\"step_us\":" << c.step_us
    << ",\"turns\":" << r.turns << ",\"placements\":" << r.placements << ",\"cancels\":" << r.cancels << ",\"handed_back\":" << r.handed_back
    << ",\"acquired\":" << r.acquired << ",\"core_cpu_s\":" << core_cpu << ",\"core_wall_s\":" << core_wall
    << ",\"tasks_per_s\":" << n / std::max(core_cpu, 1e-9) << ",\"us_per_task\":" << core_cpu * 1e6 / n
    << ",\"wall_us_per_task\":" << core_wall * 1e6 / n;
  const std::pair<const char*, const Meter*> phases[] = {{"submit", &r.submit},   {"release", &r.release},
                                                         {"results", &r.results}, {"heartbeat", &r.heartbeat},
                                                         {"tick", &r.tick},       {"schedule", &r.schedule},
                                                         {"clear", &r.clear}};
  for (const auto& [name, m] : phases) o << ",\"" << name << "_us_per_task\":" << m->cpu * 1e6 / n;
  o << ",\"sim_s\":" << r.sim_s << ",\"run_wall_s\":" << r.total_wall_s << ",\"peak_pending\":" << r.peak_pending
    << ",\"peak_rss_bytes\":" << r.peak_rss << ",\"pid\":" << ::getpid() << ",\"ok\":" << (r.error.empty() ? "true" : "false");
  if (!r.error.empty()) {
    std::string e;
    for (char ch : r.error) e += (ch == '"' || ch == '\\') ? ' ' : ch;
    o << ",\"error\":\"" << e << "\"";
  }
  o << "}";
  return o.str();
}

/// Runs `f` in a forked child (its own peak RSS); returns what it wrote, or an error line.
template <typename F>
std::string in_child(F&& f) {
  int fds[2];
  if (::pipe(fds) != 0) return "{\"ok\":false,\"error\":\"pipe failed\"}";
  std::fflush(stdout);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    const std::string line = f();
    std::size_t off = 0;
    while (off < line.size()) {
      const ssize_t w = ::write(fds[1], line.data() + off, line.size() - off);
      if (w <= 0) break;
      off += static_cast<std::size_t>(w);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t got;
  while ((got = ::read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(got));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (out.empty()) {
    return "{\"system\":\"herd\",\"bench\":\"sim\",\"ok\":false,\"error\":\"the run died (status " + std::to_string(status) + ")\"}";
  }
  return out;
}

std::vector<std::uint64_t> parse_list(const std::string& s) {
  std::vector<std::uint64_t> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(std::stoull(item));
  }
  return out;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

/// A number out of a JSON line this program wrote (flat, no nesting).
double field(const std::string& line, const std::string& name) {
  const std::string key = "\"" + name + "\":";
  const auto at = line.find(key);
  return at == std::string::npos ? 0.0 : std::atof(line.c_str() + at + key.size());
}

std::string text_field(const std::string& line, const std::string& name) {
  const std::string key = "\"" + name + "\":\"";
  const auto at = line.find(key);
  if (at == std::string::npos) return "";
  const auto end = line.find('"', at + key.size());
  return line.substr(at + key.size(), end - at - key.size());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"herd_sim: the scheduler core driven by virtual workers (JSON lines, then a table)"};
  Config c;
  std::string workers = "10,100,1000,10000", tasks = "1000000", workloads = "independent,tree,mix";
  std::uint64_t pending = 1'000'000;
  bool small = false, table = true;
  app.add_option("--workers", workers, "worker counts, comma separated")->capture_default_str();
  app.add_option("--tasks", tasks, "task counts, comma separated (tree: about this many, 2*leaves-1)")->capture_default_str();
  app.add_option("--workload", workloads, "independent, tree, mix; comma separated")->capture_default_str();
  app.add_option("--slots", c.slots, "task slots (threads) per worker")->capture_default_str();
  app.add_option("--task-us", c.task_us, "virtual run time of a task")->capture_default_str();
  app.add_option("--batch-us", c.batch_us, "HERD_BATCH_US: tasks quicker than this are placed this much work at a time (0 = off)")
      ->capture_default_str();
  app.add_option("--step-us", c.step_us, "virtual time per turn")->capture_default_str();
  app.add_option("--batch", c.batch, "specs the client submits per turn")->capture_default_str();
  app.add_option("--window", c.window, "most tasks submitted and not yet gathered (0 = no bound)")->capture_default_str();
  app.add_option("--gpu-fraction", c.gpu_fraction, "mix: share of tasks needing {gpu: 1}")->capture_default_str();
  app.add_option("--gpu-workers", c.gpu_workers, "mix: share of workers offering {gpu: 1}")->capture_default_str();
  app.add_option("--pending", pending, "bytes per pending task over this many tasks (0 = skip)")->capture_default_str();
  app.add_flag("!--no-table", table, "JSON lines only");
  int repeat = 1;
  app.add_option("--repeat", repeat, "runs per grid point; the table shows the fastest")->capture_default_str();
  app.add_flag("--small", small, "a tiny grid: 10 and 100 workers, 20,000 tasks (the smoke test)");
  CLI11_PARSE(app, argc, argv);
  if (small) {
    workers = "10,100";
    tasks = "20000";
    pending = 20000;
  }
  const auto wl = split(workloads);
  for (const auto& w : wl) {
    if (w != "independent" && w != "tree" && w != "mix") {
      std::fprintf(stderr, "herd_sim: unknown workload '%s' (independent, tree, mix)\n", w.c_str());
      return 2;
    }
  }
  std::vector<std::string> lines;
  bool ok = true;
  std::string pending_line;
  if (pending > 0) {
    pending_line = in_child([&] {
      const Pending p = pending_memory(pending, c.batch);
      std::ostringstream o;
      o << "{\"system\":\"herd\",\"bench\":\"sim_pending\",\"tasks\":" << p.n << ",\"malloc_bytes_per_task\":" << p.malloc_per_task
        << ",\"rss_bytes_per_task\":" << p.rss_per_task << ",\"submit_us_per_task\":" << p.submit_us_per_task
        << ",\"task_record_bytes\":" << sizeof(Task) << "}";
      return o.str();
    });
    std::printf("%s\n", pending_line.c_str());
    std::fflush(stdout);
  }
  for (const auto& w : wl) {
    for (std::uint64_t n : parse_list(tasks)) {
      for (std::uint64_t nw : parse_list(workers)) {
        Config rc = c;
        rc.workload = w;
        rc.tasks = n;
        rc.workers = static_cast<std::uint32_t>(nw);
        // Repeats: the table keeps the run with the least core CPU time (the one least
        // disturbed by whatever else the machine runs); every run prints its JSON line.
        std::string best;
        for (int r = 0; r < repeat; ++r) {
          const std::string line = in_child([&] { return json_run(rc, run(rc)); });
          std::printf("%s\n", line.c_str());
          std::fflush(stdout);
          if (line.find("\"ok\":true") == std::string::npos) ok = false;
          if (best.empty() || field(line, "us_per_task") < field(best, "us_per_task")) best = line;
        }
        lines.push_back(best);
      }
    }
  }
  if (table) {
    if (repeat > 1) std::printf("\n(the fastest of %d runs each)", repeat);
    // `x_first`: us/task against the first worker count of the same workload and task count
    // (how the cost grows with workers).
    std::printf("\n%-12s %8s %10s %12s %9s %8s %9s %9s %9s %9s %10s\n", "workload", "workers", "tasks", "tasks/s(cpu)", "us/task",
                "x_first", "sched_us", "result_us", "submit_us", "wall_us", "peak_MiB");
    std::string first_key;
    double first_us = 0;
    for (const auto& l : lines) {
      const std::string key = text_field(l, "workload") + "/" + std::to_string(static_cast<long long>(field(l, "tasks")));
      if (key != first_key) {
        first_key = key;
        first_us = field(l, "us_per_task");
      }
      std::printf("%-12s %8.0f %10.0f %12.0f %9.3f %8.2f %9.3f %9.3f %9.3f %9.3f %10.1f%s\n", text_field(l, "workload").c_str(),
                  field(l, "workers"), field(l, "tasks"), field(l, "tasks_per_s"), field(l, "us_per_task"),
                  first_us > 0 ? field(l, "us_per_task") / first_us : 0.0, field(l, "schedule_us_per_task"),
                  field(l, "results_us_per_task"), field(l, "submit_us_per_task"), field(l, "wall_us_per_task"),
                  field(l, "peak_rss_bytes") / 1048576.0, l.find("\"ok\":true") == std::string::npos ? "  FAILED" : "");
    }
    if (!pending_line.empty()) {
      std::printf("\npending tasks: %.0f; bytes per pending task: %.1f (malloc), %.1f (RSS); the Task record: %.0f\n",
                  field(pending_line, "tasks"), field(pending_line, "malloc_bytes_per_task"), field(pending_line, "rss_bytes_per_task"),
                  field(pending_line, "task_record_bytes"));
    }
  }
  return ok ? 0 : 1;
}
