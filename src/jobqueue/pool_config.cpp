#include "jobqueue/pool_config.hpp"

#include <CLI/CLI.hpp>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>

namespace herd::jobqueue {
namespace {

using Setter = std::function<void(PoolConfig&, const std::vector<std::string>&)>;

int to_int(const std::string& key, const std::vector<std::string>& v) {
  try {
    std::size_t used = 0;
    const int n = std::stoi(v.at(0), &used);
    if (used != v.at(0).size()) throw std::invalid_argument("");
    return n;
  } catch (const std::exception&) {
    throw std::invalid_argument(key + " must be an integer, got '" + (v.empty() ? "" : v[0]) + "'");
  }
}

std::map<std::string, std::string> to_env(const std::string& key, const std::vector<std::string>& v) {
  std::map<std::string, std::string> out;
  for (const auto& item : v) {
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0) throw std::invalid_argument(key + ": expected NAME=VALUE, got '" + item + "'");
    out[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return out;
}

const std::map<std::string, Setter>& setters() {
  static const std::map<std::string, Setter> s = [] {
    std::map<std::string, Setter> m;
    auto str = [&m](const std::string& key, SlurmOptions& (SlurmOptions::*f)(std::string) &) {
      m[key] = [f](PoolConfig& p, const std::vector<std::string>& v) { (p.options.*f)(v.empty() ? "" : v[0]); };
    };
    auto num = [&m](const std::string& key, SlurmOptions& (SlurmOptions::*f)(int) &) {
      m[key] = [f, key](PoolConfig& p, const std::vector<std::string>& v) { (p.options.*f)(to_int(key, v)); };
    };
    auto list = [&m](const std::string& key, SlurmOptions& (SlurmOptions::*f)(std::vector<std::string>) &) {
      m[key] = [f](PoolConfig& p, const std::vector<std::string>& v) { (p.options.*f)(v); };
    };
    str("memory", &SlurmOptions::memory);
    str("partition", &SlurmOptions::partition);
    str("queue", &SlurmOptions::partition);
    str("account", &SlurmOptions::account);
    str("qos", &SlurmOptions::qos);
    str("walltime", &SlurmOptions::walltime);
    str("job_name", &SlurmOptions::job_name);
    str("log_directory", &SlurmOptions::log_directory);
    str("worker_executable", &SlurmOptions::worker_executable);
    str("warning_signal", &SlurmOptions::warning_signal);
    str("interface", &SlurmOptions::interface);
    num("cores", &SlurmOptions::cores);
    num("nthreads", &SlurmOptions::nthreads);
    num("gpus", &SlurmOptions::gpus);
    num("warning_seconds", &SlurmOptions::warning_seconds);
    num("retire_before", &SlurmOptions::retire_before);
    num("jobs", &SlurmOptions::jobs);
    list("job_extra_directives", &SlurmOptions::job_extra_directives);
    list("job_script_prologue", &SlurmOptions::job_script_prologue);
    list("worker_extra_args", &SlurmOptions::worker_extra_args);
    m["env"] = [](PoolConfig& p, const std::vector<std::string>& v) { p.options.env(to_env("env", v)); };
    m["resources"] = [](PoolConfig& p, const std::vector<std::string>& v) {
      std::map<std::string, double> r;
      for (const auto& [k, amount] : to_env("resources", v)) {
        try {
          r[k] = std::stod(amount);
        } catch (const std::exception&) {
          throw std::invalid_argument("resources: amount of '" + k + "' is not a number");
        }
      }
      p.options.resources(r);
    };
    m["kind"] = [](PoolConfig& p, const std::vector<std::string>& v) {
      p.kind = v.empty() ? "" : v[0];
      if (p.kind != "slurm" && p.kind != "local") throw std::invalid_argument("kind must be slurm or local, got '" + p.kind + "'");
    };
    m["adapt_minimum"] = [](PoolConfig& p, const std::vector<std::string>& v) { p.adapt_minimum = to_int("adapt_minimum", v); };
    m["adapt_maximum"] = [](PoolConfig& p, const std::vector<std::string>& v) { p.adapt_maximum = to_int("adapt_maximum", v); };
    m["idle_timeout"] = [](PoolConfig& p, const std::vector<std::string>& v) { p.idle_timeout_s = to_int("idle_timeout", v); };
    return m;
  }();
  return s;
}

std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string toml_list(const std::vector<std::string>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + toml_string(v[i]);
  return out + "]";
}

}  // namespace

SchedulerConfig parse_config(std::istream& in, const std::string& source) {
  SchedulerConfig config;
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigTOML().from_config(in);
  } catch (const std::exception& e) {
    throw std::invalid_argument(source + ": " + e.what());
  }
  std::map<std::string, std::size_t> pool_index;
  for (const auto& item : items) {
    if (item.name == "++" || item.name == "--") continue;
    const auto& p = item.parents;
    try {
      if (p.size() == 1 && p[0] == "scheduler") {
        if (item.name != "listen") throw std::invalid_argument("unknown key '" + item.name + "'");
        config.listen = item.inputs.empty() ? "" : item.inputs[0];
      } else if (p.size() == 2 && p[0] == "pool") {
        auto found = pool_index.find(p[1]);
        if (found == pool_index.end()) {
          found = pool_index.emplace(p[1], config.pools.size()).first;
          config.pools.emplace_back();
          config.pools.back().options.pool(p[1]);
        }
        auto setter = setters().find(item.name);
        if (setter == setters().end()) throw std::invalid_argument("unknown key '" + item.name + "'");
        setter->second(config.pools[found->second], item.inputs);
      } else {
        throw std::invalid_argument("unexpected key '" + item.name + "' (sections are [scheduler] and [pool.NAME])");
      }
    } catch (const std::invalid_argument& e) {
      std::string where;
      for (const auto& s : p) where += s + ".";
      throw std::invalid_argument(source + ": [" + (where.empty() ? "" : where.substr(0, where.size() - 1)) + "] " + e.what());
    }
  }
  for (const auto& pool : config.pools) {
    if ((pool.adapt_minimum >= 0) != (pool.adapt_maximum >= 0) || pool.adapt_maximum < pool.adapt_minimum) {
      throw std::invalid_argument(source + ": [pool." + pool.options.pool() +
                                  "] adapt_minimum and adapt_maximum go together, minimum <= maximum");
    }
  }
  return config;
}

SchedulerConfig load_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("cannot read the configuration file " + path);
  return parse_config(in, path);
}

std::string to_toml(const SchedulerConfig& c) {
  std::ostringstream s;
  if (!c.listen.empty()) s << "[scheduler]\nlisten = " << toml_string(c.listen) << "\n\n";
  for (const auto& p : c.pools) {
    const SlurmOptions& o = p.options;
    s << "[pool." << o.pool() << "]\n";
    s << "kind = " << toml_string(p.kind) << "\n";
    s << "cores = " << o.cores() << "\nnthreads = " << o.nthreads() << "\ngpus = " << o.gpus() << "\n";
    auto str = [&](const char* key, const std::string& v) {
      if (!v.empty()) s << key << " = " << toml_string(v) << "\n";
    };
    str("memory", o.memory());
    str("partition", o.partition());
    str("account", o.account());
    str("qos", o.qos());
    str("walltime", o.walltime());
    str("job_name", o.job_name());
    str("log_directory", o.log_directory());
    str("worker_executable", o.worker_executable());
    str("warning_signal", o.warning_signal());
    str("interface", o.interface());
    s << "warning_seconds = " << o.warning_seconds() << "\nretire_before = " << o.retire_before()
      << "\njobs = " << o.jobs() << "\n";
    if (!o.job_extra_directives().empty()) s << "job_extra_directives = " << toml_list(o.job_extra_directives()) << "\n";
    if (!o.job_script_prologue().empty()) s << "job_script_prologue = " << toml_list(o.job_script_prologue()) << "\n";
    if (!o.worker_extra_args().empty()) s << "worker_extra_args = " << toml_list(o.worker_extra_args()) << "\n";
    std::vector<std::string> env, resources;
    for (const auto& [k, v] : o.env()) env.push_back(k + "=" + v);
    for (const auto& [k, v] : o.resources()) {
      std::ostringstream a;
      a << v;
      resources.push_back(k + "=" + a.str());
    }
    if (!env.empty()) s << "env = " << toml_list(env) << "\n";
    if (!resources.empty()) s << "resources = " << toml_list(resources) << "\n";
    if (p.adapt_minimum >= 0) s << "adapt_minimum = " << p.adapt_minimum << "\nadapt_maximum = " << p.adapt_maximum << "\n";
    s << "idle_timeout = " << p.idle_timeout_s << "\n\n";
  }
  return s.str();
}

}  // namespace herd::jobqueue
