// The worker's side of `herd logs`: the scheduler forwards a LogsRequest (logs_fetch); the
// worker answers from its LogBook (src/task/log_capture.hpp) with worker_logs_reply.
#include "common/logging.hpp"
#include "task/log_capture.hpp"
#include "worker/worker.hpp"

namespace herd::worker {

bool Worker::queued_locked(protocol::TaskId id, const std::string& key) {
  if (state_->queued(id, key)) return true;  // waiting for inputs or a thread
  for (const auto& r : state_->out().run) {  // started by the state this turn, not handed off yet
    if (r.task.id == id || (id == 0 && r.task.key == key)) return true;
  }
  for (const auto& r : handoff_) {           // handed off, not yet taken by an executor
    if (r.task.id == id || (id == 0 && r.task.key == key)) return true;
  }
  return false;
}

void Worker::on_logs_fetch(const protocol::LogsRequest& req) {
  protocol::LogsReply reply;
  reply.request_id = req.request_id;
  const std::size_t lines = req.lines == 0 ? 100 : req.lines;
  const task::LogBook& book = task::LogBook::instance();
  if (req.kind == static_cast<std::uint8_t>(protocol::LogsKind::task)) {
    protocol::LogSource source;
    // Executors move a task from the queue into the LogBook under run_mu_: holding it, the
    // task is in one of the two.
    std::lock_guard lock(run_mu_);
    if (book.task_output(req.task, req.target, lines, options_.name, source)) {
      reply.ok = true;
      reply.sources.push_back(std::move(source));
    } else if (queued_locked(req.task, req.target)) {
      // The scheduler counts it as processing; here it waits for its inputs or a free slot.
      reply.error = "task " + req.target + " is queued on worker " + options_.name + " and has not started yet";
    } else {
      reply.error = "worker " + options_.name + " holds no output of task " +
                    (req.target.empty() ? std::to_string(req.task) : req.target);
    }
  } else {
    reply.ok = true;
    reply.sources.push_back(book.worker_log(options_.name, lines));
  }
  protocol::send<protocol::MessageType::worker_logs_reply>(*channels_, "", reply);
}

}  // namespace herd::worker
