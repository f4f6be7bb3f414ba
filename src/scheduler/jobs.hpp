// Jobs of shell commands (`herd submit`), as the scheduler's core holds them (state_jobs.cpp).
//
// A job is a list of *positions* 0..total-1, each one task of the job: an array's ids in the
// order of its ranges, an --each-line file's lines, or a job file's tasks. Nothing per
// position is made at submission but one byte of state: a task enters the task graph (as a
// "herd::job_task" task of client 0) only when the scheduler is about to need it, a bounded
// window of them across all jobs, and leaves it as soon as it has finished, its outcome kept
// here (its exit code and error only when it failed). A million-task array is one message and a
// few megabytes.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "protocol/messages.hpp"

namespace herd::scheduler {

enum class JobTaskState : std::uint8_t { waiting = 0, running = 1, ok = 2, failed = 3, cancelled = 4 };
inline constexpr int kJobTaskStates = 5;
const char* to_string(JobTaskState s);

struct JobFailure {
  std::int32_t exit_code = -1;
  std::string error;
};

struct Job {
  std::uint64_t id = 0;
  protocol::JobSpec spec;
  std::uint64_t total = 0;
  std::vector<JobTaskState> state;          // by position
  std::vector<std::uint64_t> range_first;   // array: the first position of each range
  std::uint64_t next = 0;                   // the next position never started
  std::deque<std::uint64_t> again;          // positions to run again (before `next`)
  std::uint64_t counts[kJobTaskStates] = {};
  std::unordered_map<std::uint64_t, JobFailure> failures;  // by position
  std::int64_t submitted_ms = 0, finished_ms = 0;
  bool cancelled = false;
  std::string cancel_reason;
  // A job file's tasks: their dependencies, by position.
  std::unordered_map<std::uint64_t, std::uint64_t> position_of;  // task id -> position
  std::vector<std::uint32_t> deps_left;
  std::vector<std::vector<std::uint64_t>> dependents;
  std::deque<std::uint64_t> file_ready;     // positions whose dependencies all succeeded

  bool file() const { return !spec.tasks.empty(); }
  bool done() const { return counts[0] == 0 && counts[1] == 0; }
  /// The id of the task at `position` (the array index, the line number, the file's id).
  std::uint64_t task_id(std::uint64_t position) const;
  /// The position of task id `task`, or total when the job has none.
  std::uint64_t position(std::uint64_t task) const;
  const protocol::JobTaskDef& def(std::uint64_t position) const {
    return file() ? spec.tasks[position] : spec.task;
  }
  void set(std::uint64_t position, JobTaskState s) {
    --counts[static_cast<int>(state[position])];
    state[position] = s;
    ++counts[static_cast<int>(s)];
  }
  /// waiting, running, finished, failed or cancelled.
  std::string summary() const;
};

/// Checks a job's spec and sets up `job` (positions, ranges, dependencies); "" or the error.
std::string setup_job(Job& job);

}  // namespace herd::scheduler
