// The batch script of a Slurm pool, and Slurm's time formats.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <stdexcept>

#include "common/process.hpp"
#include "common/util.hpp"
#include "herd/slurm.hpp"

namespace herd {
namespace {

/// `v` with control characters spelled out (\n, \x01), for an error message.
std::string visible(const std::string& v) {
  std::string out;
  for (const char ch : v) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out;
}

/// Every value that reaches the script is one line of it at most: a newline (or another control
/// character, a tab aside) would end a #SBATCH directive or a command and start one of its own.
void check_line(const std::string& option, const std::string& value) {
  for (const char ch : value) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c < 0x20 && c != '\t') || c == 0x7f) {
      throw std::invalid_argument(option + " '" + visible(value) + "' contains " +
                                  (c == '\n' ? "a newline" : c == '\r' ? "a carriage return" : "a control character") +
                                  ", which would add a line of its own to the job script");
    }
  }
}

/// check_line on every value of `o` that the script contains.
void check_script_values(const SlurmOptions& o, const std::string& scheduler_address) {
  check_line("pool", o.pool());
  check_line("partition", o.partition());
  check_line("account", o.account());
  check_line("qos", o.qos());
  check_line("memory", o.memory());
  check_line("walltime", o.walltime());
  check_line("job_name", o.job_name());
  check_line("log_directory", o.log_directory());
  check_line("local_directory", o.local_directory());
  check_line("warning_signal", o.warning_signal());
  check_line("worker_executable", o.worker_executable());
  check_line("scheduler address", scheduler_address);
  check_line("shebang", o.shebang());
  for (const auto& d : o.job_directives_skip()) check_line("job_directives_skip", d);
  for (const auto& l : o.job_script_epilogue()) check_line("job_script_epilogue", l);
  for (const auto& a : o.submit_command_extra()) check_line("submit_command_extra", a);
  for (const auto& d : o.job_extra_directives()) check_line("job_extra_directives", d);
  for (const auto& l : o.job_script_prologue()) check_line("job_script_prologue", l);
  for (const auto& a : o.worker_extra_args()) check_line("worker_extra_args", a);
  for (const auto& [k, v] : o.env()) check_line("env " + k, v);
  for (const auto& [r, amount] : o.resources()) check_line("resources", r);
}

bool is_identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

}  // namespace

long walltime_seconds(const std::string& w) {
  auto fail = [&]() -> long {
    throw std::invalid_argument("walltime '" + w +
                                "' is not a Slurm time (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS)");
  };
  if (w.empty()) fail();
  long days = 0;
  std::string rest = w;
  if (const auto dash = w.find('-'); dash != std::string::npos) {
    try {
      days = std::stol(w.substr(0, dash));
    } catch (const std::exception&) {
      fail();
    }
    rest = w.substr(dash + 1);
  }
  std::vector<long> parts;
  std::stringstream in(rest);
  std::string item;
  while (std::getline(in, item, ':')) {
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos) fail();
    parts.push_back(std::stol(item));
  }
  const bool has_days = rest.size() != w.size();
  long s = 0;
  if (has_days) {  // D-HH, D-HH:MM, D-HH:MM:SS
    if (parts.empty() || parts.size() > 3) fail();
    s = parts[0] * 3600 + (parts.size() > 1 ? parts[1] * 60 : 0) + (parts.size() > 2 ? parts[2] : 0);
  } else if (parts.size() == 1) {  // MM
    s = parts[0] * 60;
  } else if (parts.size() == 2) {  // MM:SS
    s = parts[0] * 60 + parts[1];
  } else if (parts.size() == 3) {  // HH:MM:SS
    s = parts[0] * 3600 + parts[1] * 60 + parts[2];
  } else {
    fail();
  }
  return days * 86400 + s;
}

long long memory_bytes(const std::string& m) {
  auto fail = [&]() -> long long {
    throw std::invalid_argument("memory '" + m + "' is not a Slurm memory size (e.g. 4000, 512M, 8G, 1T)");
  };
  std::size_t digits = 0;
  while (digits < m.size() && std::isdigit(static_cast<unsigned char>(m[digits]))) ++digits;
  if (digits == 0 || digits > 15) fail();
  const long long n = std::stoll(m.substr(0, digits));
  std::string unit = m.substr(digits);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.size() == 3 && unit.substr(1) == "IB") unit = unit.substr(0, 1);
  if (unit.size() == 2 && unit[1] == 'B') unit = unit.substr(0, 1);
  long long scale = 0;
  if (unit.empty() || unit == "M") scale = 1LL << 20;
  else if (unit == "K") scale = 1LL << 10;
  else if (unit == "G") scale = 1LL << 30;
  else if (unit == "T") scale = 1LL << 40;
  else fail();
  if (n > (1LL << 62) / scale) fail();
  return n * scale;
}

std::string job_script(const SlurmOptions& o, const std::string& scheduler_address) {
  check_script_values(o, scheduler_address);
  if (o.cores() < 1) throw std::invalid_argument("cores must be >= 1, got " + std::to_string(o.cores()));
  if (o.gpus() < 0) throw std::invalid_argument("gpus must be >= 0, got " + std::to_string(o.gpus()));
  if (o.processes() < 1) throw std::invalid_argument("processes must be >= 1, got " + std::to_string(o.processes()));
  if (o.nodes() < 1) throw std::invalid_argument("nodes must be >= 1, got " + std::to_string(o.nodes()));
  if (o.processes() > o.cores()) {
    throw std::invalid_argument("processes (" + std::to_string(o.processes()) + ") must be at most cores (" +
                                std::to_string(o.cores()) + "): each worker needs a core of its own");
  }
  if (o.nodes() > 1 && o.cores() % o.processes() != 0) {
    throw std::invalid_argument("cores (" + std::to_string(o.cores()) + ") must be a multiple of processes (" +
                                std::to_string(o.processes()) + ") when a job spans nodes: srun gives each worker "
                                "cores/processes CPUs");
  }
  if (o.gpus() > 0 && o.gpus() % o.processes() != 0) {
    throw std::invalid_argument("gpus (" + std::to_string(o.gpus()) + ") must be a multiple of processes (" +
                                std::to_string(o.processes()) + "): each worker of a node gets gpus/processes "
                                "GPUs of its own");
  }
  if (o.shebang().rfind("#!", 0) != 0) {
    throw std::invalid_argument("shebang '" + o.shebang() + "' must start with #! (e.g. #!/usr/bin/env bash)");
  }
  if (o.warning_signal() == "USR1" || o.warning_signal() == "SIGUSR1") {
    throw std::invalid_argument("warning_signal USR1 is used by NCCL; choose TERM, USR2 or another");
  }
  const long walltime = walltime_seconds(o.walltime());
  const std::string name = o.job_name().empty() ? "herd-" + o.pool() : o.job_name();
  const std::string logs = std::filesystem::absolute(o.log_directory()).lexically_normal().string();
  const int processes = o.processes();
  const int workers = o.workers_per_job();
  const int nthreads = o.nthreads() > 0 ? o.nthreads() : std::max(1, o.cores() / processes);
  const int gpus_per_worker = o.gpus() / processes;

  std::ostringstream s;
  s << o.shebang() << "\n";
  // The generated directives, less those job_directives_skip names.
  auto directive = [&](const std::string& text) {
    for (const auto& skip : o.job_directives_skip()) {
      if (!skip.empty() && text.find(skip) != std::string::npos) return;
    }
    s << "#SBATCH " << text << "\n";
  };
  directive("--job-name=" + name);
  directive("--output=" + logs + "/" + name + "-%A_%a.out");
  directive("--error=" + logs + "/" + name + "-%A_%a.err");
  if (!o.partition().empty()) directive("--partition=" + o.partition());
  if (!o.account().empty()) directive("--account=" + o.account());
  if (!o.qos().empty()) directive("--qos=" + o.qos());
  if (o.nodes() == 1) {
    // One task: the workers of the node are processes of the batch script, sharing its CPUs.
    directive("--nodes=1");
    directive("--ntasks=1");
    directive("--cpus-per-task=" + std::to_string(o.cores()));
  } else {
    // One srun task per worker.
    directive("--nodes=" + std::to_string(o.nodes()));
    directive("--ntasks-per-node=" + std::to_string(processes));
    directive("--cpus-per-task=" + std::to_string(o.cores() / processes));
  }
  if (!o.memory().empty()) directive("--mem=" + o.memory());
  if (o.gpus() > 0) directive("--gres=gpu:" + std::to_string(o.gpus()));
  directive("--time=" + o.walltime());
  if (!o.warning_signal().empty() && o.warning_seconds() > 0) {
    directive("--signal=B:" + o.warning_signal() + "@" + std::to_string(o.warning_seconds()));
  }
  for (const auto& d : o.job_extra_directives()) {
    s << (d.rfind("#SBATCH", 0) == 0 ? d : "#SBATCH " + d) << "\n";
  }
  s << "\n# herd worker of pool '" << o.pool() << "' for the scheduler at " << scheduler_address << "\n";
  for (const auto& line : o.job_script_prologue()) s << line << "\n";
  // Values always in single quotes, so that the script reads the same whatever they hold.
  s << "export HERD_POOL=" << util::shell_quote(o.pool(), util::Quote::always) << "\n";
  s << "export HERD_JOB_ID=\"${SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID}_${SLURM_ARRAY_TASK_ID:-0}\"\n";
  s << "export HERD_WALLTIME_S=" << walltime << "\n";
  s << "export HERD_RETIRE_BEFORE_S=" << o.retire_before() << "\n";
  if (!o.local_directory().empty()) {
    s << "export HERD_LOCAL_DIRECTORY=" << util::shell_quote(o.local_directory(), util::Quote::always) << "\n";
  }
  for (const auto& [k, v] : o.env()) {
    if (!is_identifier(k)) throw std::invalid_argument("env: '" + k + "' is not a variable name");
    s << "export " << k << "=" << util::shell_quote(v, util::Quote::always) << "\n";
  }
  std::vector<std::string> args = {"--scheduler", scheduler_address, "--nthreads", std::to_string(nthreads)};
  std::string resources;
  if (o.gpus() > 0) resources = "gpu=" + std::to_string(gpus_per_worker);
  for (const auto& [r, amount] : o.resources()) {
    resources += (resources.empty() ? "" : ",") + r + "=" + util::format_double(amount);
  }
  if (!resources.empty()) args.insert(args.end(), {"--resources", resources});
  if (!o.interface().empty()) args.insert(args.end(), {"--interface", o.interface()});
  args.insert(args.end(), o.worker_extra_args().begin(), o.worker_extra_args().end());
  for (const auto& a : args) {
    if (a.find(' ') != std::string::npos) {
      throw std::invalid_argument("worker argument '" + a + "' contains a space, which herd cannot pass");
    }
  }
  s << "export HERD_ROLE=worker\n";
  s << "export HERD_ROLE_ARGS=" << util::shell_quote(util::join(args, " "), util::Quote::always) << "\n";
  const std::string exe = o.worker_executable().empty() ? process::self_executable() : o.worker_executable();
  const std::string quoted_exe = util::shell_quote(exe, util::Quote::always);
  if (workers == 1 && o.job_script_epilogue().empty()) {
    // exec: the worker is the batch step's process, so Slurm's signals reach it directly.
    s << "exec " << quoted_exe << "\n";
    return s.str();
  }
  // Several workers (or an epilogue): the script stays, starts them in the background and
  // passes on the signals that Slurm sends the batch shell (--signal=B:..., preemption); a
  // worker that gets the same signal twice within 300 ms counts it once.
  s << "export HERD_WORKERS_PER_JOB=" << workers << "\n";
  s << "export HERD_PROCESSES_PER_NODE=" << processes << "\n";
  if (o.gpus() > 0 && processes > 1) {
    // Each worker of a node takes its own slice of the node's GPUs: the worker with index i
    // on its node (HERD_WORKER_INDEX below, srun's SLURM_LOCALID) sets CUDA_VISIBLE_DEVICES to
    // GPUs i*k .. i*k+k-1 of what Slurm gave the job there, before CUDA starts (gpu::discover).
    s << "export HERD_GPUS_PER_WORKER=" << gpus_per_worker << "\n";
  }
  s << "herd_pids=()\n";
  std::vector<std::string> signals = {"TERM", "INT", "USR2"};
  std::string warning = o.warning_signal();
  if (warning.rfind("SIG", 0) == 0) warning = warning.substr(3);
  if (!warning.empty() && std::find(signals.begin(), signals.end(), warning) == signals.end()) {
    signals.push_back(warning);
  }
  for (const auto& sig : signals) {
    s << "trap 'kill -" << sig << " \"${herd_pids[@]}\" 2>/dev/null' " << sig << "\n";
  }
  if (o.nodes() == 1) {
    s << "for herd_i in $(seq 0 " << (processes - 1) << "); do\n";
    s << "  HERD_WORKER_INDEX=$herd_i " << quoted_exe << " &\n";
    s << "  herd_pids+=($!)\n";
    s << "done\n";
  } else {
    // Each srun task is one worker; SLURM_PROCID tells them apart, SLURM_LOCALID those of a
    // node (a HERD_WORKER_INDEX inherited from where sbatch ran would hide both).
    s << "unset HERD_WORKER_INDEX\n";
    s << "srun --nodes=" << o.nodes() << " --ntasks=" << workers << " --ntasks-per-node=" << processes
      << " --cpus-per-task=" << o.cores() / processes << " --kill-on-bad-exit=0 " << quoted_exe << " &\n";
    s << "herd_pids+=($!)\n";
  }
  // wait returns early when a trapped signal comes: wait again until each one has ended.
  s << "herd_status=0\n";
  s << "for herd_pid in \"${herd_pids[@]}\"; do\n";
  s << "  while true; do herd_s=0; wait \"$herd_pid\" || herd_s=$?; kill -0 \"$herd_pid\" 2>/dev/null || break; done\n";
  s << "  [ \"$herd_s\" -ne 0 ] && herd_status=$herd_s\n";
  s << "done\n";
  for (const auto& line : o.job_script_epilogue()) s << line << "\n";
  s << "exit \"$herd_status\"\n";
  return s.str();
}

}  // namespace herd
