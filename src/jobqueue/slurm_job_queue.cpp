#include "jobqueue/slurm_job_queue.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/logging.hpp"
#include "common/security.hpp"
#include "common/util.hpp"
#include "herd/error.hpp"
#include "herd/shell.hpp"
#include "jobqueue/job_output.hpp"

namespace herd::jobqueue {
namespace {

ShellResult run(std::vector<std::string> argv, double timeout_s) { return CommandRunner::run(std::move(argv), timeout_s); }

/// Why a command failed, in its own words ("squeue did not answer within 30 s" when it hung).
std::string failure(const ShellResult& r, const std::string& command, double timeout_s) {
  if (r.timed_out) return command + " did not answer within " + std::to_string(static_cast<int>(timeout_s)) + " s";
  std::string why = std::string(util::trim(r.stderr_tail.empty() ? r.stdout_tail : r.stderr_tail));
  if (why.empty()) why = command + " exited with code " + std::to_string(r.exit_code);
  return why;
}

/// One line of squeue (%i|%T|%r) or sacct (JobID|State|ExitCode|Reason).
std::vector<std::string> fields(const std::string& line) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t bar = line.find('|', start);
    out.push_back(line.substr(start, bar == std::string::npos ? std::string::npos : bar - start));
    if (bar == std::string::npos) break;
    start = bar + 1;
  }
  return out;
}

/// This user's live jobs running `script` (by squeue's command column): id -> state.
std::map<std::string, std::string> jobs_of_script(const std::string& script, double timeout_s, bool* ok) {
  std::map<std::string, std::string> out;
  const auto r = run({"squeue", "--me", "--noheader", "-r", "--format=%i|%T|%o"}, timeout_s);
  *ok = r.ok();
  std::istringstream lines(r.ok() ? r.stdout_tail : std::string());
  for (std::string line; std::getline(lines, line);) {
    auto f = fields(line);
    if (f.size() >= 3 && f[2] == script && (f[1] == "PENDING" || f[1] == "RUNNING" || f[1] == "CONFIGURING")) {
      out[f[0]] = f[1];
    }
  }
  return out;
}

JobState state_of(const std::string& slurm) {
  if (slurm == "PENDING" || slurm == "CONFIGURING" || slurm == "REQUEUED" || slurm == "REQUEUE_HOLD" ||
      slurm == "REQUEUE_FED" || slurm == "RESV_DEL_HOLD" || slurm == "SUSPENDED" || slurm == "STOPPED" ||
      slurm == "RESIZING" || slurm == "SIGNALING") {
    return JobState::pending;
  }
  // COMPLETING is a passage, not an end: a requeued job goes through it back to PENDING, and
  // forgetting it there would make the pool submit a job too many.
  if (slurm == "RUNNING" || slurm == "COMPLETING") return JobState::running;
  return JobState::ended;  // COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, PREEMPTED, ...
}

}  // namespace

SlurmJobQueue::SlurmJobQueue(SlurmQueueOptions options) : options_(std::move(options)) {
  script_ = job_script(options_.options, options_.scheduler_address);
  // sbatch reads the script when it is called, so one private file per pool suffices. The
  // directory's name is predictable: another user may have made it first (refused), or a
  // symbolic link there (refused too).
  const std::string dir = "/tmp/herd-" + std::to_string(::getuid());
  try {
    security::private_directory(dir);
  } catch (const std::exception& e) {
    throw JobQueueError(std::string("cannot write the job script of pool '") + options_.options.pool() + "': " + e.what());
  }
  script_path_ = dir + "/" + options_.options.pool() + "-" + std::to_string(::getpid()) + ".sbatch";
  std::ofstream(script_path_) << script_;
  submit_dir_ = std::filesystem::current_path().string();
}

std::vector<std::string> SlurmJobQueue::output_files(const std::string& id) const {
  const std::string& name = options_.options.job_name().empty() ? "herd-" + options_.options.pool()
                                                                : options_.options.job_name();
  return slurm_output_files(sbatch_output_patterns(script_), id, name, submit_dir_);
}

SlurmJobQueue::~SlurmJobQueue() {
  close();
  std::error_code ec;
  std::filesystem::remove(script_path_, ec);
}

void SlurmJobQueue::submit(std::size_t count, SubmitDone done) {
  if (count == 0) {
    runner().complete([done = std::move(done)] { done({}); });
    return;
  }
  ++submitting_;
  const std::string log_dir = options_.options.log_directory();
  const std::string pool = options_.options.pool();
  const std::string jobs_file = options_.jobs_file;
  const double timeout = options_.command_timeout_s;
  std::vector<std::string> argv = {"sbatch", "--parsable", "--array=0-" + std::to_string(count - 1)};
  argv.insert(argv.end(), options_.options.submit_command_extra().begin(), options_.options.submit_command_extra().end());
  argv.push_back(script_path_);
  const std::string script = script_path_;
  runner().post([=, this]() -> CommandRunner::Continuation {
    SubmitResult res;
    std::map<std::string, std::string> made;  // jobs a timed-out sbatch made after all
    // Slurm does not create the log directory, and a job whose output file cannot be opened
    // dies without a trace. Made readable by this user alone: job output may hold secrets.
    if (const std::string why = util::make_private_directories(log_dir); !why.empty()) {
      res.error = "the log directory of pool '" + pool + "': " + why;
    } else {
      const auto r = run(argv, timeout);
      std::string out = std::string(util::trim(r.stdout_tail));
      // --parsable: "<jobid>" or "<jobid>;<cluster>"; warnings may precede it on earlier lines.
      if (const auto nl = out.rfind('\n'); nl != std::string::npos) out = out.substr(nl + 1);
      const std::string array_id = out.substr(0, out.find(';'));
      if (r.timed_out) {
        // The controller may have made the jobs and only the answer was late: look for them.
        bool looked = false;
        made = jobs_of_script(script, timeout, &looked);
        res.error = "sbatch refused the jobs of pool '" + pool + "': " + failure(r, "sbatch", timeout);
      } else if (!r.ok()) {
        res.error = "sbatch refused the jobs of pool '" + pool + "': " + failure(r, "sbatch", timeout);
      } else if (array_id.empty() || array_id.find_first_not_of("0123456789") != std::string::npos) {
        res.error = "unexpected sbatch output: '" + out + "'";
      } else {
        for (std::size_t i = 0; i < count; ++i) res.ids.push_back(array_id + "_" + std::to_string(i));
        if (!jobs_file.empty()) {  // the owner's record, should this scheduler die
          std::ofstream record(jobs_file, std::ios::app);
          for (const auto& id : res.ids) record << id << "\n";
        }
      }
    }
    return [this, res = std::move(res), made = std::move(made), done, jobs_file]() mutable {
      --submitting_;
      const auto now = std::chrono::steady_clock::now();
      if (!made.empty() || !res.error.empty()) {
        if (res.error.find("did not answer") != std::string::npos) orphan_checks_ = 3;
        for (const auto& [id, state] : made) {
          if (jobs_.count(id)) continue;
          HERD_LOG(warning) << "sbatch timed out but made job " << id << " (" << state << "): adopted";
          res.ids.push_back(id);
          if (!jobs_file.empty()) std::ofstream(jobs_file, std::ios::app) << id << "\n";
        }
        // Counted as submitted: the pool does not ask for them again.
        if (!res.ids.empty()) res.error.clear();
      }
      for (const auto& id : res.ids) jobs_[id] = Job{{id, JobState::pending, "PENDING", "submitted"}, now, 0};
      done(res);
    };
  });
}

void SlurmJobQueue::cancel(const std::vector<std::string>& ids, CancelDone done) {
  if (ids.empty()) {
    runner().complete([done = std::move(done)] { done(""); });
    return;
  }
  std::vector<std::string> argv = {"scancel"};
  argv.insert(argv.end(), ids.begin(), ids.end());
  const double timeout = options_.command_timeout_s;
  runner().post([argv = std::move(argv), timeout, done = std::move(done)]() -> CommandRunner::Continuation {
    const auto r = run(argv, timeout);
    std::string error;
    // Jobs that already ended are what we wanted; anything else is worth a retry.
    if (!r.ok() && r.stderr_tail.find("already") == std::string::npos &&
        r.stderr_tail.find("Invalid job id") == std::string::npos) {
      error = "scancel failed: " + failure(r, "scancel", timeout);
    }
    return [error, done] { done(error); };
  });
}

void SlurmJobQueue::poll(PollDone done) {
  if (jobs_.empty() && orphan_checks_ == 0) {
    runner().complete([done = std::move(done)] { done({}); });
    return;
  }
  std::vector<std::string> ids;
  for (const auto& [id, job] : jobs_) ids.push_back(id);
  const double timeout = options_.command_timeout_s;
  struct Answer {
    bool squeue_ok = false, sacct_ok = true;
    std::string squeue_error, sacct_error;
    std::map<std::string, std::vector<std::string>> squeue, sacct;  // id -> fields
    bool looked = false;                                             // for jobs of a timed-out sbatch
    std::map<std::string, std::string> own;                          // this pool's script's jobs
  };
  const bool look = orphan_checks_ > 0;
  const std::string script = script_path_;
  runner().post([ids, timeout, done = std::move(done), look, script, this]() -> CommandRunner::Continuation {
    Answer a;
    if (look) a.own = jobs_of_script(script, timeout, &a.looked);
    // One squeue for the whole pool; -r lists array tasks one per line.
    const auto r = ids.empty() ? ShellResult{}
                               : run({"squeue", "--noheader", "-r", "--format=%i|%T|%r", "--jobs=" + util::join(ids, ",")}, timeout);
    if (ids.empty() || r.ok() || (!r.timed_out && r.stderr_tail.find("Invalid job id") != std::string::npos)) {
      a.squeue_ok = true;  // "Invalid job id": none of them is in the queue any more
      std::istringstream lines(r.ok() ? r.stdout_tail : std::string());
      for (std::string line; std::getline(lines, line);) {
        auto f = fields(line);
        if (f.size() >= 3) a.squeue[f[0]] = std::move(f);
      }
      std::vector<std::string> gone;
      for (const auto& id : ids) {
        if (!a.squeue.count(id)) gone.push_back(id);
      }
      if (!gone.empty()) {
        const auto s = run({"sacct", "--noheader", "--parsable2", "--allocations",
                            "--format=JobID,State,ExitCode,Reason", "--jobs=" + util::join(gone, ",")},
                           timeout);
        a.sacct_ok = s.ok();
        if (!s.ok()) a.sacct_error = failure(s, "sacct", timeout);
        std::istringstream sl(s.ok() ? s.stdout_tail : std::string());
        for (std::string line; std::getline(sl, line);) {
          auto f = fields(line);
          if (f.size() >= 4) a.sacct[f[0]] = std::move(f);
        }
      }
    } else {
      a.squeue_error = "squeue failed: " + failure(r, "squeue", timeout);
    }
    return [this, a = std::move(a), ids, done] {
      PollResult result;
      if (a.looked) {
        --orphan_checks_;
        const auto at = std::chrono::steady_clock::now();
        for (const auto& [id, state] : a.own) {
          if (jobs_.count(id)) continue;
          // Made by an sbatch whose answer never came: ours, and capacity like any other.
          result.log.push_back("adopted job " + id + " (" + state + "), made by an sbatch that timed out");
          jobs_[id] = Job{{id, state_of(state), state, "adopted"}, at, 0};
          if (!options_.jobs_file.empty()) std::ofstream(options_.jobs_file, std::ios::app) << id << "\n";
        }
      }
      if (!a.squeue_ok) {
        // slurmctld down or slow: keep what we knew (nothing ends for want of an answer).
        result.error = a.squeue_error;
        for (const auto& [id, job] : jobs_) result.jobs.push_back(job.info);
        done(std::move(result));
        return;
      }
      if (!a.sacct_ok) result.log.push_back("sacct failed: " + a.sacct_error);
      const auto now = std::chrono::steady_clock::now();
      for (const auto& id : ids) {
        auto it = jobs_.find(id);
        if (it == jobs_.end()) continue;
        Job& job = it->second;
        if (auto q = a.squeue.find(id); q != a.squeue.end()) {
          job.unknown_polls = 0;
          job.info.detail = q->second[1];
          job.info.state = state_of(q->second[1]);
          job.info.reason = q->second[2] == "None" ? "" : q->second[2];
        } else if (auto s = a.sacct.find(id); s != a.sacct.end()) {
          // "CANCELLED by 0" -> "CANCELLED"
          const std::string word = s->second[1].substr(0, s->second[1].find(' '));
          job.info.detail = word;
          job.info.state = state_of(word);
          if (job.info.state == JobState::ended) {
            const std::string& reason = s->second[3];
            job.info.reason = "exit code " + s->second[2] + (reason.empty() || reason == "None" ? "" : ", " + reason);
          }
        } else if (a.sacct_ok) {
          // Just submitted jobs can be missing from both for a moment; three polls and 10 s
          // later a job Slurm does not know is final ("Invalid job id"), not something to wait
          // for. (When sacct itself failed, that proves nothing.)
          if (++job.unknown_polls >= 3 && now - job.submitted > std::chrono::seconds(10)) {
            job.info.state = JobState::ended;
            job.info.detail = "UNKNOWN";
            job.info.reason = "Slurm no longer knows this job (Invalid job id)";
          }
        }
      }
      for (auto it = jobs_.begin(); it != jobs_.end();) {
        result.jobs.push_back(it->second.info);
        if (it->second.info.state == JobState::ended) {
          result.log.push_back("job " + it->first + " ended: " + it->second.info.detail +
                               (it->second.info.reason.empty() ? "" : " (" + it->second.info.reason + ")"));
          it = jobs_.erase(it);
        } else {
          ++it;
        }
      }
      done(std::move(result));
    };
  });
}

void SlurmJobQueue::close() {
  // A submission under way may still bring job ids: wait for its answer (bounded by sbatch's
  // timeout), so that no job of ours is left in the queue.
  if (attached()) {
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(static_cast<int>(options_.command_timeout_s * 1000) + 2000);
    while (submitting_ > 0 && std::chrono::steady_clock::now() < deadline) {
      (void)runner().wait_idle(std::chrono::milliseconds(100));
    }
  }
  if (jobs_.empty()) return;
  std::vector<std::string> ids;
  for (const auto& [id, job] : jobs_) ids.push_back(id);
  std::vector<std::string> argv = {"scancel"};
  argv.insert(argv.end(), ids.begin(), ids.end());
  const auto c = run(argv, options_.command_timeout_s);
  if (!c.ok()) HERD_LOG(warning) << "scancel " << util::join(ids, " ") << ": " << std::string(util::trim(c.stderr_tail));
  // Wait (bounded) until squeue no longer lists them, so "no job left" holds when we return.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    const auto r = run({"squeue", "--noheader", "-r", "--format=%i|%T", "--jobs=" + util::join(ids, ",")}, 10);
    if (!r.ok() || util::trim(r.stdout_tail).empty()) break;
    bool all_gone = true;
    std::istringstream lines(r.stdout_tail);
    std::string line;
    while (std::getline(lines, line)) {
      const std::string state = line.substr(line.find('|') + 1);
      if (state != "COMPLETED" && state != "CANCELLED" && state != "FAILED") all_gone = false;
    }
    if (all_gone) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  jobs_.clear();
}

}  // namespace herd::jobqueue
