// The scheduler's HTTP dashboard: `/` (a self-contained page), `/api/status` (JSON) and
// `/metrics` (Prometheus text format). It runs on its own threads and never touches the
// scheduler's state: a request raises a flag, the event loop sees it on its next turn (within
// 250 ms), publishes a snapshot, and the request is answered from that copy. Nobody looking
// costs the scheduler nothing (a snapshot walks the whole task graph).
#pragma once

#include <memory>
#include <string>

#include "protocol/messages.hpp"

namespace herd::scheduler {

class HttpServer {
 public:
  /// Binds `address` ("host:port"; port 0 = a free one; a busy port falls back to a free
  /// one) and starts serving. @throws std::runtime_error when it cannot bind at all.
  explicit HttpServer(const std::string& address);
  ~HttpServer();  // stops and joins
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  /// "http://127.0.0.1:8787/"
  const std::string& url() const;
  /// True when a request waits for a fresh snapshot (cheap: an atomic load).
  bool wanted() const;
  /// Replaces the snapshot requests are answered from, and wakes the waiting requests.
  void publish(protocol::StatusReply snapshot);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The Prometheus text exposition of a snapshot (herd_workers, herd_tasks{state=...}, ...).
std::string prometheus_metrics(const protocol::StatusReply& s);
/// The dashboard page: HTML with inline CSS and JS that polls api/status every second.
const char* dashboard_html();

}  // namespace herd::scheduler
