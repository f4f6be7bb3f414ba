#include "scheduler/http_server.hpp"

#include <fcntl.h>
#include <sys/socket.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <httplib.h>  // Debian: libcpp-httplib-dev (header-only)

#include "common/status_view.hpp"
#include "common/util.hpp"

namespace herd::scheduler {

struct HttpServer::Impl {
  httplib::Server server;
  std::thread thread;
  std::string url;
  std::mutex mu;
  std::condition_variable cv;
  protocol::StatusReply snapshot;  // guarded by mu
  std::uint64_t generation = 0;    // guarded by mu: publications so far
  std::atomic<bool> wanted{false};

  /// A snapshot at most one event-loop turn old; the last one if the loop does not answer
  /// within a second (it is busy: better a slightly old page than none).
  protocol::StatusReply current() {
    std::unique_lock lock(mu);
    const std::uint64_t seen = generation;
    wanted.store(true);
    cv.wait_for(lock, std::chrono::seconds(1), [&] { return generation != seen; });
    return snapshot;
  }
};

HttpServer::HttpServer(const std::string& address) : impl_(std::make_unique<Impl>()) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) throw std::runtime_error("dashboard address '" + address + "' is not host:port");
  const std::string host = address.substr(0, colon);
  int port = 0;
  try {
    port = std::stoi(address.substr(colon + 1));
  } catch (const std::exception&) {
    throw std::runtime_error("dashboard address '" + address + "' has no port number");
  }
  auto& srv = impl_->server;
  // Worker processes are spawned by this process: the listening socket must not leak into them.
  srv.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    ::fcntl(sock, F_SETFD, FD_CLOEXEC);
  });
  Impl* impl = impl_.get();
  srv.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(dashboard_html(), "text/html; charset=utf-8");
  });
  srv.Get("/api/status", [impl](const httplib::Request&, httplib::Response& res) {
    res.set_header("Cache-Control", "no-store");
    res.set_content(detail::to_cluster_status(impl->current()).to_json(), "application/json");
  });
  srv.Get("/metrics", [impl](const httplib::Request&, httplib::Response& res) {
    res.set_content(prometheus_metrics(impl->current()), "text/plain; version=0.0.4; charset=utf-8");
  });
  int bound = port;
  if (port == 0 || !srv.bind_to_port(host, port)) {
    bound = srv.bind_to_any_port(host);  // like Dask: 8787 taken means another free port
    if (bound <= 0) throw std::runtime_error("cannot bind the dashboard to " + host + " (any port)");
  }
  const std::string shown_host = host == "0.0.0.0" || host.empty() ? "127.0.0.1" : host;
  impl_->url = "http://" + shown_host + ":" + std::to_string(bound) + "/";
  impl_->thread = std::thread([impl] { impl->server.listen_after_bind(); });
}

HttpServer::~HttpServer() {
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

const std::string& HttpServer::url() const { return impl_->url; }

bool HttpServer::wanted() const { return impl_->wanted.load(std::memory_order_relaxed); }

void HttpServer::publish(protocol::StatusReply snapshot) {
  {
    std::lock_guard lock(impl_->mu);
    impl_->snapshot = std::move(snapshot);
    ++impl_->generation;
    impl_->wanted.store(false);
  }
  impl_->cv.notify_all();
}

namespace {
std::string label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// Prometheus' text format spells the numbers JSON lacks as Go's ParseFloat reads them.
std::string sample_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return util::format_double(v);
}

struct Metrics {
  std::string text;
  void head(const char* name, const char* type, const char* help) {
    text += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  void sample(const std::string& name_and_labels, double v) {
    text += name_and_labels + " " + sample_value(v) + "\n";
  }
};
}  // namespace

std::string prometheus_metrics(const protocol::StatusReply& s) {
  Metrics m;
  std::uint64_t threads = 0, busy = 0;
  for (const auto& w : s.workers) {
    threads += w.nthreads;
    busy += w.executing;
  }
  m.head("herd_workers", "gauge", "Workers connected.");
  m.sample("herd_workers", static_cast<double>(s.workers.size()));
  m.head("herd_threads", "gauge", "Task slots of the connected workers.");
  m.sample("herd_threads", static_cast<double>(threads));
  m.head("herd_threads_busy", "gauge", "Task slots running a task.");
  m.sample("herd_threads_busy", static_cast<double>(busy));
  m.head("herd_clients", "gauge", "Clients connected.");
  m.sample("herd_clients", s.clients);
  m.head("herd_tasks", "gauge", "Tasks in the scheduler's graph by state.");
  for (const char* st : {"waiting", "ready", "processing", "memory", "erred", "cancelled", "released"}) {
    auto it = s.tasks.find(st);
    m.sample(std::string("herd_tasks{state=\"") + st + "\"}", it == s.tasks.end() ? 0.0 : static_cast<double>(it->second));
  }
  m.head("herd_function_tasks", "gauge", "Tasks in the graph by function and state.");
  for (const auto& [fn, states] : s.functions) {
    for (const auto& [st, n] : states) {
      if (st.find("_total") != std::string::npos) continue;
      m.sample("herd_function_tasks{function=\"" + label(fn) + "\",state=\"" + st + "\"}", static_cast<double>(n));
    }
  }
  m.head("herd_function_runs_total", "counter", "Task runs since the scheduler started by function and outcome.");
  for (const auto& [fn, states] : s.functions) {
    for (const char* outcome : {"finished", "failed"}) {
      auto it = states.find(std::string(outcome) + "_total");
      m.sample("herd_function_runs_total{function=\"" + label(fn) + "\",outcome=\"" + outcome + "\"}",
               it == states.end() ? 0.0 : static_cast<double>(it->second));
    }
  }
  m.head("herd_tasks_finished_total", "counter", "Task runs that succeeded since the scheduler started.");
  m.sample("herd_tasks_finished_total", static_cast<double>(s.finished_total));
  m.head("herd_tasks_failed_total", "counter", "Task runs that raised since the scheduler started.");
  m.sample("herd_tasks_failed_total", static_cast<double>(s.failed_total));
  m.head("herd_throughput_tasks_per_second", "gauge", "Tasks finished per second over the last 10 s.");
  m.sample("herd_throughput_tasks_per_second", s.throughput);
  m.head("herd_worker_memory_bytes", "gauge", "Resident memory of each worker.");
  for (const auto& w : s.workers) {
    m.sample("herd_worker_memory_bytes{worker=\"" + label(w.name) + "\",pool=\"" + label(w.pool) + "\"}",
             static_cast<double>(w.memory_rss));
  }
  m.head("herd_worker_processing", "gauge", "Tasks assigned to each worker.");
  for (const auto& w : s.workers) {
    m.sample("herd_worker_processing{worker=\"" + label(w.name) + "\"}", w.processing);
  }
  m.head("herd_pool_target", "gauge", "Workers each pool wants.");
  for (const auto& p : s.pools) m.sample("herd_pool_target{pool=\"" + label(p.name) + "\"}", p.target);
  m.head("herd_pool_workers", "gauge", "Workers of each pool connected.");
  for (const auto& p : s.pools) m.sample("herd_pool_workers{pool=\"" + label(p.name) + "\"}", p.workers);
  m.head("herd_pool_jobs", "gauge", "Jobs of each pool by state.");
  for (const auto& p : s.pools) {
    m.sample("herd_pool_jobs{pool=\"" + label(p.name) + "\",state=\"running\"}", p.running);
    m.sample("herd_pool_jobs{pool=\"" + label(p.name) + "\",state=\"pending\"}", p.pending);
  }
  m.head("herd_pool_pending_jobs", "gauge", "Pending jobs of each pool by the batch system's reason.");
  for (const auto& p : s.pools) {
    for (const auto& [reason, n] : p.pending_reasons) {
      m.sample("herd_pool_pending_jobs{pool=\"" + label(p.name) + "\",reason=\"" + label(reason) + "\"}", n);
    }
  }
  m.head("herd_pool_submitted_total", "counter", "Jobs each pool submitted.");
  for (const auto& p : s.pools) {
    m.sample("herd_pool_submitted_total{pool=\"" + label(p.name) + "\"}", static_cast<double>(p.submitted));
  }
  m.head("herd_uptime_seconds", "gauge", "Seconds since the scheduler started.");
  m.sample("herd_uptime_seconds", s.uptime_s);
  return m.text;
}

}  // namespace herd::scheduler
