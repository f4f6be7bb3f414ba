// Client::worker_logs / task_output / logs, herd::task_log, and how logs print.
#include "client/logs.hpp"

#include <algorithm>
#include <ctime>

#include "herd/client.hpp"
#include "task/log_capture.hpp"

namespace herd {
namespace detail {

Logs to_logs(const protocol::LogSource& s) {
  static const char* streams[] = {"log", "stdout", "stderr", "task_log"};
  Logs l;
  l.kind = s.kind;
  l.name = s.name;
  l.worker = s.worker;
  l.path = s.path;
  l.dropped = s.dropped;
  l.note = s.note;
  l.lines.reserve(s.lines.size());
  for (const auto& line : s.lines) {
    l.lines.push_back({line.time_ms, line.stream < 4 ? streams[line.stream] : "other", line.text});
  }
  return l;
}

void task_log_line(const std::string& line) {
  std::size_t start = 0;
  while (true) {
    const std::size_t nl = line.find('\n', start);
    task::LogBook::instance().task_line(task::kStreamTaskLog,
                                          std::string_view(line).substr(start, nl == std::string::npos ? nl : nl - start),
                                          /*echo=*/true);
    if (nl == std::string::npos || nl + 1 == line.size()) break;
    start = nl + 1;
  }
}

}  // namespace detail

namespace {
std::uint32_t line_count(int lines) {
  if (lines < 0) throw std::invalid_argument("logs: lines must be >= 0, got " + std::to_string(lines));
  return static_cast<std::uint32_t>(lines);
}

std::vector<Logs> ask(detail::ClientCore& core, protocol::LogsKind kind, const std::string& target,
                      std::uint64_t task, int lines) {
  protocol::LogsRequest req;
  req.kind = static_cast<std::uint8_t>(kind);
  req.target = target;
  req.task = task;
  req.lines = line_count(lines);
  protocol::LogsReply reply = detail::logs_request(core, std::move(req));
  if (!reply.ok) throw LogsNotFound(reply.error);
  std::vector<Logs> out;
  for (const auto& s : reply.sources) out.push_back(detail::to_logs(s));
  return out;
}

/// A task that ran on several workers (a retry, a worker lost mid-run): one Logs, runs in
/// time order, each opened by a marker line.
Logs merge(std::vector<Logs> runs) {
  if (runs.size() == 1) return std::move(runs.front());
  std::sort(runs.begin(), runs.end(), [](const Logs& a, const Logs& b) {
    const auto first = [](const Logs& l) { return l.lines.empty() ? INT64_MAX : l.lines.front().time_ms; };
    return first(a) < first(b);
  });
  Logs out;
  out.kind = "task";
  out.name = runs.front().name;
  for (auto& r : runs) {
    out.worker += (out.worker.empty() ? "" : ", ") + r.worker;
    out.dropped += r.dropped;
    if (!r.note.empty()) out.note += (out.note.empty() ? "" : "; ") + r.worker + ": " + r.note;
    out.lines.push_back({r.lines.empty() ? 0 : r.lines.front().time_ms, "log", "--- on worker " + r.worker + " ---"});
    for (auto& line : r.lines) out.lines.push_back(std::move(line));
  }
  return out;
}
}  // namespace

std::string Logs::text() const {
  std::string out;
  for (const auto& line : lines) out += line.text + "\n";
  return out;
}

std::string Logs::to_text() const {
  std::string head = "==> " + kind + " " + name;
  if (kind == "task" && !worker.empty()) head += " (on " + worker + ")";
  if (!path.empty()) head += ": " + path;
  head += " <==\n";
  if (dropped > 0) head += "(" + std::to_string(dropped) + " earlier lines not shown)\n";
  if (!note.empty()) head += "(" + note + ")\n";
  return head + text();
}

std::vector<Logs> Client::worker_logs(const std::string& worker, int lines) const {
  return ask(*core_, protocol::LogsKind::worker, worker, 0, lines);
}

Logs Client::task_output(const std::string& key, int lines) const {
  return merge(ask(*core_, protocol::LogsKind::task, key, 0, lines));
}

Logs Client::task_output_of(std::uint64_t id, const std::string& key, int lines) const {
  return merge(ask(*core_, protocol::LogsKind::task, key, id, lines));
}

std::vector<Logs> Client::logs(const std::string& name, int lines) const {
  return ask(*core_, protocol::LogsKind::any, name, 0, lines);
}

}  // namespace herd
