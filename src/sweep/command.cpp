#include "sweep/command.hpp"

#include <stdexcept>

#include "common/util.hpp"
#include "sweep/metrics.hpp"

namespace herd::sweep {
namespace {

/// Walks a template, calling text(piece) for literal text and name(n) for each placeholder.
template <typename Text, typename Name>
void walk(std::string_view t, Text&& text, Name&& name) {
  std::size_t i = 0;
  while (i < t.size()) {
    const char c = t[i];
    if (c == '$' && i + 1 < t.size() && t[i + 1] == '{') {
      // ${VAR}, ${VAR:-x}: the shell's, copied through to the closing brace.
      const std::size_t close = t.find('}', i + 2);
      const std::size_t end = close == std::string_view::npos ? t.size() : close + 1;
      text(t.substr(i, end - i));
      i = end;
    } else if ((c == '{' || c == '}') && i + 1 < t.size() && t[i + 1] == c) {
      text(t.substr(i, 1));
      i += 2;
    } else if (c == '{') {
      const std::size_t close = t.find('}', i + 1);
      if (close != std::string_view::npos && valid_param_name(t.substr(i + 1, close - i - 1))) {
        name(std::string(t.substr(i + 1, close - i - 1)));
        i = close + 1;
      } else {
        text(t.substr(i, 1));
        ++i;
      }
    } else {
      std::size_t j = i + 1;
      while (j < t.size() && t[j] != '{' && t[j] != '}' && t[j] != '$') ++j;
      text(t.substr(i, j - i));
      i = j;
    }
  }
}

}  // namespace

std::set<std::string> placeholders(std::string_view tmpl) {
  std::set<std::string> out;
  walk(tmpl, [](std::string_view) {}, [&](const std::string& n) { out.insert(n); });
  return out;
}

std::string fill_template(std::string_view tmpl, const std::map<std::string, std::string>& values, bool quote) {
  std::string out;
  walk(tmpl, [&](std::string_view piece) { out += piece; },
       [&](const std::string& n) {
         const auto it = values.find(n);
         if (it == values.end()) {
           std::string known;
           for (const auto& [k, v] : values) known += (known.empty() ? "" : ", ") + k;
           throw std::invalid_argument("placeholder {" + n + "} is not a parameter (known: " + known +
                                       "; write {{ and }} for literal braces)");
         }
         out += quote ? util::shell_quote(it->second) : it->second;
       });
  return out;
}

}  // namespace herd::sweep
