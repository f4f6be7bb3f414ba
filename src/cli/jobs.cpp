// `herd submit`, `herd jobs` and `herd job ...`: jobs of shell commands, as HyperQueue's
// `hq submit` / `hq job` and Slurm's job arrays (the jobs are the scheduler's:
// src/scheduler/state_jobs.cpp; a task runs herd::job_task, src/task/job_task.cpp).
//
//   herd submit --array 1-1000 --cpus 4 -- ./sim.sh
//   herd submit --file job.toml
//   herd jobs
//   herd job info|wait|progress|cancel|output|resubmit ID
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <set>
#include <sstream>
#include <thread>

#include "cli/commands.hpp"
#include "cli/connect.hpp"
#include "client/jobs.hpp"
#include "common/progress_bar.hpp"
#include "common/toml_file.hpp"
#include "common/util.hpp"
#include "task/job_task.hpp"

namespace herd::detail {
namespace {

constexpr const char* kDefaultStdout = "%{SUBMIT_DIR}/job-%{JOB_ID}/%{TASK_ID}.stdout";
constexpr const char* kDefaultStderr = "%{SUBMIT_DIR}/job-%{JOB_ID}/%{TASK_ID}.stderr";

const char* kSubmitFooter = R"(The command is everything after `--`: a program and its arguments, run without a shell; one
word with spaces or shell syntax is a /bin/sh script ('echo $HERD_TASK_ID > out.txt').
Each task sees HERD_JOB_ID, HERD_TASK_ID (its array index) and, with --each-line, HERD_ENTRY.
Arrays: --array 1-1000, 0-100:2 (a step), 1,5,9, or a mix (1-10,20,30-40:5).
Output: a file per task (default %{SUBMIT_DIR}/job-%{JOB_ID}/%{TASK_ID}.stdout and .stderr;
  placeholders %{JOB_ID} %{TASK_ID} %{CWD} %{SUBMIT_DIR}; `none` keeps nothing), or with
  --stream DIR every task's output in one framed file per worker, read back with
  `herd job output ID --task N`.
Job file (--file, TOML, as HyperQueue's):
  name = "pipeline"          # also max_fails, stdout, stderr, stream
  [[task]]
  id = 1
  command = ["./prepare.sh"] # or "a /bin/sh script"
  [[task]]
  id = 2
  command = ["./simulate.sh", "--fast"]
  deps = [1]                 # runs once task 1 succeeded
  resources = { cpus = 4, gpus = 1, memory = "4G" }
  env = { OMP_NUM_THREADS = "4" }
  # also: name, cwd, priority, time_limit = "10m", retries, pool, nodes = 2 (for mpirun)
Exit status: the job's id is printed; with --wait, 0 when every task succeeded, 1 when one
  failed or was cancelled (2: usage errors).)";

/// "1-1000", "0-100:2", "1,5,9" and mixes, as (first, last, step) triples.
std::vector<std::uint64_t> parse_array(const std::string& text) {
  std::vector<std::uint64_t> out;
  auto number = [&](const std::string& s) -> std::uint64_t {
    if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 15) {
      throw std::invalid_argument("--array " + text + ": '" + s + "' is not a whole number");
    }
    return std::stoull(s);
  };
  std::stringstream parts(text);
  for (std::string part; std::getline(parts, part, ',');) {
    part = std::string(util::trim(part));
    std::uint64_t step = 1;
    if (const auto colon = part.find(':'); colon != std::string::npos) {
      step = number(part.substr(colon + 1));
      if (step == 0) throw std::invalid_argument("--array " + text + ": a step of 0");
      part = part.substr(0, colon);
    }
    const auto dash = part.find('-');
    const std::uint64_t first = number(dash == std::string::npos ? part : part.substr(0, dash));
    const std::uint64_t last = dash == std::string::npos ? first : number(part.substr(dash + 1));
    if (last < first) throw std::invalid_argument("--array " + text + ": " + part + " ends before it starts");
    out.insert(out.end(), {first, last - (last - first) % step, step});
  }
  if (out.empty()) throw std::invalid_argument("--array: no ids");
  return out;
}

/// "90", "90s", "10m", "2h", "1d", "HH:MM:SS", "MM:SS" -> milliseconds.
std::uint32_t parse_duration_ms(const std::string& text, const std::string& what) {
  auto fail = [&]() -> std::uint32_t {
    throw std::invalid_argument(what + " " + text + ": expected seconds, 10s, 5m, 2h, 1d or HH:MM:SS");
  };
  if (text.empty()) fail();
  double seconds = 0;
  try {
    if (text.find(':') != std::string::npos) {
      std::stringstream parts(text);
      for (std::string p; std::getline(parts, p, ':');) {
        std::size_t used = 0;
        const double v = std::stod(p, &used);
        if (used != p.size() || v < 0) fail();
        seconds = seconds * 60 + v;
      }
    } else {
      std::size_t used = 0;
      const double v = std::stod(text, &used);
      const std::string unit = text.substr(used);
      const double scale = unit.empty() || unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : unit == "d" ? 86400 : -1;
      if (scale < 0 || v < 0) fail();
      seconds = v * scale;
    }
  } catch (const std::logic_error&) {
    fail();
  }
  if (seconds * 1000 > 4e9) throw std::invalid_argument(what + " " + text + ": longer than 46 days");
  return static_cast<std::uint32_t>(std::llround(seconds * 1000));
}

/// "4G", "512M", "1T", "2000" (MB) -> megabytes, as herd sweep's --memory.
double parse_memory_mb(const std::string& text) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::logic_error&) {
    throw std::invalid_argument("--memory " + text + ": expected an amount such as 4G, 512M or 2000 (MB)");
  }
  std::string unit = text.substr(used);
  if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b') && unit.size() > 1) unit.pop_back();
  const double scale = unit.empty() || unit == "M" || unit == "m" ? 1
                       : unit == "G" || unit == "g"               ? 1024
                       : unit == "T" || unit == "t"               ? 1024 * 1024
                       : unit == "K" || unit == "k"               ? 1.0 / 1024
                                                                  : -1;
  if (scale < 0 || v <= 0) throw std::invalid_argument("--memory " + text + ": expected an amount such as 4G, 512M or 2000 (MB)");
  return v * scale;
}

void check_pattern(const std::string& pattern, const char* what) {
  for (std::size_t i = pattern.find("%{"); i != std::string::npos; i = pattern.find("%{", i + 2)) {
    const auto end = pattern.find('}', i);
    const std::string name = end == std::string::npos ? pattern.substr(i) : pattern.substr(i + 2, end - i - 2);
    if (name != "JOB_ID" && name != "TASK_ID" && name != "CWD" && name != "SUBMIT_DIR") {
      throw std::invalid_argument(std::string(what) + " " + pattern + ": unknown placeholder %{" + name +
                                  "} (JOB_ID, TASK_ID, CWD, SUBMIT_DIR)");
    }
  }
}

std::string output_pattern(const std::string& given, const char* fallback, const char* what) {
  if (given == "none") return {};
  if (given.empty()) return fallback;
  check_pattern(given, what);
  return given;
}

std::string submitted_by() {
  const char* user = ::getlogin();
  return std::string(user != nullptr ? user : "?") + "@" + util::hostname();
}

std::string absolute(const std::string& path) {
  std::error_code ec;
  const auto p = std::filesystem::absolute(path, ec);
  return ec ? path : p.lexically_normal().string();
}

// ---- job files ----------------------------------------------------------------------------

/// A job file (TOML) into `spec`; errors name file:line:column.
void read_job_file(const std::string& path, protocol::JobSpec& spec, std::string& stream, bool& has_stdout,
                   bool& has_stderr) {
  const tomlfile::Document doc = tomlfile::load(path);
  auto fail_at = [&](const toml::source_region& where, const std::string& what) {
    throw std::invalid_argument(tomlfile::where(doc, where) + ": " + what);
  };
  auto text = [&](const toml::node& v, const std::string& key) {
    const auto t = v.is_array() || v.is_table() ? std::nullopt : tomlfile::scalar_text(doc, v);
    if (!t) fail_at(v.source(), key + ": expected a value, got " + tomlfile::type_name(v));
    return *t;
  };
  auto whole = [&](const toml::node& v, const std::string& key) -> std::int64_t {
    if (!v.is_integer() || v.as_integer()->get() < 0) fail_at(v.source(), key + ": expected a whole number >= 0, got " + tomlfile::type_name(v));
    return v.as_integer()->get();
  };
  auto number = [&](const toml::node& v, const std::string& key) -> double {
    const auto d = v.is_boolean() ? std::nullopt : v.value<double>();
    if (!d) fail_at(v.source(), key + ": expected a number, got " + tomlfile::type_name(v));
    return *d;
  };
  const toml::array* tasks = nullptr;
  for (const auto& [key, v] : doc.root) {
    const std::string k(key.str());
    if (k == "name") spec.name = text(v, k);
    else if (k == "max_fails") spec.max_fails = whole(v, k);
    else if (k == "stdout") {
      spec.stdout_path = output_pattern(text(v, k), kDefaultStdout, "stdout");
      has_stdout = true;
    } else if (k == "stderr") {
      spec.stderr_path = output_pattern(text(v, k), kDefaultStderr, "stderr");
      has_stderr = true;
    }
    else if (k == "stream") stream = text(v, k);
    else if (k == "task") {
      tasks = v.as_array();
      if (tasks == nullptr) fail_at(key.source(), "task: expected [[task]] tables, got " + tomlfile::type_name(v));
    } else {
      fail_at(key.source(), "unknown key '" + k + "' (name, max_fails, stdout, stderr, stream, [[task]])");
    }
  }
  if (tasks == nullptr || tasks->empty()) throw std::invalid_argument(path + ": no [[task]]");
  std::map<std::uint64_t, toml::source_region> ids;
  std::vector<std::pair<std::uint64_t, toml::source_region>> deps_at;  // (dep id, where) per task, checked after
  std::uint64_t next_id = 0;
  for (const toml::node& node : *tasks) {
    const toml::table* t = node.as_table();
    if (t == nullptr) fail_at(node.source(), "[[task]]: expected a table");
    protocol::JobTaskDef d;
    bool has_id = false, has_command = false;
    for (const auto& [key, v] : *t) {
      const std::string k(key.str());
      if (k == "id") {
        d.id = static_cast<std::uint64_t>(whole(v, k));
        has_id = true;
      } else if (k == "name") {
        d.name = text(v, k);
      } else if (k == "command") {
        has_command = true;
        if (const toml::array* a = v.as_array()) {
          for (const toml::node& w : *a) d.argv.push_back(text(w, "command"));
          if (d.argv.empty()) fail_at(v.source(), "command: empty");
        } else {
          d.script = text(v, k);
        }
      } else if (k == "cwd") {
        d.cwd = text(v, k);
      } else if (k == "env") {
        const toml::table* e = v.as_table();
        if (e == nullptr) fail_at(v.source(), "env: expected a table { NAME = \"value\" }");
        for (const auto& [ek, ev] : *e) d.env[std::string(ek.str())] = text(ev, "env." + std::string(ek.str()));
      } else if (k == "deps") {
        const toml::array* a = v.as_array();
        if (a == nullptr) fail_at(v.source(), "deps: expected an array of task ids");
        for (const toml::node& dep : *a) {
          d.deps.push_back(static_cast<std::uint64_t>(whole(dep, "deps")));
          deps_at.emplace_back(d.deps.back(), dep.source());
        }
      } else if (k == "resources") {
        const toml::table* r = v.as_table();
        if (r == nullptr) fail_at(v.source(), "resources: expected a table { cpus = 4, gpus = 1, memory = \"4G\" }");
        for (const auto& [rk, rv] : *r) {
          const std::string name(rk.str());
          if (name == "memory") d.resources["memory"] = rv.is_string() ? parse_memory_mb(text(rv, name)) : number(rv, name);
          else if (name == "gpus") d.resources["gpu"] = number(rv, name);
          else d.resources[name] = number(rv, name);
        }
      } else if (k == "priority") {
        d.priority = static_cast<std::int32_t>(number(v, k));
      } else if (k == "time_limit") {
        try {
          d.time_limit_ms = parse_duration_ms(text(v, k), "time_limit");
        } catch (const std::invalid_argument& e) {
          fail_at(v.source(), e.what());
        }
      } else if (k == "retries") {
        d.retries = static_cast<std::uint32_t>(whole(v, k));
      } else if (k == "pool") {
        d.pool = text(v, k);
      } else if (k == "nodes") {
        const std::int64_t n = whole(v, k);
        if (n < 1) fail_at(v.source(), "nodes: expected a whole number of nodes, 1 or more");
        d.nodes = n > 1 ? static_cast<std::uint32_t>(n) : 0;
      } else {
        fail_at(key.source(), "[[task]]: unknown key '" + k +
                                  "' (id, name, command, cwd, env, deps, resources, priority, time_limit, retries, pool, nodes)");
      }
    }
    if (!has_command) fail_at(node.source(), "[[task]]: no command");
    if (!has_id) d.id = next_id;
    next_id = std::max(next_id, d.id + 1);
    if (!ids.emplace(d.id, node.source()).second) fail_at(node.source(), "[[task]]: a second task with id " + std::to_string(d.id));
    spec.tasks.push_back(std::move(d));
  }
  for (const auto& [dep, where] : deps_at) {
    if (ids.count(dep) == 0) fail_at(where, "deps: no task has the id " + std::to_string(dep));
  }
}

// ---- talking to the scheduler --------------------------------------------------------------

protocol::JobReply ask(const Client& client, protocol::JobOp op, std::uint64_t job = 0, bool all_tasks = false) {
  protocol::JobRequest req;
  req.op = static_cast<std::uint8_t>(op);
  req.job = job;
  req.all_tasks = all_tasks;
  req.spec.submitted_by = submitted_by();
  return ClientAccess::ask_job(client, std::move(req));
}

protocol::JobReply info_of(const Client& client, std::uint64_t job, bool all_tasks = false) {
  protocol::JobReply r = ask(client, protocol::JobOp::info, job, all_tasks);
  if (!r.ok || r.jobs.empty()) throw std::runtime_error(r.error);
  return r;
}

bool finished(const protocol::JobInfo& j) { return j.waiting == 0 && j.running == 0; }

std::string counts_text(const protocol::JobInfo& j) {
  return std::to_string(j.ok) + " ok, " + std::to_string(j.failed) + " failed, " + std::to_string(j.cancelled) +
         " cancelled" + (finished(j) ? "" : ", " + std::to_string(j.running) + " running, " + std::to_string(j.waiting) + " waiting");
}

/// Waits for `job`; with `bar`, draws its progress. Returns the job's last state.
protocol::JobInfo wait_for(const Client& client, std::uint64_t job, bool bar) {
  util::ProgressBar progress(std::cerr, util::is_terminal(std::cerr));
  auto pause = std::chrono::milliseconds(5);
  auto last_line = std::chrono::steady_clock::now();
  while (true) {
    const protocol::JobInfo j = info_of(client, job).jobs.front();
    const bool done = finished(j);
    if (bar && (done || progress.redraws() || std::chrono::steady_clock::now() - last_line > std::chrono::seconds(5))) {
      const std::uint64_t ended = j.ok + j.failed + j.cancelled;
      progress.update(util::ProgressBar::cells(ended, j.total, 30) + "job " + std::to_string(job) + ": " +
                      std::to_string(ended) + "/" + std::to_string(j.total) + " (" + counts_text(j) + ")");
      last_line = std::chrono::steady_clock::now();
    }
    if (done) {
      if (bar) progress.finish();
      return j;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(bar ? 250 : 200));
  }
}

void print_failures(const protocol::JobReply& r, std::ostream& out, std::size_t limit = 20) {
  std::size_t shown = 0;
  for (const protocol::JobTaskInfo& t : r.tasks) {
    if (t.state != "failed") continue;
    if (shown++ == limit) {
      out << "  ... (herd job info " << r.jobs.front().id << " --all-failed for every one)\n";
      break;
    }
    const auto nl = t.error.find('\n');
    const std::string first = t.error.substr(0, nl);
    out << "  task " << t.id << (t.name.empty() ? "" : " (" + t.name + ")") << ": " << first << "\n";
    if (nl != std::string::npos) {
      std::stringstream rest(t.error.substr(nl + 1));
      for (std::string line; std::getline(rest, line);) out << "    | " << line << "\n";
    }
  }
}

int job_exit(const protocol::JobInfo& j) { return j.failed + j.cancelled > 0 ? 1 : 0; }

std::string when(std::int64_t ms) {
  if (ms == 0) return "-";
  const std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

void print_info(const protocol::JobReply& r, std::ostream& out, bool all_failed) {
  const protocol::JobInfo& j = r.jobs.front();
  out << "job " << j.id << (j.name.empty() ? "" : " (" + j.name + ")") << ": " << j.state << "\n"
      << "  tasks: " << j.total << " (" << counts_text(j) << ")\n"
      << "  command: " << j.command << "\n"
      << "  submitted: " << when(j.submitted_ms) << " from " << j.submit_dir << "\n";
  if (j.finished_ms != 0) {
    out << "  finished: " << when(j.finished_ms) << " (" << util::format_duration((j.finished_ms - j.submitted_ms) / 1000.0)
        << ")\n";
  }
  if (!j.after.empty()) {
    out << "  after jobs:";
    for (auto a : j.after) out << " " << a;
    out << "\n";
  }
  if (!j.stream_dir.empty()) out << "  output: streamed to " << j.stream_dir << " (herd job output " << j.id << ")\n";
  else out << "  stdout: " << (j.stdout_path.empty() ? "none" : j.stdout_path) << "\n  stderr: "
           << (j.stderr_path.empty() ? "none" : j.stderr_path) << "\n";
  if (j.failed > 0) {
    out << "failed tasks:\n";
    print_failures(r, out, all_failed ? SIZE_MAX : 20);
  }
}

// ---- the commands ----------------------------------------------------------------------------

int submit(const std::vector<std::string>& all_args) {
  CLI::App app{"herd submit: run a command, or an array of it, as a job of the scheduler"};
  app.name("herd submit");
  SchedulerArgs sched(app);
  std::string array, each_line, file, name, cwd, out_pattern, err_pattern, stream, time_limit, memory, pool;
  std::vector<std::string> env, resources, after;
  double cpus = 0, gpus = 0;
  int nodes = 1, priority = 0, retries = 0;
  std::int64_t max_fails = -1;
  bool wait = false, progress = false;
  app.add_option("--array", array, "task ids: 1-1000, 0-100:2, 1,5,9");
  app.add_option("--each-line", each_line, "a task per line of FILE (HERD_ENTRY)")->check(CLI::ExistingFile);
  app.add_option("--file", file, "a job file (TOML): named tasks with dependencies")->check(CLI::ExistingFile);
  app.add_option("--name", name, "the job's name");
  app.add_option("--cpus", cpus, "resource cpus=N per task (workers must offer it)");
  app.add_option("--gpus", gpus, "resource gpu=N per task (a Slurm pool's gpus)");
  app.add_option("--memory", memory, "resource memory per task, e.g. 4G (in MB)");
  app.add_option("--nodes", nodes, "whole nodes per task (1): workers on this many hosts of one allocation, held for the task alone; it runs on the first, with HERD_NODES and HERD_NODE_FILE (for mpirun)")->check(CLI::PositiveNumber);
  app.add_option("--resource", resources, "NAME=AMOUNT per task (repeatable)")->allow_extra_args(false);
  app.add_option("--time-limit", time_limit, "a task is killed after this long (90s, 10m, 2h, HH:MM:SS)");
  app.add_option("--priority", priority, "higher runs first");
  app.add_option("--pool", pool, "only on workers of this pool");
  app.add_option("--cwd", cwd, "the tasks' working directory (default: here)");
  app.add_option("--env", env, "NAME=VALUE for the command (repeatable)")->allow_extra_args(false);
  app.add_option("--stdout", out_pattern, "each task's stdout file (placeholders; none)");
  app.add_option("--stderr", err_pattern, "each task's stderr file (placeholders; none)");
  app.add_option("--stream", stream, "every task's output framed in one file per worker in DIR");
  app.add_option("--after", after, "start once these jobs succeeded (repeatable, or 3,4)")->allow_extra_args(false);
  app.add_option("--max-fails", max_fails, "cancel the rest once more than N tasks failed")->check(CLI::NonNegativeNumber);
  app.add_option("--retries", retries, "runs a failed task again up to N times")->check(CLI::NonNegativeNumber);
  app.add_flag("--wait", wait, "wait for the job; exit 1 when a task failed");
  app.add_flag("--progress", progress, "wait, with a progress bar");
  app.footer(kSubmitFooter);
  std::vector<std::string> args = all_args, command;
  const auto dashes = std::find(args.begin(), args.end(), "--");
  if (dashes != args.end()) {
    command.assign(dashes + 1, args.end());
    args.erase(dashes, args.end());
  }
  if (const int rc = sched.parse(app, args); rc >= 0) return rc;
  protocol::JobSpec spec;
  bool file_stdout = false, file_stderr = false;
  try {
    if (!file.empty()) {
      if (!command.empty() || !array.empty() || !each_line.empty()) {
        throw std::invalid_argument("--file takes no command, --array or --each-line: its tasks are in the file");
      }
      read_job_file(file, spec, stream, file_stdout, file_stderr);
    } else if (command.empty()) {
      std::cerr << "herd submit: no command: give it after `--` (herd submit -- ./sim.sh), or --file\n";
      return 2;
    }
    if (!array.empty() && !each_line.empty()) throw std::invalid_argument("give --array or --each-line, not both");
    const std::string here = absolute(".");
    spec.submit_dir = here;
    spec.submitted_by = submitted_by();
    if (!name.empty() || spec.name.empty()) spec.name = name;
    if (max_fails >= 0) spec.max_fails = max_fails;
    if (app.count("--stdout") > 0) spec.stdout_path = output_pattern(out_pattern, kDefaultStdout, "--stdout");
    else if (!file_stdout) spec.stdout_path = kDefaultStdout;
    if (app.count("--stderr") > 0) spec.stderr_path = output_pattern(err_pattern, kDefaultStderr, "--stderr");
    else if (!file_stderr) spec.stderr_path = kDefaultStderr;
    if (!stream.empty()) {
      check_pattern(stream, "--stream");
      spec.stream_dir = stream.find("%{") == std::string::npos ? absolute(stream) : stream;
    }
    for (const std::string& a : after) {
      std::stringstream ids(a);
      for (std::string id; std::getline(ids, id, ',');) {
        if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos) {
          throw std::invalid_argument("--after " + a + ": '" + id + "' is not a job id");
        }
        spec.after.push_back(std::stoull(id));
      }
    }
    // What the command line gives applies to every task (of a job file too, unless it set it).
    auto apply_options = [&](protocol::JobTaskDef& d, bool from_file) {
      if (cpus > 0) d.resources["cpus"] = cpus;
      if (gpus > 0) d.resources["gpu"] = gpus;
      if (!memory.empty()) d.resources["memory"] = parse_memory_mb(memory);
      for (const std::string& r : resources) {
        const auto [rname, amount] = split_pair(r, "--resource");
        try {
          d.resources[rname] = std::stod(amount);
        } catch (const std::logic_error&) {
          throw std::invalid_argument("--resource " + r + ": the amount is not a number");
        }
      }
      if (!time_limit.empty() && (!from_file || d.time_limit_ms == 0)) d.time_limit_ms = parse_duration_ms(time_limit, "--time-limit");
      if (!from_file || app.count("--priority") > 0) d.priority = priority;
      if (app.count("--retries")) d.retries = static_cast<std::uint32_t>(retries);
      if (!pool.empty()) d.pool = pool;
      if (app.count("--nodes") > 0) d.nodes = nodes > 1 ? static_cast<std::uint32_t>(nodes) : 0;
      if (!cwd.empty() && (!from_file || d.cwd.empty())) d.cwd = cwd;
      for (const std::string& e : env) {
        const auto [ename, value] = split_pair(e, "--env");
        d.env.emplace(ename, value);
      }
      // Relative working directories are the submitter's.
      if (!d.cwd.empty() && d.cwd[0] != '/') d.cwd = absolute(here + "/" + d.cwd);
    };
    if (!file.empty()) {
      for (protocol::JobTaskDef& d : spec.tasks) apply_options(d, true);
    } else {
      spec.task.argv = command;
      apply_options(spec.task, false);
      if (!array.empty()) spec.array = parse_array(array);
      if (!each_line.empty()) {
        std::ifstream in(each_line);
        for (std::string line; std::getline(in, line);) spec.entries.push_back(line);
        if (spec.entries.empty()) throw std::invalid_argument("--each-line " + each_line + ": the file has no lines");
      }
    }
  } catch (const std::invalid_argument& e) {
    std::cerr << "herd submit: " << e.what() << "\n";
    return 2;
  }
  try {
    Client client = sched.connect("herd submit");
    protocol::JobRequest req;
    req.op = static_cast<std::uint8_t>(protocol::JobOp::submit);
    req.spec = std::move(spec);
    const protocol::JobReply reply = ClientAccess::ask_job(client, std::move(req), std::chrono::seconds(60));
    if (!reply.ok) {
      std::cerr << "herd submit: " << reply.error << "\n";
      return 2;
    }
    std::cout << reply.job << std::endl;
    if (!wait && !progress) return 0;
    const protocol::JobInfo j = wait_for(client, reply.job, progress);
    std::cerr << "job " << j.id << " " << j.state << ": " << counts_text(j) << "\n";
    if (j.failed > 0) print_failures(info_of(client, j.id), std::cerr, 5);
    return job_exit(j);
  } catch (const std::exception& e) {
    std::cerr << "herd submit: " << e.what() << "\n";
    return 1;
  }
}

int list_jobs(const std::vector<std::string>& args) {
  CLI::App app{"herd jobs: every job of shell commands, and the detached campaigns of C++ clients"};
  app.name("herd jobs");
  SchedulerArgs sched(app);
  if (const int rc = sched.parse(app, args); rc >= 0) return rc;
  try {
    Client client = sched.connect("herd jobs");
    const protocol::JobReply r = ask(client, protocol::JobOp::list);
    if (r.jobs.empty() && r.campaigns.empty()) {
      std::cout << "no jobs\n";
      return 0;
    }
    if (!r.jobs.empty()) {
      std::cout << std::left << std::setw(6) << "ID" << std::setw(20) << "NAME" << std::setw(11) << "STATE" << std::right
                << std::setw(9) << "TASKS" << std::setw(9) << "OK" << std::setw(8) << "FAILED" << std::setw(10)
                << "CANCELLED" << std::setw(9) << "RUNNING" << std::setw(9) << "WAITING" << "  COMMAND\n";
      for (const protocol::JobInfo& j : r.jobs) {
        std::string cmd = j.command.size() > 60 ? j.command.substr(0, 57) + "..." : j.command;
        std::string jname = j.name.size() > 19 ? j.name.substr(0, 16) + "..." : j.name;
        std::cout << std::left << std::setw(6) << j.id << std::setw(20) << (jname.empty() ? "-" : jname) << std::setw(11)
                  << j.state << std::right << std::setw(9) << j.total << std::setw(9) << j.ok << std::setw(8) << j.failed
                  << std::setw(10) << j.cancelled << std::setw(9) << j.running << std::setw(9) << j.waiting << "  " << cmd
                  << "\n";
      }
    }
    if (!r.campaigns.empty()) {
      if (!r.jobs.empty()) std::cout << "\n";
      std::cout << "campaigns (C++ clients' detached tasks):\n";
      std::cout << std::left << std::setw(26) << "NAME" << std::right << std::setw(9) << "TASKS" << std::setw(9) << "DONE"
                << std::setw(8) << "FAILED" << std::setw(9) << "PENDING" << "  CLIENT\n";
      for (const protocol::CampaignInfo& c : r.campaigns) {
        std::cout << std::left << std::setw(26) << c.name << std::right << std::setw(9) << c.total << std::setw(9) << c.done
                  << std::setw(8) << c.failed << std::setw(9) << c.pending << "  " << (c.client.empty() ? "(detached)" : c.client)
                  << "\n";
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "herd jobs: " << e.what() << "\n";
    return 1;
  }
}

/// `herd job output`: a task's output, from its files or the job's stream files.
int print_output(const Client& client, std::uint64_t job, const std::vector<std::uint64_t>& tasks, bool err_only,
                 bool out_only) {
  const bool whole_job = tasks.empty();
  const protocol::JobReply r = info_of(client, job, whole_job);
  const protocol::JobInfo& j = r.jobs.front();
  const bool file_job = j.command.find(" of a job file") != std::string::npos;  // state_jobs.cpp's words
  std::map<std::uint64_t, const protocol::JobTaskInfo*> by_id;
  for (const auto& t : r.tasks) by_id[t.id] = &t;
  std::vector<std::uint64_t> ids = tasks;
  if (whole_job) {
    for (const auto& t : r.tasks) {
      if (t.state == "ok" || t.state == "failed") ids.push_back(t.id);
    }
  }
  // Streamed: every file read once, for all the tasks asked.
  std::map<std::uint64_t, StreamedOutput> streamed;
  if (!j.stream_dir.empty()) {
    const std::string dir = job_output_path(j.stream_dir, job, 0, job_task_cwd(j.cwd, j.submit_dir), j.submit_dir);
    streamed = read_stream_outputs(dir, job, tasks.size() == 1 ? &tasks[0] : nullptr);
  }
  int missing = 0;
  for (std::uint64_t id : ids) {
    // A job file's tasks are all in the reply (each with its working directory); an array's
    // tasks share the job's.
    auto it = by_id.find(id);
    if (it == by_id.end() && file_job) {
      std::cerr << "herd job output: job " << job << " has no task " << id << "\n";
      ++missing;
      continue;
    }
    const std::string task_cwd = it != by_id.end() ? it->second->cwd : j.cwd;
    const std::string state = it != by_id.end() ? it->second->state : "no output";
    const std::string cwd = job_task_cwd(task_cwd, j.submit_dir);
    std::string out, err;
    bool found = false;
    if (!j.stream_dir.empty()) {
      if (auto sit = streamed.find(id); sit != streamed.end()) {
        found = true;
        out = std::move(sit->second.out);
        err = std::move(sit->second.err);
      }
    } else {
      auto slurp = [&](const std::string& pattern, std::string& into) {
        if (pattern.empty()) return;
        std::ifstream in(job_output_path(pattern, job, id, cwd, j.submit_dir), std::ios::binary);
        if (!in) return;
        found = true;
        into.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      };
      slurp(j.stdout_path, out);
      if (j.stderr_path != j.stdout_path) slurp(j.stderr_path, err);
    }
    if (!found) {
      if (!whole_job) {
        std::cerr << "herd job output: no output of task " << id << " of job " << job << " (" << state
                  << (j.stdout_path.empty() && j.stream_dir.empty() ? "; the job keeps none" : "") << ")\n";
        ++missing;
      }
      continue;
    }
    if (!err_only) std::cout << out;
    if (!out_only) std::cerr << err;
  }
  std::cout.flush();
  return missing > 0 ? 1 : 0;
}

int job_command(const std::vector<std::string>& all_args) {
  static const char* kUsage =
      "usage: herd job info|wait|progress|cancel|output|resubmit ID [options]\n"
      "  info ID [--all-failed]           the job, and its failed tasks with their exit codes and last stderr\n"
      "  wait ID...                       until they finish; exit 1 when a task failed or was cancelled\n"
      "  progress ID...                   wait, with a progress bar\n"
      "  cancel ID...                     cancel what has not finished (running tasks are killed)\n"
      "  output ID [--task N] [--stdout|--stderr]   a task's output (every finished task's without --task)\n"
      "  resubmit ID [--failed]           a new job of its tasks (only the failed ones with --failed)\n";
  if (all_args.empty() || all_args[0] == "--help" || all_args[0] == "-h") {
    std::cout << kUsage;
    return all_args.empty() ? 2 : 0;
  }
  const std::string verb = all_args[0];
  static const std::set<std::string> kVerbs = {"info", "wait", "progress", "cancel", "output", "resubmit"};
  if (kVerbs.count(verb) == 0) {
    std::cerr << "herd job: unknown command '" << verb << "'\n" << kUsage;
    return 2;
  }
  CLI::App app{"herd job " + verb};
  app.name("herd job " + verb);
  SchedulerArgs sched(app);
  std::vector<std::uint64_t> ids, tasks;
  bool failed_only = false, all_failed = false, err_only = false, out_only = false;
  app.add_option("ID", ids, "job id")->required();
  if (verb == "output") {
    app.add_option("--task", tasks, "task id (repeatable)")->allow_extra_args(false);
    app.add_flag("--stderr", err_only, "only stderr");
    app.add_flag("--stdout", out_only, "only stdout");
  }
  if (verb == "resubmit") app.add_flag("--failed", failed_only, "only the failed tasks");
  if (verb == "info") app.add_flag("--all-failed", all_failed, "every failed task, not the first 20");
  if (const int rc = sched.parse(app, std::vector<std::string>(all_args.begin() + 1, all_args.end())); rc >= 0) return rc;
  try {
    Client client = sched.connect("herd job " + verb);
    int rc = 0;
    for (std::uint64_t id : ids) {
      if (verb == "info") {
        print_info(info_of(client, id), std::cout, all_failed);
      } else if (verb == "wait" || verb == "progress") {
        const protocol::JobInfo j = wait_for(client, id, verb == "progress");
        std::cout << "job " << id << " " << j.state << ": " << counts_text(j) << "\n";
        rc = std::max(rc, job_exit(j));
      } else if (verb == "cancel") {
        const protocol::JobReply r = ask(client, protocol::JobOp::cancel, id);
        if (!r.ok) throw std::runtime_error(r.error);
        std::cout << "job " << id << " cancelled (" << counts_text(r.jobs.front()) << ")\n";
      } else if (verb == "output") {
        rc = std::max(rc, print_output(client, id, tasks, err_only, out_only));
      } else if (verb == "resubmit") {
        const protocol::JobReply r = ask(client, protocol::JobOp::resubmit, id, !failed_only);
        if (!r.ok) throw std::runtime_error(r.error);
        std::cout << r.job << std::endl;
      }
    }
    return rc;
  } catch (const std::exception& e) {
    std::cerr << "herd job " << verb << ": " << e.what() << "\n";
    return 1;
  }
}

}  // namespace

int submit_main(const std::vector<std::string>& args) { return submit(args); }
int jobs_main(const std::vector<std::string>& args) { return list_jobs(args); }
int job_main(const std::vector<std::string>& args) { return job_command(args); }

}  // namespace herd::detail
