// The dashboard page. Self-contained (inline CSS and JS, no external resource): it is reached
// through `ssh -L` from a laptop, often from a cluster without internet access. The script
// fetches api/status every second (with the token the page was opened with) and redraws; every
// user string goes in through textContent.
#include <string>

#include "record/report.hpp"
#include "scheduler/http_server.hpp"

namespace herd::scheduler {

namespace {
const char* kHead = R"HTML(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>herd dashboard</title>
<style>)HTML";

const char* kPage = R"HTML(  #stream { width: 100%; height: 180px; display: block; }
  .err { color: #c22; }
  #error { color: #c22; padding: 0 16px; }
  #journal { padding: 0 16px; color: #556; }
  #journal.bad { color: #c22; font-weight: 600; }
  .bar { display: flex; height: 12px; min-width: 200px; background: #eef; border-radius: 3px; overflow: hidden; }
  .bar span { display: block; height: 100%; }
  .memory { background: #3a7; } .processing { background: #e9a23b; } .ready { background: #9ab; }
  .waiting { background: #ccd; } .erred { background: #d44; } .released { background: #7bc; }
  .cancelled { background: #999; }
  .legend span { display: inline-block; width: 10px; height: 10px; margin: 0 4px 0 10px; }
</style>
</head>
<body>
<header><h1>herd</h1><span class="sub" id="scheduler">connecting...</span><span class="sub" id="updated"></span><a class="sub" id="report-link" href="report" target="_blank">report of the run so far</a></header>
<div id="error"></div>
<div id="journal"></div>
<main>
  <div class="cards">
    <div class="card"><div class="v" id="n-workers">-</div><div class="l">workers</div></div>
    <div class="card"><div class="v" id="n-slots">-</div><div class="l">slots busy</div></div>
    <div class="card"><div class="v" id="n-finished">-</div><div class="l">tasks finished</div></div>
    <div class="card"><div class="v" id="n-failed">-</div><div class="l">tasks failed</div></div>
    <div class="card"><div class="v" id="n-rate">-</div><div class="l">tasks/s (10 s)</div></div>
    <div class="card"><div class="v" id="n-graph">-</div><div class="l">tasks in graph</div></div>
  </div>
  <section class="wide"><h2>Task stream (last 60 s)</h2><svg id="stream"></svg></section>
  <section><h2>Tasks by function</h2>
    <div class="legend"><span class="memory"></span>memory<span class="processing"></span>processing<span class="ready"></span>ready<span class="waiting"></span>waiting<span class="erred"></span>erred</div>
    <table id="functions"></table></section>
  <section><h2>Memory per worker</h2><table id="memory"></table></section>
  <section class="wide"><h2>Workers</h2><table id="workers"></table></section>
  <section class="wide"><h2>Pools and jobs</h2><table id="pools"></table><table id="jobs"></table></section>
  <section><h2>CPU per worker, last hour (%)</h2><svg class="chart" id="history-cpu"></svg></section>
  <section><h2>Memory per worker, last hour</h2><svg class="chart" id="history-memory"></svg></section>
  <section class="wide"><h2>Pool size, last hour</h2><svg class="chart" id="history-pools"></svg></section>
</main>
<script>)HTML";

const char* kScript = R"HTML(
const STATES = ["memory", "processing", "ready", "waiting", "erred"];
const COLORS = herdColors;
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}
const bytes = herdBytes;
function secs(s) {
  if (s < 0) return "-";
  s = Math.round(s);
  if (s < 60) return s + " s";
  const h = Math.floor(s / 3600), m = Math.floor(s / 60) % 60, r = s % 60;
  return (h ? h + ":" + String(m).padStart(2, "0") : m) + ":" + String(r).padStart(2, "0");
}
function fill(table, head, rows) {
  table.replaceChildren(el("tr", {}, ...head.map(h => el("th", {}, h))),
                        ...rows.map(r => el("tr", {}, ...r.map(c => el("td", {}, c)))));
}
function colorOf(name, names) { return COLORS[names.indexOf(name) % COLORS.length]; }
function render(s) {
  document.getElementById("scheduler").textContent = "scheduler " + s.address + " - up " + secs(s.uptime_s) +
      " - " + s.clients + (s.clients === 1 ? " client" : " clients");
  document.getElementById("updated").textContent = "updated " + new Date(s.now_ms).toLocaleTimeString();
  const journal = document.getElementById("journal");
  journal.textContent = s.journal ? "journal " + s.journal : "";
  journal.className = s.journal_failing ? "bad" : "";
  let slots = 0, busy = 0, graph = 0;
  for (const w of s.workers) { slots += w.nthreads; busy += w.busy; }
  for (const n of Object.values(s.tasks)) graph += n;
  document.getElementById("n-workers").textContent = s.workers.length;
  document.getElementById("n-slots").textContent = busy + "/" + slots;
  document.getElementById("n-finished").textContent = s.finished_total;
  document.getElementById("n-failed").textContent = s.failed_total;
  document.getElementById("n-rate").textContent = s.throughput.toFixed(1);
  document.getElementById("n-graph").textContent = graph;

  const fnames = Object.keys(s.functions).sort();
  fill(document.getElementById("functions"), ["function", "in the graph", "finished", "failed"], fnames.map(f => {
    const c = s.functions[f]; let total = 0;
    for (const st of STATES) total += c[st] || 0;
    const bar = el("div", {class: "bar"});
    for (const st of STATES) {
      if (c[st]) bar.append(el("span", {class: st, style: "width:" + (100 * c[st] / total) + "%", title: st + " " + c[st]}));
    }
    return [f, bar, c.finished_total || 0, c.failed_total || 0];
  }));

  const maxMem = Math.max(1, ...s.workers.map(w => w.memory_limit || w.memory_rss));
  fill(document.getElementById("memory"), ["worker", "resident", ""], s.workers.map(w => {
    const bar = el("div", {class: "bar"});
    bar.append(el("span", {class: "memory", style: "width:" + (100 * w.memory_rss / maxMem) + "%"}));
    return [w.name, bytes(w.memory_rss) + (w.memory_limit ? " / " + bytes(w.memory_limit) : ""), bar];
  }));

  fill(document.getElementById("workers"),
       ["name", "host", "pool", "job", "busy", "queued", "stored", "resources", "time left", ""],
       s.workers.map(w => [w.name, w.host, w.pool || "-", w.job_id || "-", w.busy + "/" + w.nthreads,
                           Math.max(0, w.processing - w.busy), w.stored,
                           Object.entries(w.resources).map(([k, v]) => k + "=" + v).join(",") || "-",
                           secs(w.time_left_s), w.retiring ? "retiring" : ""]));

  fill(document.getElementById("pools"), ["pool", "kind", "target", "workers", "running", "pending", "pending reasons", "notes"],
       s.pools.map(p => [p.name, p.kind, p.adaptive ? p.target + " (adapt " + p.minimum + "-" + p.maximum + ")" : p.target,
                         p.workers, p.running, p.pending,
                         Object.entries(p.pending_reasons).map(([r, n]) => n + " " + r).join(", ") || "-",
                         [p.paused && "paused: " + p.paused, p.last_error && "error: " + p.last_error,
                          p.stalled && p.stalled + " suspended or held",
                          p.batch_error && "batch system: " + p.batch_error].filter(Boolean).join("; ") || "-"]));
  fill(document.getElementById("jobs"), ["pool", "job", "state", "reason", "worker"],
       s.jobs.map(j => [j.pool, j.id, j.detail || j.state, j.reason || "-", j.worker || "-"]));

  // Task stream: one row per worker, one rectangle per task run, coloured by function.
  const svg = document.getElementById("stream");
  const W = svg.clientWidth || 1000, H = svg.clientHeight || 180;
  const workers = s.workers.map(w => w.name);
  for (const e of s.events) if (!workers.includes(e.worker)) workers.push(e.worker);
  const t1 = s.now_ms, t0 = t1 - 60000, left = 110;
  const rowH = Math.max(6, Math.min(40, (H - 16) / Math.max(1, workers.length)));
  const NS = "http://www.w3.org/2000/svg";
  const kids = [];
  const allFns = [...new Set(fnames.concat(s.events.map(e => e.function)))].sort();
  workers.forEach((w, i) => {
    const t = document.createElementNS(NS, "text");
    t.setAttribute("x", 0); t.setAttribute("y", i * rowH + rowH * 0.75); t.setAttribute("font-size", Math.min(12, rowH));
    t.textContent = w; kids.push(t);
  });
  // Runs that overlap on one worker (several slots) go in lanes within its row.
  const laneEnds = workers.map(() => []);
  const runs = s.events.filter(e => e.end_ms >= t0).sort((a, b) => a.start_ms - b.start_ms);
  const placed = runs.map(e => {
    const ends = laneEnds[workers.indexOf(e.worker)];
    let lane = ends.findIndex(end => end <= e.start_ms + 25);  // start = end - run time: not exact
    if (lane < 0) { lane = ends.length; ends.push(0); }
    ends[lane] = e.end_ms;
    return [e, lane];
  });
  for (const [e, lane] of placed) {
    const row = workers.indexOf(e.worker);
    const lanes = Math.max(1, laneEnds[row].length), laneH = (rowH - 2) / lanes;
    const x = left + (Math.max(e.start_ms, t0) - t0) / 60000 * (W - left);
    const r = document.createElementNS(NS, "rect");
    r.setAttribute("x", x); r.setAttribute("y", row * rowH + 1 + lane * laneH);
    r.setAttribute("width", Math.max(1.5, (e.end_ms - Math.max(e.start_ms, t0)) / 60000 * (W - left)));
    r.setAttribute("height", Math.max(1, laneH - 1));
    r.setAttribute("fill", e.ok ? colorOf(e.function, allFns) : "#d00");
    const title = document.createElementNS(NS, "title");
    title.textContent = e.key + " on " + e.worker + ", " + (e.end_ms - e.start_ms) + " ms" + (e.ok ? "" : " (failed)");
    r.append(title); kids.push(r);
  }
  const axis = document.createElementNS(NS, "text");
  axis.setAttribute("x", left); axis.setAttribute("y", H - 2); axis.setAttribute("font-size", 10);
  axis.textContent = "-60 s" + "\u2003".repeat(10) + "now \u2192 right edge; " + s.events.length + " recent runs";
  kids.push(axis);
  svg.replaceChildren(...kids);
}
// The token came in the address (?token=...) once; the server also set a cookie. Keep it for
// the requests below and take it out of the address bar (history, screen sharing).
const TOKEN = new URLSearchParams(location.search).get("token");
if (TOKEN) history.replaceState(null, "", location.pathname);
async function refresh() {
  try {
    const r = await fetch("api/status" + (TOKEN ? "?token=" + encodeURIComponent(TOKEN) : ""), {cache: "no-store"});
    if (r.status === 403) throw new Error("the scheduler refused: open the address with ?token=... that `herd scheduler` printed");
    const s = await r.json();
    render(s);
    document.getElementById("error").textContent = s.auth_off
        ? "HERD_AUTH=off: this cluster authenticates and encrypts nothing; anyone who can reach it can run commands as you"
        : "";
  } catch (e) {
    document.getElementById("error").textContent = "cannot reach the scheduler: " + e.message;
  }
}
refresh();
setInterval(refresh, 1000);
// History: the last hour of every worker's CPU and memory and every pool's size (api/history),
// drawn with the report's charts (herdChart).
async function refreshHistory() {
  try {
    const r = await fetch("api/history" + (TOKEN ? "?token=" + encodeURIComponent(TOKEN) : ""), {cache: "no-store"});
    if (!r.ok) return;
    const h = await r.json();
    const opt = {xmin: -3600 * 1000, xmax: 0, xfmt: v => "-" + secs(-v / 1000)};
    const rel = pts => pts.map(p => [p[0] - h.now_ms].concat(p.slice(1)));
    const ws = Object.entries(h.workers);
    herdChart(document.getElementById("history-cpu"), ws.map(([n, pts]) => ({name: n, points: rel(pts).map(p => [p[0], p[1]])})), opt);
    herdChart(document.getElementById("history-memory"), ws.map(([n, pts]) => ({name: n, points: rel(pts).map(p => [p[0], p[2]])})),
              Object.assign({yfmt: herdBytes}, opt));
    const ps = [];
    for (const [n, pts] of Object.entries(h.pools)) {
      ps.push({name: n + " target", step: true, points: rel(pts).map(p => [p[0], p[1]])});
      ps.push({name: n + " workers", step: true, points: rel(pts).map(p => [p[0], p[2]])});
      ps.push({name: n + " pending jobs", step: true, points: rel(pts).map(p => [p[0], p[4]])});
    }
    herdChart(document.getElementById("history-pools"), ps, opt);
  } catch (e) {
    // The status refresh says when the scheduler cannot be reached.
  }
}
refreshHistory();
setInterval(refreshHistory, 10000);
</script>
</body>
</html>
)HTML";
}  // namespace

const char* dashboard_html() {
  // The style and the chart code are the report's (record/report.hpp): one place for each.
  static const std::string page =
      std::string(kHead) + record::page_css() + kPage + record::charts_js() + kScript;
  return page.c_str();
}

}  // namespace herd::scheduler
