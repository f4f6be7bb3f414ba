#include "worker/worker_state.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace herd::worker {

namespace {
constexpr double kEps = 1e-9;

std::string hex(TaskId id) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(id));
  return buf;
}
}  // namespace

WorkerState::WorkerState(WorkerStateOptions options) : options_(std::move(options)) {
  options_.nthreads = std::max<std::uint32_t>(1, options_.nthreads);
  free_resources_ = options_.resources;
  gpu_free_.assign(options_.gpus, 1.0);
  core_free_.assign(options_.cores.size(), true);
}

namespace {
bool asks_cores(const protocol::ExecuteTask& t) {
  if (t.resources.empty()) return false;
  auto c = t.resources.find("cpus");
  return c != t.resources.end() && c->second > 0;
}
}  // namespace

std::size_t WorkerState::core_task_limit() const {
  auto it = options_.resources.find("cpus");
  return it == options_.resources.end() || it->second < 1 ? 0 : static_cast<std::size_t>(it->second + kEps);
}

std::vector<int> WorkerState::free_cores() const {
  std::vector<int> out;
  for (std::size_t i = 0; i < core_free_.size(); ++i) {
    if (core_free_[i]) out.push_back(options_.cores[i]);
  }
  return out;
}

std::vector<std::size_t> WorkerState::pick_cores(double need) const {
  // The lowest free ones: a task's cores stay together when the others' do.
  std::vector<std::size_t> out;
  const auto n = static_cast<std::size_t>(std::ceil(need - kEps));
  for (std::size_t i = 0; i < core_free_.size() && out.size() < n; ++i) {
    if (core_free_[i]) out.push_back(i);
  }
  if (out.size() < n) out.clear();
  return out;
}

void WorkerState::release(const Running& r) {
  for (const auto& [name, amount] : r.resources) free_resources_[name] += amount;
  for (int d : r.devices) gpu_free_[static_cast<std::size_t>(d)] += r.gpu_share;
  for (std::size_t c : r.cores) core_free_[c] = true;
  if (r.holds_cores) --core_tasks_;
}

// ---- from the scheduler --------------------------------------------------------------------

void WorkerState::execute(std::vector<protocol::ExecuteTask>&& tasks) {
  for (auto& task : tasks) {
    const TaskId id = task.id;
    if (pending_.count(id) || running_.count(id)) continue;  // a resend
    std::uint32_t missing = 0;
    for (const auto& in : task.inputs) missing += stored_.count(in.id) == 0;
    if (missing == 0) {
      make_ready(std::move(task));
      continue;
    }
    Pending& p = pending_[id];
    p.task = std::move(task);
    p.missing = missing;
    p.arrived_us = now_us_;
    std::vector<TaskId> to_fetch;
    for (const auto& in : p.task.inputs) {
      if (stored_.count(in.id)) continue;
      auto [it, added] = wanted_.try_emplace(in.id);
      it->second.tasks.push_back(id);
      if (added) {
        it->second.holders = in.holders;
        to_fetch.push_back(in.id);
      }
    }
    // An input with no holder to ask gives the task back at once (p may be gone after this).
    for (TaskId dep : to_fetch) fetch_next(dep);
  }
  start_ready();
  check();
}

void WorkerState::cancel(const std::vector<TaskId>& ids) {
  for (TaskId id : ids) {
    if (pending_.erase(id) > 0) {
      hand_back(id);
      continue;
    }
    auto it = std::find_if(ready_.begin(), ready_.end(), [id](const auto& t) { return t.id == id; });
    if (it != ready_.end()) {
      ready_cores_ -= asks_cores(*it);
      ready_.erase(it);
      hand_back(id);
    }
    // Running: it finishes (the scheduler knows whether it still wants the result).
  }
  check();
}

bool WorkerState::abandon(TaskId id, protocol::ErrorInfo error) {
  auto it = running_.find(id);
  if (it == running_.end()) {
    cancel({id});
    return false;
  }
  release(it->second);
  forget_seceded(it->first, it->second);
  running_.erase(it);
  if (!fetched_.empty()) fetched_.erase(id);
  protocol::TaskResult r;
  r.id = id;
  r.error = std::move(error);
  if (r.error.worker.empty()) r.error.worker = options_.name;
  out_.results.push_back(std::move(r));
  start_ready();
  check();
  return true;
}

void WorkerState::hand_back(TaskId id) {
  // Unstarted: given back. The scheduler knows whether it was cancelled or is moving it.
  if (!fetched_.empty()) fetched_.erase(id);
  protocol::TaskResult r;
  r.id = id;
  r.handed_back = true;
  r.error = {"herd::HandedBack", "given back before it started", "", options_.name};
  out_.results.push_back(std::move(r));
}

void WorkerState::free_keys(const std::vector<TaskId>& ids) {
  for (TaskId id : ids) {
    auto it = stored_.find(id);
    if (it == stored_.end()) continue;
    stored_bytes_ -= it->second;
    stored_.erase(it);
    out_.free.push_back(id);
  }
  check();
}

void WorkerState::acquire(const std::vector<protocol::DepLocation>& keys) {
  for (const auto& key : keys) {
    if (stored_.count(key.id)) {
      out_.acquired.push_back(key.id);  // already here: say so, so the scheduler counts the copy
      continue;
    }
    auto [it, added] = wanted_.try_emplace(key.id);
    it->second.acquire = true;
    if (added) {
      it->second.holders = key.holders;
      fetch_next(key.id);
    }
  }
  check();
}

void WorkerState::put_from(TaskId id, const std::string& source) {
  if (auto it = stored_.find(id); it != stored_.end()) {
    put(id, it->second);  // here already (a resend)
    return;
  }
  auto [it, added] = wanted_.try_emplace(id);
  it->second.put = true;
  if (added) {
    it->second.holders = {source};
    fetch_next(id);
  }
  check();
}

void WorkerState::put(TaskId id, std::uint64_t nbytes) {
  if (!stored_.count(id)) {
    stored_[id] = nbytes;
    stored_bytes_ += nbytes;
  }
  protocol::TaskResult r;
  r.id = id;
  r.ok = true;
  r.nbytes = nbytes;
  out_.results.push_back(std::move(r));
  input_arrived(id);  // a task may have been waiting for exactly this
  check();
}

// ---- inputs --------------------------------------------------------------------------------

void WorkerState::fetch_next(TaskId dep) {
  auto it = wanted_.find(dep);
  if (it == wanted_.end()) return;
  Wanted& w = it->second;
  while (w.next < w.holders.size() && w.holders[w.next] == options_.data_address) ++w.next;
  if (w.next >= w.holders.size()) {
    input_unavailable(dep);
    return;
  }
  out_.fetch[w.holders[w.next++]].push_back(dep);
}

void WorkerState::fetched(const std::string& address, TaskId id, std::uint64_t nbytes) {
  (void)address;
  if (!stored_.count(id)) {
    stored_[id] = nbytes;
    stored_bytes_ += nbytes;
  }
  if (auto w = wanted_.find(id); w != wanted_.end() && w->second.put) {
    // A scattered value fetched from its client: the scatter's result, as put() reports it.
    protocol::TaskResult r;
    r.id = id;
    r.ok = true;
    r.nbytes = nbytes;
    out_.results.push_back(std::move(r));
  } else {
    // Every copy fetched is reported: the scheduler counts it as a holder (and frees it when
    // nobody needs it), whether a task or an acquire asked for it.
    out_.acquired.push_back(id);
    if (w != wanted_.end()) {
      for (TaskId tid : w->second.tasks) {  // what each waiting task's fetching cost (run record)
        Fetched& f = fetched_[tid];
        f.bytes += nbytes;
        ++f.peers;
      }
    }
  }
  input_arrived(id);
  check();
}

void WorkerState::not_there(const std::string& address, TaskId id) {
  auto it = wanted_.find(id);
  if (it == wanted_.end()) return;
  it->second.not_held.push_back(address);
  fetch_next(id);
  check();
}

void WorkerState::fetch_failed(const std::string& address, const std::vector<TaskId>& ids, const std::string& why) {
  for (TaskId id : ids) {
    auto it = wanted_.find(id);
    if (it == wanted_.end()) continue;
    it->second.unreachable.push_back(address + " (" + why + ")");
    fetch_next(id);
  }
  check();
}

void WorkerState::input_arrived(TaskId dep) {
  auto w = wanted_.find(dep);
  if (w == wanted_.end()) return;
  const std::vector<TaskId> tasks = std::move(w->second.tasks);
  wanted_.erase(w);
  for (TaskId id : tasks) {
    auto p = pending_.find(id);
    if (p == pending_.end()) continue;
    if (--p->second.missing == 0) {
      if (auto f = fetched_.find(id); f != fetched_.end()) {
        f->second.us = now_us_ > p->second.arrived_us ? now_us_ - p->second.arrived_us : 0;
      }
      protocol::ExecuteTask task = std::move(p->second.task);
      pending_.erase(p);
      make_ready(std::move(task));
    }
  }
  start_ready();
}

void WorkerState::input_unavailable(TaskId dep) {
  auto w = wanted_.find(dep);
  if (w == wanted_.end()) return;
  Wanted gone = std::move(w->second);
  wanted_.erase(w);
  // Which holders did what, for the scheduler (it places the task elsewhere, or recomputes the
  // input) and for the error the user sees if nothing works.
  std::vector<std::string> unreachable_ports, not_held_ports;
  std::string detail;
  for (const auto& u : gone.unreachable) {
    unreachable_ports.push_back(u.substr(0, u.find(' ')));
    detail += (detail.empty() ? "" : "; ") + std::string("could not reach ") + u;
  }
  for (const auto& a : gone.not_held) {
    not_held_ports.push_back(a);
    detail += (detail.empty() ? "" : "; ") + a + " no longer holds it";
  }
  if (gone.holders.empty()) detail = "the scheduler named no holder";
  if (gone.acquire) out_.acquire_failed.push_back({dep, gone.holders});
  if (gone.put) {
    protocol::TaskResult r;
    r.id = dep;
    r.error = {protocol::kScatterSourceUnreachable,
               "worker " + options_.name + " could not fetch scattered value " + hex(dep) + ": " + detail, "",
               options_.name};
    out_.results.push_back(std::move(r));
  }
  for (TaskId id : gone.tasks) {
    auto p = pending_.find(id);
    if (p == pending_.end()) continue;
    const std::string key = p->second.task.key;
    pending_.erase(p);
    if (!fetched_.empty()) fetched_.erase(id);
    protocol::TaskResult r;
    r.id = id;
    r.missing_input = true;
    r.error = {"herd::MissingInput", "input " + hex(dep) + " could not be fetched: " + detail, key, options_.name};
    if (!unreachable_ports.empty()) r.unreachable.push_back({dep, unreachable_ports});
    if (!not_held_ports.empty()) r.not_held.push_back({dep, not_held_ports});
    out_.results.push_back(std::move(r));
  }
}

// ---- running -------------------------------------------------------------------------------

void WorkerState::make_ready(protocol::ExecuteTask&& task) {
  // A gang member goes first: the other ranks are waiting for it.
  ready_cores_ += asks_cores(task);
  if (task.gang != 0) ready_.push_front(std::move(task));
  else ready_.push_back(std::move(task));
}

std::vector<int> WorkerState::pick_gpus(double need) const {
  std::vector<int> out;
  if (need <= 0) return out;
  if (need < 1) {
    // One device with room, the fullest that fits (so whole devices stay whole).
    int best = -1;
    for (std::size_t i = 0; i < gpu_free_.size(); ++i) {
      if (gpu_free_[i] + kEps >= need && (best < 0 || gpu_free_[i] < gpu_free_[static_cast<std::size_t>(best)])) {
        best = static_cast<int>(i);
      }
    }
    if (best >= 0) out.push_back(best);
    return out;
  }
  const auto n = static_cast<std::size_t>(std::ceil(need - kEps));
  for (std::size_t i = 0; i < gpu_free_.size() && out.size() < n; ++i) {
    if (gpu_free_[i] >= 1.0 - kEps) out.push_back(static_cast<int>(i));
  }
  if (out.size() < n) out.clear();
  return out;
}

void WorkerState::pause(bool on) {
  if (paused_ == on) return;
  paused_ = on;
  start_ready();
}

bool WorkerState::secede(TaskId id) {
  auto it = running_.find(id);
  if (it == running_.end()) return false;
  // A task holding cores holds no slot: nothing to give back.
  if (!it->second.seceded && !it->second.holds_cores) {
    it->second.seceded = true;
    ++seceded_;
    out_.seceded.push_back(id);
    start_ready();
  }
  check();
  return true;
}

bool WorkerState::rejoin(TaskId id) {
  auto it = running_.find(id);
  if (it == running_.end() || !it->second.seceded) return true;
  if (std::find(rejoining_.begin(), rejoining_.end(), id) == rejoining_.end()) rejoining_.push_back(id);
  grant_rejoins();
  check();
  return !running_.at(id).seceded;
}

void WorkerState::grant_rejoins() {
  // Before any new task: a task that waited for its inputs to be computed goes on first.
  while (!rejoining_.empty() && slots_used() < options_.nthreads) {
    const TaskId id = rejoining_.front();
    rejoining_.pop_front();
    auto it = running_.find(id);
    if (it == running_.end() || !it->second.seceded) continue;
    it->second.seceded = false;
    --seceded_;
    out_.rejoined.push_back(id);
  }
}

void WorkerState::forget_seceded(TaskId id, const Running& r) {
  if (!r.seceded) return;
  --seceded_;
  rejoining_.erase(std::remove(rejoining_.begin(), rejoining_.end(), id), rejoining_.end());
}

void WorkerState::start_ready() {
  grant_rejoins();
  if (paused_) return;
  while (!ready_.empty()) {
    // A task that asks for cpus holds cores, not a thread slot: its cores cap it. Nothing can
    // start: no scan of what is ready.
    const bool slot = slots_used() < options_.nthreads;
    if (!slot && (ready_cores_ == 0 || core_tasks_ >= core_task_limit())) return;
    auto fits = [&](const protocol::ExecuteTask& t) {
      const bool cores = asks_cores(t);
      if (cores ? core_tasks_ >= core_task_limit() : !slot) return false;
      if (cores && !core_free_.empty() && pick_cores(t.resources.at("cpus")).empty()) return false;
      for (const auto& [r, amount] : t.resources) {
        auto have = free_resources_.find(r);
        if (have == free_resources_.end() || have->second + kEps < amount) return false;
        if (r == "gpu" && amount > 0 && !gpu_free_.empty() && pick_gpus(amount).empty()) return false;
      }
      return true;
    };
    auto it = std::find_if(ready_.begin(), ready_.end(), fits);
    if (it == ready_.end()) return;  // what is ready waits for resources a running task holds
    Run run;
    ready_cores_ -= asks_cores(*it);
    run.task = std::move(*it);
    ready_.erase(it);
    Running held;
    held.key = run.task.key;
    held.resources = run.task.resources;
    held.full_result = run.task.full_result;
    for (const auto& [r, amount] : run.task.resources) free_resources_[r] -= amount;
    if (auto g = run.task.resources.find("gpu"); g != run.task.resources.end() && g->second > 0 && !gpu_free_.empty()) {
      run.devices = pick_gpus(g->second);
      held.devices = run.devices;
      held.gpu_share = std::min(1.0, g->second);
      for (int d : run.devices) gpu_free_[static_cast<std::size_t>(d)] -= held.gpu_share;
    }
    if (auto c = run.task.resources.find("cpus"); c != run.task.resources.end() && c->second > 0) {
      held.holds_cores = true;
      ++core_tasks_;
      if (!core_free_.empty()) {
        held.cores = pick_cores(c->second);
        for (std::size_t i : held.cores) {
          core_free_[i] = false;
          run.cores.push_back(options_.cores[i]);
        }
      }
    }
    running_.emplace(run.task.id, std::move(held));
    out_.run.push_back(std::move(run));
  }
}

void WorkerState::finished(Completion c) {
  auto it = running_.find(c.id);
  bool full_result = false;
  if (it != running_.end()) {
    release(it->second);
    full_result = it->second.full_result;
    forget_seceded(it->first, it->second);
    running_.erase(it);
  }
  protocol::TaskResult r;
  r.id = c.id;
  r.ok = c.ok;
  r.duration_us = c.duration_us;
  r.missing_input = c.missing_input;
  r.thread = c.thread;
  r.return_us = c.ended_us;  // a time until sent: the shell makes it a duration then
  if (!fetched_.empty()) {
    if (auto f = fetched_.find(c.id); f != fetched_.end()) {
      r.fetch_us = f->second.us;
      r.fetch_bytes = f->second.bytes;
      r.fetch_peers = f->second.peers;
      fetched_.erase(f);
    }
  }
  if (c.ok && c.bytes) {
    r.nbytes = c.bytes->size();
    if (!stored_.count(c.id)) {
      stored_[c.id] = r.nbytes;
      stored_bytes_ += r.nbytes;
    }
    // Small results travel with the notice, so the client's gather needs no extra round trip.
    const bool whole = full_result && (options_.max_full_result_bytes == 0 || r.nbytes <= options_.max_full_result_bytes);
    if (r.nbytes <= protocol::kInlineResultBytes || whole) {
      r.inline_data.assign(c.bytes->data(), c.bytes->data() + c.bytes->size());
    }
  } else {
    r.error = std::move(c.error);
    r.preempted = c.preempted && !c.missing_input;
  }
  out_.results.push_back(std::move(r));
  start_ready();
  check();
}

void WorkerState::not_started(TaskId id) {
  auto it = running_.find(id);
  if (it == running_.end()) return;
  release(it->second);
  running_.erase(it);
  hand_back(id);
}

void WorkerState::over_memory(const std::string& why) {
  for (const auto& [id, held] : running_) {
    protocol::TaskResult r;
    r.id = id;
    r.error = {"herd::MemoryLimitExceeded", "task " + held.key + " was running when " + why, held.key, options_.name};
    out_.results.push_back(std::move(r));
    release(held);
  }
  running_.clear();
  for (const auto& t : ready_) hand_back(t.id);
  ready_.clear();
  ready_cores_ = 0;
  for (const auto& [id, p] : pending_) hand_back(id);
  pending_.clear();
  wanted_.clear();
  fetched_.clear();
}

// ---- read access ---------------------------------------------------------------------------

bool WorkerState::queued(TaskId id, const std::string& key) const {
  for (const auto& [pid, p] : pending_) {
    if (pid == id || (id == 0 && p.task.key == key)) return true;
  }
  for (const auto& t : ready_) {
    if (t.id == id || (id == 0 && t.key == key)) return true;
  }
  return false;
}

void WorkerState::check() const {
#ifndef NDEBUG
  if (const std::string broken = validate(); !broken.empty()) {
    std::fprintf(stderr, "herd worker state is inconsistent: %s\n", broken.c_str());
    std::abort();
  }
#endif
}

std::string WorkerState::validate() const {
  std::size_t holding = 0;
  std::vector<bool> cores_taken(options_.cores.size(), false);
  for (const auto& [id, r] : running_) {
    holding += r.holds_cores;
    if (r.holds_cores && r.seceded) return "task " + r.key + " holds cores and seceded";
    for (std::size_t c : r.cores) {
      if (c >= cores_taken.size() || cores_taken[c]) return "core " + std::to_string(c) + " is held twice";
      cores_taken[c] = true;
    }
  }
  if (holding != core_tasks_) return "core task count is off";
  std::size_t ready_cores = 0;
  for (const auto& t : ready_) ready_cores += asks_cores(t);
  if (ready_cores != ready_cores_) return "ready core task count is off";
  if (core_tasks_ > core_task_limit()) return "more tasks holding cores than cores";
  for (std::size_t c = 0; c < cores_taken.size(); ++c) {
    if (cores_taken[c] == core_free_[c]) return "core " + std::to_string(c) + " accounting is off";
  }
  if (running_.size() < seceded_ + core_tasks_ || slots_used() > options_.nthreads) {
    return "more tasks holding slots than threads";
  }
  for (const auto& [id, f] : fetched_) {
    const bool known = pending_.count(id) || running_.count(id) ||
                       std::any_of(ready_.begin(), ready_.end(), [id = id](const auto& t) { return t.id == id; });
    if (!known) return "fetch costs kept for task " + hex(id) + ", which is neither pending, ready nor running";
  }
  std::size_t seceded = 0;
  for (const auto& [id, r] : running_) seceded += r.seceded;
  if (seceded != seceded_) return "seceded count " + std::to_string(seceded_) + " but " + std::to_string(seceded) + " running tasks seceded";
  for (TaskId id : rejoining_) {
    auto it = running_.find(id);
    if (it == running_.end() || !it->second.seceded) return "a task waits to rejoin but is not seceded";
  }
  for (const auto& [id, p] : pending_) {
    std::uint32_t missing = 0;
    for (const auto& in : p.task.inputs) {
      if (stored_.count(in.id)) continue;
      auto w = wanted_.find(in.id);
      if (w == wanted_.end()) return "task " + p.task.key + " waits for an input nobody fetches";
      if (std::find(w->second.tasks.begin(), w->second.tasks.end(), id) == w->second.tasks.end()) {
        return "task " + p.task.key + " is not among the waiters of its input";
      }
      ++missing;
    }
    if (missing != p.missing) return "task " + p.task.key + " counts its missing inputs wrong";
    if (missing == 0) return "task " + p.task.key + " waits with every input here";
  }
  for (const auto& t : ready_) {
    if (pending_.count(t.id) || running_.count(t.id)) return "task " + t.key + " is ready and elsewhere too";
  }
  std::map<std::string, double> expect = options_.resources;
  std::vector<double> gpus(options_.gpus, 1.0);
  for (const auto& [id, held] : running_) {
    for (const auto& [r, amount] : held.resources) expect[r] -= amount;
    for (int d : held.devices) gpus[static_cast<std::size_t>(d)] -= held.gpu_share;
  }
  for (const auto& [r, amount] : expect) {
    auto have = free_resources_.find(r);
    if (std::abs((have == free_resources_.end() ? 0.0 : have->second) - amount) > 1e-6) {
      return "free resource " + r + " is off";
    }
  }
  for (std::size_t d = 0; d < gpus.size(); ++d) {
    if (std::abs(gpus[d] - gpu_free_[d]) > 1e-6 || gpu_free_[d] < -1e-6) return "GPU " + std::to_string(d) + " accounting is off";
  }
  std::uint64_t bytes = 0;
  for (const auto& [id, n] : stored_) bytes += n;
  if (bytes != stored_bytes_) return "stored bytes are off";
  return {};
}

}  // namespace herd::worker
