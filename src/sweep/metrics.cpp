#include "sweep/metrics.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <stdexcept>

#include "common/json.hpp"
#include "common/util.hpp"

namespace herd::sweep {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v'; }

bool parse_number(std::string_view text, double& out) {
  if (text.empty()) return false;
  if (text.front() == '+') text.remove_prefix(1);  // from_chars refuses a leading '+'
  const auto r = std::from_chars(text.data(), text.data() + text.size(), out);
  return r.ec == std::errc() && r.ptr == text.data() + text.size();
}

std::string shorten(std::string_view line) {
  constexpr std::size_t kMax = 120;
  std::string out(line.substr(0, kMax));
  if (line.size() > kMax) out += "...";
  return out;
}

}  // namespace

bool valid_param_name(std::string_view name) {
  if (name.empty() || !(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_')) return false;
  for (const char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  }
  return true;
}

bool valid_metric_name(std::string_view name) {
  if (name.empty() || !(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_')) return false;
  for (const char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '/' || c == '-' || c == ':')) {
      return false;
    }
  }
  return true;
}

ParsedMetrics parse_metrics(std::string_view output, bool truncated) {
  ParsedMetrics out;
  if (truncated) {
    const auto nl = output.find('\n');
    output = nl == std::string_view::npos ? std::string_view{} : output.substr(nl + 1);
  }
  std::string_view last_line;
  std::size_t line_no = 0;
  std::size_t pos = 0;
  while (pos < output.size()) {
    const std::size_t end = std::min(output.find('\n', pos), output.size());
    const std::string_view raw = output.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    const std::string_view line = util::trim(raw);
    if (line.empty()) continue;
    last_line = line;
    if (line.substr(0, kMetricPrefix.size()) != kMetricPrefix) continue;
    std::string_view rest = line.substr(kMetricPrefix.size());
    if (!rest.empty() && !is_space(rest.front())) continue;  // e.g. "herd-metrics": not ours
    rest = util::trim(rest);
    const std::string where = (truncated ? "metric line '" : "metric line " + std::to_string(line_no) + " '") +
                              shorten(line) + "'";
    if (rest.empty()) {
      if (out.error.empty()) out.error = "malformed " + where + ": no name=value";
      continue;
    }
    while (!rest.empty()) {
      std::size_t t = 0;
      while (t < rest.size() && !is_space(rest[t])) ++t;
      const std::string_view token = rest.substr(0, t);
      rest = util::trim(rest.substr(t));
      const auto eq = token.find('=');
      double value = 0;
      if (eq == std::string_view::npos || !valid_metric_name(token.substr(0, eq)) ||
          !parse_number(token.substr(eq + 1), value)) {
        if (out.error.empty()) out.error = "malformed " + where + ": '" + std::string(token) + "' is not name=number";
        continue;
      }
      const std::string name(token.substr(0, eq));
      out.history[name].push_back(value);
      out.final[name] = value;
    }
  }
  if (!last_line.empty() && last_line.front() == '{') {
    try {
      const json::Json doc = json::parse(last_line);
      for (const auto& [name, v] : doc.items()) {
        if (v.is_number()) {
          out.final[name] = v.get<double>();
        } else if (v.is_null()) {
          out.final[name] = std::nan("");  // how the JSON of a diverged run spells NaN
        } else if (v.is_string()) {
          double d = 0;
          if (parse_number(v.get<std::string>(), d)) out.final[name] = d;  // e.g. "nan" or "1e-3"
        }
        // Other members (flags, paths, nested objects) are not metrics.
      }
    } catch (const std::invalid_argument& e) {
      if (out.error.empty()) {
        out.error = "malformed JSON object on the last line of stdout '" + shorten(last_line) + "': " + e.what();
      }
    }
  }
  return out;
}

}  // namespace herd::sweep
