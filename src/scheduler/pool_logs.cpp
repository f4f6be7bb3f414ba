// A pool's job output: the end of a failed job's output file(s), logged and shown in
// `herd status` and the pool's last_failure, so that "module: command not found" or a
// crashed worker's last words reach the user without a hunt through log directories; and
// `herd logs JOB`. Also where a failed job counts towards a crash loop.
//
// The files are found and read on the CommandRunner's threads (a shared file system can be
// slow, and job output can be large): PoolState only asks (PoolActions::read_output) and
// takes the lines when they come (output_read).
#include <algorithm>

#include "common/logging.hpp"
#include "jobqueue/job_output.hpp"
#include "scheduler/pool.hpp"

namespace herd::scheduler {
namespace {
constexpr std::size_t kKeptFailures = 20;   // failures shown per pool
constexpr std::size_t kKeptEnded = 500;     // ended jobs whose files `herd logs` still finds

/// A clean end: the job finished with exit code 0, or it was stopped because we asked.
bool clean_end(const jobqueue::JobInfo& job, bool asked_to_stop) {
  if (job.detail == "COMPLETED") return true;
  if (job.detail == "EXITED") return job.reason == "exited with code 0" || asked_to_stop;  // local
  return asked_to_stop && job.detail == "CANCELLED";
}
}  // namespace

void PoolState::job_ended(Clock::time_point now, const jobqueue::JobInfo& job, bool asked_to_stop, bool crash) {
  // `crash`: it ended on its own before its worker connected (it never served, whatever its
  // exit code), or just after, before the worker had any work (see PoolState::polled).
  const bool had_worker = connected_at_.erase(job.id) > 0;
  ended_.push_back(job.id);
  if (ended_.size() > kKeptEnded) ended_.pop_front();
  if (clean_end(job, asked_to_stop) && !crash) return;
  FailedJob f;
  f.info = job;
  f.had_worker = had_worker;
  failed_.push_back(std::move(f));
  if (failed_.size() > kKeptFailures) failed_.pop_front();
  to_read_.push_back(job.id);
  last_failure_ = "job " + job.id + " " + job.detail + (job.reason.empty() ? "" : " (" + job.reason + ")") +
                  (had_worker ? " after its worker connected" : " before its worker connected") +
                  "; reading the end of its output";
  // A few crashes in a row back off (one job at a time, pauses doubling), then pause the pool
  // until the user scales again: a broken prologue or a missing module must not become
  // thousands of failed jobs a day.
  if (!crash) return;
  ++crashes_;
  if (crashes_ >= policy_.crash_limit) {
    if (!crash_paused_) {
      HERD_LOG(warning) << "pool " << name() << ": " << crashes_
                        << " jobs in a row ended before their worker connected; no more submissions until scale() "
                        << "or adapt()";
    }
    crash_paused_ = true;
  } else if (crashes_ >= policy_.crash_backoff_after) {
    const auto pause = policy_.crash_backoff * (1LL << std::min<std::uint32_t>(crashes_ - policy_.crash_backoff_after, 10));
    crash_next_try_ = now + pause;
    HERD_LOG(warning) << "pool " << name() << ": " << crashes_ << " jobs in a row ended before their worker connected; "
                      << "next job in " << std::chrono::duration_cast<std::chrono::seconds>(pause).count()
                      << " s, one at a time";
  }
}

void PoolState::output_read(const std::string& job, std::vector<std::string> files, std::vector<std::string> tail) {
  auto f = std::find_if(failed_.begin(), failed_.end(), [&](const FailedJob& x) { return x.info.id == job; });
  if (f == failed_.end()) return;
  f->files = std::move(files);
  f->tail = std::move(tail);
  f->output_read = true;
  std::string summary = "job " + job + " " + f->info.detail + (f->info.reason.empty() ? "" : " (" + f->info.reason + ")") +
                        (f->had_worker ? " after its worker connected" : " before its worker connected");
  if (f->files.empty()) {
    summary += "; its output is not kept (no log directory)";
  } else if (f->tail.empty()) {
    std::string names;
    for (const auto& file : f->files) names += (names.empty() ? "" : ", ") + file;
    summary += "; its output file is empty or missing (" + names + ")";
  } else {
    summary += "; its output ends with:";
    for (const auto& line : f->tail) summary += "\n  " + line;
  }
  HERD_LOG(warning) << "pool " << name() << ": " << summary;
  // The newest failure is the one shown (output reads may finish out of order).
  if (&*f == &failed_.back()) last_failure_ = std::move(summary);
}

bool Pool::read_job_output(const std::string& id, std::size_t lines,
                           std::function<void(std::vector<protocol::LogSource>)> done) {
  if (!state_.knows_job(id)) return false;
  const std::string pool = name();
  runner().post([q = queue_, id, lines, pool, done = std::move(done)]() -> jobqueue::CommandRunner::Continuation {
    std::vector<protocol::LogSource> out;
    const auto files = q->output_files(id);
    if (files.empty()) {
      protocol::LogSource s;
      s.kind = "job";
      s.name = id;
      s.note = "the output of pool " + pool + "'s jobs is not kept (no log directory)";
      out.push_back(std::move(s));
    }
    for (const auto& file : files) {
      protocol::LogSource s;
      s.kind = "job";
      s.name = id;
      s.path = file;
      std::size_t dropped = 0;
      for (auto& line : jobqueue::last_lines(file, lines, 16u << 20, &dropped)) {
        s.lines.push_back({0, static_cast<std::uint8_t>(files.size() > 1 && &file == &files.back() ? 2 : 1), std::move(line)});
      }
      s.dropped = dropped;
      if (s.lines.empty()) s.note = "empty, or not written yet (the job may still be pending)";
      out.push_back(std::move(s));
    }
    return [done, out = std::move(out)]() mutable { done(std::move(out)); };
  });
  return true;
}

}  // namespace herd::scheduler
