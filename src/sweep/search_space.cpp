// SearchSpace, herd::param<T> and the small option parsers of the public sweep API.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <stdexcept>

#include "herd/sweep.hpp"
#include "common/util.hpp"
#include "sweep/metrics.hpp"

namespace herd {
namespace {

using Kind = SearchSpace::Dimension::Kind;

// splitmix64 (Steele, Lea, Flood 2014): a fixed, documented generator, so a seed gives the same
// draws on every platform (std::uniform_real_distribution is implementation-defined).
struct SplitMix64 {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  /// Uniform in [0, n), without modulo bias.
  std::uint64_t below(std::uint64_t n) {
    const std::uint64_t limit = std::numeric_limits<std::uint64_t>::max() -
                                std::numeric_limits<std::uint64_t>::max() % n;
    for (;;) {
      const std::uint64_t x = next();
      if (x < limit) return x % n;
    }
  }
};

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

/// 6 significant digits, unless rounding would leave [low, high] (then every digit).
std::string round6(double v, double low, double high) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  double back = 0;
  std::from_chars(buf, buf + std::char_traits<char>::length(buf), back);
  if (back < low || back > high) return util::format_double(v);
  return buf;
}

bool parse_double(std::string_view s, double& out) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  const auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return !s.empty() && r.ec == std::errc() && r.ptr == s.data() + s.size();
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t at = s.find(sep, start);
    out.push_back(s.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return out;
    start = at + 1;
  }
}

}  // namespace

namespace detail {
void throw_bad_param(const std::string& name, const std::string& value, const char* type) {
  throw std::invalid_argument("parameter '" + name + "' = '" + value + "' is not " + type);
}
void throw_missing_param(const std::string& name) {
  throw std::invalid_argument("no parameter '" + name + "' in this trial");
}
bool parse_param(const std::string& text, double& out) { return parse_double(text, out); }
bool parse_param(const std::string& text, long long& out) {
  std::string_view s = text;
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  const auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  if (!s.empty() && r.ec == std::errc() && r.ptr == s.data() + s.size()) return true;
  // "32.0" or "1e3" from a grid of numbers: whole numbers written as floating point.
  double d = 0;
  if (!parse_double(text, d) || d != std::floor(d) || std::fabs(d) > 9.0e18) return false;
  out = static_cast<long long>(d);
  return true;
}
bool parse_param(const std::string& text, bool& out) {
  if (text == "1" || text == "true" || text == "True" || text == "yes" || text == "on") {
    out = true;
  } else if (text == "0" || text == "false" || text == "False" || text == "no" || text == "off") {
    out = false;
  } else {
    return false;
  }
  return true;
}
}  // namespace detail

// ---- SearchSpace ----

SearchSpace& SearchSpace::add(Dimension d) {
  if (!sweep::valid_param_name(d.name)) {
    throw std::invalid_argument("parameter name '" + d.name + "' must match [A-Za-z_][A-Za-z0-9_]*");
  }
  if (d.name == "trial" || d.name == "index") {
    throw std::invalid_argument("parameter name '" + d.name + "' is reserved ({trial} and {index} are placeholders)");
  }
  for (const auto& e : dims_) {
    if (e.name == d.name) throw std::invalid_argument("parameter '" + d.name + "' is defined twice");
  }
  const std::string what = "parameter '" + d.name + "': ";
  switch (d.kind) {
    case Kind::grid:
    case Kind::choice:
      if (d.values.empty()) throw std::invalid_argument(what + "no values");
      break;
    case Kind::uniform:
      if (!std::isfinite(d.low) || !std::isfinite(d.high) || d.low > d.high) {
        throw std::invalid_argument(what + "uniform needs finite low <= high");
      }
      break;
    case Kind::log_uniform:
      if (!std::isfinite(d.low) || !std::isfinite(d.high) || d.low <= 0 || d.low > d.high) {
        throw std::invalid_argument(what + "log-uniform needs 0 < low <= high");
      }
      break;
    case Kind::integer:
      if (d.low > d.high) throw std::invalid_argument(what + "integer range needs low <= high");
      break;
  }
  dims_.push_back(std::move(d));
  return *this;
}

SearchSpace& SearchSpace::grid(const std::string& name, std::vector<std::string> values) {
  return add({name, Kind::grid, std::move(values), 0, 0});
}

SearchSpace& SearchSpace::grid_numbers(const std::string& name, const std::vector<double>& values) {
  std::vector<std::string> text;
  for (const double v : values) text.push_back(util::format_double(v));
  return add({name, Kind::grid, std::move(text), 0, 0});
}

SearchSpace& SearchSpace::uniform(const std::string& name, double low, double high) {
  return add({name, Kind::uniform, {}, low, high});
}

SearchSpace& SearchSpace::log_uniform(const std::string& name, double low, double high) {
  return add({name, Kind::log_uniform, {}, low, high});
}

SearchSpace& SearchSpace::integer(const std::string& name, long low, long high) {
  return add({name, Kind::integer, {}, static_cast<double>(low), static_cast<double>(high)});
}

SearchSpace& SearchSpace::choice(const std::string& name, std::vector<std::string> values) {
  return add({name, Kind::choice, std::move(values), 0, 0});
}

SearchSpace& SearchSpace::samples(int n) {
  if (n < 1) throw std::invalid_argument("samples must be at least 1");
  samples_ = n;
  return *this;
}

SearchSpace& SearchSpace::seed(std::uint64_t s) {
  seed_ = s;
  return *this;
}

SearchSpace& SearchSpace::parse(const std::string& spec, bool is_grid) {
  const auto eq = spec.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw std::invalid_argument("'" + spec + "': expected NAME=" + (is_grid ? "V1,V2,..." : "KIND:ARGS"));
  }
  const std::string name = spec.substr(0, eq), rest = spec.substr(eq + 1);
  if (is_grid) {
    std::vector<std::string> values = split(rest, ',');
    for (const auto& v : values) {
      if (v.empty()) throw std::invalid_argument("'" + spec + "': empty value in the grid");
    }
    return grid(name, std::move(values));
  }
  const auto colon = rest.find(':');
  const std::string kind = rest.substr(0, colon);
  const std::string args = colon == std::string::npos ? "" : rest.substr(colon + 1);
  if (kind == "choice") {
    std::vector<std::string> values = split(args, ',');
    for (const auto& v : values) {
      if (v.empty()) throw std::invalid_argument("'" + spec + "': empty choice");
    }
    return choice(name, std::move(values));
  }
  const std::vector<std::string> bounds = split(args, ':');
  const std::string usage = "'" + spec + "': expected " + name + "=" +
                            (kind.empty() ? std::string("KIND") : kind) + ":LOW:HIGH";
  if (bounds.size() != 2) throw std::invalid_argument(usage);
  if (kind == "int" || kind == "integer" || kind == "randint") {
    long long lo = 0, hi = 0;
    if (!detail::parse_param(bounds[0], lo) || !detail::parse_param(bounds[1], hi)) {
      throw std::invalid_argument(usage + " with whole numbers");
    }
    return integer(name, static_cast<long>(lo), static_cast<long>(hi));
  }
  double lo = 0, hi = 0;
  if (!parse_double(bounds[0], lo) || !parse_double(bounds[1], hi)) throw std::invalid_argument(usage + " with numbers");
  if (kind == "uniform") return uniform(name, lo, hi);
  if (kind == "loguniform" || kind == "log-uniform" || kind == "log_uniform" || kind == "log") {
    return log_uniform(name, lo, hi);
  }
  throw std::invalid_argument("'" + spec + "': unknown kind '" + kind +
                              "' (uniform, loguniform, int or choice)");
}

std::vector<std::string> SearchSpace::names() const {
  std::vector<std::string> out;
  for (const auto& d : dims_) out.push_back(d.name);
  return out;
}

std::vector<Params> SearchSpace::expand() const {
  std::vector<const Dimension*> grid_dims, random_dims;
  for (const auto& d : dims_) (d.kind == Kind::grid ? grid_dims : random_dims).push_back(&d);
  // The draws first: the same ones for every grid point.
  const int n_draws = random_dims.empty() ? 1 : samples_;
  std::vector<Params> draws(static_cast<std::size_t>(n_draws));
  for (int i = 0; i < n_draws; ++i) {
    for (const Dimension* d : random_dims) {
      // One stream per (seed, draw, dimension name): independent of the other dimensions and
      // of how many draws there are.
      SplitMix64 rng{fnv1a(d->name) ^ (seed_ * 0xD1B54A32D192ED03ULL) ^
                     (static_cast<std::uint64_t>(i) * 0x9E3779B97F4A7C15ULL)};
      rng.next();
      std::string value;
      switch (d->kind) {
        case Kind::uniform:
          value = round6(d->low + rng.unit() * (d->high - d->low), d->low, d->high);
          break;
        case Kind::log_uniform:
          value = round6(std::exp(std::log(d->low) + rng.unit() * (std::log(d->high) - std::log(d->low))),
                         d->low, d->high);
          break;
        case Kind::integer: {
          const auto lo = static_cast<long long>(d->low), hi = static_cast<long long>(d->high);
          const auto span = static_cast<std::uint64_t>(hi - lo) + 1;
          const std::uint64_t offset = span == 0 ? rng.next() : rng.below(span);  // 0: the full range
          value = std::to_string(lo + static_cast<long long>(offset));
          break;
        }
        case Kind::choice:
          value = d->values[rng.below(d->values.size())];
          break;
        case Kind::grid:
          break;
      }
      draws[static_cast<std::size_t>(i)][d->name] = std::move(value);
    }
  }
  std::vector<Params> out;
  std::set<Params> seen;
  std::vector<std::size_t> at(grid_dims.size(), 0);
  for (;;) {
    for (const Params& draw : draws) {
      Params p = draw;
      for (std::size_t g = 0; g < grid_dims.size(); ++g) p[grid_dims[g]->name] = grid_dims[g]->values[at[g]];
      if (seen.insert(p).second) out.push_back(std::move(p));
    }
    // Row-major: the last grid dimension varies fastest.
    std::size_t g = grid_dims.size();
    while (g > 0) {
      --g;
      if (++at[g] < grid_dims[g]->values.size()) break;
      at[g] = 0;
      if (g == 0) return out;
    }
    if (grid_dims.empty()) return out;
  }
}

// ---- SuccessiveHalving ----

std::vector<double> SuccessiveHalving::rungs() const {
  if (!sweep::valid_param_name(parameter_)) {
    throw std::invalid_argument("early stopping: budget parameter '" + parameter_ + "' must match [A-Za-z_][A-Za-z0-9_]*");
  }
  if (!(min_budget_ > 0) || !(max_budget_ >= min_budget_) || !std::isfinite(max_budget_)) {
    throw std::invalid_argument("early stopping: budgets need 0 < min_budget <= max_budget");
  }
  if (!(eta_ > 1) || !std::isfinite(eta_)) throw std::invalid_argument("early stopping: eta must be > 1");
  std::vector<double> out;
  for (double b = min_budget_; b < max_budget_ * (1 - 1e-9); b *= eta_) {
    double rounded = 0;
    const std::string text = round6(b, min_budget_, max_budget_);
    (void)parse_double(text, rounded);
    out.push_back(rounded);
    if (out.size() > 64) throw std::invalid_argument("early stopping: more than 64 rungs (eta too close to 1?)");
  }
  out.push_back(max_budget_);
  return out;
}

const char* to_string(TrialStatus status) {
  switch (status) {
    case TrialStatus::ok: return "ok";
    case TrialStatus::failed: return "failed";
    case TrialStatus::timeout: return "timeout";
    case TrialStatus::stopped: return "stopped";
  }
  return "?";
}

std::optional<double> TrialResult::metric(const std::string& name) const {
  const auto it = metrics.find(name);
  if (it == metrics.end()) return std::nullopt;
  return it->second;
}

}  // namespace herd
