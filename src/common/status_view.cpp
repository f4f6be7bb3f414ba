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
  i.crashes = static_cast<int>(p.crashes);
  i.stalled = static_cast<int>(p.stalled);
  i.batch_error = p.batch_error;
  i.last_answer_s = p.last_answer_s;
  i.workers_per_job = static_cast<int>(p.workers_per_job);
  i.walltime_s = static_cast<long>(p.walltime_s);
  i.retire_before_s = static_cast<long>(p.retire_before_s);
  i.submitted = p.submitted;
  i.user_paused = p.user_paused;
  i.kept_for_data = p.kept_for_data;
  i.cores_per_job = static_cast<int>(p.cores_per_job);
  i.memory_per_job = p.memory_per_job;
  return i;
}

PoolChange to_pool_change(const protocol::ScalePoolReply& r) {
  PoolChange c;
  c.pool = r.pool;
  c.before = static_cast<int>(r.before);
  c.after = static_cast<int>(r.after);
  c.adaptive = r.adaptive;
  c.minimum = static_cast<int>(r.minimum);
  c.maximum = static_cast<int>(r.maximum);
  c.submitted = static_cast<int>(r.submitted);
  c.retiring = static_cast<int>(r.retiring);
  c.paused = r.user_paused;
  c.kept_for_data = r.kept_for_data;
  c.worker = r.worker;
  c.note = r.note;
  return c;
}

ClusterStatus to_cluster_status(const protocol::StatusReply& r) {
  ClusterStatus s;
  s.scheduler_id = r.scheduler_id;
  s.address = r.address;
  s.dashboard = r.dashboard;
  s.auth_off = r.auth_off;
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
    i.spilled_bytes = w.spilled_bytes;
    i.link = w.link;
    i.paused = w.paused;
    i.kept_for_data = w.kept_for_data;
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
  s.journal = r.journal;
  s.journal_failing = r.journal_failing;
  s.journal_behind = r.journal_behind;
  s.record = r.record;
  for (const auto& c : r.campaigns) s.campaigns.push_back(to_campaign_info(c));
  return s;
}

CampaignInfo to_campaign_info(const protocol::CampaignInfo& c) {
  return {c.name, c.total, c.done, c.failed, c.pending, c.client};
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
  for (const auto& [k, v] : res) {
    // memory counts MiB (TaskOptions::memory): shown as a size.
    const std::string amount = k == "memory" && v >= 1 ? util::format_bytes(static_cast<std::uint64_t>(v) << 20)
                                                        : util::format_double(v);
    out += (out.empty() ? "" : ",") + k + "=" + amount;
  }
  return out.empty() ? "-" : out;
}

}  // namespace

std::string ClusterStatus::to_json() const {
  using json::Json;
  Json o;
  o["scheduler_id"] = scheduler_id;
  o["address"] = address;
  o["dashboard"] = dashboard;
  o["auth_off"] = auth_off;
  o["now_ms"] = now_ms;
  o["uptime_s"] = uptime_s;
  o["clients"] = clients;
  o["workers"] = Json::array();
  for (const WorkerInfo& w : workers) {
    Json x;
    x["name"] = w.name;
    x["host"] = w.host;
    x["address"] = w.address;
    x["job_id"] = w.job_id;
    x["pool"] = w.pool;
    x["nthreads"] = w.nthreads;
    x["busy"] = w.busy;
    x["processing"] = w.processing;
    x["stored"] = w.stored;
    x["memory_rss"] = w.memory_rss;
    x["spilled_bytes"] = w.spilled_bytes;
    x["link"] = w.link;
    x["paused"] = w.paused;
    x["memory_limit"] = w.memory_limit;
    x["resources"] = w.resources;
    x["end_time"] = w.end_time;
    x["time_left_s"] = w.time_left_s;
    x["retiring"] = w.retiring;
    x["kept_for_data"] = w.kept_for_data;
    x["gpus"] = Json::array();
    for (const GpuInfo& g : w.gpus) x["gpus"].push_back(Json{{"id", g.id}, {"name", g.name}, {"memory", g.memory}});
    o["workers"].push_back(std::move(x));
  }
  o["tasks"] = tasks;
  o["functions"] = functions;
  o["finished_total"] = finished_total;
  o["failed_total"] = failed_total;
  o["throughput"] = throughput;
  o["pools"] = Json::array();
  for (const PoolInfo& p : pools) {
    Json x;
    x["name"] = p.name;
    x["kind"] = p.kind;
    x["target"] = p.target;
    x["adaptive"] = p.adaptive;
    x["minimum"] = p.minimum;
    x["maximum"] = p.maximum;
    x["pending"] = p.pending;
    x["running"] = p.running;
    x["workers"] = p.workers;
    x["pending_reasons"] = p.pending_reasons;
    x["paused"] = p.paused;
    x["last_error"] = p.last_error;
    x["last_failure"] = p.last_failure;
    x["crashes"] = p.crashes;
    x["stalled"] = p.stalled;
    x["batch_error"] = p.batch_error;
    x["last_answer_s"] = p.last_answer_s;
    x["workers_per_job"] = p.workers_per_job;
    x["walltime_s"] = p.walltime_s;
    x["retire_before_s"] = p.retire_before_s;
    x["submitted"] = p.submitted;
    x["user_paused"] = p.user_paused;
    x["kept_for_data"] = p.kept_for_data;
    x["cores_per_job"] = p.cores_per_job;
    x["memory_per_job"] = p.memory_per_job;
    o["pools"].push_back(std::move(x));
  }
  o["jobs"] = Json::array();
  for (const JobInfo& j : jobs) {
    o["jobs"].push_back(Json{{"pool", j.pool}, {"id", j.id}, {"state", j.state}, {"detail", j.detail},
                             {"reason", j.reason}, {"worker", j.worker}, {"output", j.output},
                             {"output_tail", j.output_tail}});
  }
  o["events"] = Json::array();
  for (const TaskEventInfo& e : events) {
    o["events"].push_back(Json{{"key", e.key}, {"function", e.function}, {"worker", e.worker},
                               {"start_ms", e.start_ms}, {"end_ms", e.end_ms}, {"ok", e.ok}});
  }
  o["journal"] = journal;
  o["journal_failing"] = journal_failing;
  o["journal_behind"] = journal_behind;
  o["record"] = record;
  o["campaigns"] = Json::array();
  for (const CampaignInfo& c : campaigns) {
    o["campaigns"].push_back(Json{{"name", c.name}, {"total", c.total}, {"done", c.done}, {"failed", c.failed},
                                  {"pending", c.pending}, {"client", c.client}});
  }
  return json::dump(o);
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
  if (!journal.empty()) out << "journal " << journal << "\n";
  if (!record.empty()) out << "run record " << record << " (herd report)\n";
  if (auth_off) {
    out << "authentication OFF (HERD_AUTH=off): no key is checked and nothing is encrypted; anyone who can "
           "reach the scheduler or a worker can run commands as you\n";
  }
  char rate[32];
  std::snprintf(rate, sizeof rate, "%.1f", throughput);
  out << "\nworkers: " << workers.size() << ", slots " << busy << "/" << slots << " busy\n";
  if (!workers.empty()) {
    std::vector<std::vector<std::string>> rows = {
        {"name", "host", "pool", "job", "busy", "queued", "memory", "resources", "gpus", "time left"}};
    for (const auto& w : workers) {
      std::string mem = util::format_bytes(w.memory_rss);
      if (w.memory_limit > 0) mem += " / " + util::format_bytes(w.memory_limit);
      if (w.spilled_bytes > 0) mem += ", " + util::format_bytes(w.spilled_bytes) + " spilled";
      rows.push_back({w.name + (w.retiring ? " (retiring)" : "") + (w.paused.empty() ? "" : " (paused)") +
                          (w.kept_for_data.empty() ? "" : " (kept for data)"),
                      w.host, w.pool.empty() ? "-" : w.pool,
                      w.job_id.empty() ? "-" : w.job_id,
                      std::to_string(w.busy) + "/" + std::to_string(w.nthreads),
                      std::to_string(std::max(0, w.processing - w.busy)), mem, resources_text(w.resources),
                      gpus_text(w.gpus), w.time_left_s < 0 ? "-" : util::format_duration(w.time_left_s)});
    }
    out << table(rows);
    for (const auto& w : workers) {
      if (!w.paused.empty()) out << "  " << w.name << " paused: " << w.paused << "\n";
      if (!w.kept_for_data.empty()) {
        out << "  " << w.name << " kept for data: its pool would let it go, but it holds " << w.kept_for_data << "\n";
      }
    }
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
  if (!campaigns.empty()) {
    out << "\ncampaigns:\n";
    std::vector<std::vector<std::string>> rows = {{"campaign", "total", "done", "failed", "pending", "client"}};
    for (const auto& c : campaigns) {
      rows.push_back({c.name, std::to_string(c.total), std::to_string(c.done), std::to_string(c.failed),
                      std::to_string(c.pending), c.client.empty() ? "- (detached)" : c.client});
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
      if (p.stalled > 0) notes += (notes.empty() ? "" : ", ") + std::to_string(p.stalled) + " suspended or held";
      if (!p.batch_error.empty()) notes += (notes.empty() ? "" : ", ") + std::string("batch system: ") + p.batch_error;
      if (!p.kept_for_data.empty()) {
        notes += (notes.empty() ? "" : ", ") + std::to_string(p.kept_for_data.size()) + " worker(s) kept for data";
      }
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


TaskExplanation detail::to_task_explanation(const protocol::TaskExplanation& e) {
  TaskExplanation out;
  out.found = e.found;
  out.key = e.key;
  out.function = e.function;
  out.state = e.state;
  out.summary = e.summary;
  out.inputs = e.inputs;
  out.workers = e.workers;
  out.pools = e.pools;
  out.never = e.never;
  out.resources = e.resources;
  out.duration_s = static_cast<int>(e.duration_s);
  return out;
}

std::string TaskExplanation::to_text() const {
  if (!found) return summary + "\n";
  std::string s = "task " + key + " (function " + function + "): " + state + "\n";
  s += "  " + summary + "\n";
  if (never) s += "  NOTHING CAN RUN IT: no connected worker, and no pool's workers, offer what it needs\n";
  if (!resources.empty()) {
    s += "  needs:";
    for (const auto& [r, amount] : resources) s += " " + r + "=" + util::format_double(amount);
    s += "\n";
  }
  if (duration_s > 0) s += "  duration: " + std::to_string(duration_s) + " s\n";
  if (!inputs.empty()) s += "  inputs not ready:\n";
  for (const auto& i : inputs) s += "    " + i + "\n";
  if (!workers.empty()) s += "  workers:\n";
  for (const auto& w : workers) s += "    " + w + "\n";
  if (!pools.empty()) s += "  pools:\n";
  for (const auto& p : pools) s += "    " + p + "\n";
  return s;
}

std::string PoolChange::to_text() const {
  std::string out;
  if (!worker.empty()) out += note.empty() ? "worker " + worker + " retires\n" : note + "\n";
  if (pool.empty()) return out;
  const auto workers = [](int n) { return std::to_string(n) + (n == 1 ? " worker" : " workers"); };
  out += "pool " + pool + ": ";
  if (adaptive) {
    out += "adaptive " + std::to_string(minimum) + "-" + std::to_string(maximum) + " workers, " +
           std::to_string(after) + " wanted now (was " + std::to_string(before) + ")";
  } else {
    out += std::to_string(before) + " \u2192 " + workers(after);
  }
  std::string more;
  if (submitted > 0) more += std::to_string(submitted) + (submitted == 1 ? " job" : " jobs") + " submitted";
  if (retiring > 0) more += (more.empty() ? "" : ", ") + std::to_string(retiring) + " retiring";
  if (!more.empty()) out += " (" + more + ")";
  out += "\n";
  if (paused) out += "pool " + pool + " is paused: no job is submitted until `herd pool resume " + pool + "`\n";
  for (const auto& k : kept_for_data) out += "kept for data: " + k + "\n";
  return out;
}

}  // namespace herd
