#include "jobqueue/slurm_job_queue.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/logging.hpp"
#include "common/util.hpp"
#include "herd/error.hpp"
#include "herd/shell.hpp"
#include "jobqueue/job_output.hpp"

namespace herd::jobqueue {
namespace {

ShellResult run(std::vector<std::string> argv, double timeout_s) {
  ShellCommand c{std::move(argv)};
  c.timeout_s = timeout_s;
  c.tail_bytes = 1 << 20;
  return shell(std::move(c));
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
  // sbatch reads the script when it is called, so one private file per pool suffices.
  const std::string dir = "/tmp/herd-" + std::to_string(::getuid());
  std::filesystem::create_directories(dir);
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all);
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

std::vector<std::string> SlurmJobQueue::submit(std::size_t count) {
  if (count == 0) return {};
  // Slurm does not create the log directory, and a job whose output file cannot be opened
  // dies without a trace.
  std::error_code ec;
  std::filesystem::create_directories(options_.options.log_directory(), ec);
  if (ec) {
    throw JobQueueError("cannot create the log directory " + options_.options.log_directory() + ": " + ec.message());
  }
  const auto r = run({"sbatch", "--parsable", "--array=0-" + std::to_string(count - 1), script_path_},
                     options_.command_timeout_s);
  if (!r.ok()) {
    std::string why(util::trim(r.stderr_tail.empty() ? r.stdout_tail : r.stderr_tail));
    if (r.timed_out) why = "sbatch did not answer within " + std::to_string(options_.command_timeout_s) + " s";
    if (why.empty()) why = "sbatch exited with code " + std::to_string(r.exit_code);
    throw JobQueueError("sbatch refused the jobs of pool '" + options_.options.pool() + "': " + why);
  }
  std::string out(util::trim(r.stdout_tail));
  // --parsable: "<jobid>" or "<jobid>;<cluster>"; warnings may precede it on earlier lines.
  if (const auto nl = out.rfind('\n'); nl != std::string::npos) out = out.substr(nl + 1);
  const std::string array_id = out.substr(0, out.find(';'));
  if (array_id.empty() || array_id.find_first_not_of("0123456789") != std::string::npos) {
    throw JobQueueError("unexpected sbatch output: '" + out + "'");
  }
  std::vector<std::string> ids;
  const auto now = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < count; ++i) {
    const std::string id = array_id + "_" + std::to_string(i);
    jobs_[id] = Job{{id, JobState::pending, "PENDING", "submitted"}, now, 0};
    ids.push_back(id);
  }
  if (!options_.jobs_file.empty()) {
    std::ofstream record(options_.jobs_file, std::ios::app);
    for (const auto& id : ids) record << id << "\n";
  }
  return ids;
}

void SlurmJobQueue::cancel(const std::vector<std::string>& ids) {
  if (ids.empty()) return;
  std::vector<std::string> argv = {"scancel"};
  argv.insert(argv.end(), ids.begin(), ids.end());
  const auto r = run(argv, options_.command_timeout_s);
  if (!r.ok()) HERD_LOG(warning) << "scancel " << util::join(ids, " ") << ": " << util::trim(r.stderr_tail);
}

PollResult SlurmJobQueue::poll() {
  PollResult result;
  const auto now = std::chrono::steady_clock::now();
  if (jobs_.empty() || now - last_poll_ < options_.poll_interval) {
    for (const auto& [id, job] : jobs_) result.jobs.push_back(job.info);
    return result;
  }
  last_poll_ = now;
  std::vector<std::string> ids;
  for (const auto& [id, job] : jobs_) ids.push_back(id);
  // One squeue for the whole pool; -r lists array tasks one per line.
  const auto r = run({"squeue", "--noheader", "-r", "--format=%i|%T|%r", "--jobs=" + util::join(ids, ",")},
                     options_.command_timeout_s);
  std::set<std::string> seen;
  if (r.ok()) {
    std::istringstream lines(r.stdout_tail);
    std::string line;
    while (std::getline(lines, line)) {
      std::istringstream f(line);
      std::string id, state, reason;
      std::getline(f, id, '|');
      std::getline(f, state, '|');
      std::getline(f, reason);
      auto it = jobs_.find(id);
      if (it == jobs_.end()) continue;
      seen.insert(id);
      it->second.unknown_polls = 0;
      it->second.info.detail = state;
      it->second.info.state = state_of(state);
      it->second.info.reason = reason == "None" ? "" : reason;
    }
  } else if (r.stderr_tail.find("Invalid job id") == std::string::npos) {
    // squeue itself failed (slurmctld down?): keep what we knew, try again next time.
    result.log.push_back("squeue failed: " + std::string(util::trim(r.stderr_tail)));
    for (const auto& [id, job] : jobs_) result.jobs.push_back(job.info);
    return result;
  }
  std::vector<std::string> gone;
  for (const auto& id : ids) {
    if (!seen.count(id)) gone.push_back(id);
  }
  if (!gone.empty()) query_sacct(gone, result);
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
  return result;
}

void SlurmJobQueue::query_sacct(const std::vector<std::string>& ids, PollResult& result) {
  const auto r = run({"sacct", "--noheader", "--parsable2", "--allocations",
                      "--format=JobID,State,ExitCode,Reason", "--jobs=" + util::join(ids, ",")},
                     options_.command_timeout_s);
  std::set<std::string> known;
  if (r.ok()) {
    std::istringstream lines(r.stdout_tail);
    std::string line;
    while (std::getline(lines, line)) {
      std::istringstream f(line);
      std::string id, state, exit_code, reason;
      std::getline(f, id, '|');
      std::getline(f, state, '|');
      std::getline(f, exit_code, '|');
      std::getline(f, reason);
      auto it = jobs_.find(id);
      if (it == jobs_.end()) continue;
      known.insert(id);
      // "CANCELLED by 0" -> "CANCELLED"
      const std::string word = state.substr(0, state.find(' '));
      it->second.info.detail = word;
      it->second.info.state = state_of(word);
      if (it->second.info.state == JobState::ended) {
        it->second.info.reason = "exit code " + exit_code + (reason.empty() || reason == "None" ? "" : ", " + reason);
      }
    }
  } else {
    result.log.push_back("sacct failed: " + std::string(util::trim(r.stderr_tail)));
  }
  const auto now = std::chrono::steady_clock::now();
  for (const auto& id : ids) {
    if (known.count(id)) continue;
    auto& job = jobs_.at(id);
    // Just submitted jobs can be missing from both for a moment; three polls and 10 s later a
    // job Slurm does not know is final ("Invalid job id"), not something to wait for.
    if (++job.unknown_polls >= 3 && now - job.submitted > std::chrono::seconds(10)) {
      job.info.state = JobState::ended;
      job.info.detail = "UNKNOWN";
      job.info.reason = "Slurm no longer knows this job (Invalid job id)";
    }
  }
}

void SlurmJobQueue::close() {
  if (jobs_.empty()) return;
  std::vector<std::string> ids;
  for (const auto& [id, job] : jobs_) ids.push_back(id);
  cancel(ids);
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
