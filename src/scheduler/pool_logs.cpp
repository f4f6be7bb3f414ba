// A pool's job output: the end of a failed job's output file(s), logged and shown in
// `herd status` and the pool's last_failure, so that "module: command not found" or a
// crashed worker's last words reach the user without a hunt through log directories; and
// `herd logs JOB`.
#include <algorithm>

#include "common/logging.hpp"
#include "jobqueue/job_output.hpp"
#include "scheduler/pool.hpp"

namespace herd::scheduler {
namespace {
constexpr std::size_t kFailureLines = 20;   // lines of each output file kept for a failure
constexpr std::size_t kKeptFailures = 20;   // failures shown per pool
constexpr std::size_t kKeptEnded = 500;     // ended jobs whose files `herd logs` still finds

/// A clean end: the job finished with exit code 0, or it was stopped because we asked.
bool clean_end(const jobqueue::JobInfo& job, bool asked_to_stop) {
  if (job.detail == "COMPLETED") return true;
  if (job.detail == "EXITED") return job.reason == "exited with code 0" || asked_to_stop;  // local
  return asked_to_stop && job.detail == "CANCELLED";
}
}  // namespace

void Pool::job_ended(const jobqueue::JobInfo& job, bool asked_to_stop) {
  const bool had_worker = had_worker_.erase(job.id) > 0;
  ended_.push_back(job.id);
  if (ended_.size() > kKeptEnded) ended_.pop_front();
  if (clean_end(job, asked_to_stop)) return;
  FailedJob f;
  f.info = job;
  f.had_worker = had_worker;
  f.files = queue_->output_files(job.id);
  for (const auto& file : f.files) {
    auto lines = jobqueue::last_lines(file, kFailureLines, 64 << 10);
    if (f.files.size() > 1 && !lines.empty()) f.tail.push_back("==> " + file + " <==");
    f.tail.insert(f.tail.end(), lines.begin(), lines.end());
  }
  std::string summary = "job " + job.id + " " + job.detail + (job.reason.empty() ? "" : " (" + job.reason + ")") +
                        (had_worker ? " after its worker connected" : " before its worker connected");
  if (f.files.empty()) {
    summary += "; its output is not kept (no log directory)";
  } else if (f.tail.empty()) {
    std::string names;
    for (const auto& file : f.files) names += (names.empty() ? "" : ", ") + file;
    summary += "; its output file is empty or missing (" + names + ")";
  } else {
    summary += "; its output ends with:";
    for (const auto& line : f.tail) summary += "\n  " + line;
  }
  HERD_LOG(warning) << "pool " << name() << ": " << summary;
  last_failure_ = std::move(summary);
  failed_.push_back(std::move(f));
  if (failed_.size() > kKeptFailures) failed_.pop_front();
}

bool Pool::job_output(const std::string& id, std::size_t lines, std::vector<protocol::LogSource>& out) const {
  if (!jobs_.count(id) && std::find(ended_.begin(), ended_.end(), id) == ended_.end()) return false;
  const auto files = queue_->output_files(id);
  if (files.empty()) {
    protocol::LogSource s;
    s.kind = "job";
    s.name = id;
    s.note = "the output of pool " + name() + "'s jobs is not kept (no log directory)";
    out.push_back(std::move(s));
    return true;
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
  return true;
}

}  // namespace herd::scheduler
