#include "sweep/results.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "herd/error.hpp"
#include "common/json.hpp"
#include "common/util.hpp"

namespace herd::sweep {
namespace {

TrialStatus status_from(const std::string& s) {
  if (s == "ok") return TrialStatus::ok;
  if (s == "failed") return TrialStatus::failed;
  if (s == "timeout") return TrialStatus::timeout;
  if (s == "stopped") return TrialStatus::stopped;
  throw std::invalid_argument("unknown status '" + s + "'");
}

using json::Json;

const Json* member(const Json& obj, const char* key) {
  const auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

std::string text_of(const Json& obj, const char* key) {
  const Json* v = member(obj, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string{};
}

double number_of(const Json& obj, const char* key) {
  const Json* v = member(obj, key);
  return v != nullptr && v->is_number() ? v->get<double>() : 0.0;
}

// null is how JSON spells a NaN (a diverged run's loss).
double metric_value(const Json& v) { return v.is_number() ? v.get<double>() : std::nan(""); }

std::string csv_number(double v) { return util::format_double(v); }

}  // namespace

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string to_json_line(const RunRecord& r) {
  const TrialResult& t = r.result;
  Json j;
  j["trial"] = t.id;
  j["index"] = t.index;
  j["params"] = t.params;
  j["budget"] = t.budget;
  j["status"] = to_string(t.status);
  j["final"] = r.final;
  j["metrics"] = t.metrics;
  j["history"] = t.history;
  j["exit_code"] = t.exit_code;
  j["wall_time_s"] = t.wall_time_s;
  j["attempts"] = t.attempts;
  j["worker"] = t.worker;
  j["job_id"] = t.job_id;
  j["host"] = t.host;
  j["error"] = t.error;
  j["stderr_tail"] = r.stderr_tail;
  j["finished_at"] = r.finished_at;
  return json::dump(j);
}

RunRecord from_json_line(const std::string& line) {
  const Json doc = json::parse(line);
  if (!doc.is_object()) throw std::invalid_argument("not a JSON object");
  RunRecord r;
  TrialResult& t = r.result;
  t.id = text_of(doc, "trial");
  if (t.id.empty()) throw std::invalid_argument("no trial id");
  t.index = static_cast<std::size_t>(number_of(doc, "index"));
  const Json* params = member(doc, "params");
  if (params == nullptr || !params->is_object()) throw std::invalid_argument("no params");
  for (const auto& [k, v] : params->items()) {
    if (!v.is_string()) throw std::invalid_argument("parameter " + k + " is not text");
    t.params[k] = v.get<std::string>();
  }
  t.budget = text_of(doc, "budget");
  t.status = status_from(text_of(doc, "status"));
  const Json* fin = member(doc, "final");
  r.final = fin == nullptr || !fin->is_boolean() || fin->get<bool>();
  if (const Json* m = member(doc, "metrics"); m != nullptr && m->is_object()) {
    for (const auto& [k, v] : m->items()) t.metrics[k] = metric_value(v);
  }
  if (const Json* h = member(doc, "history"); h != nullptr && h->is_object()) {
    for (const auto& [k, v] : h->items()) {
      if (!v.is_array()) continue;
      auto& values = t.history[k];
      for (const Json& x : v) values.push_back(metric_value(x));
    }
  }
  t.exit_code = static_cast<int>(number_of(doc, "exit_code"));
  t.wall_time_s = number_of(doc, "wall_time_s");
  t.attempts = static_cast<int>(number_of(doc, "attempts"));
  t.worker = text_of(doc, "worker");
  t.job_id = text_of(doc, "job_id");
  t.host = text_of(doc, "host");
  t.error = text_of(doc, "error");
  r.stderr_tail = text_of(doc, "stderr_tail");
  r.finished_at = text_of(doc, "finished_at");
  return r;
}

ResultsStore::ResultsStore(const std::string& prefix, std::vector<std::string> param_names, std::string objective,
                           bool with_budget)
    : objective_(std::move(objective)), with_budget_(with_budget), param_columns_(std::move(param_names)) {
  std::string base = prefix;
  for (const char* ext : {".jsonl", ".csv"}) {
    const std::string e = ext;
    if (base.size() > e.size() && base.compare(base.size() - e.size(), e.size(), e) == 0) {
      base.resize(base.size() - e.size());
    }
  }
  jsonl_path_ = base + ".jsonl";
  csv_path_ = base + ".csv";
  const std::filesystem::path parent = std::filesystem::path(jsonl_path_).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  jsonl_fd_ = ::open(jsonl_path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (jsonl_fd_ < 0) throw Error("herd sweep: cannot open " + jsonl_path_ + ": " + std::strerror(errno));
  // Two sweeps appending to one log would interleave their decisions; the lock goes with the
  // process, so a killed sweep never leaves it behind.
  if (::flock(jsonl_fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(jsonl_fd_);
    jsonl_fd_ = -1;
    throw Error("herd sweep: " + jsonl_path_ + " is in use by another sweep");
  }
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::pread(jsonl_fd_, buf, sizeof buf, static_cast<off_t>(text.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error("herd sweep: cannot read " + jsonl_path_ + ": " + std::strerror(errno));
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t end = std::min(text.find('\n', pos), text.size());
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      previous_.push_back(from_json_line(line));
    } catch (const std::invalid_argument&) {
      ++unreadable_;
    }
  }
  // A line cut short by a kill: end it, so the next record starts on a line of its own.
  if (!text.empty() && text.back() != '\n') write_all(jsonl_fd_, "\n", jsonl_path_);
  for (const RunRecord& r : previous_) {
    if (!r.final) continue;
    add_columns(r);
    const auto it = row_of_.find(r.result.id);
    if (it == row_of_.end()) {
      row_of_[r.result.id] = rows_.size();
      rows_.push_back(r);
    } else {
      rows_[it->second] = r;
    }
  }
  rewrite_csv();
}

ResultsStore::~ResultsStore() {
  if (jsonl_fd_ >= 0) ::close(jsonl_fd_);
  if (csv_fd_ >= 0) ::close(csv_fd_);
}

void ResultsStore::write_all(int fd, const std::string& text, const std::string& path) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error("herd sweep: cannot write " + path + ": " + std::strerror(errno));
    done += static_cast<std::size_t>(n);
  }
}

bool ResultsStore::add_columns(const RunRecord& r) {
  bool added = false;
  for (const auto& [k, v] : r.result.params) {
    if (std::find(param_columns_.begin(), param_columns_.end(), k) == param_columns_.end()) {
      param_columns_.push_back(k);
      added = true;
    }
  }
  for (const auto& [k, v] : r.result.metrics) {
    if (std::find(metric_columns_.begin(), metric_columns_.end(), k) == metric_columns_.end()) {
      metric_columns_.push_back(k);
      added = true;
    }
  }
  if (!r.result.budget.empty() && !with_budget_) {
    with_budget_ = true;
    added = true;
  }
  // The objective first, the others by name.
  std::sort(metric_columns_.begin(), metric_columns_.end(), [&](const std::string& a, const std::string& b) {
    if ((a == objective_) != (b == objective_)) return a == objective_;
    return a < b;
  });
  return added;
}

std::string ResultsStore::csv_row(const RunRecord& r) const {
  const TrialResult& t = r.result;
  std::string line = csv_field(t.id) + "," + std::to_string(t.index) + "," + to_string(t.status);
  for (const auto& p : param_columns_) {
    const auto it = t.params.find(p);
    line += "," + csv_field(it == t.params.end() ? "" : it->second);
  }
  if (with_budget_) line += "," + csv_field(t.budget);
  for (const auto& m : metric_columns_) {
    const auto it = t.metrics.find(m);
    line += "," + (it == t.metrics.end() ? std::string{} : csv_number(it->second));
  }
  line += "," + std::to_string(t.exit_code) + "," + csv_number(t.wall_time_s) + "," + std::to_string(t.attempts) +
          "," + csv_field(t.worker) + "," + csv_field(t.job_id) + "," + csv_field(t.host) + "," +
          csv_field(t.error) + "," + csv_field(r.finished_at) + "\n";
  return line;
}

void ResultsStore::rewrite_csv() {
  std::string text = "trial,index,status";
  // A metric named like a parameter or a fixed column gets a prefix, so no header repeats.
  static const char* const kFixed[] = {"trial", "index", "status", "budget", "exit_code", "wall_time_s",
                                       "attempts", "worker", "job_id", "host", "error", "finished_at"};
  for (const auto& p : param_columns_) text += "," + csv_field(p);
  if (with_budget_) text += ",budget";
  for (const auto& m : metric_columns_) {
    const bool clash = std::find(param_columns_.begin(), param_columns_.end(), m) != param_columns_.end() ||
                       std::find(std::begin(kFixed), std::end(kFixed), m) != std::end(kFixed);
    text += "," + csv_field(clash ? "metric." + m : m);
  }
  text += ",exit_code,wall_time_s,attempts,worker,job_id,host,error,finished_at\n";
  for (const auto& r : rows_) text += csv_row(r);
  // Written aside and renamed over the old file, so that a kill in the middle leaves the old one.
  const std::string tmp = csv_path_ + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("herd sweep: cannot write " + tmp + ": " + std::strerror(errno));
  try {
    write_all(fd, text, tmp);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), csv_path_.c_str()) != 0) {
    throw Error("herd sweep: cannot rename " + tmp + ": " + std::strerror(errno));
  }
  if (csv_fd_ >= 0) ::close(csv_fd_);
  csv_fd_ = ::open(csv_path_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (csv_fd_ < 0) throw Error("herd sweep: cannot open " + csv_path_ + ": " + std::strerror(errno));
}

void ResultsStore::append(const RunRecord& record) {
  if (jsonl_fd_ < 0) return;
  write_all(jsonl_fd_, to_json_line(record) + "\n", jsonl_path_);
  if (!record.final) return;
  const bool new_columns = add_columns(record);
  const auto it = row_of_.find(record.result.id);
  if (it != row_of_.end()) {
    rows_[it->second] = record;
    rewrite_csv();
  } else {
    row_of_[record.result.id] = rows_.size();
    rows_.push_back(record);
    if (new_columns) {
      rewrite_csv();
    } else {
      write_all(csv_fd_, csv_row(record), csv_path_);
    }
  }
}

}  // namespace herd::sweep
