#include "scheduler/http_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include <httplib.h>  // Debian: libcpp-httplib-dev (header-only)

#include "common/json.hpp"
#include "common/logging.hpp"
#include "common/security.hpp"
#include "common/status_view.hpp"
#include "common/util.hpp"

namespace herd::scheduler {

namespace {

constexpr std::size_t kThreads = 4;    // serving dashboard requests
constexpr std::size_t kQueued = 64;    // accepted connections waiting for one of them
constexpr time_t kReadTimeoutS = 2;   // a request's bytes, and an idle kept-alive connection

/// httplib's ThreadPool with a bound: past `max_queued` waiting, the caller (the listening
/// thread) runs the job itself.
class BoundedQueue final : public httplib::TaskQueue {
 public:
  BoundedQueue(std::size_t threads, std::size_t max_queued) : max_queued_(max_queued) {
    for (std::size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { work(); });
  }
  void enqueue(std::function<void()> fn) override {
    {
      std::unique_lock lock(mu_);
      if (jobs_.size() < max_queued_) {
        jobs_.push_back(std::move(fn));
        lock.unlock();
        cv_.notify_one();
        return;
      }
    }
    fn();  // full: this thread serves it, and accepts nothing meanwhile
  }
  void shutdown() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

 private:
  void work() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;  // stopping, and nothing left
        fn = std::move(jobs_.front());
        jobs_.pop_front();
      }
      fn();
    }
  }
  std::size_t max_queued_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  bool stop_ = false;
};

/// Who listens on TCP `port` of this machine (from /proc/net/tcp and tcp6), if anyone does.
std::optional<uid_t> listener_uid(int port) {
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid ...
      std::istringstream f(line);
      std::string sl, local, remote, state, queues, timer, retransmits;
      unsigned long uid = 0;
      if (!(f >> sl >> local >> remote >> state >> queues >> timer >> retransmits >> uid)) continue;
      const auto colon = local.rfind(':');
      if (state != "0A" || colon == std::string::npos) continue;  // 0A: LISTEN
      if (std::stoi(local.substr(colon + 1), nullptr, 16) == port) return static_cast<uid_t>(uid);
    }
  }
  return std::nullopt;
}

/// Who holds `port`, for the message; `*ours` when it is a process of this user's.
std::string who_holds(int port, bool* ours) {
  const auto uid = listener_uid(port);
  *ours = uid && *uid == ::getuid();
  if (!uid) return "another process";
  if (*ours) return "another process of yours (another herd scheduler?)";
  const passwd* pw = ::getpwuid(*uid);
  return (pw ? std::string(pw->pw_name) : "uid " + std::to_string(*uid)) +
         ", another user: do not open or forward that port, its pages are not this scheduler's";
}

}  // namespace

struct HttpServer::Impl {
  httplib::Server server;
  std::thread thread;
  std::string url;
  std::string token;
  std::string cookie;       // "herd-dashboard-<port>": browsers send a host's cookies to all its ports
  std::string bound_host;
  int port = 0;
  bool metrics_open = false;
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

  /// The Host header names this machine (see the header): else the request may come from a
  /// page of another site whose name was made to resolve here (DNS rebinding).
  bool host_allowed(const std::string& header) const {
    std::string host = header;
    if (!host.empty() && host.front() == '[') {  // [v6]:port
      const auto close = host.find(']');
      if (close == std::string::npos) return false;
      host = host.substr(1, close - 1);
    } else if (const auto colon = host.find(':'); colon != std::string::npos) {
      host = host.substr(0, colon);
    }
    if (host.empty()) return false;
    for (char& c : host) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    unsigned char addr[16];
    // An address literal cannot be rebound: no other site's name is involved.
    if (::inet_pton(AF_INET, host.c_str(), addr) == 1 || ::inet_pton(AF_INET6, host.c_str(), addr) == 1) return true;
    if (host == "localhost" || host == bound_host) return true;
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) == 0) {
      std::string me = name;
      for (char& c : me) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (host == me || host == me.substr(0, me.find('.')) || host.rfind(me + ".", 0) == 0) return true;
    }
    return false;
  }

  /// The request carries the token, in the query or in our cookie.
  bool token_ok(const httplib::Request& req, bool* from_query) const {
    *from_query = false;
    if (req.has_param("token") && same_secret(req.get_param_value("token"), token)) {
      *from_query = true;
      return true;
    }
    const std::string cookies = req.get_header_value("Cookie");
    std::size_t at = 0;
    while (at < cookies.size()) {
      std::size_t end = cookies.find(';', at);
      if (end == std::string::npos) end = cookies.size();
      std::string item = cookies.substr(at, end - at);
      const auto first = item.find_first_not_of(' ');
      item = first == std::string::npos ? "" : item.substr(first);
      if (item.rfind(cookie + "=", 0) == 0 && same_secret(item.substr(cookie.size() + 1), token)) return true;
      at = end + 1;
    }
    return false;
  }

  static bool same_secret(const std::string& a, const std::string& b) {
    if (a.size() != b.size()) return false;  // the length is no secret (32 hex digits)
    unsigned char diff = 0;
    for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
    return diff == 0;
  }

  httplib::Server::HandlerResponse gate(const httplib::Request& req, httplib::Response& res) {
    res.set_header("Cache-Control", "no-store");
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("X-Frame-Options", "DENY");
    res.set_header("Referrer-Policy", "no-referrer");
    if (req.method != "GET") {
      res.status = 405;
      res.set_header("Allow", "GET");
      res.set_content("herd dashboard: only GET\n", "text/plain");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!host_allowed(req.get_header_value("Host"))) {
      res.status = 403;
      res.set_content("herd dashboard: the Host header does not name this machine (open the address "
                      "`herd scheduler` printed, e.g. http://localhost:" + std::to_string(port) + "/)\n",
                      "text/plain");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (metrics_open && req.path == "/metrics") return httplib::Server::HandlerResponse::Unhandled;
    bool from_query = false;
    if (!token_ok(req, &from_query)) {
      res.status = 403;
      res.set_content("herd dashboard: this page needs the scheduler's token: open the URL with ?token=... that "
                      "`herd scheduler` printed (also in `herd status`)\n",
                      "text/plain");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (from_query) {
      res.set_header("Set-Cookie", cookie + "=" + token + "; Path=/; HttpOnly; SameSite=Strict");
    }
    return httplib::Server::HandlerResponse::Unhandled;
  }
};

HttpServer::HttpServer(const HttpOptions& options) : impl_(std::make_unique<Impl>()) {
  const std::string& address = options.address;
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) throw std::runtime_error("dashboard address '" + address + "' is not host:port");
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = 0;
  try {
    port = std::stoi(address.substr(colon + 1));
  } catch (const std::exception&) {
    throw std::runtime_error("dashboard address '" + address + "' has no port number");
  }
  auto& srv = impl_->server;
  // Connections wait in a queue of bounded length for the server's threads; past it the
  // listening thread serves one itself, so that it accepts nothing more meanwhile (the kernel's
  // backlog holds the rest, at no descriptor of ours): a flood of idle connections holds at
  // most kThreads + kQueued descriptors for at most the read timeout, where httplib's own
  // queue grows without end.
  srv.new_task_queue = [] { return new BoundedQueue(kThreads, kQueued); };
  srv.set_read_timeout(kReadTimeoutS, 0);
  srv.set_keep_alive_timeout(kReadTimeoutS);
  // Worker processes are spawned by this process: the listening socket must not leak into
  // them. SO_REUSEADDR (a restart within TIME_WAIT keeps its port) but never httplib's default
  // SO_REUSEPORT: a port another socket listens on, anyone's, is never shared with ours.
  srv.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    ::fcntl(sock, F_SETFD, FD_CLOEXEC);
  });
  Impl* impl = impl_.get();
  impl->token = options.token.empty() ? security::random_hex(16) : options.token;
  impl->metrics_open = options.metrics_open;
  impl->bound_host = host;
  for (char& c : impl->bound_host) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  srv.set_pre_routing_handler([impl](const httplib::Request& req, httplib::Response& res) { return impl->gate(req, res); });
  srv.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(dashboard_html(), "text/html; charset=utf-8");
  });
  srv.Get("/api/status", [impl](const httplib::Request&, httplib::Response& res) {
    res.set_content(herd::detail::to_cluster_status(impl->current()).to_json(), "application/json");
  });
  if (options.history) {
    srv.Get("/api/history", [history = options.history](const httplib::Request&, httplib::Response& res) {
      res.set_content(history(), "application/json");
    });
  }
  if (options.report) {
    srv.Get("/report", [report = options.report](const httplib::Request& req, httplib::Response& res) {
      protocol::ReportRequest r;
      r.format = req.has_param("format") ? req.get_param_value("format") : "html";
      r.campaign = req.has_param("campaign") ? req.get_param_value("campaign") : "";
      r.job = req.has_param("job") ? req.get_param_value("job") : "";
      r.title = "herd report: the run so far";
      try {
        if (req.has_param("since")) r.since_us = std::stoll(req.get_param_value("since")) * 1000;
      } catch (const std::exception&) {
        res.status = 400;
        res.set_content("herd dashboard: since= takes unix milliseconds\n", "text/plain");
        return;
      }
      const protocol::ReportReply reply = report(r);
      if (!reply.error.empty()) {
        res.status = 404;
        res.set_content("herd report: " + reply.error + "\n", "text/plain");
        return;
      }
      if (r.format == "trace") {
        res.set_header("Content-Disposition", "attachment; filename=\"herd-trace.json\"");
        res.set_content(reply.document, "application/json");
      } else {
        res.set_content(reply.document, "text/html; charset=utf-8");
      }
    });
  }
  srv.Get("/metrics", [impl](const httplib::Request&, httplib::Response& res) {
    res.set_content(prometheus_metrics(impl->current()), "text/plain; version=0.0.4; charset=utf-8");
  });
  int bound = port;
  if (port == 0 || !srv.bind_to_port(host, port)) {
    bound = srv.bind_to_any_port(host);  // like Dask: 8787 taken means another free port
    if (bound <= 0) throw std::runtime_error("cannot bind the dashboard to " + host + " (any port)");
    if (port != 0) {
      bool ours = false;
      const std::string who = who_holds(port, &ours);
      const std::string note = "dashboard: port " + std::to_string(port) + " on " + host + " is taken by " + who +
                               "; this scheduler's dashboard is on port " + std::to_string(bound) + " instead";
      // Loud unless it is one of this user's own processes (several schedulers of a user).
      if (ours) {
        HERD_LOG(info) << note;
      } else {
        HERD_LOG(warning) << note;
      }
    }
  }
  impl->port = bound;
  impl->cookie = "herd-dashboard-" + std::to_string(bound);
  std::string shown_host = host == "0.0.0.0" || host.empty() ? "127.0.0.1" : host == "::" ? "::1" : host;
  if (shown_host.find(':') != std::string::npos) shown_host = "[" + shown_host + "]";
  impl->url = "http://" + shown_host + ":" + std::to_string(bound) + "/?token=" + impl->token;
  impl->thread = std::thread([impl] { impl->server.listen_after_bind(); });
}

HttpServer::~HttpServer() {
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

const std::string& HttpServer::url() const { return impl_->url; }

int HttpServer::port() const { return impl_->port; }

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
  m.head("herd_pool_crashes", "gauge", "Jobs in a row of each pool that ended before their worker connected.");
  for (const auto& p : s.pools) m.sample("herd_pool_crashes{pool=\"" + label(p.name) + "\"}", p.crashes);
  m.head("herd_pool_batch_system_up", "gauge", "1 while each pool's batch system answers its polls, 0 while they fail.");
  for (const auto& p : s.pools) m.sample("herd_pool_batch_system_up{pool=\"" + label(p.name) + "\"}", p.batch_error.empty() ? 1 : 0);
  if (!s.journal.empty()) {
    m.head("herd_journal_behind_records", "gauge", "Journal records not on disk yet.");
    m.sample("herd_journal_behind_records", static_cast<double>(s.journal_behind));
    m.head("herd_journal_failing", "gauge", "1 while the journal cannot write (disk full, I/O error).");
    m.sample("herd_journal_failing", s.journal_failing ? 1 : 0);
  }
  m.head("herd_uptime_seconds", "gauge", "Seconds since the scheduler started.");
  m.sample("herd_uptime_seconds", s.uptime_s);
  return m.text;
}

}  // namespace herd::scheduler
