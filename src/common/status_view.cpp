#include "common/status_view.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "common/json.hpp"
#include "common/util.hpp"

namespace herd {
namespace detail {

PoolInfo to_pool_info(const protocol::PoolStatus& p) {
  PoolInfo i;
  i.name = p.name;
  i.kind = p.kind;
  i.target = static_cast<int>(p.target);
  i.adaptive = p.adaptive;
  i.minimum = static_cast<int>(p.minimum);
  i.maximum = static_cast<int>(p.maximum);
  i.pending = static_cast<int>(p.pending);
  i.running = static_cast<int>(p.running);
  i.workers = static_cast<int>(p.workers);
  for (const auto& [r, n] : p.pending_reasons) i.pending_reasons[r] = static_cast<int>(n);
  i.paused = p.paused;
  i.last_error = p.last_error;
  i.last_failure = p.last_failure;
  return i;
}

ClusterStatus to_cluster_status(const protocol::StatusReply& r) {
  ClusterStatus s;
  s.scheduler_id = r.scheduler_id;
  s.address = r.address;
  s.dashboard = r.dashboard;
  s.now_ms = r.now_ms;
  s.uptime_s = r.uptime_s;
  s.clients = static_cast<int>(r.clients);
  for (const auto& w : r.workers) {
    WorkerInfo i;
    i.name = w.name;
    i.host = w.host;
    i.address = w.address;
    i.job_id = w.job_id;
    i.pool = w.pool;
    i.nthreads = static_cast<int>(w.nthreads);
    i.processing = static_cast<int>(w.processing);
    i.busy = static_cast<int>(std::min(w.executing, w.nthreads));
    i.stored = w.stored;
    i.memory_rss = w.memory_rss;
    i.memory_limit = w.memory_limit;
    i.resources = w.resources;
    i.end_time = w.end_time;
    i.time_left_s = w.end_time > 0 ? std::max<double>(0, static_cast<double>(w.end_time) - static_cast<double>(r.now_ms) / 1000.0) : -1;
    i.retiring = w.retiring;
    for (const auto& g : w.gpus) i.gpus.push_back({g.id, g.name, g.memory});
    s.workers.push_back(std::move(i));
  }
  s.tasks = r.tasks;
  s.functions = r.functions;
  s.finished_total = r.finished_total;
  s.failed_total = r.failed_total;
  s.throughput = r.throughput;
  for (const auto& p : r.pools) s.pools.push_back(to_pool_info(p));
  for (const auto& j : r.jobs) {
    s.jobs.push_back({j.pool, j.id, j.state, j.detail, j.reason, j.worker, j.output, j.output_tail});
  }
  for (const auto& e : r.events) s.events.push_back({e.key, e.function, e.worker, e.start_ms, e.end_ms, e.ok});
  return s;
}

}  // namespace detail

namespace {

/// Left-aligned columns, two spaces apart.
std::string table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width;
  for (const auto& r : rows) {
    if (width.size() < r.size()) width.resize(r.size(), 0);
    for (std::size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (std::size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line += std::string(width[i] - r[i].size() + 2, ' ');
    }
    out += "  " + line + "\n";
  }
  return out;
}

// "-", or "2 x NVIDIA H100 80GB HBM3 (80 GiB)", or "0,1" when the model is unknown.
std::string gpus_text(const std::vector<GpuInfo>& gpus) {
  if (gpus.empty()) return "-";
  if (gpus.front().name.empty()) {
    std::string ids;
    for (const auto& g : gpus) ids += (ids.empty() ? "" : ",") + g.id;
    return ids;
  }
  std::string out = std::to_string(gpus.size()) + " x " + gpus.front().name;
  if (gpus.front().memory > 0) out += " (" + util::format_bytes(gpus.front().memory) + ")";
  return out;
}

std::string resources_text(const std::map<std::string, double>& res) {
  std::string out;
  for (const auto& [k, v] : res) out += (out.empty() ? "" : ",") + k + "=" + util::format_double(v);
  return out.empty() ? "-" : out;
}

// --- JSON, written by hand (herd has no JSON dependency) ---
using sweep::json_number;
using sweep::json_quote;

std::string jnum(double v) { return json_number(v); }
std::string jnum(std::uint64_t v) { return std::to_string(v); }
std::string jnum(std::int64_t v) { return std::to_string(v); }
std::string jnum(int v) { return std::to_string(v); }
std::string jbool(bool v) { return v ? "true" : "false"; }

template <typename M, typename F>
std::string jmap(const M& m, F value) {
  std::string out = "{";
  for (const auto& [k, v] : m) out += (out.size() > 1 ? "," : "") + json_quote(k) + ":" + value(v);
  return out + "}";
}

template <typename V, typename F>
std::string jarray(const V& v, F item) {
  std::string out = "[";
  for (const auto& x : v) out += (out.size() > 1 ? "," : "") + item(x);
  return out + "]";
}

struct Obj {
  std::string text = "{";
  Obj& f(std::string_view k, const std::string& raw) {
    text += (text.size() > 1 ? "," : "") + json_quote(k) + ":" + raw;
    return *this;
  }
  Obj& s(std::string_view k, const std::string& v) { return f(k, json_quote(v)); }
  std::string str() const { return text + "}"; }
};

}  // namespace

std::string ClusterStatus::to_json() const {
  auto count_map = [](const auto& m) {
    return jmap(m, [](std::uint64_t n) { return jnum(n); });
  };
  Obj o;
  o.s("scheduler_id", scheduler_id).s("address", address).s("dashboard", dashboard);
  o.f("now_ms", jnum(now_ms)).f("uptime_s", jnum(uptime_s)).f("clients", jnum(clients));
  o.f("workers", jarray(workers, [](const WorkerInfo& w) {
    Obj x;
    x.s("name", w.name).s("host", w.host).s("address", w.address).s("job_id", w.job_id).s("pool", w.pool);
    x.f("nthreads", jnum(w.nthreads)).f("busy", jnum(w.busy)).f("processing", jnum(w.processing));
    x.f("stored", jnum(w.stored)).f("memory_rss", jnum(w.memory_rss)).f("memory_limit", jnum(w.memory_limit));
    x.f("resources", jmap(w.resources, [](double v) { return jnum(v); }));
    x.f("end_time", jnum(w.end_time)).f("time_left_s", jnum(w.time_left_s)).f("retiring", jbool(w.retiring));
    x.f("gpus", jarray(w.gpus, [](const GpuInfo& g) {
      Obj y;
      y.s("id", g.id).s("name", g.name).f("memory", jnum(g.memory));
      return y.str();
    }));
    return x.str();
  }));
  o.f("tasks", count_map(tasks));
  o.f("functions", jmap(functions, count_map));
  o.f("finished_total", jnum(finished_total)).f("failed_total", jnum(failed_total));
  o.f("throughput", jnum(throughput));
  o.f("pools", jarray(pools, [](const PoolInfo& p) {
    Obj x;
    x.s("name", p.name).s("kind", p.kind).f("target", jnum(p.target)).f("adaptive", jbool(p.adaptive));
    x.f("minimum", jnum(p.minimum)).f("maximum", jnum(p.maximum)).f("pending", jnum(p.pending));
    x.f("running", jnum(p.running)).f("workers", jnum(p.workers));
    x.f("pending_reasons", jmap(p.pending_reasons, [](int n) { return jnum(n); }));
    x.s("paused", p.paused).s("last_error", p.last_error).s("last_failure", p.last_failure);
    return x.str();
  }));
  o.f("jobs", jarray(jobs, [](const JobInfo& j) {
    return Obj{}.s("pool", j.pool).s("id", j.id).s("state", j.state).s("detail", j.detail)
        .s("reason", j.reason).s("worker", j.worker).s("output", j.output)
        .f("output_tail", jarray(j.output_tail, [](const std::string& l) { return json_quote(l); })).str();
  }));
  o.f("events", jarray(events, [](const TaskEventInfo& e) {
    return Obj{}.s("key", e.key).s("function", e.function).s("worker", e.worker)
        .f("start_ms", jnum(e.start_ms)).f("end_ms", jnum(e.end_ms)).f("ok", jbool(e.ok)).str();
  }));
  return o.str();
}

std::string ClusterStatus::to_text() const {
  std::ostringstream out;
  std::uint64_t in_graph = 0;
  for (const auto& [state, n] : tasks) in_graph += n;
  int slots = 0, busy = 0;
  for (const auto& w : workers) {
    slots += w.nthreads;
    busy += w.busy;
  }
  out << "scheduler " << address << " (up " << util::format_duration(uptime_s) << ", " << clients
      << (clients == 1 ? " client" : " clients") << ")\n";
  if (!dashboard.empty()) out << "dashboard " << dashboard << "\n";
  char rate[32];
  std::snprintf(rate, sizeof rate, "%.1f", throughput);
  out << "\nworkers: " << workers.size() << ", slots " << busy << "/" << slots << " busy\n";
  if (!workers.empty()) {
    std::vector<std::vector<std::string>> rows = {
        {"name", "host", "pool", "job", "busy", "queued", "memory", "resources", "gpus", "time left"}};
    for (const auto& w : workers) {
      std::string mem = util::format_bytes(w.memory_rss);
      if (w.memory_limit > 0) mem += " / " + util::format_bytes(w.memory_limit);
      rows.push_back({w.name + (w.retiring ? " (retiring)" : ""), w.host, w.pool.empty() ? "-" : w.pool,
                      w.job_id.empty() ? "-" : w.job_id,
                      std::to_string(w.busy) + "/" + std::to_string(w.nthreads),
                      std::to_string(std::max(0, w.processing - w.busy)), mem, resources_text(w.resources),
                      gpus_text(w.gpus), w.time_left_s < 0 ? "-" : util::format_duration(w.time_left_s)});
    }
    out << table(rows);
  }
  out << "\ntasks: " << finished_total << " finished, " << failed_total << " failed since start; "
      << rate << "/s over the last 10 s; " << in_graph << " in the graph\n";
  if (!tasks.empty()) {
    std::string line;
    for (const auto& [state, n] : tasks) line += (line.empty() ? "" : ", ") + state + " " + std::to_string(n);
    out << "  by state: " << line << "\n";
  }
  if (!functions.empty()) {
    std::vector<std::vector<std::string>> rows = {
        {"function", "finished", "failed", "waiting", "ready", "processing", "memory", "erred"}};
    auto get = [](const std::map<std::string, std::uint64_t>& m, const char* k) {
      auto it = m.find(k);
      return std::to_string(it == m.end() ? 0 : it->second);
    };
    for (const auto& [fn, m] : functions) {
      rows.push_back({fn, get(m, "finished_total"), get(m, "failed_total"), get(m, "waiting"), get(m, "ready"),
                      get(m, "processing"), get(m, "memory"), get(m, "erred")});
    }
    out << table(rows);
  }
  if (!pools.empty()) {
    out << "\npools:\n";
    std::vector<std::vector<std::string>> rows = {{"pool", "kind", "target", "workers", "running", "pending", "notes"}};
    for (const auto& p : pools) {
      std::string notes;
      if (p.adaptive) notes += "adapt " + std::to_string(p.minimum) + "-" + std::to_string(p.maximum);
      for (const auto& [reason, n] : p.pending_reasons) {
        notes += (notes.empty() ? "" : ", ") + std::to_string(n) + " pending (" + reason + ")";
      }
      if (!p.paused.empty()) notes += (notes.empty() ? "" : ", ") + std::string("paused: ") + p.paused;
      if (!p.last_error.empty()) notes += (notes.empty() ? "" : ", ") + std::string("error: ") + p.last_error;
      rows.push_back({p.name, p.kind, std::to_string(p.target), std::to_string(p.workers), std::to_string(p.running),
                      std::to_string(p.pending), notes.empty() ? "-" : notes});
    }
    out << table(rows);
  }
  if (!jobs.empty()) {
    out << "\njobs:\n";
    std::vector<std::vector<std::string>> rows = {{"pool", "job", "state", "reason", "worker"}};
    for (const auto& j : jobs) {
      rows.push_back({j.pool, j.id, j.detail.empty() ? j.state : j.detail, j.reason.empty() ? "-" : j.reason,
                      j.worker.empty() ? "-" : j.worker});
    }
    out << table(rows);
    // Why failed jobs failed, in their own words (the end of their output files).
    for (const auto& j : jobs) {
      if (j.state != "ended" || (j.output.empty() && j.output_tail.empty())) continue;
      out << "\njob " << j.id << " " << j.detail << ": " << (j.output.empty() ? "output not kept" : j.output) << "\n";
      for (const auto& line : j.output_tail) out << "  | " << line << "\n";
    }
  }
  return out.str();
}

}  // namespace herd
