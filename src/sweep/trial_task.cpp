#include "sweep/trial_task.hpp"

#include <cxxabi.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <typeinfo>

#include "herd/remote.hpp"
#include "common/util.hpp"
#include "herd/sweep.hpp"
#include "sweep/metrics.hpp"
#include "common/env.hpp"

namespace herd {
namespace sweep {
namespace {

// What report_metric() appends to: set while a function trial runs on this thread.
thread_local std::map<std::string, std::vector<double>>* t_history = nullptr;

constexpr std::size_t kTailBytes = 2048;

std::string current_exception_type() {
  const std::type_info* t = abi::__cxa_current_exception_type();
  if (t == nullptr) return "unknown exception";
  return util::demangle(t->name());
}

std::string last_line(const std::string& text) {
  std::size_t end = text.find_last_not_of(" \t\r\n");
  if (end == std::string::npos) return {};
  const std::size_t start = text.find_last_of('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1, end - (start == std::string::npos ? 0 : start + 1) + 1);
}

void run_command(const TrialRequest& request, TrialOutput& out) {
  const ShellResult r = herd::shell(request.command);
  out.exit_code = r.exit_code;
  out.timed_out = r.timed_out;
  out.wall_time_s = r.wall_time_s;
  out.stdout_tail = last_lines(r.stdout_tail, kTailBytes);
  out.stderr_tail = last_lines(r.stderr_tail, kTailBytes);
  // herd::shell keeps the last tail_bytes: when it kept that many, the first line may be cut.
  ParsedMetrics parsed = parse_metrics(r.stdout_tail, r.stdout_tail.size() >= request.command.tail_bytes);
  out.metrics = std::move(parsed.final);
  out.history = std::move(parsed.history);
  if (r.timed_out) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "timed out after %g s", request.command.timeout_s);
    out.error = buf;
  } else if (r.exit_code != 0) {
    const std::string why = last_line(r.stderr_tail);
    out.error = "exit code " + std::to_string(r.exit_code) + (why.empty() ? "" : ": " + why);
  } else {
    out.error = std::move(parsed.error);
  }
}

void run_function(const TrialRequest& request, TrialOutput& out) {
  const detail::FunctionEntry* entry = detail::find_function(request.function);
  if (entry == nullptr) {
    out.error = "function '" + request.function + "' is not registered on this worker (HERD_TASK)";
    return;
  }
  msgpack::sbuffer args;
  msgpack::packer<msgpack::sbuffer> pk(args);
  pk.pack_array(1);
  pk.pack(request.params);
  const msgpack::object_handle in = msgpack::unpack(args.data(), args.size());
  msgpack::sbuffer result;
  std::map<std::string, std::vector<double>> history;
  t_history = &history;
  const auto start = std::chrono::steady_clock::now();
  try {
    entry->invoke(in.get(), result);
  } catch (const std::exception& e) {
    out.error = current_exception_type() + ": " + e.what();
  } catch (...) {
    out.error = current_exception_type();
  }
  t_history = nullptr;
  out.wall_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.history = std::move(history);
  // A metric only reported along the way ends at its last report.
  for (const auto& [name, values] : out.history) {
    if (!values.empty()) out.metrics[name] = values.back();
  }
  if (!out.error.empty()) return;
  const msgpack::object_handle h = msgpack::unpack(result.data(), result.size());
  const msgpack::object& o = h.get();
  try {
    if (o.type == msgpack::type::MAP) {
      for (const auto& [name, value] : o.as<std::map<std::string, double>>()) out.metrics[name] = value;
    } else if (o.type == msgpack::type::FLOAT32 || o.type == msgpack::type::FLOAT64 ||
               o.type == msgpack::type::POSITIVE_INTEGER || o.type == msgpack::type::NEGATIVE_INTEGER) {
      out.metrics[request.objective.empty() ? "value" : request.objective] = o.as<double>();
    } else if (o.type == msgpack::type::BOOLEAN) {
      out.metrics[request.objective.empty() ? "value" : request.objective] = o.as<bool>() ? 1 : 0;
    } else {
      out.error = "function '" + request.function + "' returned neither herd::Metrics nor a number";
    }
  } catch (const std::exception& e) {
    out.error = "function '" + request.function + "' returned something that is not herd::Metrics: " + e.what();
  }
}

}  // namespace

std::string last_lines(const std::string& text, std::size_t bytes) {
  if (text.size() <= bytes) return text;
  std::size_t from = text.size() - bytes;
  const std::size_t nl = text.find('\n', from);
  if (nl != std::string::npos && nl + 1 < text.size()) from = nl + 1;
  return text.substr(from);
}

TrialOutput run_trial(TrialRequest request) {
  TrialOutput out;
  out.worker = herd::this_task().worker;
  if (const char* job = env::get(env::Var::job_id); job != nullptr && *job != '\0') {
    out.job_id = job;
  } else if (const char* sjob = env::get("SLURM_JOB_ID")) {
    out.job_id = sjob;
  }
  out.host = util::hostname();
  // Caught here rather than left to the worker, so that the record still says where it ran.
  try {
    if (request.function.empty()) {
      run_command(request, out);
    } else {
      run_function(request, out);
    }
  } catch (const std::exception& e) {
    out.error = current_exception_type() + ": " + e.what();  // e.g. herd::shell: command not found
  }
  return out;
}

}  // namespace sweep

void report_metric(const std::string& name, double value) {
  if (sweep::t_history != nullptr) (*sweep::t_history)[name].push_back(value);
}

}  // namespace herd

HERD_TASK_NAMED(herd::sweep::run_trial, "herd::sweep::run_trial");
