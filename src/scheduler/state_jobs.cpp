// Jobs of shell commands (`herd submit`, `herd job ...`) in the scheduler's core: see jobs.hpp.
//
// A job's tasks enter the task graph lazily (feed_jobs(), at the start of each schedule()):
// across all jobs at most a window of them at a time, earlier jobs first, each a
// "herd::job_task" task of client 0 whose argument is its command with the job's output
// settings. When one finishes (apply() hands it here), its outcome is kept by position (an
// exit code and the error's words only when it failed) and the task leaves the graph at once.
//
// With the journal on, a job outlives the scheduler: its spec is journaled when it is
// submitted, the outcomes of each turn in one record per job, a cancel as a record. A
// scheduler started again on the journal restores every job (restore_job_record): finished
// tasks keep their outcomes, the others run again.
#include <algorithm>
#include <string_view>
#include <utility>

#include <msgpack.hpp>

#include "common/logging.hpp"
#include "common/util.hpp"
#include "protocol/codec.hpp"
#include "scheduler/journal.hpp"
#include "scheduler/state.hpp"

namespace herd::scheduler {

namespace {

constexpr const char* kJobTaskFunction = "herd::job_task";
/// Job tasks in the graph at once, at least (and 4 per thread of the connected workers).
constexpr std::size_t kJobWindow = 4096;
/// Failed tasks of an array that job_info() lists (all of them with all_tasks).
constexpr std::size_t kInfoTasks = 1000;
/// Failed tasks whose error words are kept in full; after that only exit codes.
constexpr std::size_t kKeptErrors = 10000;

enum class JobRecordKind : std::uint8_t { submit = 0, outcomes = 1, cancel = 2 };

/// What the journal keeps of a job (key job_record_key()).
struct JobRecord {
  std::uint8_t kind = 0;
  std::uint64_t job = 0;
  protocol::JobSpec spec;                  // submit
  std::int64_t at_ms = 0;                  // submit: when; cancel: when
  std::vector<std::uint64_t> positions;    // outcomes
  std::vector<std::uint8_t> states;        // JobTaskState of each
  std::vector<std::int32_t> codes;         // exit code of each failed one (0 otherwise)
  std::vector<std::string> errors;         // error of each failed one ("" otherwise)
  std::string reason;                      // cancel
  MSGPACK_DEFINE_MAP(kind, job, spec, at_ms, positions, states, codes, errors, reason);
};

/// The first line of a failed job task's message: "exit code N ..." (herd::CommandFailed,
/// src/task/job_task.cpp); -1 when it has none.
int exit_code_of(const std::string& message) {
  constexpr std::string_view kPrefix = "exit code ";
  if (message.rfind(kPrefix, 0) != 0) return -1;
  try {
    return std::stoi(message.substr(kPrefix.size()));
  } catch (const std::exception&) {
    return -1;
  }
}


std::string command_text(const protocol::JobTaskDef& d) {
  if (!d.script.empty()) return d.script;
  std::string out;
  for (const std::string& a : d.argv) {
    if (!out.empty()) out += ' ';
    out += util::shell_quote(a);
  }
  return out;
}

}  // namespace

const char* to_string(JobTaskState s) {
  switch (s) {
    case JobTaskState::waiting: return "waiting";
    case JobTaskState::running: return "running";
    case JobTaskState::ok: return "ok";
    case JobTaskState::failed: return "failed";
    case JobTaskState::cancelled: return "cancelled";
  }
  return "?";
}

std::uint64_t Job::task_id(std::uint64_t position) const {
  if (file()) return spec.tasks[position].id;
  if (spec.array.empty()) return position;  // one task (id 0), or --each-line (line numbers)
  const auto it = std::upper_bound(range_first.begin(), range_first.end(), position);
  const std::size_t r = static_cast<std::size_t>(it - range_first.begin()) - 1;
  return spec.array[3 * r] + (position - range_first[r]) * spec.array[3 * r + 2];
}

std::uint64_t Job::position(std::uint64_t task) const {
  if (file()) {
    auto it = position_of.find(task);
    return it == position_of.end() ? total : it->second;
  }
  if (spec.array.empty()) return task < total ? task : total;
  for (std::size_t r = 0; r < range_first.size(); ++r) {
    const std::uint64_t first = spec.array[3 * r], last = spec.array[3 * r + 1], step = spec.array[3 * r + 2];
    if (task >= first && task <= last && (task - first) % step == 0) return range_first[r] + (task - first) / step;
  }
  return total;
}

std::string Job::summary() const {
  if (!done()) {
    if (cancelled) return "cancelling";
    return counts[static_cast<int>(JobTaskState::running)] > 0 ||
                   counts[static_cast<int>(JobTaskState::ok)] + counts[static_cast<int>(JobTaskState::failed)] > 0
               ? "running"
               : "waiting";
  }
  if (counts[static_cast<int>(JobTaskState::failed)] > 0) return "failed";
  if (counts[static_cast<int>(JobTaskState::cancelled)] > 0) return "cancelled";
  return "finished";
}

std::string setup_job(Job& job) {
  protocol::JobSpec& s = job.spec;
  if (!s.tasks.empty()) {
    if (!s.array.empty() || !s.entries.empty()) return "a job of named tasks has no array and no entries";
    job.total = s.tasks.size();
    job.deps_left.assign(job.total, 0);
    job.dependents.assign(job.total, {});
    for (std::uint64_t p = 0; p < job.total; ++p) {
      if (!job.position_of.emplace(s.tasks[p].id, p).second) {
        return "two tasks have the id " + std::to_string(s.tasks[p].id);
      }
    }
    for (std::uint64_t p = 0; p < job.total; ++p) {
      for (std::uint64_t dep : s.tasks[p].deps) {
        auto it = job.position_of.find(dep);
        if (it == job.position_of.end()) {
          return "task " + std::to_string(s.tasks[p].id) + " depends on task " + std::to_string(dep) +
                 ", which the job does not have";
        }
        if (it->second == p) return "task " + std::to_string(dep) + " depends on itself";
        ++job.deps_left[p];
        job.dependents[it->second].push_back(p);
      }
    }
    // Kahn's order: a cycle leaves tasks behind.
    std::vector<std::uint32_t> left = job.deps_left;
    std::vector<std::uint64_t> order;
    for (std::uint64_t p = 0; p < job.total; ++p) {
      if (left[p] == 0) order.push_back(p);
    }
    for (std::size_t i = 0; i < order.size(); ++i) {
      for (std::uint64_t d : job.dependents[order[i]]) {
        if (--left[d] == 0) order.push_back(d);
      }
    }
    if (order.size() != job.total) {
      std::string cycle;
      for (std::uint64_t p = 0; p < job.total; ++p) {
        if (left[p] > 0) cycle += (cycle.empty() ? "" : ", ") + std::to_string(s.tasks[p].id);
      }
      return "the dependencies of tasks " + cycle + " form a cycle";
    }
    for (std::uint64_t p = 0; p < job.total; ++p) {
      if (job.deps_left[p] == 0) job.file_ready.push_back(p);
    }
  } else {
    if (s.task.argv.empty() && s.task.script.empty()) return "no command";
    if (s.array.size() % 3 != 0) return "damaged array ranges";
    if (!s.array.empty()) {
      std::uint64_t total = 0;
      for (std::size_t r = 0; r < s.array.size(); r += 3) {
        const std::uint64_t first = s.array[r], last = s.array[r + 1], step = s.array[r + 2];
        if (step == 0 || last < first) return "bad array range";
        job.range_first.push_back(total);
        total += (last - first) / step + 1;
      }
      job.total = total;
      if (!s.entries.empty()) {
        // A resubmitted --each-line job: its ids index the entries.
        for (std::size_t r = 0; r < s.array.size(); r += 3) {
          if (s.array[r + 1] >= s.entries.size()) return "an array id has no entry";
        }
      }
    } else if (!s.entries.empty()) {
      job.total = s.entries.size();
    } else {
      job.total = 1;
    }
  }
  if (job.total == 0) return "no tasks";
  job.state.assign(job.total, JobTaskState::waiting);
  job.counts[0] = job.total;
  return {};
}

std::uint64_t SchedulerState::submit_job(protocol::JobSpec spec, const Now& now, std::string& error) {
  for (std::uint64_t dep : spec.after) {
    if (jobs_.count(dep) == 0) {
      error = "--after " + std::to_string(dep) + ": no job of that id";
      return 0;
    }
  }
  Job job;
  job.id = next_job_id_;
  job.spec = std::move(spec);
  job.submitted_ms = now.unix_ms;
  error = setup_job(job);
  if (!error.empty()) return 0;
  ++next_job_id_;
  if (options_.full_results && !restoring_) {
    JobRecord r;
    r.kind = static_cast<std::uint8_t>(JobRecordKind::submit);
    r.job = job.id;
    r.spec = job.spec;
    r.at_ms = job.submitted_ms;
    out_.journal.emplace_back(job_record_key(), protocol::pack_bytes(r));
  }
  HERD_LOG(info) << "job " << job.id << (job.spec.name.empty() ? "" : " (" + job.spec.name + ")") << ": " << job.total
                 << " tasks";
  const std::uint64_t id = job.id;
  jobs_.emplace(id, std::move(job));
  return id;
}

std::uint64_t SchedulerState::resubmit_job(std::uint64_t id, bool failed_only, const Now& now, std::string& error) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) {
    error = "no job " + std::to_string(id);
    return 0;
  }
  const Job& old = it->second;
  protocol::JobSpec spec = old.spec;
  spec.after.clear();
  auto chosen = [&](std::uint64_t p) {
    const JobTaskState s = old.state[p];
    return failed_only ? s == JobTaskState::failed : true;
  };
  if (old.file()) {
    spec.tasks.clear();
    std::unordered_map<std::uint64_t, bool> kept;
    for (std::uint64_t p = 0; p < old.total; ++p) {
      if (chosen(p)) kept[old.spec.tasks[p].id] = true;
    }
    for (std::uint64_t p = 0; p < old.total; ++p) {
      if (!chosen(p)) continue;
      protocol::JobTaskDef d = old.spec.tasks[p];
      std::erase_if(d.deps, [&](std::uint64_t dep) { return kept.count(dep) == 0; });  // those succeeded
      spec.tasks.push_back(std::move(d));
    }
    if (spec.tasks.empty()) {
      error = "job " + std::to_string(id) + " has no " + (failed_only ? "failed " : "") + "tasks";
      return 0;
    }
  } else {
    spec.array.clear();
    for (std::uint64_t p = 0; p < old.total; ++p) {
      if (!chosen(p)) continue;
      const std::uint64_t tid = old.task_id(p);
      // Consecutive ids of step 1 make one range.
      if (!spec.array.empty() && spec.array[spec.array.size() - 2] + 1 == tid && spec.array.back() == 1) {
        spec.array[spec.array.size() - 2] = tid;
      } else {
        spec.array.insert(spec.array.end(), {tid, tid, 1});
      }
    }
    if (spec.array.empty()) {
      error = "job " + std::to_string(id) + " has no " + (failed_only ? "failed " : "") + "tasks";
      return 0;
    }
  }
  spec.name = (old.spec.name.empty() ? "job " + std::to_string(id) : old.spec.name) + " (resubmitted)";
  return submit_job(std::move(spec), now, error);
}

bool SchedulerState::cancel_job(std::uint64_t id, const std::string& why, std::string& error) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) {
    error = "no job " + std::to_string(id);
    return false;
  }
  Job& job = it->second;
  if (job.done()) return true;
  job.cancelled = true;
  job.cancel_reason = why;
  if (options_.full_results && !restoring_) {
    JobRecord r;
    r.kind = static_cast<std::uint8_t>(JobRecordKind::cancel);
    r.job = id;
    r.reason = why;
    r.at_ms = last_unix_ms_;
    out_.journal.emplace_back(job_record_key(), protocol::pack_bytes(r));
  }
  for (std::uint64_t p = 0; p < job.total; ++p) {
    if (job.state[p] == JobTaskState::waiting) job.set(p, JobTaskState::cancelled);
  }
  job.again.clear();
  job.file_ready.clear();
  // Its running tasks are stopped where they run (as cancel(force)): they come back cancelled.
  std::vector<std::pair<WorkerId, TaskId>> running;
  std::vector<TaskId> mine;
  for (const auto& [tid, ref] : job_tasks_) {
    if (ref.job != id) continue;
    mine.push_back(tid);
    const Task* t = graph_.find(tid);
    if (t != nullptr && t->status == TaskStatus::processing && t->worker != kNoWorker) running.emplace_back(t->worker, tid);
  }
  for (TaskId tid : mine) graph_.cancel(tid, fx_);
  for (auto [wid, tid] : running) {
    if (workers_.count(wid)) out(wid).abandon.push_back(tid);
  }
  apply(fx_);
  if (job.done() && job.finished_ms == 0) job.finished_ms = last_unix_ms_;
  HERD_LOG(info) << "job " << id << " cancelled: " << why;
  check();
  return true;
}

void SchedulerState::feed_jobs() {
  if (jobs_.empty()) return;
  std::size_t window = kJobWindow;
  if (job_tasks_.size() >= window) {  // a big cluster: 4 per thread (counted only then)
    std::size_t threads = 0;
    for (const auto& [wid, w] : workers_) threads += w.nthreads;
    window = std::max(window, 4 * threads);
    if (job_tasks_.size() >= window) return;
  }
  for (auto& [id, job] : jobs_) {
    if (job_tasks_.size() >= window) break;
    if (job.cancelled || job.counts[static_cast<int>(JobTaskState::waiting)] == 0) continue;
    // --after: every task of those jobs succeeded; one that did not cancels this one.
    bool blocked = false;
    for (std::uint64_t dep : job.spec.after) {
      auto d = jobs_.find(dep);
      if (d == jobs_.end() || d->first == id) continue;
      if (!d->second.done()) {
        blocked = true;
        break;
      }
      if (d->second.counts[static_cast<int>(JobTaskState::ok)] != d->second.total) {
        std::string ignored;
        const std::uint64_t self = id;
        cancel_job(self, "job " + std::to_string(dep) + ", which it runs after, did not succeed", ignored);
        blocked = true;
        break;
      }
    }
    if (blocked || job.cancelled) continue;
    while (job_tasks_.size() < window) {
      std::uint64_t p = job.total;
      if (!job.again.empty()) {
        p = job.again.front();
        job.again.pop_front();
      } else if (job.file()) {
        if (job.file_ready.empty()) break;
        p = job.file_ready.front();
        job.file_ready.pop_front();
      } else {
        while (job.next < job.total && job.state[job.next] != JobTaskState::waiting) ++job.next;
        if (job.next == job.total) break;
        p = job.next++;
      }
      if (job.state[p] != JobTaskState::waiting) continue;
      materialize(job, p);
    }
  }
  apply(fx_);
}

void SchedulerState::materialize(Job& job, std::uint64_t position) {
  const protocol::JobTaskDef& def = job.def(position);
  protocol::JobTaskRun run;
  run.job = job.id;
  run.task = job.task_id(position);
  if (!job.spec.entries.empty()) {
    run.has_entry = true;
    run.entry = job.spec.entries[run.task < job.spec.entries.size() ? run.task : 0];
  }
  run.def = def;
  run.def.deps.clear();
  run.stdout_path = job.spec.stdout_path;
  run.stderr_path = job.spec.stderr_path;
  run.stream_dir = job.spec.stream_dir;
  run.submit_dir = job.spec.submit_dir;
  protocol::TaskSpec spec;
  spec.id = ++next_restored_;  // client index 0, as a restored campaign's tasks
  spec.function = kJobTaskFunction;
  msgpack::sbuffer args;
  msgpack::packer<msgpack::sbuffer> pk(args);
  pk.pack_array(1);
  pk.pack(run);
  spec.args.assign(args.data(), args.data() + args.size());
  spec.priority = def.priority;
  spec.retries = def.retries;
  spec.resources = def.resources;
  spec.pool = def.pool;
  spec.nodes = def.nodes;
  spec.want_result = true;
  graph_.add(spec, 0, shape_of(spec.resources, {}, spec.pool, false), fx_);
  if (Task* t = graph_.find(spec.id)) t->job = true;
  if (spec.nodes != 0) multinode_added(spec);
  job_tasks_.emplace(spec.id, JobTaskRef{job.id, position});
  job.set(position, JobTaskState::running);
}

void SchedulerState::job_tasks_finished(Effects& fx) {
  std::unordered_map<std::uint64_t, JobRecord> records;
  for (TaskId tid : jobs_finished_) {
    auto ref = job_tasks_.find(tid);
    Task* t = graph_.find(tid);
    if (ref == job_tasks_.end() || t == nullptr) continue;
    auto j = jobs_.find(ref->second.job);
    const std::uint64_t p = ref->second.position;
    job_tasks_.erase(ref);
    if (j != jobs_.end() && p < j->second.total && j->second.state[p] == JobTaskState::running) {
      JobFailure failure;
      JobTaskState s = JobTaskState::ok;
      if (t->status == TaskStatus::erred || t->status == TaskStatus::cancelled) {
        s = t->status == TaskStatus::cancelled ? JobTaskState::cancelled : JobTaskState::failed;
        if (t->error) {
          failure.error = t->error->type == "herd::CommandFailed" ? t->error->message
                                                                   : t->error->type + ": " + t->error->message;
          failure.exit_code = t->error->type == "herd::CommandFailed" ? exit_code_of(t->error->message) : -1;
        } else if (s == JobTaskState::cancelled) {
          failure.error = j->second.cancel_reason.empty() ? "cancelled" : j->second.cancel_reason;
        }
      }
      if (options_.full_results && !restoring_) {
        JobRecord& r = records[j->first];
        r.kind = static_cast<std::uint8_t>(JobRecordKind::outcomes);
        r.job = j->first;
        r.positions.push_back(p);
        r.states.push_back(static_cast<std::uint8_t>(s));
        r.codes.push_back(s == JobTaskState::ok ? 0 : failure.exit_code);
        r.errors.push_back(s == JobTaskState::ok ? std::string() : failure.error);
      }
      job_outcome(j->second, p, s, std::move(failure));
    }
    graph_.release(tid, fx);  // its result (nothing) freed, the task forgotten
  }
  jobs_finished_.clear();
  for (auto& [id, r] : records) out_.journal.emplace_back(job_record_key(), protocol::pack_bytes(r));
}

void SchedulerState::job_outcome(Job& job, std::uint64_t p, JobTaskState s, JobFailure failure) {
  job.set(p, s);
  if (s == JobTaskState::failed || (s == JobTaskState::cancelled && !failure.error.empty())) {
    if (job.failures.size() >= kKeptErrors) failure.error.clear();
    job.failures[p] = std::move(failure);
  }
  if (job.file()) {
    if (s == JobTaskState::ok) {
      for (std::uint64_t d : job.dependents[p]) {
        if (--job.deps_left[d] == 0 && job.state[d] == JobTaskState::waiting && !job.cancelled) job.file_ready.push_back(d);
      }
    } else {
      // Its dependents cannot run: cancelled, and theirs after them.
      std::vector<std::uint64_t> stack(job.dependents[p].begin(), job.dependents[p].end());
      while (!stack.empty()) {
        const std::uint64_t d = stack.back();
        stack.pop_back();
        if (job.state[d] != JobTaskState::waiting) continue;
        job.set(d, JobTaskState::cancelled);
        job.failures[d] = {-1, "task " + std::to_string(job.task_id(p)) + ", which it depends on, did not succeed"};
        stack.insert(stack.end(), job.dependents[d].begin(), job.dependents[d].end());
      }
    }
  }
  if (s == JobTaskState::failed && job.spec.max_fails >= 0 && !job.cancelled &&
      job.counts[static_cast<int>(JobTaskState::failed)] > static_cast<std::uint64_t>(job.spec.max_fails)) {
    job.cancelled = true;  // the rest is cancelled by the next turn (not from inside apply())
    job.cancel_reason = "more than " + std::to_string(job.spec.max_fails) + " tasks failed (--max-fails)";
    jobs_to_cancel_.push_back(job.id);
  }
  if (job.done() && job.finished_ms == 0) {
    job.finished_ms = last_unix_ms_;
    HERD_LOG(info) << "job " << job.id << " " << job.summary() << ": " << job.counts[static_cast<int>(JobTaskState::ok)]
                   << " ok, " << job.counts[static_cast<int>(JobTaskState::failed)] << " failed, "
                   << job.counts[static_cast<int>(JobTaskState::cancelled)] << " cancelled";
  }
}

void SchedulerState::jobs_tick(const Now& now) {
  last_unix_ms_ = now.unix_ms;
  while (!jobs_to_cancel_.empty()) {
    const std::uint64_t id = jobs_to_cancel_.back();
    jobs_to_cancel_.pop_back();
    auto it = jobs_.find(id);
    if (it == jobs_.end()) continue;
    const std::string why = it->second.cancel_reason;
    it->second.cancelled = false;  // cancel_job sets it again, with its record
    std::string ignored;
    cancel_job(id, why, ignored);
  }
  feed_jobs();
}

protocol::JobInfo SchedulerState::job_summary(const Job& job) const {
  protocol::JobInfo info;
  info.id = job.id;
  info.name = job.spec.name;
  info.state = job.summary();
  info.total = job.total;
  info.waiting = job.counts[static_cast<int>(JobTaskState::waiting)];
  info.running = job.counts[static_cast<int>(JobTaskState::running)];
  info.ok = job.counts[static_cast<int>(JobTaskState::ok)];
  info.failed = job.counts[static_cast<int>(JobTaskState::failed)];
  info.cancelled = job.counts[static_cast<int>(JobTaskState::cancelled)];
  info.submitted_ms = job.submitted_ms;
  info.finished_ms = job.finished_ms;
  info.command = job.file() ? std::to_string(job.total) + " tasks of a job file" : command_text(job.spec.task);
  info.stdout_path = job.spec.stdout_path;
  info.stderr_path = job.spec.stderr_path;
  info.stream_dir = job.spec.stream_dir;
  info.submit_dir = job.spec.submit_dir;
  info.cwd = job.file() ? std::string() : job.spec.task.cwd;
  info.after = job.spec.after;
  return info;
}

std::vector<protocol::JobInfo> SchedulerState::jobs() const {
  std::vector<protocol::JobInfo> out;
  out.reserve(jobs_.size());
  for (const auto& [id, job] : jobs_) out.push_back(job_summary(job));
  return out;
}

bool SchedulerState::job_info(std::uint64_t id, bool all_tasks, protocol::JobReply& reply) const {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) {
    reply.error = "no job " + std::to_string(id);
    if (!jobs_.empty()) {
      reply.error += " (jobs: " + std::to_string(jobs_.begin()->first) +
                     (jobs_.size() > 1 ? "-" + std::to_string(jobs_.rbegin()->first) : "") + ")";
    }
    return false;
  }
  const Job& job = it->second;
  reply.jobs.push_back(job_summary(job));
  // A job file's tasks are few: all of them, always. An array's: the failed ones (the first
  // kInfoTasks), or every one when asked.
  const bool every = all_tasks || job.file();
  std::size_t failed = 0;
  for (std::uint64_t p = 0; p < job.total; ++p) {
    const JobTaskState s = job.state[p];
    if (!every && (s != JobTaskState::failed || ++failed > kInfoTasks)) continue;
    protocol::JobTaskInfo& t = reply.tasks.emplace_back();
    t.id = job.task_id(p);
    t.state = to_string(s);
    if (job.file()) t.name = job.spec.tasks[p].name;
    t.cwd = job.def(p).cwd;
    if (auto f = job.failures.find(p); f != job.failures.end()) {
      t.exit_code = f->second.exit_code;
      t.error = f->second.error;
    }
  }
  reply.ok = true;
  return true;
}

void SchedulerState::restore_job_record(const std::vector<char>& bytes) {
  JobRecord r;
  try {
    msgpack::object_handle oh = msgpack::unpack(bytes.data(), bytes.size());
    oh.get().convert(r);
  } catch (const std::exception& e) {
    HERD_LOG(warning) << "journal: an unreadable job record is skipped (" << e.what() << ")";
    return;
  }
  restoring_ = true;
  switch (static_cast<JobRecordKind>(r.kind)) {
    case JobRecordKind::submit: {
      next_job_id_ = r.job;  // the same id again (records come in the order of their ids)
      std::string error;
      Now now;
      now.unix_ms = r.at_ms;
      std::erase_if(r.spec.after, [&](std::uint64_t d) { return jobs_.count(d) == 0; });
      const std::uint64_t id = submit_job(std::move(r.spec), now, error);
      if (id == 0) {
        HERD_LOG(warning) << "journal: job " << r.job << " cannot be restored: " << error;
        next_job_id_ = r.job + 1;
      }
      break;
    }
    case JobRecordKind::outcomes: {
      auto it = jobs_.find(r.job);
      if (it == jobs_.end()) break;
      Job& job = it->second;
      for (std::size_t i = 0; i < r.positions.size() && i < r.states.size(); ++i) {
        const std::uint64_t p = r.positions[i];
        if (p >= job.total || job.state[p] != JobTaskState::waiting) continue;
        JobFailure f;
        if (i < r.codes.size()) f.exit_code = r.codes[i];
        if (i < r.errors.size()) f.error = r.errors[i];
        job.set(p, JobTaskState::running);  // as it was when it finished
        if (job.file()) std::erase(job.file_ready, p);
        job_outcome(job, p, static_cast<JobTaskState>(r.states[i]), std::move(f));
      }
      break;
    }
    case JobRecordKind::cancel: {
      last_unix_ms_ = r.at_ms;
      std::string ignored;
      cancel_job(r.job, r.reason, ignored);
      break;
    }
  }
  restoring_ = false;
}

void SchedulerState::jobs_restarted() {
  // Client::restart() emptied the graph: what was running runs again.
  for (const auto& [tid, ref] : job_tasks_) {
    auto j = jobs_.find(ref.job);
    if (j == jobs_.end() || j->second.state[ref.position] != JobTaskState::running) continue;
    j->second.set(ref.position, JobTaskState::waiting);
    j->second.again.push_back(ref.position);
  }
  job_tasks_.clear();
  jobs_finished_.clear();
}

std::string SchedulerState::validate_jobs() const {
  std::size_t running = 0;
  for (const auto& [id, job] : jobs_) {
    running += job.counts[static_cast<int>(JobTaskState::running)];
    if (job.total > 100000) continue;  // a big array's counts: not after every event
    std::uint64_t counts[kJobTaskStates] = {};
    for (JobTaskState s : job.state) ++counts[static_cast<int>(s)];
    for (int i = 0; i < kJobTaskStates; ++i) {
      if (counts[i] != job.counts[i]) return "job " + std::to_string(id) + "'s counts do not match its tasks";
    }
  }
  if (running != job_tasks_.size()) return "job tasks in the graph do not match the jobs' running counts";
  for (const auto& [tid, ref] : job_tasks_) {
    const Task* t = graph_.find(tid);
    if (t == nullptr || !t->job) return "a job's task is missing from the graph";
  }
  return {};
}

}  // namespace herd::scheduler
