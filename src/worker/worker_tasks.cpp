// What runs the tasks the state starts: the hand-off to executor threads, the executors' loop
// and their end of each task, the one quick task a turn on the I/O thread itself (decided by
// InlinePolicy, relieved through ReliefPolicy: inline_policy.hpp), secede and rejoin, time limits
// and abandoned tasks, and the completions and results that go back to the scheduler.
#include "worker/worker.hpp"

#include <malloc.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "common/logging.hpp"
#include "task/log_capture.hpp"
#include "task/this_task.hpp"
#include "worker/worker_internal.hpp"

namespace herd::worker {

using protocol::MessageType;
using protocol::TaskId;

void Worker::carry_out() {
  WorkerInstructions& out = state_->out();
  if (out.empty()) return;
  const auto now = Clock::now();
  std::vector<std::tuple<std::string, std::vector<TaskId>, std::string>> silent;
  for (auto& [address, ids] : out.fetch) {
    if (std::string why = fetcher_->recently_silent(address, now); !why.empty()) {
      silent.emplace_back(address, std::move(ids), std::move(why));
    } else {
      fetcher_->request(address, std::move(ids), now);
    }
  }
  if (!out.free.empty()) {
    const std::uint64_t before = store_.memory_bytes();
    for (TaskId id : out.free) store_.erase(id);
    // Under a memory limit, big results released give their pages back at once (else the
    // allocator may keep them, and a paused worker would stay paused).
    if (options_.memory_limit > 0 && before - store_.memory_bytes() >= (4u << 20)) ::malloc_trim(0);
  }
  // The turn's run for the I/O thread waits for the turn's end (io_loop), where nothing of the
  // turn is left to do if another thread has to take the loop meanwhile.
  if (auto here = take_inline_run_locked(out)) inline_next_ = std::move(here);
  hand_off_runs_locked(out, now, false);
  for (auto& r : out.results) results_out_.push_back(std::move(r));
  acquired_out_.insert(acquired_out_.end(), out.acquired.begin(), out.acquired.end());
  acquire_failed_out_.insert(acquire_failed_out_.end(), out.acquire_failed.begin(), out.acquire_failed.end());
  if (!out.seceded.empty() || !out.rejoined.empty()) {
    // Before the results of the same turn: the scheduler counts the slot before the task ends.
    protocol::SecedeEvent ev;
    ev.seceded = out.seceded;
    ev.rejoined = out.rejoined;
    protocol::send<MessageType::task_seceded>(*channels_, "", ev);
    for (TaskId id : out.rejoined) {
      if (auto w = rejoin_waiters_.find(id); w != rejoin_waiters_.end()) {
        w->second->set_value();
        rejoin_waiters_.erase(w);
      }
    }
  }
  out.clear();
  if (!silent.empty()) {
    // Failed at once, as the last request there did; the state tries the next holder or
    // reports the inputs out of reach (a new round of instructions).
    for (auto& [address, ids, why] : silent) state_->fetch_failed(address, ids, why);
    carry_out();
    return;
  }
  flush_results();
}

bool Worker::hand_off_runs_locked(WorkerInstructions& out, Clock::time_point now, bool self) {
  bool more;
  // Executors to wake: not the one calling, which takes its next task without sleeping.
  const std::size_t n = out.run.size() - (self && !out.run.empty() ? 1 : 0);
  {
    std::lock_guard lock(run_mu_);
    for (auto& r : out.run) {
      if (r.task.timeout_ms > 0) {  // a gang member's too: it fails the gang attempt
        deadlines_[r.task.id] = {now + std::chrono::milliseconds(r.task.timeout_ms), r.task.timeout_ms};
      }
      handoff_.push_back(std::move(r));
    }
    more = !handoff_.empty();
  }
  out.run.clear();
  if (n > 1) {
    run_cv_.notify_all();
  } else if (n == 1) {
    run_cv_.notify_one();
  }
  return more;
}

namespace {
/// True on the I/O thread while it runs a task itself (Worker::run_inline).
bool& running_inline() {
  thread_local bool here = false;
  return here;
}
/// The task running on this thread's I/O turn called secede.
bool& inline_seceded() {
  thread_local bool seceded = false;
  return seceded;
}
}  // namespace

std::optional<Run> Worker::take_inline_run_locked(WorkerInstructions& out) {
  if (!inline_policy_.take(out.run)) return std::nullopt;
  std::optional<Run> here(std::move(out.run.front()));
  out.run.clear();
  return here;
}

bool Worker::run_inline(Run run, std::unique_lock<std::mutex>& turn) {
  const std::string function = run.task.function;
  std::uint64_t seq;
  {
    std::lock_guard lock(relief_mu_);
    seq = relief_.started(&function, Clock::now());
  }
  // The state is free meanwhile, as while the loop waits in poll: executors end their tasks,
  // and a relief takes the loop.
  turn.unlock();
  running_inline() = true;
  task::LogBook::instance().task_started(run.task.id, run.task.key);
  detail::current_task_id() = run.task.id;
  Completion c = execute(run.task, run.devices, nullptr);
  detail::current_task_id() = 0;
  task::LogBook::task_returned();
  running_inline() = false;
  const bool seceded = std::exchange(inline_seceded(), false);
  bool relieved;
  {
    std::lock_guard lock(relief_mu_);
    relieved = relief_.ended(seq);
  }
  if (relieved) {
    // The new loop has marked the function for executors (io_loop).
    task::LogBook::instance().task_finished(run.task.id);
    finish_on_executor(std::move(c), function, false);
    return false;
  }
  turn.lock();
  using Slow = InlinePolicy::Verdict::Slow;
  const InlinePolicy::Verdict verdict = inline_policy_.ran_inline(function, c.duration_us, seceded);
  if (verdict.slow == Slow::twice || verdict.slow == Slow::too_often) {
    HERD_LOG(info) << "function " << function << " took " << c.duration_us << " us on the I/O thread, "
                   << (verdict.slow == Slow::twice ? "twice in " + std::to_string(verdict.within) + " runs there"
                                                   : std::to_string(verdict.slow_runs) + " times")
                   << "; its tasks run on executors from now on";
  } else if (verdict.slow == Slow::once) {
    HERD_LOG(debug) << "function " << function << " took " << c.duration_us << " us on the I/O thread";
  }
  state_->finished(std::move(c));
  inline_log_open_ = run.task.id;  // finished in the log once its result is out (io_loop)
  return true;
}

void Worker::relief_watch() {
  for (;;) {
    std::this_thread::sleep_for(ReliefPolicy::kLookEvery);
    std::lock_guard lock(relief_mu_);
    std::optional<ReliefPolicy::Relief> relief = relief_.look(Clock::now());
    if (!relief) continue;
    HERD_LOG(warning) << "a task of " << relief->function << " has held the I/O thread for " << relief->held.count()
                      << " ms: another thread takes the sockets, and its tasks run on executors from now on";
    std::thread([this, function = std::move(relief->function)] {
      ::pthread_setname_np(::pthread_self(), "herd-io");
      leave_process(*this, io_loop(function));
    }).detach();
  }
}

void Worker::finish_on_executor(Completion c, const std::string& function, bool takes_next) {
  bool wake = false;
  {
    std::lock_guard lock(state_mu_);
    inline_policy_.ran(function, c.duration_us);
    if (!deadlines_.empty()) deadlines_.erase(c.id);
    state_->finished(std::move(c));
    WorkerInstructions& out = state_->out();
    const auto now = Clock::now();
    const bool more = hand_off_runs_locked(out, now, takes_next);  // this thread takes the next one itself?
    for (auto& r : out.results) exec_results_.push_back(std::move(r));
    out.results.clear();
    if (!out.empty()) wake = true;  // what only the I/O thread does (a rejoin granted...)
    if (batch_.finished(now, more)) wake = true;
  }
  if (wake) wake_io();
}

namespace {
/// True on an executor thread whose task seceded: the thread ends with that task.
bool& seceded_thread() {
  thread_local bool seceded = false;
  return seceded;
}
}  // namespace

std::uint64_t steady_us() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

double CpuMeter::percent() {
  // /proc/self/stat: fields 14 and 15 are utime and stime in clock ticks; the name (field 2)
  // may hold spaces, so count from its closing parenthesis.
  std::uint64_t cpu_us = 0;
  if (FILE* f = std::fopen("/proc/self/stat", "r")) {
    char buf[1024];
    const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = '\0';
    const char* p = std::strrchr(buf, ')');
    unsigned long long ut = 0, st = 0;
    if (p != nullptr && std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) == 2) {
      const long hz = ::sysconf(_SC_CLK_TCK);
      cpu_us = (ut + st) * 1000000ull / static_cast<unsigned long long>(hz > 0 ? hz : 100);
    }
  }
  const std::uint64_t wall = steady_us();
  double pct = 0;
  if (last_wall_us_ != 0 && wall > last_wall_us_ && cpu_us >= last_cpu_us_) {
    pct = 100.0 * static_cast<double>(cpu_us - last_cpu_us_) / static_cast<double>(wall - last_wall_us_);
  }
  last_cpu_us_ = cpu_us;
  last_wall_us_ = wall;
  return pct;
}

std::uint32_t& executor_index() {
  thread_local std::uint32_t index = 0;
  return index;
}

void Worker::executor_loop() {
  static std::atomic<std::uint32_t> executors{0};
  executor_index() = executors.fetch_add(1, std::memory_order_relaxed) % 1000 + 1;
  // Set when the worker stops waiting for this thread's task (Worker::abandon): the thread then
  // ends after it, its completion dropped, as a new executor has taken its place.
  auto abandoned = std::make_shared<std::atomic<bool>>(false);
  detail::current_abandoned() = abandoned;
  while (true) {
    Run run;
    std::shared_ptr<IsolatedChild> child;
    {
      std::unique_lock lock(run_mu_);
      run_cv_.wait(lock, [&] { return stopping_ || !handoff_.empty(); });
      if (stopping_) return;
      run = std::move(handoff_.front());
      handoff_.pop_front();
      OnExecutor& on = on_executor_[run.task.id];
      on = OnExecutor{abandoned, std::this_thread::get_id(), nullptr, run.task.gang, run.task.gang_attempt};
      if (run.task.isolated && run.task.gang == 0) on.child = child = std::make_shared<IsolatedChild>();
      // Still under run_mu_, as on_logs_fetch looks: it finds the task queued or in the
      // LogBook, never between them (lock order: run_mu_, then the LogBook's).
      task::LogBook::instance().task_started(run.task.id, run.task.key);  // output capture
    }
    detail::current_task_id() = run.task.id;
    Completion c = execute(run.task, run.devices, child.get(), run.cores);
    detail::current_task_id() = 0;
    task::LogBook::instance().task_finished(run.task.id);
    {
      std::lock_guard lock(run_mu_);
      auto it = on_executor_.find(run.task.id);
      if (it != on_executor_.end() && it->second.abandoned == abandoned) on_executor_.erase(it);
      if (abandoned->load()) {  // reported failed already; a new executor has the slot
        ended_threads_.push_back(std::this_thread::get_id());  // joined by the next abandon or secede
        return;
      }
    }
    if (!seceded_thread()) {
      finish_on_executor(std::move(c), run.task.function);
      continue;
    }
    // Its task seceded: another executor has had its slot since. Through the I/O thread, after
    // the secede call this thread made (the scheduler hears of the secession first).
    bool was_empty;
    {
      std::lock_guard lock(done_mu_);
      was_empty = done_.empty();
      done_.push_back(std::move(c));
      seceded_functions_.push_back(run.task.function);
    }
    if (was_empty) wake_io();
    {
      std::lock_guard lock(run_mu_);
      ended_threads_.push_back(std::this_thread::get_id());
      return;
    }
  }
}

void Worker::secede_task(TaskId id) {
  if (running_inline()) {
    // On the I/O thread (a function that was quick until now): nothing to give back; if it
    // takes long, a relief takes the loop (relief_watch). Never there again.
    inline_seceded() = true;
    return;
  }
  {
    std::lock_guard lock(run_mu_);
    if (!seceded_thread()) {
      // This thread is the task's until it ends: the slot it leaves gets a thread of its own.
      seceded_thread() = true;
      if (!stopping_) {
        join_ended_locked();
        executors_.emplace_back([this] { executor_loop(); });
      }
    }
  }
  {
    std::lock_guard lock(done_mu_);
    secede_calls_.push_back({id, nullptr});
  }
  wake_io();
}

void Worker::join_ended_locked() {
  for (auto it = executors_.begin(); it != executors_.end();) {
    if (std::find(ended_threads_.begin(), ended_threads_.end(), it->get_id()) != ended_threads_.end()) {
      std::erase(ended_threads_, it->get_id());
      std::erase(abandoned_threads_, it->get_id());
      it->join();  // it has returned, or is about to (it noted itself under run_mu_)
      it = executors_.erase(it);
    } else {
      ++it;
    }
  }
}

void Worker::rejoin_task(TaskId id) {
  if (running_inline()) return;  // it never left its slot (secede_task)
  auto granted = std::make_shared<std::promise<void>>();
  auto f = granted->get_future();
  {
    std::lock_guard lock(done_mu_);
    secede_calls_.push_back({id, granted});
  }
  wake_io();
  // Until the state gives the task a slot again, or the worker stops (the task then goes on).
  while (f.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    if (io_gone_.load()) return;
  }
}

void Worker::release_rejoin_waiters() {
  io_gone_.store(true);
  for (auto& [id, w] : rejoin_waiters_) w->set_value();
  rejoin_waiters_.clear();
}

bool Worker::abandon(protocol::TaskId id, protocol::ErrorInfo error) {
  protocol::TaskId gang = 0;
  std::uint32_t gang_attempt = 0;
  {
    std::lock_guard lock(run_mu_);
    auto it = on_executor_.find(id);
    // Not on an executor: not started (handed back below), or it just ended and its completion
    // is on its way (it finished in time).
    if (it == on_executor_.end()) {
      if (state_->running(id)) return false;
      state_->abandon(id, std::move(error));
      return false;
    }
    it->second.abandoned->store(true);
    // Its thread then returns as soon as the child is reaped (and is joined later).
    if (it->second.child) it->second.child->kill();
    gang = it->second.gang;
    gang_attempt = it->second.gang_attempt;
    abandoned_threads_.push_back(it->second.thread);
    on_executor_.erase(it);
    if (!stopping_) {
      join_ended_locked();
      executors_.emplace_back([this] { executor_loop(); });  // the slot, with a thread
    }
  }
  if (gang != 0) {
    // Its collective operations throw GangAborted (the thread may then end); the scheduler
    // aborts the other ranks when it hears of this failure.
    std::shared_ptr<collective::GangSession> session;
    {
      std::lock_guard lock(gang_mu_);
      if (auto g = gangs_.find({gang, gang_attempt}); g != gangs_.end()) session = g->second;
    }
    if (session) session->abort(error.type + ": " + error.message);
  }
  deadlines_.erase(id);
  HERD_LOG(warning) << "stopped waiting for task " << error.task << ": " << error.message;
  state_->abandon(id, std::move(error));
  if (auto w = rejoin_waiters_.find(id); w != rejoin_waiters_.end()) {  // it may go on; it is not waited for
    w->second->set_value();
    rejoin_waiters_.erase(w);
  }
  return true;
}

void Worker::check_deadlines(Clock::time_point now) {
  std::vector<std::pair<protocol::TaskId, std::uint32_t>> due;
  for (const auto& [id, deadline] : deadlines_) {
    if (now >= deadline.first) due.emplace_back(id, deadline.second);
  }
  for (const auto& [id, limit_ms] : due) {
    deadlines_.erase(id);
    if (!state_->running(id)) continue;
    char limit[32];
    std::snprintf(limit, sizeof limit, "%.3g s", limit_ms / 1000.0);
    const std::string key = state_->running_key(id);
    abandon(id, {"herd::TimeoutError",
                 "task " + key + " exceeded its time limit of " + limit +
                     " (TaskOptions::timeout); worker " + options_.name +
                     " stopped waiting for it and freed its slot",
                 key, options_.name});
  }
  if (!due.empty()) carry_out();
}

void Worker::drain_completions() {
  std::vector<Completion> done;
  std::vector<protocol::GangJoinRequest> joins;
  std::vector<SecedeCall> calls;
  std::vector<std::string> seceded;
  {
    std::lock_guard lock(done_mu_);
    done.swap(done_);
    seceded.swap(seceded_functions_);
    joins.swap(gang_joins_);
    calls.swap(secede_calls_);
  }
  for (auto& call : calls) {
    if (!call.rejoined) {
      state_->secede(call.id);
    } else if (!state_->running(call.id)) {
      call.rejoined->set_value();  // abandoned meanwhile: nothing to rejoin
    } else {
      const auto& granted = state_->out().rejoined;
      if (state_->rejoin(call.id) && std::find(granted.begin(), granted.end(), call.id) == granted.end()) {
        call.rejoined->set_value();  // it had not seceded
      } else {
        rejoin_waiters_[call.id] = call.rejoined;  // answered in carry_out, once the state grants it
      }
    }
  }
  for (const auto& function : seceded) inline_policy_.seceded(function);  // never on the I/O thread
  for (const auto& join : joins) protocol::send<MessageType::gang_join>(*channels_, "", join);
  for (auto& c : done) {
    if (!deadlines_.empty()) deadlines_.erase(c.id);
    state_->finished(std::move(c));
  }
  carry_out();
}

void Worker::flush_results() {
  const auto now = Clock::now();
  batch_.sent(now);
  if (results_out_.empty() && exec_results_.empty() && acquired_out_.empty() && acquire_failed_out_.empty()) return;
  // The results' end times become the time they waited to go (TaskResult::return_us).
  const auto sent_us = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count());
  for (auto* list : {&results_out_, &exec_results_}) {
    for (auto& r : *list) r.return_us = r.return_us != 0 && sent_us > r.return_us ? sent_us - r.return_us : 0;
  }
  protocol::TaskResultsEvent ev;
  ev.results.swap(results_out_);
  if (ev.results.empty()) {
    ev.results.swap(exec_results_);
  } else {
    for (auto& r : exec_results_) ev.results.push_back(std::move(r));
    exec_results_.clear();
  }
  ev.acquired.swap(acquired_out_);
  ev.acquire_failed.swap(acquire_failed_out_);
  protocol::send<MessageType::task_results>(*channels_, "", ev);
  // The executors' list keeps its storage for the next batch (not grown anew by doubling).
  ev.results.clear();
  if (ev.results.capacity() > exec_results_.capacity() && ev.results.capacity() <= kKeptEntries) {
    exec_results_.swap(ev.results);
  }
}

}  // namespace herd::worker
