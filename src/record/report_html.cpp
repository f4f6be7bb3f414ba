// The report page and the drawing code it shares with the dashboard (charts_js, page_css).
// Self-contained: inline CSS, JS and SVG, no network. Every user string goes in through
// textContent; the data is one JSON object in a <script type="application/json"> element.
#include <string>

#include "record/report.hpp"

namespace herd::record {

const char* page_css() {
  return R"CSS(
  body { font: 13px/1.4 system-ui, sans-serif; margin: 0; background: #f6f7f9; color: #222; }
  header { background: #23395d; color: #fff; padding: 8px 16px; display: flex; gap: 24px; align-items: baseline; flex-wrap: wrap; }
  header h1 { font-size: 18px; margin: 0; }
  header .sub { opacity: 0.8; }
  header a { color: #cde; }
  main { display: grid; grid-template-columns: 1fr 1fr; gap: 12px; padding: 12px; }
  section { background: #fff; border: 1px solid #dde; border-radius: 6px; padding: 8px 12px; overflow: auto; }
  section.wide { grid-column: 1 / 3; }
  h2 { font-size: 14px; margin: 0 0 6px 0; color: #23395d; }
  .cards { display: flex; gap: 12px; grid-column: 1 / 3; flex-wrap: wrap; }
  .card { background: #fff; border: 1px solid #dde; border-radius: 6px; padding: 6px 14px; min-width: 110px; }
  .card .v { font-size: 22px; font-weight: 600; }
  .card .l { color: #667; }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: left; padding: 2px 8px 2px 0; white-space: nowrap; }
  td.n, th.n { text-align: right; }
  th { color: #667; font-weight: 500; border-bottom: 1px solid #dde; }
  .err { color: #c22; }
  .note { color: #667; }
  svg.chart { width: 100%; height: 170px; display: block; }
  svg text { font-size: 10px; fill: #445; }
  .legend span.sw { display: inline-block; width: 10px; height: 10px; margin: 0 4px 0 10px; }
)CSS";
}

const char* charts_js() {
  return R"JS(
"use strict";
const herdColors = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
const SVGNS = "http://www.w3.org/2000/svg";
function svgEl(tag, attrs, text) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function herdBytes(n) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0;
  while (n >= 1024 && i < 4) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(n < 10 ? 1 : 0)) + " " + u[i];
}
function herdSecs(s) {
  if (s < 0) return "-";
  if (s < 10) return s.toFixed(s < 1 ? 3 : 2) + " s";
  s = Math.round(s);
  if (s < 60) return s + " s";
  const h = Math.floor(s / 3600), m = Math.floor(s / 60) % 60, r = s % 60;
  return (h ? h + ":" + String(m).padStart(2, "0") : m) + ":" + String(r).padStart(2, "0");
}
// A line chart in `svg`: series [{name, color, points: [[x, y], ...], step}], x in ms from
// opt.x0 (labels: opt.xfmt), y from 0 (labels: opt.yfmt); opt.marks: [{x, label, color}]
// drawn as vertical lines. Replaces what the svg held.
function herdChart(svg, series, opt) {
  opt = opt || {};
  const W = svg.clientWidth || 600, H = svg.clientHeight || 170, L = 58, B = 16, T = 14;
  let xmin = opt.xmin, xmax = opt.xmax, ymax = opt.ymax || 0;
  for (const s of series) for (const [x, y] of s.points) {
    if (xmin === undefined || x < xmin) xmin = x;
    if (xmax === undefined || x > xmax) xmax = x;
    if (y > ymax) ymax = y;
  }
  if (xmin === undefined) { xmin = 0; xmax = 1; }
  if (xmax <= xmin) xmax = xmin + 1;
  if (ymax <= 0) ymax = 1;
  const X = x => L + (x - xmin) / (xmax - xmin) * (W - L - 4);
  const Y = y => T + (1 - y / ymax) * (H - T - B);
  const kids = [];
  const yfmt = opt.yfmt || (v => String(Math.round(v * 100) / 100));
  const xfmt = opt.xfmt || (v => herdSecs(v / 1000));
  for (let i = 0; i <= 4; i++) {
    const y = ymax * i / 4;
    kids.push(svgEl("line", {x1: L, x2: W - 4, y1: Y(y), y2: Y(y), stroke: "#eef"}));
    kids.push(svgEl("text", {x: 2, y: Y(y) + 3}, yfmt(y)));
  }
  for (let i = 0; i <= 5; i++) {
    const x = xmin + (xmax - xmin) * i / 5;
    kids.push(svgEl("text", {x: Math.min(X(x), W - 40), y: H - 3}, xfmt(x)));
  }
  for (const m of opt.marks || []) {
    kids.push(svgEl("line", {x1: X(m.x), x2: X(m.x), y1: T, y2: H - B, stroke: m.color || "#d44", "stroke-dasharray": "3,2", class: "mark"}));
    kids.push(svgEl("text", {x: X(m.x) + 2, y: H - B - 3, fill: m.color || "#d44"}, m.label));
  }
  series.forEach((s, i) => {
    if (!s.points.length) return;
    let d = "";
    s.points.forEach(([x, y], k) => {
      if (k === 0) d += "M" + X(x) + "," + Y(y);
      else if (s.step) d += "H" + X(x) + "V" + Y(y);
      else d += "L" + X(x) + "," + Y(y);
    });
    if (s.step && opt.extend !== false) d += "H" + X(xmax);
    const p = svgEl("path", {d, fill: "none", stroke: s.color || herdColors[i % herdColors.length], "stroke-width": 1.5, class: "series"});
    p.append(svgEl("title", {}, s.name));
    kids.push(p);
  });
  // Legend: the series' names along the top.
  let lx = L;
  for (const [i, s] of series.entries()) {
    if (lx > W - 60 || i > 12) break;
    kids.push(svgEl("rect", {x: lx, y: 2, width: 8, height: 8, fill: s.color || herdColors[i % herdColors.length]}));
    kids.push(svgEl("text", {x: lx + 10, y: 10}, s.name));
    lx += 16 + 6 * s.name.length;
  }
  svg.replaceChildren(...kids);
}
)JS";
}

namespace {

const char* kHead = R"HTML(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>)HTML";

const char* kBody = R"HTML(</title>
<style>)HTML";

const char* kBody2 = R"HTML(
  #stream { width: 100%; display: block; cursor: grab; user-select: none; }
  #stream rect.run:hover { stroke: #000; }
  #warnings { color: #c22; padding: 0 16px; }
</style>
</head>
<body>
<header><h1 id="title"></h1><span class="sub" id="source"></span><span class="sub" id="span"></span><span class="sub" id="generated"></span></header>
<div id="warnings"></div>
<main>
  <div class="cards" id="cards"></div>
  <section class="wide"><h2>Task stream <span class="note" id="stream-note"></span></h2>
    <div class="legend" id="stream-legend"></div>
    <svg id="stream"></svg>
    <canvas id="stream-canvas" style="display:none"></canvas>
    <div class="note">Drag to pan, wheel to zoom, double-click to see it all. Red: failed; grey: lost with its worker.</div></section>
  <section class="wide"><h2>Time by function</h2><table id="functions"></table>
    <div class="note">Phases of every run: waiting for its inputs to be computed, queued (for a worker, then a slot), fetching inputs from other workers, running, returning its result. Totals in seconds; mean per run below.</div></section>
  <section><h2>Busy task slots</h2><svg class="chart" id="busy"></svg></section>
  <section><h2>Pool size</h2><svg class="chart" id="pool"></svg></section>
  <section><h2>CPU per worker (%)</h2><svg class="chart" id="cpu"></svg></section>
  <section><h2>Memory per worker</h2><svg class="chart" id="memory"></svg></section>
  <section><h2>Workers joined and left</h2><table id="worker-events"></table></section>
  <section><h2>Pool events</h2><table id="pool-events"></table></section>
  <section><h2>Data moved</h2><table id="moved"></table></section>
  <section><h2>Slowest runs</h2><table id="slowest"></table></section>
  <section class="wide"><h2>Failed and lost runs</h2><table id="failed"></table></section>
</main>
<script type="application/json" id="data">)HTML";

const char* kScript = R"HTML(</script>
<script>)HTML";

const char* kMain = R"JS(
const D = JSON.parse(document.getElementById("data").textContent);
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}
function cell(v, attrs) { return el("td", attrs || {}, v); }
function fill(id, head, rows) {
  const t = document.getElementById(id);
  t.replaceChildren(el("tr", {}, ...head.map(h => el("th", {}, h))),
                    ...rows.map(r => el("tr", {}, ...r.map(c => c instanceof Node ? c : cell(c)))));
}
const STATUS = ["ok", "failed", "lost", "cancelled"];
const fnColor = f => herdColors[f % herdColors.length];
document.title = D.title;
document.getElementById("title").textContent = D.title;
document.getElementById("source").textContent = D.source;
document.getElementById("span").textContent = new Date(D.t0_ms).toLocaleString() + ", " + herdSecs(D.span_ms / 1000);
document.getElementById("generated").textContent = "made " + new Date(D.generated_ms).toLocaleString();
document.getElementById("warnings").textContent = D.warnings.join("; ");

// Cards.
let failed = 0, lost = 0, retried = 0;
for (const r of D.table) { failed += r[3]; lost += r[4]; retried += r[5]; }
const cards = [[D.runs_total, "task runs"], [failed, "failed"], [lost, "lost with a worker"], [retried, "retries and re-runs"],
               [D.workers.length, "workers"], [herdBytes(D.moved.fetched), "inputs fetched"], [herdBytes(D.moved.results), "results"]];
document.getElementById("cards").replaceChildren(...cards.map(([v, l]) =>
    el("div", {class: "card"}, el("div", {class: "v"}, v), el("div", {class: "l"}, l))));

// The task stream: a row per worker, a lane per thread, a rectangle per run; zoomable.
const S = D.stream, NR = S.w.length;
const lanes = D.workers.map(() => 1);
for (let i = 0; i < NR; i++) lanes[S.w[i]] = Math.max(lanes[S.w[i]], S.t[i] + 1);
const LANE_H = Math.max(3, Math.min(14, 420 / Math.max(1, lanes.reduce((a, b) => a + b, 0))));
const rowY = []; let y = 0;
for (let w = 0; w < D.workers.length; w++) { rowY.push(y); y += lanes[w] * LANE_H + 4; }
const STREAM_H = y + 18, LEFT = 110;
let view = [0, D.span_ms];
document.getElementById("stream-note").textContent = "(" + NR + (NR < D.runs_total ? " of " + D.runs_total + " runs: every failed one, the slowest, and an even sample" : " runs") + ")";
document.getElementById("stream-legend").replaceChildren(...D.functions.map((f, i) =>
    el("span", {}, el("span", {class: "sw", style: "background:" + fnColor(i)}), f)));
const svg = document.getElementById("stream"), canvas = document.getElementById("stream-canvas");
svg.style.height = STREAM_H + "px";
function drawStream() {
  const W = svg.clientWidth || 1000, span = view[1] - view[0];
  const X = t => LEFT + (t - view[0]) / span * (W - LEFT - 4);
  const kids = [];
  D.workers.forEach((w, i) => kids.push(svgEl("text", {x: 0, y: rowY[i] + Math.min(12, lanes[i] * LANE_H)}, w)));
  const inView = [];
  for (let i = 0; i < NR; i++) {
    const s = S.s[i], e = s + S.us[i] / 1000;
    if (e >= view[0] && s <= view[1]) inView.push(i);
  }
  const useCanvas = inView.length > 20000;
  canvas.style.display = useCanvas ? "block" : "none";
  let ctx = null;
  if (useCanvas) {
    canvas.width = W; canvas.height = STREAM_H; ctx = canvas.getContext("2d");
    ctx.clearRect(0, 0, W, STREAM_H);
  }
  for (const i of inView) {
    const s = S.s[i], x = Math.max(LEFT, X(s)), wd = Math.max(1, X(s + S.us[i] / 1000) - x);
    const yy = rowY[S.w[i]] + S.t[i] * LANE_H, color = S.st[i] === 0 ? fnColor(S.f[i]) : S.st[i] === 2 ? "#999" : "#d00";
    if (useCanvas) { ctx.fillStyle = color; ctx.fillRect(x, yy, wd, LANE_H - 1); continue; }
    const r = svgEl("rect", {x, y: yy, width: wd, height: LANE_H - 1, fill: color, class: "run", "data-f": S.f[i],
                             "data-w": S.w[i], "data-s": S.s[i], "data-us": S.us[i], "data-status": STATUS[S.st[i]], "data-key": S.k[i]});
    r.append(svgEl("title", {}, S.k[i] + " (" + D.functions[S.f[i]] + ") on " + D.workers[S.w[i]] + " thread " + S.t[i] +
                   ": " + (S.us[i] / 1000).toFixed(3) + " ms, " + STATUS[S.st[i]] + (S.a[i] ? ", attempt " + (S.a[i] + 1) : "") +
                   (S.fx[i] ? ", fetched inputs for " + (S.fx[i] / 1000).toFixed(3) + " ms" : "")));
    kids.push(r);
  }
  // Workers joining, leaving and lost, where they happened, on their rows.
  for (const [t, w, what, , , , , why] of D.worker_events) {
    if (t < view[0] || t > view[1]) continue;
    const x = X(t), color = what === "joined" ? "#3a7" : what === "lost" ? "#d00" : "#667";
    const m = svgEl("line", {x1: x, x2: x, y1: rowY[w], y2: rowY[w] + lanes[w] * LANE_H, stroke: color, "stroke-width": 2,
                             class: "worker-" + what, "data-w": w, "data-t": t});
    m.append(svgEl("title", {}, D.workers[w] + " " + what + (why ? ": " + why : "")));
    kids.push(m);
    if (what !== "joined") kids.push(svgEl("text", {x: x + 2, y: rowY[w] + 9, fill: color, class: "worker-label"}, what));
  }
  for (let i = 0; i <= 6; i++) {
    const t = view[0] + span * i / 6;
    kids.push(svgEl("text", {x: Math.min(X(t), W - 40), y: STREAM_H - 3}, herdSecs(t / 1000)));
  }
  svg.replaceChildren(...kids);
}
drawStream();
let drag = null;
svg.addEventListener("mousedown", e => { drag = [e.clientX, view.slice()]; });
window.addEventListener("mouseup", () => { drag = null; });
window.addEventListener("mousemove", e => {
  if (!drag) return;
  const W = svg.clientWidth || 1000, span = drag[1][1] - drag[1][0];
  const dt = (e.clientX - drag[0]) / (W - LEFT) * span;
  view = [drag[1][0] - dt, drag[1][1] - dt];
  drawStream();
});
svg.addEventListener("wheel", e => {
  e.preventDefault();
  const W = svg.clientWidth || 1000, span = view[1] - view[0];
  const at = view[0] + Math.max(0, e.offsetX - LEFT) / (W - LEFT) * span;
  const k = e.deltaY < 0 ? 0.8 : 1.25, ns = Math.max(0.01, Math.min(D.span_ms * 1.2, span * k));
  view = [at - (at - view[0]) * ns / span, at + (view[1] - at) * ns / span];
  drawStream();
}, {passive: false});
svg.addEventListener("dblclick", () => { view = [0, D.span_ms]; drawStream(); });

// Time by function.
const secs = us => (us / 1e6).toFixed(3);
const mean = (us, n) => n ? (us / n / 1000).toFixed(3) + " ms" : "-";
fill("functions", ["function", "runs", "ok", "failed", "lost", "retried", "waiting", "queued", "fetching", "running", "returning", "longest run", "fetched", "results"],
     D.table.map(r => {
       const n = r[1];
       const phase = (us, name) => { const td = el("td", {class: "n", "data-us": us, "data-phase": name}, secs(us)); td.append(el("br"), el("span", {class: "note"}, mean(us, n))); return td; };
       return [el("td", {class: "fn"}, el("span", {class: "sw", style: "display:inline-block;width:10px;height:10px;margin-right:4px;background:" + fnColor(r[0])}), D.functions[r[0]]),
               el("td", {class: "n", "data-runs": n}, n), cell(r[2], {class: "n"}), cell(r[3], {class: "n" + (r[3] ? " err" : "")}),
               cell(r[4], {class: "n"}), cell(r[5], {class: "n"}),
               phase(r[6], "waiting"), phase(r[7], "queued"), phase(r[8], "fetching"), phase(r[9], "running"), phase(r[10], "returning"),
               cell((r[11] / 1000).toFixed(3) + " ms", {class: "n"}), cell(herdBytes(r[12]), {class: "n"}), cell(herdBytes(r[13]), {class: "n"})];
     }));

// Charts over time.
const xs = {xmin: 0, xmax: D.span_ms};
herdChart(document.getElementById("busy"), [{name: "running tasks (mean)", points: D.busy},
    {name: "task slots", color: "#999", step: true, points: (() => {
      // Slots of the workers sampled at each time: the sum of each one's newest sample.
      const ev = []; D.samples.forEach((ss, w) => ss.forEach(s => ev.push([s[0], w, s[5]])));
      ev.sort((a, b) => a[0] - b[0]); const cur = D.workers.map(() => 0); let sum = 0; const pts = [];
      for (const [t, w, n] of ev) { sum += n - cur[w]; cur[w] = n; pts.push([t, sum]); }
      for (const [t, w, what] of D.worker_events) if (what !== "joined") { sum -= cur[w]; cur[w] = 0; pts.push([t, sum]); }
      return pts.sort((a, b) => a[0] - b[0]);
    })()}], xs);
const lostMarks = D.worker_events.filter(e => e[2] === "lost").map(e => ({x: e[0], label: D.workers[e[1]] + " lost"}));
herdChart(document.getElementById("cpu"), D.samples.map((ss, w) => ({name: D.workers[w], points: ss.map(s => [s[0], s[1]])})),
          Object.assign({marks: lostMarks}, xs));
herdChart(document.getElementById("memory"), D.samples.map((ss, w) => ({name: D.workers[w], points: ss.map(s => [s[0], s[2]])})),
          Object.assign({yfmt: herdBytes, marks: lostMarks}, xs));
const pools = [...new Set(D.pool_events.map(e => e[1]))];
const poolSeries = [];
for (const p of pools) {
  const evs = D.pool_events.filter(e => e[1] === p);
  poolSeries.push({name: p + " target", step: true, points: evs.map(e => [e[0], e[5]])});
  poolSeries.push({name: p + " workers", step: true, points: evs.map(e => [e[0], e[6]])});
  poolSeries.push({name: p + " pending jobs", step: true, points: evs.map(e => [e[0], e[8]])});
}
herdChart(document.getElementById("pool"), poolSeries, Object.assign({
  marks: D.pool_events.filter(e => e[2] === "failed" || e[2] === "scaled").map(e => ({x: e[0], label: e[2], color: e[2] === "failed" ? "#d44" : "#3a7"}))}, xs));

// Tables of events, data, slow and failed runs.
const at = ms => "+" + herdSecs(ms / 1000);
fill("worker-events", ["when", "worker", "what", "host", "pool", "job", "threads", "why"],
     D.worker_events.map(e => [at(e[0]), D.workers[e[1]], e[2], e[3], e[4] || "-", e[5] || "-", e[6], e[7] || ""]));
fill("pool-events", ["when", "pool", "what", "job", "reason", "target", "workers", "running", "pending"],
     D.pool_events.map(e => [at(e[0]), e[1], e[2], e[3] || "-", e[4] || "", e[5], e[6], e[7], e[8]]));
fill("moved", ["worker", "inputs fetched", "results stored"], D.moved.by_worker.map(m => [m[0], herdBytes(m[1]), herdBytes(m[2])]));
const runRow = r => [r[0], r[1], r[2] || "-", at(r[3]), (r[4] / 1000).toFixed(3) + " ms", r[5], r[6] + 1, r[7], r[8]];
fill("slowest", ["task", "function", "worker", "started", "ran", "status", "attempt"], D.slowest.map(r => runRow(r).slice(0, 7)));
fill("failed", ["task", "function", "worker", "started", "ran", "status", "attempt", "error", "message"], D.failed.map(runRow));
)JS";

const char* kTail = R"HTML(
</script>
</body>
</html>
)HTML";

std::string escape_text(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

}  // namespace

std::string html_page(const std::string& title, const std::string& data_json) {
  std::string out;
  out.reserve(data_json.size() + 32768);
  out += kHead;
  out += escape_text(title);
  out += kBody;
  out += page_css();
  out += kBody2;
  out += data_json;
  out += kScript;
  out += charts_js();
  out += kMain;
  out += kTail;
  return out;
}

}  // namespace herd::record
