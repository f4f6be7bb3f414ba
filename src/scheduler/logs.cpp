// `herd logs` on the scheduler. A client asks once (LogsRequest); the scheduler answers job
// output files itself (it runs where the job scripts were submitted, on the shared file
// system), and routes worker logs and task output to the workers that hold them (logs_fetch),
// gathering their answers (worker_logs_reply) into one LogsReply. A worker that leaves or
// stays silent does not hold the client up: after kLogsTimeout the answer goes with what came.
//
// Which worker has a task's output: the one running it (processing), else every connected
// worker is asked: the task stream knows only the last runs, and a retried task may have
// output on two workers. Asking all is one small message per worker, for an interactive
// command; nothing is tracked per task on the hot path.
#include <algorithm>

#include "common/logging.hpp"
#include "scheduler/scheduler.hpp"

namespace herd::scheduler {

using protocol::LogsKind;
using protocol::MessageType;

namespace {
constexpr auto kLogsTimeout = std::chrono::seconds(5);
constexpr std::size_t kDeparted = 256;      // departed workers remembered, for clear errors
constexpr std::uint32_t kMaxLines = 100000;  // per source
}  // namespace

void Scheduler::handle_logs_request(ClientId client, const protocol::LogsRequest& in) {
  const std::string* client_identity = identity_of(Role::client, client);
  if (client_identity == nullptr) return;
  protocol::LogsRequest req = in;
  req.lines = std::min(req.lines == 0 ? 100u : req.lines, kMaxLines);
  const auto kind = static_cast<LogsKind>(req.kind);
  const std::string& target = req.target;
  auto answer = [&](protocol::LogsReply r) {
    r.request_id = in.request_id;
    protocol::send<MessageType::logs_reply>(*channels_, *client_identity, r);
  };
  auto fail = [&](const std::string& why) {
    protocol::LogsReply r;
    r.error = why;
    answer(std::move(r));
  };
  auto departed = [&](const std::string& name) -> const std::string* {
    for (auto it = departed_.rbegin(); it != departed_.rend(); ++it) {
      if (it->first == name) return &it->second;
    }
    return nullptr;
  };
  LogsQuery q;
  q.client = *client_identity;
  q.request = req;
  q.deadline = Clock::now() + kLogsTimeout;
  auto forward = [&](LogsKind as, const std::string& what, TaskId task) {
    const std::uint64_t qid = next_logs_query_++;
    protocol::LogsRequest fwd = req;
    fwd.request_id = qid;
    fwd.kind = static_cast<std::uint8_t>(as);
    fwd.target = what;
    fwd.task = task;
    q.request.kind = fwd.kind;
    q.request.target = what;
    q.request.task = task;
    for (const auto& [wid, name] : q.waiting) {
      // A task dispatched this turn goes out first, so the worker knows it when asked about it.
      flush_worker(wid);
      if (const std::string* identity = identity_of(Role::worker, wid)) {
        protocol::send<MessageType::logs_fetch>(*channels_, *identity, fwd);
      }
    }
    logs_queries_.emplace(qid, std::move(q));
  };

  if (kind == LogsKind::worker || kind == LogsKind::any) {
    if (kind == LogsKind::worker && target.empty()) {
      if (state_.workers().empty()) return fail("no worker is connected");
      for (const auto& [wid, w] : state_.workers()) q.waiting[wid] = w.name;
      return forward(LogsKind::worker, "", 0);
    }
    for (const auto& [wid, w] : state_.workers()) {
      if (w.name == target) {
        q.waiting[wid] = w.name;
        return forward(LogsKind::worker, target, 0);
      }
    }
    if (kind == LogsKind::worker) {
      if (const std::string* why = departed(target)) {
        return fail("worker " + target + " is gone (" + *why + "); its log went with it. Its job's output file, if " +
                    "its pool keeps one: herd logs --job " + target);
      }
      return fail("no worker named '" + target + "' is connected");
    }
  }
  if (kind == LogsKind::job || kind == LogsKind::any) {
    std::string gone;
    if (const std::string* why = departed(target)) gone = "worker " + target + " is gone (" + *why + ")";
    for (const auto& p : pools_) {
      // The files are found and read off the loop; the answer goes when they have been.
      const bool known = p->read_job_output(
          target, req.lines,
          [this, client = *client_identity, request_id = in.request_id, gone](std::vector<protocol::LogSource> sources) {
            protocol::LogsReply r;
            r.ok = true;
            r.request_id = request_id;
            r.sources = std::move(sources);
            if (!gone.empty() && !r.sources.empty()) {
              r.sources.front().note = gone + (r.sources.front().note.empty() ? "" : "; " + r.sources.front().note);
            }
            protocol::send<MessageType::logs_reply>(*channels_, client, r);
          });
      if (known) return;
    }
    if (kind == LogsKind::job) return fail("no pool has a job '" + target + "' (live, or among its last ended)");
  }
  // A task: by the client's id, else by key.
  const TaskGraph& graph = state_.graph();
  const Task* t = req.task != 0 ? graph.find(req.task) : nullptr;
  if (t == nullptr && !target.empty()) {
    for (const auto& [id, task] : graph.tasks()) {
      if (graph.key_of(task) == target) {
        t = &task;
        break;
      }
    }
  }
  const std::string key = t != nullptr ? graph.key_of(*t) : target;
  if (key.empty()) return fail("which task? (no key or id given)");
  if (t != nullptr && (t->status == TaskStatus::waiting || t->status == TaskStatus::ready)) {
    return fail("task " + key + " has not started yet (" +
                (t->status == TaskStatus::waiting ? "waiting for its inputs" : "ready, waiting for a free worker") + ")");
  }
  if (t != nullptr && t->status == TaskStatus::processing) {
    for (const auto& [wid, w] : state_.workers()) {
      if (w.processing.count(t->id)) q.waiting[wid] = w.name;
    }
  }
  if (q.waiting.empty()) {
    for (const auto& [wid, w] : state_.workers()) q.waiting[wid] = w.name;
  }
  if (q.waiting.empty()) {
    return fail(kind == LogsKind::any && t == nullptr ? "no worker, job or task named '" + target + "'"
                                                      : "no worker is connected to hold the output of task " + key);
  }
  forward(LogsKind::task, key, t != nullptr ? t->id : 0);
}

void Scheduler::on_worker_logs_reply(WorkerId wid, const protocol::LogsReply& in) {
  protocol::LogsReply r = in;
  auto it = logs_queries_.find(r.request_id);
  if (it == logs_queries_.end() || it->second.waiting.erase(wid) == 0) return;  // came too late
  LogsQuery& q = it->second;
  if (r.ok) {
    for (auto& s : r.sources) q.reply.sources.push_back(std::move(s));
  } else if (!r.error.empty()) {
    q.misses.push_back(std::move(r.error));
  }
  if (q.waiting.empty()) finish_logs_query(r.request_id);
}

void Scheduler::logs_worker_gone(WorkerId id, const std::string& name, const std::string& why) {
  departed_.emplace_back(name, why);
  if (departed_.size() > kDeparted) departed_.pop_front();
  std::vector<std::uint64_t> done;
  for (auto& [qid, q] : logs_queries_) {
    if (q.waiting.erase(id) == 0) continue;
    q.misses.push_back("worker " + name + " left before it answered (" + why + ")");
    if (q.waiting.empty()) done.push_back(qid);
  }
  for (auto qid : done) finish_logs_query(qid);
}

void Scheduler::expire_logs_queries() {
  const auto now = Clock::now();
  std::vector<std::uint64_t> done;
  for (auto& [qid, q] : logs_queries_) {
    if (now < q.deadline) continue;
    for (const auto& [wid, name] : q.waiting) {
      q.misses.push_back("worker " + name + " did not answer within " +
                         std::to_string(std::chrono::duration_cast<std::chrono::seconds>(kLogsTimeout).count()) + " s");
    }
    q.waiting.clear();
    done.push_back(qid);
  }
  for (auto qid : done) finish_logs_query(qid);
}

void Scheduler::finish_logs_query(std::uint64_t id) {
  auto it = logs_queries_.find(id);
  if (it == logs_queries_.end()) return;
  LogsQuery q = std::move(it->second);
  logs_queries_.erase(it);
  protocol::LogsReply& r = q.reply;
  r.request_id = q.request.request_id;
  const auto kind = static_cast<LogsKind>(q.request.kind);
  std::sort(r.sources.begin(), r.sources.end(), [](const auto& a, const auto& b) { return a.worker < b.worker; });
  if (kind == LogsKind::worker) {
    // Every worker asked: those that left or kept silent are named rather than dropped.
    for (const auto& miss : q.misses) {
      protocol::LogSource s;
      s.kind = "worker";
      s.name = miss.substr(0, miss.find(' ', 7));  // "worker NAME ..." -> for the header
      s.note = miss;
      r.sources.push_back(std::move(s));
    }
    r.ok = !r.sources.empty();
    if (!r.ok) r.error = "no worker answered";
  } else if (!r.sources.empty()) {
    r.ok = true;
  } else {
    // Nobody holds it: say what the scheduler knows of the task.
    const std::string& key = q.request.target;
    std::string why = "no connected worker holds output of task " + key;
    const auto& events = state_.counters().events;
    for (auto e = events.rbegin(); e != events.rend(); ++e) {
      if (e->key != key) continue;
      bool connected = false;
      for (const auto& [wid, w] : state_.workers()) connected = connected || w.name == e->worker;
      if (!connected) {
        why = "task " + key + " ran on worker " + e->worker + ", which is gone";
        for (auto d = departed_.rbegin(); d != departed_.rend(); ++d) {
          if (d->first == e->worker) {
            why += " (" + d->second + ")";
            break;
          }
        }
        why += "; its output went with it";
      } else {
        why += " (it ran on " + e->worker + ", which keeps the output of its last HERD_TASK_OUTPUT_TASKS tasks "
               "that printed something)";
      }
      break;
    }
    if (q.request.task == 0 && why.rfind("no connected", 0) == 0) {
      bool known = false;
      for (const auto& e : events) known = known || e.key == key;
      if (!known) why = "no worker, job or task named '" + key + "' (or the task ran too long ago)";
    }
    for (const auto& miss : q.misses) {
      if (miss.find("has not started yet") != std::string::npos) why = miss;
    }
    for (const auto& miss : q.misses) {
      if (miss.find("left before") != std::string::npos || miss.find("did not answer") != std::string::npos) {
        why += "; " + miss;
      }
    }
    r.error = std::move(why);
  }
  try {
    protocol::send<MessageType::logs_reply>(*channels_, q.client, r);
  } catch (const zmq::error_t&) {
    // The client is gone; nothing to tell.
  }
}

}  // namespace herd::scheduler
