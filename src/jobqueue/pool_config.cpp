#include "jobqueue/pool_config.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>

#include "common/toml_file.hpp"
#include "common/util.hpp"

namespace herd::jobqueue {
namespace {

using tomlfile::Document;

/// One key's value in the file, and how to say where it is wrong.
class Value {
 public:
  Value(const Document& doc, const toml::node& node, std::string key)
      : doc_(doc), node_(node), key_(std::move(key)) {}

  [[noreturn]] void fail(const std::string& what) const { fail_at(node_, what); }
  [[noreturn]] void fail_at(const toml::node& n, const std::string& what) const {
    throw std::invalid_argument(tomlfile::where(doc_, n.source()) + ": " + what);
  }

  /// What the value is, for a message: `the string "four"`, `an array`.
  std::string got(const toml::node& n) const {
    if (const auto* s = n.as_string()) return "the string \"" + s->get() + "\"";
    return tomlfile::type_name(n);
  }

  /// A string; an integer (memory = 8000) or an unquoted time (walltime = 01:00:00) as text.
  std::string text() const {
    if (node_.is_string() || node_.is_integer() || node_.is_time()) return *tomlfile::scalar_text(doc_, node_);
    fail(key_ + " must be a string, got " + got(node_));
  }

  int integer() const {
    const auto* i = node_.as_integer();
    if (i == nullptr) fail(key_ + " must be an integer, got " + got(node_));
    if (i->get() < std::numeric_limits<int>::min() || i->get() > std::numeric_limits<int>::max()) {
      fail(key_ + " is out of range: " + std::to_string(i->get()));
    }
    return static_cast<int>(i->get());
  }

  std::vector<std::string> strings() const {
    const auto* a = node_.as_array();
    if (a == nullptr) fail(key_ + " must be an array of strings, got " + got(node_));
    std::vector<std::string> out;
    for (const toml::node& item : *a) {
      const auto* s = item.as_string();
      if (s == nullptr) fail_at(item, key_ + " must be an array of strings, but holds " + got(item));
      out.push_back(s->get());
    }
    return out;
  }

  /// A table of NAME = VALUE, or an array of "NAME=VALUE" strings (the form older files use).
  std::map<std::string, std::string> pairs() const {
    std::map<std::string, std::string> out;
    if (const auto* t = node_.as_table()) {
      for (const auto& [name, v] : *t) {
        const auto text = v.is_array() || v.is_table() ? std::nullopt : tomlfile::scalar_text(doc_, v);
        if (!text) fail_at(v, key_ + "." + std::string(name.str()) + " must be a string, got " + got(v));
        out[std::string(name.str())] = *text;
      }
      return out;
    }
    if (!node_.is_array()) fail(key_ + " must be a table (" + key_ + ".NAME = VALUE) or an array of \"NAME=VALUE\", got " + got(node_));
    for (const auto& item : strings()) {
      const auto eq = item.find('=');
      if (eq == std::string::npos || eq == 0) fail(key_ + ": expected NAME=VALUE, got '" + item + "'");
      out[item.substr(0, eq)] = item.substr(eq + 1);
    }
    return out;
  }

  /// A table of NAME = NUMBER, or an array of "NAME=NUMBER" strings.
  std::map<std::string, double> amounts() const {
    std::map<std::string, double> out;
    if (const auto* t = node_.as_table()) {
      for (const auto& [name, v] : *t) {
        const auto amount = v.value<double>();  // an integer or a float
        if (!amount || v.is_boolean() || v.is_string()) {
          fail_at(v, key_ + "." + std::string(name.str()) + " must be a number, got " + got(v));
        }
        out[std::string(name.str())] = *amount;
      }
      return out;
    }
    for (const auto& [name, text] : pairs()) {
      std::size_t used = 0;
      double amount = 0;
      try {
        amount = std::stod(text, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != text.size()) fail(key_ + ": amount of '" + name + "' is not a number");
      out[name] = amount;
    }
    return out;
  }

 private:
  const Document& doc_;
  const toml::node& node_;
  std::string key_;
};

using Setter = std::function<void(PoolConfig&, const Value&)>;

const std::map<std::string, Setter>& setters() {
  static const std::map<std::string, Setter> s = [] {
    std::map<std::string, Setter> m;
    auto str = [&m](const std::string& key, SlurmOptions& (SlurmOptions::*f)(std::string) &) {
      m[key] = [f](PoolConfig& p, const Value& v) { (p.options.*f)(v.text()); };
    };
    auto num = [&m](const std::string& key, SlurmOptions& (SlurmOptions::*f)(int) &) {
      m[key] = [f](PoolConfig& p, const Value& v) { (p.options.*f)(v.integer()); };
    };
    auto list = [&m](const std::string& key, SlurmOptions& (SlurmOptions::*f)(std::vector<std::string>) &) {
      m[key] = [f](PoolConfig& p, const Value& v) { (p.options.*f)(v.strings()); };
    };
    str("memory", &SlurmOptions::memory);
    str("partition", &SlurmOptions::partition);
    str("queue", &SlurmOptions::partition);
    str("account", &SlurmOptions::account);
    str("qos", &SlurmOptions::qos);
    str("walltime", &SlurmOptions::walltime);
    str("job_name", &SlurmOptions::job_name);
    str("log_directory", &SlurmOptions::log_directory);
    str("local_directory", &SlurmOptions::local_directory);
    str("worker_executable", &SlurmOptions::worker_executable);
    str("warning_signal", &SlurmOptions::warning_signal);
    str("interface", &SlurmOptions::interface);
    str("shebang", &SlurmOptions::shebang);
    num("processes", &SlurmOptions::processes);
    num("nodes", &SlurmOptions::nodes);
    list("job_directives_skip", &SlurmOptions::job_directives_skip);
    list("job_script_epilogue", &SlurmOptions::job_script_epilogue);
    list("submit_command_extra", &SlurmOptions::submit_command_extra);
    num("cores", &SlurmOptions::cores);
    num("nthreads", &SlurmOptions::nthreads);
    num("gpus", &SlurmOptions::gpus);
    num("warning_seconds", &SlurmOptions::warning_seconds);
    num("retire_before", &SlurmOptions::retire_before);
    num("jobs", &SlurmOptions::jobs);
    list("job_extra_directives", &SlurmOptions::job_extra_directives);
    list("job_script_prologue", &SlurmOptions::job_script_prologue);
    list("worker_extra_args", &SlurmOptions::worker_extra_args);
    m["env"] = [](PoolConfig& p, const Value& v) { p.options.env(v.pairs()); };
    m["resources"] = [](PoolConfig& p, const Value& v) { p.options.resources(v.amounts()); };
    m["kind"] = [](PoolConfig& p, const Value& v) {
      p.kind = v.text();
      if (p.kind != "slurm" && p.kind != "local") v.fail("kind must be slurm or local, got '" + p.kind + "'");
    };
    m["adapt_minimum"] = [](PoolConfig& p, const Value& v) { p.adapt_minimum = v.integer(); };
    m["adapt_maximum"] = [](PoolConfig& p, const Value& v) { p.adapt_maximum = v.integer(); };
    m["idle_timeout"] = [](PoolConfig& p, const Value& v) { p.idle_timeout_s = v.integer(); };
    return m;
  }();
  return s;
}

bool before(const toml::source_position& a, const toml::source_position& b) {
  return a.line != b.line ? a.line < b.line : a.column < b.column;
}

// Whole amounts as integers ("bigmem = 2", not "2.0"); the others as floats.
void insert_amount(toml::table& t, const std::string& name, double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9e15) {
    t.insert(name, static_cast<std::int64_t>(v));
  } else {
    t.insert(name, v);
  }
}

}  // namespace

SchedulerConfig parse_config(std::istream& in, const std::string& source) {
  std::ostringstream text;
  text << in.rdbuf();
  const Document doc = tomlfile::parse(text.str(), source);
  SchedulerConfig config;
  // The section a message names: "[pool.cpu] unknown key 'partiton'".
  auto in_section = [&](const std::string& section, const auto& f) {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      std::string what = e.what();
      const auto colon = what.find(": ", doc.source.size());
      if (colon != std::string::npos) what.insert(colon + 2, "[" + section + "] ");
      throw std::invalid_argument(what);
    }
  };
  auto fail_key = [&](const toml::key& k, const std::string& what) {
    throw std::invalid_argument(tomlfile::where(doc, k.source()) + ": " + what);
  };
  std::vector<std::pair<toml::source_position, PoolConfig>> pools;
  for (const auto& [section, node] : doc.root) {
    const std::string name(section.str());
    if (name == "scheduler" && node.is_table()) {
      in_section("scheduler", [&] {
        for (const auto& [key, v] : *node.as_table()) {
          if (key.str() == "listen") {
            config.listen = Value(doc, v, "listen").text();
          } else if (key.str() == "metrics_open") {
            if (!v.is_boolean()) fail_key(key, "metrics_open must be true or false");
            config.metrics_open = v.as_boolean()->get();
          } else {
            fail_key(key, "unknown key '" + std::string(key.str()) + "'");
          }
        }
      });
    } else if (name == "pool" && node.is_table()) {
      for (const auto& [pool_name, pool] : *node.as_table()) {
        const std::string pname(pool_name.str());
        in_section("pool." + pname, [&] {
          if (!pool.is_table()) fail_key(pool_name, "pool." + pname + " must be a table ([pool." + pname + "])");
          PoolConfig p;
          p.options.pool(pname);
          for (const auto& [key, v] : *pool.as_table()) {
            const std::string k(key.str());
            const auto setter = setters().find(k);
            if (setter == setters().end()) fail_key(key, "unknown key '" + k + "'");
            setter->second(p, Value(doc, v, k));
          }
          if ((p.adapt_minimum >= 0) != (p.adapt_maximum >= 0) || p.adapt_maximum < p.adapt_minimum) {
            fail_key(pool_name, "adapt_minimum and adapt_maximum go together, minimum <= maximum");
          }
          // Where the pool's table begins: pools keep the order of the file.
          pools.emplace_back(pool.source().begin.line != 0 ? pool.source().begin : pool_name.source().begin,
                             std::move(p));
        });
      }
    } else {
      fail_key(section, "unexpected key '" + name + "' (sections are [scheduler] and [pool.NAME])");
    }
  }
  std::stable_sort(pools.begin(), pools.end(), [](const auto& a, const auto& b) { return before(a.first, b.first); });
  for (auto& [at, p] : pools) config.pools.push_back(std::move(p));
  return config;
}

SchedulerConfig load_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument("cannot read the configuration file " + path);
  return parse_config(in, path);
}

std::string to_toml(const SchedulerConfig& c) {
  // Every string must be UTF-8 (TOML holds nothing else): a path in another encoding is refused
  // by name rather than written as different bytes.
  auto text = [](const std::string& where, const std::string& v) {
    tomlfile::require_utf8(v, where);
    return v;
  };
  std::string out;
  if (!c.listen.empty() || c.metrics_open) {
    toml::table sched;
    if (!c.listen.empty()) sched.insert("listen", text("listen", c.listen));
    if (c.metrics_open) sched.insert("metrics_open", true);
    out += tomlfile::write(toml::table{{"scheduler", std::move(sched)}}) + "\n";
  }
  for (const auto& p : c.pools) {
    const SlurmOptions& o = p.options;
    const std::string pool = text("a pool name", o.pool());
    const std::string at = "pool " + pool + ": ";
    toml::table t;
    t.insert("kind", text(at + "kind", p.kind));
    t.insert("cores", o.cores());
    t.insert("nthreads", o.nthreads());
    t.insert("gpus", o.gpus());
    t.insert("warning_seconds", o.warning_seconds());
    t.insert("retire_before", o.retire_before());
    t.insert("jobs", o.jobs());
    t.insert("processes", o.processes());
    t.insert("nodes", o.nodes());
    auto str = [&](const char* key, const std::string& v) { t.insert(key, text(at + key, v)); };
    str("memory", o.memory());
    str("partition", o.partition());
    str("account", o.account());
    str("qos", o.qos());
    str("walltime", o.walltime());
    str("job_name", o.job_name());
    str("log_directory", o.log_directory());
    str("local_directory", o.local_directory());
    str("worker_executable", o.worker_executable());
    str("warning_signal", o.warning_signal());
    str("interface", o.interface());
    str("shebang", o.shebang());
    auto list = [&](const char* key, const std::vector<std::string>& v) {
      toml::array a;
      for (const auto& s : v) a.push_back(text(at + key, s));
      t.insert(key, std::move(a));
    };
    list("job_extra_directives", o.job_extra_directives());
    list("job_script_prologue", o.job_script_prologue());
    list("worker_extra_args", o.worker_extra_args());
    list("job_directives_skip", o.job_directives_skip());
    list("job_script_epilogue", o.job_script_epilogue());
    list("submit_command_extra", o.submit_command_extra());
    toml::table env, resources;
    for (const auto& [k, v] : o.env()) env.insert(text(at + "env", k), text(at + "env." + k, v));
    for (const auto& [k, v] : o.resources()) insert_amount(resources, text(at + "resources", k), v);
    t.insert("env", std::move(env));
    t.insert("resources", std::move(resources));
    if (p.adapt_minimum >= 0) {
      t.insert("adapt_minimum", p.adapt_minimum);
      t.insert("adapt_maximum", p.adapt_maximum);
    }
    t.insert("idle_timeout", p.idle_timeout_s);
    // One document per pool: toml++ writes a table's members in name order, and the pools keep
    // theirs.
    out += tomlfile::write(toml::table{{"pool", toml::table{{pool, std::move(t)}}}}) + "\n";
  }
  return out;
}

}  // namespace herd::jobqueue
