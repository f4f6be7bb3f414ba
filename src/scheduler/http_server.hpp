// The scheduler's HTTP dashboard: `/` (a self-contained page), `/api/status` (JSON),
// `/api/history` (the last hour, JSON), `/report` (the run record's report, built on request
// from the record file: record/report.hpp) and `/metrics` (Prometheus text format). It runs on its own threads and never touches the
// scheduler's state: a request raises a flag, the event loop sees it on its next turn (within
// 250 ms), publishes a snapshot, and the request is answered from that copy. Nobody looking
// costs the scheduler nothing (a snapshot walks the whole task graph).
//
// Who may look. 127.0.0.1 is shared by every user of a login node, so every page and endpoint
// needs the scheduler's token (random, 128 bits, as Jupyter's): `?token=...` once, which sets a
// cookie (HttpOnly, SameSite=Strict) for the next requests; /metrics is open without it only
// with HttpOptions::metrics_open. Against DNS rebinding (a page of evil.example that resolves to
// 127.0.0.1, reached through the user's `ssh -L`), the Host header must name this machine:
// an IP address, localhost, the bound host or this host's name. Only GET; anything else is 405.
// A port another process holds is never taken for ours: the server says so and binds another.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "protocol/messages.hpp"

namespace herd::scheduler {

struct HttpOptions {
  std::string address = "127.0.0.1:8787";  // "host:port"; port 0 = a free one
  bool metrics_open = false;               // /metrics without the token (Prometheus)
  std::string token;                       // "" = a fresh random one
  /// /api/history: the last hour of workers' CPU and memory and pools' sizes, as JSON (History).
  std::function<std::string()> history;
  /// /report (?format=trace, ?since=UNIX_MS, ?campaign=, ?job=): a report of the run record.
  std::function<protocol::ReportReply(const protocol::ReportRequest&)> report;
};

class HttpServer {
 public:
  /// Binds `options.address` (a busy port falls back to a free one, with a warning naming the
  /// taken port) and starts serving. @throws std::runtime_error when it cannot bind at all.
  explicit HttpServer(const HttpOptions& options);
  ~HttpServer();  // stops and joins
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  /// "http://127.0.0.1:8787/?token=..." (what to open in a browser)
  const std::string& url() const;
  /// The bound port.
  int port() const;
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
