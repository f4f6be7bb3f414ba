#include "scheduler/pool.hpp"

#include <algorithm>
#include <cmath>

#include "common/logging.hpp"
#include "herd/error.hpp"

namespace herd::scheduler {

Pool::Pool(PoolPolicy policy, std::unique_ptr<jobqueue::JobQueue> queue)
    : policy_(std::move(policy)), queue_(std::move(queue)) {}

void Pool::scale(std::uint32_t n) {
  policy_.adaptive = false;
  policy_.target = n;
  paused_until_ = {};  // the user asked again: try now (failures still add up to a pause)
  paused_reason_.clear();
}

void Pool::adapt(std::uint32_t minimum, std::uint32_t maximum, std::chrono::seconds idle_timeout) {
  policy_.adaptive = true;
  policy_.minimum = minimum;
  policy_.maximum = std::max(minimum, maximum);
  if (idle_timeout.count() > 0) policy_.idle_timeout = idle_timeout;
  paused_until_ = {};
  paused_reason_.clear();
}

void Pool::submit(std::size_t count) {
  try {
    const auto ids = queue_->submit(count);
    for (const auto& id : ids) jobs_[id] = {id, jobqueue::JobState::pending, "PENDING", "submitted"};
    submitted_ += ids.size();
    consecutive_failures_ = 0;
    last_error_.clear();
    HERD_LOG(info) << "pool " << name() << ": submitted " << ids.size() << " job(s)"
                   << (ids.empty() ? "" : " starting with " + ids.front());
  } catch (const std::exception& e) {
    ++failed_submissions_;
    last_error_ = e.what();
    // 1, 2, 4 ... up to 5 minutes between tries once it keeps failing.
    if (++consecutive_failures_ >= 3) {
      const auto backoff = std::chrono::seconds(std::min(300, 1 << std::min(consecutive_failures_ - 3, 8)));
      paused_until_ = Clock::now() + backoff;
      paused_reason_ = std::to_string(consecutive_failures_) + " submissions failed in a row; next try in " +
                       std::to_string(backoff.count()) + " s. Last error: " + last_error_;
    } else {
      paused_until_ = Clock::now() + std::chrono::seconds(1);
    }
    HERD_LOG(warning) << "pool " << name() << ": " << e.what();
    throw;
  }
}

std::vector<std::uint32_t> Pool::step(std::size_t backlog, double avg_task_us,
                                      const std::vector<PoolWorker>& workers) {
  const auto now = Clock::now();
  std::set<std::string> leaving_jobs;
  for (const auto& w : workers) {
    if (w.leaving) leaving_jobs.insert(w.job_id);
    if (jobs_.count(w.job_id)) had_worker_.insert(w.job_id);
  }
  // Capacity: jobs pending or running whose worker is not on its way out.
  std::uint32_t active = 0;
  std::vector<std::string> pending;
  for (const auto& [id, job] : jobs_) {
    if (cancelled_.count(id) || leaving_jobs.count(id)) continue;
    ++active;
    if (job.state == jobqueue::JobState::pending) pending.push_back(id);
  }
  std::uint32_t desired = policy_.target;
  if (policy_.adaptive) {
    // Enough slots for the backlog, but when tasks are short fewer workers do: aim to clear
    // the backlog in about 10 s of work per slot.
    const double slots = std::max<std::uint32_t>(1, policy_.slots_per_worker);
    double want = std::ceil(static_cast<double>(backlog) / slots);
    if (avg_task_us >= 0) {
      want = std::min(want, std::ceil(static_cast<double>(backlog) * avg_task_us / (slots * 10e6)));
      if (backlog > 0) want = std::max(want, 1.0);
    }
    desired = static_cast<std::uint32_t>(std::clamp(want, static_cast<double>(policy_.minimum),
                                                    static_cast<double>(policy_.maximum)));
    // Never below the workers that are busy: shrink only by idleness (below).
    std::uint32_t busy = 0;
    for (const auto& w : workers) busy += (!w.leaving && !w.idle);
    desired = std::max(desired, std::min(busy, policy_.maximum));
  }
  desired_ = desired;
  std::vector<std::uint32_t> retire;
  if (active < desired) {
    if (now >= paused_until_) {
      paused_reason_.clear();
      submit(desired - active);
    }
  } else if (active > desired) {
    std::uint32_t excess = active - desired;
    // Pending jobs go first: they cost nothing to drop.
    std::vector<std::string> cancel;
    for (auto it = pending.rbegin(); it != pending.rend() && excess > 0; ++it, --excess) cancel.push_back(*it);
    // Then running workers: for a fixed size at once; when adapting, only after idle_timeout.
    std::vector<const PoolWorker*> candidates;
    for (const auto& w : workers) {
      if (w.leaving || !jobs_.count(w.job_id) || cancelled_.count(w.job_id)) continue;
      if (policy_.adaptive && !(w.idle && now - w.idle_since >= policy_.idle_timeout)) continue;
      candidates.push_back(&w);
    }
    std::sort(candidates.begin(), candidates.end(), [](const PoolWorker* a, const PoolWorker* b) {
      return a->idle != b->idle ? a->idle : a->idle_since < b->idle_since;
    });
    for (const PoolWorker* w : candidates) {
      if (excess == 0) break;
      retire.push_back(w->id);
      --excess;
    }
    if (!cancel.empty()) {
      for (const auto& id : cancel) cancelled_.insert(id);
      queue_->cancel(cancel);
    }
  }
  return retire;
}

std::vector<std::string> Pool::poll(std::vector<std::pair<std::string, std::string>>* ended) {
  jobqueue::PollResult r = queue_->poll();
  for (const auto& job : r.jobs) {
    if (job.state == jobqueue::JobState::ended) {
      if (ended != nullptr) ended->emplace_back(job.id, job.detail + (job.reason.empty() ? "" : " (" + job.reason + ")"));
      if (jobs_.count(job.id)) job_ended(job, cancelled_.count(job.id) > 0);
      jobs_.erase(job.id);
      cancelled_.erase(job.id);
      requeued_.erase(job.id);
    } else if (auto it = jobs_.find(job.id); it != jobs_.end()) {
      // Running, then pending again: the batch system requeued it (a node failure, scontrol
      // requeue). Its worker may still be registered, silent on a dead node, until it is
      // declared lost; by then the job may run again elsewhere.
      if (it->second.state == jobqueue::JobState::running && job.state == jobqueue::JobState::pending) {
        requeued_.insert(job.id);
      }
      it->second = job;
    }
  }
  return r.log;
}

void Pool::worker_left(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || cancelled_.count(job_id)) return;
  // The worker of an incarnation the batch system already requeued: the job is its next one,
  // pending or already running (perhaps with a worker of its own), and stays.
  if (requeued_.erase(job_id) > 0) return;
  // Pending again means requeued: that is the job's next incarnation, not the worker we lost.
  // Completing means it is ending anyway, and may be on its way back to the queue (requeue):
  // cancelling it then would kill the next incarnation.
  if (it->second.state == jobqueue::JobState::pending || it->second.detail == "COMPLETING") return;
  // The worker is gone (retired, or it died): its job must not linger in the queue holding
  // resources. The batch script exits with the worker, so this is usually a no-op.
  cancelled_.insert(job_id);
  queue_->cancel({job_id});
}

void Pool::close() {
  queue_->close();
  jobs_.clear();
  cancelled_.clear();
  requeued_.clear();
}

protocol::PoolStatus Pool::status(std::uint32_t connected_workers) const {
  protocol::PoolStatus s;
  s.name = policy_.name;
  s.kind = queue_->kind();
  s.target = desired_;
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
  s.workers = connected_workers;
  s.paused = paused_reason_;
  s.last_error = last_error_;
  s.submitted = submitted_;
  s.failed_submissions = failed_submissions_;
  s.last_failure = last_failure_;
  return s;
}

}  // namespace herd::scheduler
