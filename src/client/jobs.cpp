// Jobs of shell commands from a client (jobs.hpp): Client::shell_jobs() and what `herd submit`
// and `herd job` ask.
#include "client/jobs.hpp"

#include <thread>

#include "client/client_io.hpp"

namespace herd {
namespace detail {

protocol::JobReply ClientAccess::ask_job(const Client& client, protocol::JobRequest req, std::chrono::seconds timeout) {
  ClientCore& core = *client.core_;
  std::unique_lock lock(core.mu_);
  client::Pending p = core.ask(lock, std::move(req), timeout,
                               "the scheduler did not answer a job request within " + std::to_string(timeout.count()) +
                                   " s");
  return std::get<protocol::JobReply>(std::move(p.reply));
}

ShellJob to_shell_job(const protocol::JobInfo& info, const std::vector<protocol::JobTaskInfo>& tasks) {
  ShellJob j;
  j.id = info.id;
  j.name = info.name;
  j.state = info.state;
  j.total = info.total;
  j.waiting = info.waiting;
  j.running = info.running;
  j.ok = info.ok;
  j.failed = info.failed;
  j.cancelled = info.cancelled;
  j.submitted_ms = info.submitted_ms;
  j.finished_ms = info.finished_ms;
  j.command = info.command;
  for (const protocol::JobTaskInfo& t : tasks) {
    ShellJobTask& out = j.tasks.emplace_back();
    out.id = t.id;
    out.name = t.name;
    out.state = t.state;
    out.exit_code = t.exit_code;
    out.error = t.error;
  }
  return j;
}

}  // namespace detail

std::vector<ShellJob> Client::shell_jobs() const {
  protocol::JobRequest req;
  req.op = static_cast<std::uint8_t>(protocol::JobOp::list);
  const protocol::JobReply reply = detail::ClientAccess::ask_job(*this, std::move(req));
  std::vector<ShellJob> out;
  for (const auto& j : reply.jobs) out.push_back(detail::to_shell_job(j));
  return out;
}

ShellJob Client::shell_job(std::uint64_t id) const {
  protocol::JobRequest req;
  req.op = static_cast<std::uint8_t>(protocol::JobOp::info);
  req.job = id;
  const protocol::JobReply reply = detail::ClientAccess::ask_job(*this, std::move(req));
  if (!reply.ok || reply.jobs.empty()) throw Error("shell_job: " + reply.error);
  return detail::to_shell_job(reply.jobs.front(), reply.tasks);
}

ShellJob Client::wait_shell_job(std::uint64_t id, std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(10);
  while (true) {
    ShellJob j = shell_job(id);
    if (j.finished()) return j;
    if (timeout.count() >= 0 && std::chrono::steady_clock::now() >= deadline) {
      throw TimeoutError("job " + std::to_string(id) + " has not finished within " + std::to_string(timeout.count()) +
                         " ms (" + std::to_string(j.waiting + j.running) + " of " + std::to_string(j.total) +
                         " tasks left)");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
  }
}

}  // namespace herd
