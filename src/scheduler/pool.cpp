#include "scheduler/pool.hpp"

#include <algorithm>
#include <cmath>

#include "common/logging.hpp"
#include "jobqueue/job_output.hpp"

namespace herd::scheduler {
namespace {

/// How long a job whose worker left on its own holds back its replacement while the batch
/// system has not said whether it ended or was requeued (Slurm says so within a second or two).
constexpr std::chrono::seconds kEndingGrace{30};

std::string seconds_text(PoolState::Clock::duration d) {
  const auto s = std::chrono::duration_cast<std::chrono::seconds>(d).count();
  return std::to_string(std::max<long long>(0, s)) + " s";
}

std::string seconds_until(PoolState::Clock::time_point t, PoolState::Clock::time_point now) {
  return seconds_text(t - now + std::chrono::milliseconds(999));
}

}  // namespace

// The jobs a fixed-size request asks for: workers (whole jobs of workers_per_job), jobs, cores
// or memory (the most jobs any of them needs); nullopt with `refused` set when the pool cannot
// tell (memory of a pool that asks for none).
std::optional<std::uint32_t> scale_jobs(const PoolPolicy& policy, const protocol::ScalePoolRequest& req,
                                        std::string& refused) {
  auto ceil_div = [](std::int64_t a, std::int64_t b) {
    const std::int64_t d = std::max<std::int64_t>(1, b);
    return static_cast<std::uint32_t>(std::min<std::int64_t>((a + d - 1) / d, UINT32_MAX));
  };
  const bool other_units = req.jobs >= 0 || req.cores >= 0 || req.memory >= 0;
  std::uint32_t jobs = other_units ? 0 : ceil_div(req.target, policy.workers_per_job);
  if (req.jobs >= 0) jobs = std::max(jobs, static_cast<std::uint32_t>(req.jobs));
  if (req.cores >= 0) jobs = std::max(jobs, ceil_div(req.cores, policy.cores_per_job));
  if (req.memory >= 0) {
    if (policy.memory_per_job <= 0) {
      refused = "pool '" + policy.name + "' asks for no memory per job (set its memory option), so herd cannot "
                "convert scale(memory=) into jobs";
      return std::nullopt;
    }
    jobs = std::max(jobs, ceil_div(req.memory, policy.memory_per_job));
  }
  return jobs;
}

// --- PoolState: decisions ---------------------------------------------------------------------

void PoolState::scale(std::uint32_t n) {
  policy_.adaptive = false;
  policy_.target = n;
  // The user asked again: try now (failures still add up to a pause).
  paused_until_ = {};
  paused_reason_.clear();
  crash_paused_ = false;
  crashes_ = 0;
  next_adapt_ = {};  // decide at the next step
  shrink_votes_ = 0;
}

void PoolState::adapt_pace(std::chrono::milliseconds interval, std::chrono::milliseconds target_duration,
                           std::uint32_t wait_count) {
  if (interval.count() >= 0) policy_.adapt_interval = interval;
  if (target_duration.count() > 0) policy_.target_duration = target_duration;
  if (wait_count > 0) policy_.wait_count = wait_count;
  next_adapt_ = {};
}

void PoolState::adapt(std::uint32_t minimum, std::uint32_t maximum, std::chrono::seconds idle_timeout) {
  policy_.adaptive = true;
  policy_.minimum = minimum;
  policy_.maximum = std::max(minimum, maximum);
  if (idle_timeout.count() > 0) policy_.idle_timeout = idle_timeout;
  paused_until_ = {};
  paused_reason_.clear();
  crash_paused_ = false;
  crashes_ = 0;
}

bool PoolState::may_submit(Clock::time_point now, std::size_t unproven) const {
  if (submitting_ || now < paused_until_ || crash_paused_ || user_paused_) return false;
  // In a crash loop: one untested job at a time, after a pause that doubles with each crash.
  if (crashes_ >= policy_.crash_backoff_after) return now >= crash_next_try_ && unproven == 0;
  return true;
}

PoolActions PoolState::step(Clock::time_point now, std::size_t backlog, double avg_task_us,
                            const std::vector<PoolWorker>& workers, const HoldsData& holds_data) {
  PoolActions a;
  kept_.clear();
  std::set<std::string> leaving_jobs;
  for (auto& [job, asked] : undecided_) job_ended(now, job, asked, !worked_.count(job.id));
  for (const auto& [job, asked] : undecided_) worked_.erase(job.id);
  undecided_.clear();
  for (const auto& w : workers) {
    if (w.ending) {
      // Leaving on its own: like a job whose worker left (see worker_done), from now on.
      if (jobs_.count(w.job_id)) done_.emplace(w.job_id, now);
    } else if (w.leaving) {
      leaving_jobs.insert(w.job_id);
    }
    if (!jobs_.count(w.job_id)) continue;
    if (!w.leaving) done_.erase(w.job_id);  // a worker of it serves: its next incarnation
    if (!w.idle) worked_.insert(w.job_id);
    auto [it, first] = connected_at_.emplace(w.job_id, now);
    // A worker that has stayed a while proves the jobs start fine: the crash count starts over.
    if (!first && crashes_ > 0 && !crash_paused_ && now - it->second >= policy_.crash_window) crashes_ = 0;
  }
  // Capacity: jobs pending or running whose worker is not on its way out, and that are not
  // suspended or held for longer than stalled_timeout.
  std::uint32_t active = 0;
  std::uint32_t ending = 0;  // their worker left on their own, how the job goes on not known yet
  std::size_t unproven = 0;  // live jobs whose worker has not connected yet
  std::vector<std::string> pending;
  for (const auto& [id, job] : jobs_) {
    if (cancelled_.count(id) || leaving_jobs.count(id)) continue;
    if (auto d = done_.find(id); d != done_.end()) {
      ending += now - d->second < kEndingGrace;
      continue;
    }
    if (auto s = stalled_since_.find(id); s != stalled_since_.end() && now - s->second >= policy_.stalled_timeout) continue;
    ++active;
    // Unproven: its worker has not connected, or not long enough ago to rule out a crash.
    if (auto c = connected_at_.find(id); c == connected_at_.end() || now - c->second < policy_.crash_window) ++unproven;
    if (job.state == jobqueue::JobState::pending) pending.push_back(id);
  }
  std::uint32_t desired = policy_.target;
  bool may_shrink = true;
  if (policy_.adaptive && now < next_adapt_) {
    desired = adapt_desired_;  // between two decisions (adapt_interval)
    may_shrink = shrink_votes_ >= policy_.wait_count;
  } else if (policy_.adaptive) {
    // Enough slots for the backlog, but when tasks are short fewer workers do: aim to clear
    // the backlog in about target_duration of work per slot.
    const double slots = std::max<std::uint32_t>(1, policy_.slots_per_worker);
    const double target_us = std::max(1.0, static_cast<double>(policy_.target_duration.count()) * 1e3);
    double want = std::ceil(static_cast<double>(backlog) / slots);
    if (avg_task_us >= 0) {
      want = std::min(want, std::ceil(static_cast<double>(backlog) * avg_task_us / (slots * target_us)));
      if (backlog > 0) want = std::max(want, 1.0);
    }
    std::uint32_t want_workers = static_cast<std::uint32_t>(
        std::clamp(want, static_cast<double>(policy_.minimum), static_cast<double>(policy_.maximum)));
    // Never below the workers that are busy: shrink only by idleness (below).
    std::uint32_t busy = 0;
    for (const auto& w : workers) busy += (!w.leaving && !w.idle);
    want_workers = std::max(want_workers, std::min(busy, policy_.maximum));
    // Whole jobs: the bounds count workers, each job brings workers_per_job of them.
    const std::uint32_t per_job = std::max<std::uint32_t>(1, policy_.workers_per_job);
    desired = (want_workers + per_job - 1) / per_job;
    // A shrink only once wait_count decisions in a row asked for one (Dask's wait_count): a
    // backlog that dips between two waves does not cost the workers the next wave needs.
    shrink_votes_ = desired < active ? shrink_votes_ + 1 : 0;
    may_shrink = shrink_votes_ >= policy_.wait_count;
    adapt_desired_ = desired;
    next_adapt_ = now + policy_.adapt_interval;
  }
  desired_ = desired;
  if (active + ending < desired) {
    if (may_submit(now, unproven)) {
      if (now >= paused_until_) paused_reason_.clear();
      a.submit = crashes_ >= policy_.crash_backoff_after ? 1 : desired - active - ending;
      submitting_ = true;
    }
  } else if (active > desired && may_shrink) {
    std::uint32_t excess = active - desired;
    // Pending jobs go first: they cost nothing to drop.
    for (auto it = pending.rbegin(); it != pending.rend() && excess > 0; ++it, --excess) queue_cancel(now, *it);
    // Then running jobs, every worker of each: for a fixed size at once; when adapting, only
    // once all of its workers have been idle for idle_timeout.
    struct Candidate {
      std::vector<std::uint32_t> ids;
      bool idle = true;
      Clock::time_point idle_since{};
      bool eligible = true;
      std::uint32_t data = 0;  // results only its workers hold (asked of eligible ones only)
    };
    std::map<std::string, Candidate> by_job;
    std::size_t staying = 0;  // workers not on their way out
    for (const auto& w : workers) {
      staying += !w.leaving;
      if (!jobs_.count(w.job_id) || cancelled_.count(w.job_id)) continue;
      Candidate& c = by_job[w.job_id];
      if (w.leaving) c.eligible = false;
      if (policy_.adaptive && !(w.idle && now - w.idle_since >= policy_.idle_timeout)) c.eligible = false;
      c.ids.push_back(w.id);
      c.idle = c.idle && w.idle;
      c.idle_since = std::max(c.idle_since, w.idle_since);
    }
    std::vector<Candidate*> candidates;
    for (auto& [job, c] : by_job) {
      if (!c.eligible) continue;
      if (holds_data) {
        for (std::uint32_t id : c.ids) c.data += holds_data(id);
      }
      candidates.push_back(&c);
    }
    // Workers holding nothing to move go first; then the idle, the longest idle first.
    std::sort(candidates.begin(), candidates.end(), [](const Candidate* a1, const Candidate* b1) {
      if ((a1->data == 0) != (b1->data == 0)) return a1->data == 0;
      return a1->idle != b1->idle ? a1->idle : a1->idle_since < b1->idle_since;
    });
    for (const Candidate* c : candidates) {
      if (excess == 0) break;
      // Results only it holds move to a worker that stays (as Dask's retire_workers moves
      // unique data); with none staying, the worker stays for them, and says so.
      if (c->data > 0 && staying <= c->ids.size()) {
        kept_.insert(kept_.end(), c->ids.begin(), c->ids.end());
        continue;
      }
      a.retire.insert(a.retire.end(), c->ids.begin(), c->ids.end());
      staying -= std::min(staying, c->ids.size());
      --excess;
    }
  }
  // One poll at a time: a poll that comes due while one is under way is skipped, not queued.
  if (!polling_ && !jobs_.empty() && now >= next_poll_) {
    a.poll = true;
    polling_ = true;
    next_poll_ = now + policy_.poll_interval;
  }
  // Every job to stop in one scancel, once they had cancel_delay to gather (a scale-down or a
  // wave of lost workers is one command), and never two at once.
  if (!cancelling_ && !to_cancel_.empty() && now - to_cancel_since_ >= policy_.cancel_delay && now >= next_cancel_) {
    a.cancel.assign(to_cancel_.begin(), to_cancel_.end());
    to_cancel_.clear();
    cancelling_ = true;
  }
  a.read_output = std::move(to_read_);
  to_read_.clear();
  return a;
}

void PoolState::queue_cancel(Clock::time_point now, const std::string& id) {
  cancelled_.insert(id);  // no longer capacity, from now on
  if (to_cancel_.empty()) to_cancel_since_ = now;
  to_cancel_.insert(id);
}

void PoolState::submitted(Clock::time_point now, const jobqueue::SubmitResult& r) {
  submitting_ = false;
  for (const auto& id : r.ids) jobs_[id] = {id, jobqueue::JobState::pending, "PENDING", "submitted"};
  submitted_ += r.ids.size();
  if (!r.ids.empty()) {
    HERD_LOG(info) << "pool " << name() << ": submitted " << r.ids.size() << " job(s) starting with " << r.ids.front();
  }
  if (!r.error.empty()) {
    submission_failed(now, r.error);
    return;
  }
  consecutive_failures_ = 0;
  last_error_.clear();
}

void PoolState::submission_failed(Clock::time_point now, const std::string& error) {
  ++failed_submissions_;
  last_error_ = error;
  // 1, 2, 4 ... up to 5 minutes between tries once it keeps failing.
  if (++consecutive_failures_ >= 3) {
    const auto backoff = std::chrono::seconds(std::min(300, 1 << std::min(consecutive_failures_ - 3, 8)));
    paused_until_ = now + backoff;
    paused_reason_ = std::to_string(consecutive_failures_) + " submissions failed in a row; next try in " +
                     std::to_string(backoff.count()) + " s. Last error: " + last_error_;
  } else {
    paused_until_ = now + std::chrono::seconds(1);
  }
  HERD_LOG(warning) << "pool " << name() << ": " << error;
}

PoolState::Ended PoolState::polled(Clock::time_point now, const jobqueue::PollResult& r) {
  polling_ = false;
  for (const auto& line : r.log) HERD_LOG(info) << "pool " << name() << ": " << line;
  if (!r.error.empty()) {
    // The controller is down or slow: nothing is concluded about the jobs (their workers go on
    // working); the next poll waits longer each time, and the status says so.
    if (poll_failures_++ == 0) batch_error_since_ = now;
    batch_error_ = r.error;
    const auto pause = std::min<Clock::duration>(policy_.poll_interval * (1LL << std::min<std::uint32_t>(poll_failures_, 6)),
                                                 policy_.max_poll_backoff);
    next_poll_ = now + pause;
    HERD_LOG(warning) << "pool " << name() << ": " << r.error << " (" << poll_failures_
                      << " in a row; next poll in " << seconds_text(pause) << ")";
    return {};
  }
  if (poll_failures_ > 0) {
    HERD_LOG(warning) << "pool " << name() << ": the batch system answers again (after " << poll_failures_
                      << " failed polls over " << seconds_text(now - batch_error_since_) << ")";
  }
  poll_failures_ = 0;
  batch_error_.clear();
  last_answer_ = now;
  Ended ended;
  for (const auto& job : r.jobs) {
    if (job.state == jobqueue::JobState::ended) {
      if (jobs_.count(job.id)) {
        ended.emplace_back(job.id, job.detail + (job.reason.empty() ? "" : " (" + job.reason + ")"));
        const bool asked = cancelled_.count(job.id) > 0;
        const auto c = connected_at_.find(job.id);
        if (asked || c == connected_at_.end() || now - c->second >= policy_.crash_window || worked_.count(job.id)) {
          // Decided now: asked to stop, never connected (a crash), or it served a while / had work.
          job_ended(now, job, asked, !asked && c == connected_at_.end());
          worked_.erase(job.id);
        } else {
          undecided_.emplace_back(job, asked);
        }
      }
      jobs_.erase(job.id);
      cancelled_.erase(job.id);
      to_cancel_.erase(job.id);
      stalled_since_.erase(job.id);
      requeued_.erase(job.id);
      done_.erase(job.id);
    } else if (!jobs_.count(job.id) && job.reason == "adopted") {
      // A job the queue found of an sbatch that timed out: capacity, and cancelled like any.
      jobs_[job.id] = job;
      ++submitted_;
    } else if (auto it = jobs_.find(job.id); it != jobs_.end()) {
      // Running, then pending again: the batch system requeued it (a node failure, scontrol
      // requeue). Its worker may still be registered, silent on a dead node, until it is
      // declared lost; by then the job may run again elsewhere. Suspended or stopped is not
      // requeued: it keeps its node and its (frozen) worker.
      if (it->second.state == jobqueue::JobState::running && job.state == jobqueue::JobState::pending &&
          !jobqueue::suspended(job)) {
        requeued_.insert(job.id);
        done_.erase(job.id);  // its next incarnation will bring a worker
      }
      it->second = job;
      if (jobqueue::stalled(job)) {
        stalled_since_.emplace(job.id, now);
      } else {
        stalled_since_.erase(job.id);
      }
    }
  }
  return ended;
}

void PoolState::cancelled(Clock::time_point now, const std::vector<std::string>& ids, const std::string& error) {
  cancelling_ = false;
  if (error.empty()) {
    cancel_failures_ = 0;
    return;
  }
  // Tried again with the next ones, after a pause; jobs that ended meanwhile are dropped.
  ++cancel_failures_;
  for (const auto& id : ids) {
    if (jobs_.count(id)) queue_cancel(now, id);
  }
  next_cancel_ = now + std::min<Clock::duration>(std::chrono::seconds(1LL << std::min<std::uint32_t>(cancel_failures_, 6)),
                                                 policy_.max_poll_backoff);
  HERD_LOG(warning) << "pool " << name() << ": " << error << " (" << ids.size() << " job(s); trying again)";
}

void PoolState::worker_left(Clock::time_point now, const std::string& job_id, bool worked, bool siblings) {
  if (worked && (jobs_.count(job_id) || std::any_of(undecided_.begin(), undecided_.end(),
                                                    [&](const auto& u) { return u.first.id == job_id; }))) {
    worked_.insert(job_id);
  }
  if (siblings) return;  // the job goes with its last worker
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || cancelled_.count(job_id)) return;
  // The worker of an incarnation the batch system already requeued: the job is its next one,
  // pending or already running (perhaps with a worker of its own), and stays.
  if (requeued_.erase(job_id) > 0) return;
  // Pending again means requeued: that is the job's next incarnation, not the worker we lost.
  // Completing means it is ending anyway, and may be on its way back to the queue (requeue):
  // cancelling it then would kill the next incarnation. A suspended job whose worker we let go
  // holds its node for nothing: it goes.
  if ((it->second.state == jobqueue::JobState::pending && !jobqueue::suspended(it->second)) ||
      it->second.detail == "COMPLETING") {
    return;
  }
  // The worker is gone (retired, or it died): its job must not linger in the queue holding
  // resources. The batch script exits with the worker, so this is usually a no-op.
  queue_cancel(now, job_id);
}

void PoolState::stop_job(Clock::time_point now, const std::string& job_id) {
  if (!jobs_.count(job_id) || cancelled_.count(job_id)) return;
  queue_cancel(now, job_id);
}

bool PoolState::knows_job(const std::string& id) const {
  return jobs_.count(id) || std::find(ended_.begin(), ended_.end(), id) != ended_.end();
}

bool PoolState::job_suspended(const std::string& id) const {
  auto it = jobs_.find(id);
  return it != jobs_.end() && jobqueue::suspended(it->second);
}

void PoolState::clear_jobs() {
  jobs_.clear();
  cancelled_.clear();
  to_cancel_.clear();
  connected_at_.clear();
  worked_.clear();
  undecided_.clear();
  stalled_since_.clear();
  requeued_.clear();
  done_.clear();
}

protocol::PoolStatus PoolState::status(std::uint32_t connected_workers, Clock::time_point now) const {
  protocol::PoolStatus s;
  s.name = policy_.name;
  s.target = desired_ * std::max<std::uint32_t>(1, policy_.workers_per_job);  // workers
  s.workers_per_job = policy_.workers_per_job;
  s.walltime_s = policy_.walltime_s;
  s.retire_before_s = policy_.retire_before_s;
  s.adaptive = policy_.adaptive;
  s.minimum = policy_.minimum;
  s.maximum = policy_.maximum;
  for (const auto& [id, job] : jobs_) {
    if (job.state == jobqueue::JobState::pending) {
      ++s.pending;
      if (!job.reason.empty()) ++s.pending_reasons[job.reason];
    } else if (job.state == jobqueue::JobState::running) {
      ++s.running;
    }
  }
  s.stalled = static_cast<std::uint32_t>(stalled_since_.size());
  s.workers = connected_workers;
  if (crash_paused_) {
    s.paused = std::to_string(crashes_) + " jobs in a row ended before their worker connected (or within " +
               std::to_string(policy_.crash_window.count()) + " s of it); scale() or adapt() resumes. The last: " +
               last_failure_;
  } else if (crashes_ >= policy_.crash_backoff_after && crash_next_try_ > now) {
    s.paused = std::to_string(crashes_) + " jobs in a row ended before their worker connected; next job in " +
               seconds_until(crash_next_try_, now) + ", one at a time. The last: " + last_failure_;
  } else if (now < paused_until_) {
    s.paused = paused_reason_;
  }
  s.user_paused = user_paused_;
  if (user_paused_) {
    s.paused = "paused by the user: no job is submitted until `herd pool resume " + policy_.name + "`" +
               (s.paused.empty() ? "" : "; also: " + s.paused);
  }
  s.cores_per_job = policy_.cores_per_job;
  s.memory_per_job = policy_.memory_per_job;
  s.crashes = crashes_;
  s.last_error = last_error_;
  s.submitted = submitted_;
  s.failed_submissions = failed_submissions_;
  s.last_failure = last_failure_;
  if (!batch_error_.empty()) {
    s.batch_error = std::to_string(poll_failures_) + " poll(s) in a row failed over " +
                    seconds_text(now - batch_error_since_) + ": " + batch_error_ + "; next try in " +
                    seconds_until(next_poll_, now) + "; the jobs are taken to be as they were";
  }
  s.last_answer_s = last_answer_ == Clock::time_point{} ? -1 : std::chrono::duration<double>(now - last_answer_).count();
  return s;
}

// --- Pool: the shell that carries the decisions out ----------------------------------------------

Pool::Pool(PoolPolicy policy, std::unique_ptr<jobqueue::JobQueue> queue)
    : state_(std::move(policy)), queue_(std::move(queue)) {}

Pool::~Pool() = default;

protocol::PoolStatus Pool::status(std::uint32_t connected_workers) const {
  protocol::PoolStatus s = state_.status(connected_workers, Clock::now());
  s.kind = queue_->kind();
  return s;
}

void Pool::attach(jobqueue::CommandRunner& runner) {
  runner_ = &runner;
  queue_->attach(runner);
}

jobqueue::CommandRunner& Pool::runner() {
  if (runner_ == nullptr) throw std::logic_error("pool " + name() + " used before attach(CommandRunner&)");
  return *runner_;
}

std::vector<std::uint32_t> Pool::step(Clock::time_point now, std::size_t backlog, double avg_task_us,
                                      const std::vector<PoolWorker>& workers, const PoolState::HoldsData& holds_data) {
  PoolActions a = state_.step(now, backlog, avg_task_us, workers, holds_data);
  (void)runner();
  std::weak_ptr<bool> alive = alive_;
  if (a.submit > 0) {
    queue_->submit(a.submit, [this, alive](jobqueue::SubmitResult r) {
      if (alive.expired()) return;
      state_.submitted(Clock::now(), r);
      auto waiters = std::move(settle_waiters_);
      settle_waiters_.clear();
      for (auto& w : waiters) w(r.error);
    });
  }
  if (a.poll) {
    queue_->poll([this, alive](jobqueue::PollResult r) {
      if (alive.expired()) return;
      for (auto& e : state_.polled(Clock::now(), r)) ended_.push_back(std::move(e));
    });
  }
  if (!a.cancel.empty()) {
    HERD_LOG(info) << "pool " << name() << ": stopping " << a.cancel.size() << " job(s) in one call";
    queue_->cancel(a.cancel, [this, alive, ids = a.cancel](const std::string& error) {
      if (alive.expired()) return;
      state_.cancelled(Clock::now(), ids, error);
    });
  }
  for (const auto& id : a.read_output) {
    // The end of a failed job's output: found and read on a thread (a slow or hung shared file
    // system must not stop the loop).
    runner().post([this, alive, q = queue_, id]() -> jobqueue::CommandRunner::Continuation {
      std::vector<std::string> files = q->output_files(id), tail;
      for (const auto& file : files) {
        auto lines = jobqueue::last_lines(file, 20, 64 << 10);
        if (files.size() > 1 && !lines.empty()) tail.push_back("==> " + file + " <==");
        tail.insert(tail.end(), lines.begin(), lines.end());
      }
      return [this, alive, id, files = std::move(files), tail = std::move(tail)]() mutable {
        if (alive.expired()) return;
        state_.output_read(id, std::move(files), std::move(tail));
      };
    });
  }
  return a.retire;
}

PoolState::Ended Pool::take_ended() {
  PoolState::Ended out;
  out.swap(ended_);
  return out;
}

void Pool::when_settled(std::function<void(const std::string&)> done) {
  if (!state_.submitting()) {
    done("");
    return;
  }
  settle_waiters_.push_back(std::move(done));
}

void Pool::close() {
  queue_->close();
  state_.clear_jobs();
}

}  // namespace herd::scheduler
