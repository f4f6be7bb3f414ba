#include "sweep/progress.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/util.hpp"

namespace herd::sweep {
namespace {

std::string short_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

}  // namespace

ProgressView::ProgressView(Progress mode, std::ostream& out, bool is_tty, std::vector<std::string> params,
                           std::string objective)
    : mode_(mode == Progress::automatic ? (is_tty ? Progress::bar : Progress::lines) : mode),
      bar_(out, mode_ == Progress::bar),
      params_(std::move(params)),
      objective_(std::move(objective)) {}

std::string ProgressView::trial_line(const TrialResult& r, const std::string& objective,
                                     const std::vector<std::string>& order) {
  std::string line = to_string(r.status);
  line.resize(8, ' ');
  std::string params;
  for (const auto& k : order) {
    if (const auto it = r.params.find(k); it != r.params.end()) params += (params.empty() ? "" : " ") + k + "=" + it->second;
  }
  for (const auto& [k, v] : r.params) {
    if (std::find(order.begin(), order.end(), k) == order.end()) params += (params.empty() ? "" : " ") + k + "=" + v;
  }
  if (!r.budget.empty()) params += " @" + r.budget;
  line += params;
  std::string metrics;
  if (!objective.empty()) {
    if (const auto v = r.metric(objective)) metrics = objective + "=" + short_number(*v);
  }
  for (const auto& [k, v] : r.metrics) {
    if (k == objective || metrics.size() > 60) continue;
    metrics += (metrics.empty() ? "" : " ") + k + "=" + short_number(v);
  }
  if (!metrics.empty()) line += "  " + metrics;
  if (r.status != TrialStatus::ok && !r.error.empty()) line += "  (" + r.error + ")";
  char wall[32];
  std::snprintf(wall, sizeof wall, "  %.1f s", r.wall_time_s);
  line += wall;
  if (!r.worker.empty()) line += "  " + r.worker;
  return line;
}

std::string ProgressView::bar_text(const Counts& c, std::size_t width) const {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const std::size_t done = c.finished();
  std::string bar = util::ProgressBar::cells(done, c.total, width);
  bar += std::to_string(done) + "/" + std::to_string(c.total);
  bar += " ok " + std::to_string(c.ok);
  if (c.failed + c.timed_out > 0) bar += ", failed " + std::to_string(c.failed + c.timed_out);
  if (c.stopped > 0) bar += ", stopped " + std::to_string(c.stopped);
  bar += ", running " + std::to_string(c.running);
  if (done_now_ > 0 && elapsed > 0) {
    const double rate = static_cast<double>(done_now_) / elapsed;
    char buf[32];
    std::snprintf(buf, sizeof buf, rate >= 1 ? "%.1f/s" : "%.2f/min", rate >= 1 ? rate : rate * 60);
    bar += std::string(", ") + buf;
    if (done < c.total) bar += ", ETA " + util::format_duration(static_cast<double>(c.total - done) / rate);
  }
  bar += ", " + util::format_duration(elapsed);
  return bar;
}

void ProgressView::trial_done(const TrialResult& r, const Counts& c, bool resumed) {
  if (!resumed) ++done_now_;
  if (mode_ == Progress::none) return;
  if (mode_ == Progress::lines) {
    if (resumed) return;  // the count at the start says how many were taken from the file
    char prefix[32];
    std::snprintf(prefix, sizeof prefix, "[%zu/%zu] ", c.finished(), c.total);
    bar_.print(prefix + trial_line(r, objective_, params_));
    return;
  }
  // On the bar, only what needs attention gets a line of its own.
  if (!resumed && (r.status == TrialStatus::failed || r.status == TrialStatus::timeout)) {
    bar_.print(trial_line(r, objective_, params_));
  }
  tick(c);
}

void ProgressView::note(const std::string& text, const Counts& c) {
  if (mode_ == Progress::none) return;
  bar_.print(text);
  tick(c);
}

void ProgressView::tick(const Counts& c) {
  if (mode_ != Progress::bar) return;
  bar_.update(bar_text(c, 24));
}

void ProgressView::finish(const Counts& c) {
  tick(c);
  bar_.finish();
}

}  // namespace herd::sweep
