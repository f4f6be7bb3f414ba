// The report's data is computed here (tables, series, the runs the stream draws) and written
// into the page as one JSON object; the page's script only draws it (report_html.cpp).
#include "record/report.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <unordered_map>

namespace herd::record {

namespace {

/// JSON string body (without quotes); control characters and the page's own delimiters escaped,
/// bytes that are not UTF-8 passed through as they are (the browser shows U+FFFD).
void esc(std::string& out, std::string_view s) {
  out.push_back('"');
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '<': out += "\\u003c"; break;  // never "</script>" inside the page's script
      case '>': out += "\\u003e"; break;
      case '&': out += "\\u0026"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
}

void num(std::string& out, std::int64_t v) { out += std::to_string(v); }
void num(std::string& out, std::uint64_t v) { out += std::to_string(v); }
void num(std::string& out, double v, int decimals) {
  if (!std::isfinite(v)) {
    out += "0";
    return;
  }
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", decimals, v);
  out += b;
}

std::string display_key(const TaskRun& r) {
  if (!r.key.empty()) return r.key;
  char b[32];
  std::snprintf(b, sizeof b, "-%llx", static_cast<unsigned long long>(r.task));
  return r.function + b;
}

/// Phases of one run in microseconds (they add up to received - submitted).
struct Phases {
  std::int64_t waiting, queued, fetching, running, returning;
};
Phases phases(const TaskRun& r) {
  Phases p{};
  p.waiting = std::max<std::int64_t>(0, r.ready_us - r.submitted_us);
  p.fetching = static_cast<std::int64_t>(r.fetch_us);
  p.running = std::max<std::int64_t>(0, r.end_us - r.start_us);
  p.returning = std::max<std::int64_t>(0, r.received_us - r.end_us);
  p.queued = std::max<std::int64_t>(0, r.start_us - r.ready_us - p.fetching);
  return p;
}

struct Index {
  std::vector<std::string> names;
  std::unordered_map<std::string, std::size_t> at;
  std::size_t of(const std::string& n) {
    auto it = at.find(n);
    if (it != at.end()) return it->second;
    at.emplace(n, names.size());
    names.push_back(n);
    return names.size() - 1;
  }
};

/// The runs the stream draws: all of them up to the cap, else every failed or lost one, the
/// slowest, then an even sample of the rest.
std::vector<std::size_t> stream_runs(const Contents& c, std::size_t cap) {
  std::vector<std::size_t> all(c.runs.size());
  std::iota(all.begin(), all.end(), std::size_t{0});
  if (all.size() <= cap) return all;
  std::vector<std::size_t> pick;
  std::vector<char> taken(c.runs.size(), 0);
  for (std::size_t i : all) {
    if (c.runs[i].status != RunStatus::ok && pick.size() < cap / 4) {
      pick.push_back(i);
      taken[i] = 1;
    }
  }
  std::vector<std::size_t> by_time = all;
  const std::size_t slow = std::min(cap / 4, by_time.size());
  std::partial_sort(by_time.begin(), by_time.begin() + static_cast<std::ptrdiff_t>(slow), by_time.end(),
                    [&](std::size_t a, std::size_t b) {
                      return c.runs[a].end_us - c.runs[a].start_us > c.runs[b].end_us - c.runs[b].start_us;
                    });
  for (std::size_t k = 0; k < slow; ++k) {
    if (!taken[by_time[k]]) {
      pick.push_back(by_time[k]);
      taken[by_time[k]] = 1;
    }
  }
  const std::size_t left = cap > pick.size() ? cap - pick.size() : 0;
  const double stride = static_cast<double>(c.runs.size()) / static_cast<double>(std::max<std::size_t>(1, left));
  for (double x = 0; x < static_cast<double>(c.runs.size()) && pick.size() < cap; x += stride) {
    const auto i = static_cast<std::size_t>(x);
    if (!taken[i]) {
      pick.push_back(i);
      taken[i] = 1;
    }
  }
  std::sort(pick.begin(), pick.end());
  return pick;
}

std::int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

/// The span the report covers (unix microseconds).
std::pair<std::int64_t, std::int64_t> span(const Contents& c) {
  std::int64_t t0 = INT64_MAX, t1 = INT64_MIN;
  auto see = [&](std::int64_t t) {
    if (t <= 0) return;
    t0 = std::min(t0, t);
    t1 = std::max(t1, t);
  };
  for (const auto& r : c.runs) {
    see(r.submitted_us);
    see(r.received_us);
  }
  for (const auto& e : c.pool_events) see(e.time_us);
  for (const auto& s : c.samples) see(s.time_us);
  for (const auto& e : c.worker_events) see(e.time_us);
  if (t0 > t1) t0 = t1 = now_us();
  if (t1 == t0) t1 = t0 + 1000;
  return {t0, t1};
}

}  // namespace

// Written by report_html.cpp.
std::string html_page(const std::string& title, const std::string& data_json);

std::string html_report(const Contents& c, const ReportOptions& options) {
  const auto [t0, t1] = span(c);
  auto ms = [t0 = t0](std::int64_t t) { return static_cast<double>(t - t0) / 1000.0; };
  Index fns, workers;
  // Workers in the order they first appear (joined, else first run).
  for (const auto& e : c.worker_events) workers.of(e.worker);
  for (const auto& r : c.runs) {
    fns.of(r.function);
    if (!r.worker.empty()) workers.of(r.worker);
  }
  for (const auto& s : c.samples) workers.of(s.worker);
  std::sort(fns.names.begin(), fns.names.end());
  fns.at.clear();
  for (std::size_t i = 0; i < fns.names.size(); ++i) fns.at[fns.names[i]] = i;

  std::string d;
  d.reserve(c.runs.size() * 40 + 65536);
  d += "{\"title\":";
  esc(d, options.title);
  d += ",\"source\":";
  esc(d, options.source);
  d += ",\"generated_ms\":";
  num(d, now_us() / 1000);
  d += ",\"t0_ms\":";
  num(d, t0 / 1000);
  d += ",\"span_ms\":";
  num(d, ms(t1), 3);
  d += ",\"warnings\":[";
  for (std::size_t i = 0; i < c.warnings.size(); ++i) {
    if (i) d += ',';
    esc(d, c.warnings[i]);
  }
  d += "],\"functions\":[";
  for (std::size_t i = 0; i < fns.names.size(); ++i) {
    if (i) d += ',';
    esc(d, fns.names[i]);
  }
  d += "],\"workers\":[";
  for (std::size_t i = 0; i < workers.names.size(); ++i) {
    if (i) d += ',';
    esc(d, workers.names[i]);
  }
  d += "]";

  // Per function: counts and each phase's total (microseconds), over every run.
  struct Totals {
    std::uint64_t runs = 0, ok = 0, failed = 0, lost = 0, retried = 0;
    std::int64_t waiting = 0, queued = 0, fetching = 0, running = 0, returning = 0, max_running = 0;
    std::uint64_t fetch_bytes = 0, result_bytes = 0;
  };
  std::vector<Totals> per(fns.names.size());
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> moved;  // worker -> (fetched, results)
  std::uint64_t fetched_total = 0, results_total = 0;
  for (const auto& r : c.runs) {
    Totals& t = per[fns.at[r.function]];
    const Phases p = phases(r);
    ++t.runs;
    if (r.status == RunStatus::ok) ++t.ok;
    else if (r.status == RunStatus::lost) ++t.lost;
    else ++t.failed;
    if (r.attempt > 0) ++t.retried;
    t.waiting += p.waiting;
    t.queued += p.queued;
    t.fetching += p.fetching;
    t.running += p.running;
    t.returning += p.returning;
    t.max_running = std::max(t.max_running, p.running);
    t.fetch_bytes += r.fetch_bytes;
    t.result_bytes += r.result_bytes;
    fetched_total += r.fetch_bytes;
    results_total += r.result_bytes;
    if (!r.worker.empty()) {
      auto& m = moved[r.worker];
      m.first += r.fetch_bytes;
      m.second += r.result_bytes;
    }
  }
  d += ",\"table\":[";
  for (std::size_t i = 0; i < per.size(); ++i) {
    const Totals& t = per[i];
    if (i) d += ',';
    d += '[';
    for (std::int64_t v : {static_cast<std::int64_t>(i), static_cast<std::int64_t>(t.runs), static_cast<std::int64_t>(t.ok),
                           static_cast<std::int64_t>(t.failed), static_cast<std::int64_t>(t.lost),
                           static_cast<std::int64_t>(t.retried), t.waiting, t.queued, t.fetching, t.running, t.returning,
                           t.max_running, static_cast<std::int64_t>(t.fetch_bytes), static_cast<std::int64_t>(t.result_bytes)}) {
      num(d, v);
      d += ',';
    }
    d.back() = ']';
  }
  d += "],\"moved\":{\"fetched\":";
  num(d, fetched_total);
  d += ",\"results\":";
  num(d, results_total);
  d += ",\"by_worker\":[";
  bool first = true;
  for (const auto& [w, m] : moved) {
    if (!first) d += ',';
    first = false;
    d += '[';
    esc(d, w);
    d += ',';
    num(d, m.first);
    d += ',';
    num(d, m.second);
    d += ']';
  }
  d += "]}";

  // The stream: columns, one entry per drawn run.
  const std::vector<std::size_t> drawn = stream_runs(c, options.max_stream_runs);
  d += ",\"runs_total\":";
  num(d, static_cast<std::uint64_t>(c.runs.size()));
  d += ",\"stream\":{";
  auto column = [&](const char* name, auto get) {
    d += '"';
    d += name;
    d += "\":[";
    for (std::size_t k = 0; k < drawn.size(); ++k) {
      if (k) d += ',';
      get(c.runs[drawn[k]]);
    }
    d += "],";
  };
  column("w", [&](const TaskRun& r) { num(d, static_cast<std::uint64_t>(r.worker.empty() ? 0 : workers.at[r.worker])); });
  column("t", [&](const TaskRun& r) { num(d, static_cast<std::uint64_t>(r.thread)); });
  column("f", [&](const TaskRun& r) { num(d, static_cast<std::uint64_t>(fns.at[r.function])); });
  column("s", [&](const TaskRun& r) { num(d, ms(r.start_us), 3); });
  column("us", [&](const TaskRun& r) { num(d, std::max<std::int64_t>(0, r.end_us - r.start_us)); });
  column("fx", [&](const TaskRun& r) { num(d, r.fetch_us); });
  column("st", [&](const TaskRun& r) { num(d, static_cast<std::uint64_t>(r.status)); });
  column("a", [&](const TaskRun& r) { num(d, static_cast<std::uint64_t>(r.attempt)); });
  column("k", [&](const TaskRun& r) { esc(d, display_key(r)); });
  d.back() = '}';

  // Slowest runs and failed or lost ones, with their errors.
  auto run_row = [&](const TaskRun& r) {
    const Phases p = phases(r);
    d += '[';
    esc(d, display_key(r));
    d += ',';
    esc(d, r.function);
    d += ',';
    esc(d, r.worker);
    d += ',';
    num(d, ms(r.start_us), 3);
    d += ',';
    num(d, p.running);
    d += ',';
    esc(d, status_name(r.status));
    d += ',';
    num(d, static_cast<std::uint64_t>(r.attempt));
    d += ',';
    esc(d, r.error_type);
    d += ',';
    esc(d, r.error);
    d += ']';
  };
  std::vector<std::size_t> order(c.runs.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  const std::size_t top = std::min<std::size_t>(20, order.size());
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(top), order.end(), [&](std::size_t a, std::size_t b) {
    return c.runs[a].end_us - c.runs[a].start_us > c.runs[b].end_us - c.runs[b].start_us;
  });
  d += ",\"slowest\":[";
  for (std::size_t k = 0; k < top; ++k) {
    if (k) d += ',';
    run_row(c.runs[order[k]]);
  }
  d += "],\"failed\":[";
  std::size_t nfailed = 0;
  for (const auto& r : c.runs) {
    if (r.status == RunStatus::ok) continue;
    if (nfailed == 500) break;
    if (nfailed++) d += ',';
    run_row(r);
  }
  d += "]";

  // Worker samples: per worker, [ms, cpu, memory, spilled, executing, nthreads, limit] rows.
  std::vector<std::vector<const WorkerSample*>> by_worker(workers.names.size());
  for (const auto& s : c.samples) by_worker[workers.at[s.worker]].push_back(&s);
  d += ",\"samples\":[";
  for (std::size_t w = 0; w < by_worker.size(); ++w) {
    if (w) d += ',';
    d += '[';
    // At most ~2000 points a worker: a night of 5 s samples is thinned evenly.
    const std::size_t n = by_worker[w].size(), stride = std::max<std::size_t>(1, n / 2000);
    for (std::size_t k = 0; k < n; k += stride) {
      const WorkerSample& s = *by_worker[w][k];
      if (k) d += ',';
      d += '[';
      num(d, ms(s.time_us), 0);
      d += ',';
      num(d, s.cpu, 1);
      for (std::uint64_t v : {s.memory, s.spilled, static_cast<std::uint64_t>(s.executing),
                              static_cast<std::uint64_t>(s.nthreads), s.memory_limit}) {
        d += ',';
        num(d, v);
      }
      d += ']';
    }
    d += ']';
  }
  d += "]";

  // Busy slots over time (from the runs themselves): 200 buckets over the span.
  constexpr int kBuckets = 200;
  std::vector<double> busy(kBuckets, 0.0);
  const double width = static_cast<double>(t1 - t0) / kBuckets;
  for (const auto& r : c.runs) {
    if (r.end_us <= r.start_us) continue;
    const double a = static_cast<double>(r.start_us - t0), b = static_cast<double>(r.end_us - t0);
    const int i0 = std::clamp(static_cast<int>(a / width), 0, kBuckets - 1);
    const int i1 = std::clamp(static_cast<int>(b / width), 0, kBuckets - 1);
    for (int i = i0; i <= i1; ++i) {
      const double lo = std::max(a, i * width), hi = std::min(b, (i + 1) * width);
      if (hi > lo) busy[static_cast<std::size_t>(i)] += (hi - lo) / width;
    }
  }
  d += ",\"busy\":[";
  for (int i = 0; i < kBuckets; ++i) {
    if (i) d += ',';
    d += '[';
    num(d, (i + 0.5) * width / 1000.0, 0);
    d += ',';
    num(d, busy[static_cast<std::size_t>(i)], 2);
    d += ']';
  }
  d += "]";

  // Pool events and worker events, as they happened.
  d += ",\"pool_events\":[";
  for (std::size_t i = 0; i < c.pool_events.size(); ++i) {
    const PoolEvent& e = c.pool_events[i];
    if (i) d += ',';
    d += '[';
    num(d, ms(e.time_us), 0);
    d += ',';
    esc(d, e.pool);
    d += ',';
    esc(d, what_name(e.what));
    d += ',';
    esc(d, e.job);
    d += ',';
    esc(d, e.reason);
    for (std::uint32_t v : {e.target, e.workers, e.running, e.pending}) {
      d += ',';
      num(d, static_cast<std::uint64_t>(v));
    }
    d += ']';
  }
  d += "],\"worker_events\":[";
  for (std::size_t i = 0; i < c.worker_events.size(); ++i) {
    const WorkerEvent& e = c.worker_events[i];
    if (i) d += ',';
    d += '[';
    num(d, ms(e.time_us), 0);
    d += ',';
    num(d, static_cast<std::uint64_t>(workers.at[e.worker]));
    d += ',';
    esc(d, what_name(e.what));
    d += ',';
    esc(d, e.host);
    d += ',';
    esc(d, e.pool);
    d += ',';
    esc(d, e.job);
    d += ',';
    num(d, static_cast<std::uint64_t>(e.nthreads));
    d += ',';
    esc(d, e.why);
    d += ']';
  }
  d += "]}";
  return html_page(options.title, d);
}

std::string trace_report(const Contents& c, const ReportOptions& options) {
  const auto [t0, t1] = span(c);
  (void)t1;
  Index workers;
  for (const auto& e : c.worker_events) workers.of(e.worker);
  for (const auto& r : c.runs) workers.of(r.worker.empty() ? "(unplaced)" : r.worker);
  for (const auto& s : c.samples) workers.of(s.worker);
  const std::size_t pools_pid = workers.names.size() + 1;
  std::string d;
  d.reserve(c.runs.size() * 200 + 4096);
  d += "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"title\":";
  esc(d, options.title);
  d += ",\"source\":";
  esc(d, options.source);
  d += ",\"t0_unix_us\":";
  num(d, t0);
  d += "},\"traceEvents\":[\n";
  bool first = true;
  auto sep = [&] {
    if (!first) d += ",\n";
    first = false;
  };
  for (std::size_t i = 0; i < workers.names.size(); ++i) {
    sep();
    d += "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":";
    num(d, static_cast<std::uint64_t>(i + 1));
    d += ",\"args\":{\"name\":";
    esc(d, workers.names[i]);
    d += "}}";
  }
  sep();
  d += "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":";
  num(d, static_cast<std::uint64_t>(pools_pid));
  d += ",\"args\":{\"name\":\"pools\"}}";
  for (const auto& r : c.runs) {
    const std::size_t pid = workers.of(r.worker.empty() ? "(unplaced)" : r.worker) + 1;
    const Phases p = phases(r);
    if (r.fetch_us > 0) {
      sep();
      d += "{\"ph\":\"X\",\"cat\":\"fetch\",\"name\":\"fetch inputs\",\"pid\":";
      num(d, static_cast<std::uint64_t>(pid));
      d += ",\"tid\":";
      num(d, static_cast<std::uint64_t>(r.thread));
      d += ",\"ts\":";
      num(d, r.start_us - t0 - p.fetching);  // drawn just before the run (its slot wait is not apart)
      d += ",\"dur\":";
      num(d, r.fetch_us);
      d += ",\"args\":{\"bytes\":";
      num(d, r.fetch_bytes);
      d += ",\"peers\":";
      num(d, static_cast<std::uint64_t>(r.fetch_peers));
      d += "}}";
    }
    sep();
    d += "{\"ph\":\"X\",\"cat\":";
    esc(d, status_name(r.status));
    d += ",\"name\":";
    esc(d, r.function);
    d += ",\"pid\":";
    num(d, static_cast<std::uint64_t>(pid));
    d += ",\"tid\":";
    num(d, static_cast<std::uint64_t>(r.thread));
    d += ",\"ts\":";
    num(d, r.start_us - t0);
    d += ",\"dur\":";
    num(d, p.running);
    d += ",\"args\":{\"key\":";
    esc(d, display_key(r));
    d += ",\"status\":";
    esc(d, status_name(r.status));
    d += ",\"attempt\":";
    num(d, static_cast<std::uint64_t>(r.attempt));
    d += ",\"waiting_us\":";
    num(d, p.waiting);
    d += ",\"queued_us\":";
    num(d, p.queued);
    d += ",\"fetching_us\":";
    num(d, p.fetching);
    d += ",\"returning_us\":";
    num(d, p.returning);
    d += ",\"result_bytes\":";
    num(d, r.result_bytes);
    if (r.status != RunStatus::ok) {
      d += ",\"error_type\":";
      esc(d, r.error_type);
      d += ",\"error\":";
      esc(d, r.error);
    }
    d += "}}";
  }
  for (const auto& s : c.samples) {
    sep();
    d += "{\"ph\":\"C\",\"name\":\"memory\",\"pid\":";
    num(d, static_cast<std::uint64_t>(workers.of(s.worker) + 1));
    d += ",\"ts\":";
    num(d, s.time_us - t0);
    d += ",\"args\":{\"resident\":";
    num(d, s.memory);
    d += ",\"spilled\":";
    num(d, s.spilled);
    d += "}},\n{\"ph\":\"C\",\"name\":\"cpu %\",\"pid\":";
    num(d, static_cast<std::uint64_t>(workers.of(s.worker) + 1));
    d += ",\"ts\":";
    num(d, s.time_us - t0);
    d += ",\"args\":{\"cpu\":";
    num(d, s.cpu, 1);
    d += "}}";
  }
  for (const auto& e : c.pool_events) {
    sep();
    d += "{\"ph\":\"i\",\"s\":\"p\",\"name\":";
    esc(d, std::string(what_name(e.what)) + (e.job.empty() ? "" : " " + e.job));
    d += ",\"pid\":";
    num(d, static_cast<std::uint64_t>(pools_pid));
    d += ",\"tid\":0,\"ts\":";
    num(d, e.time_us - t0);
    d += ",\"args\":{\"pool\":";
    esc(d, e.pool);
    d += ",\"reason\":";
    esc(d, e.reason);
    d += "}},\n{\"ph\":\"C\",\"name\":";
    esc(d, "pool " + e.pool);
    d += ",\"pid\":";
    num(d, static_cast<std::uint64_t>(pools_pid));
    d += ",\"ts\":";
    num(d, e.time_us - t0);
    d += ",\"args\":{\"target\":";
    num(d, static_cast<std::uint64_t>(e.target));
    d += ",\"workers\":";
    num(d, static_cast<std::uint64_t>(e.workers));
    d += ",\"running\":";
    num(d, static_cast<std::uint64_t>(e.running));
    d += ",\"pending\":";
    num(d, static_cast<std::uint64_t>(e.pending));
    d += "}}";
  }
  for (const auto& e : c.worker_events) {
    sep();
    d += "{\"ph\":\"i\",\"s\":\"p\",\"name\":";
    esc(d, std::string("worker ") + what_name(e.what) + (e.why.empty() ? "" : ": " + e.why));
    d += ",\"pid\":";
    num(d, static_cast<std::uint64_t>(workers.of(e.worker) + 1));
    d += ",\"tid\":0,\"ts\":";
    num(d, e.time_us - t0);
    d += "}";
  }
  d += "\n]}\n";
  return d;
}

}  // namespace herd::record
