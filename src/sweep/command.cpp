#include "sweep/command.hpp"

#include <stdexcept>
#include <vector>

#include "common/util.hpp"
#include "sweep/metrics.hpp"
#include "common/env.hpp"

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

[[noreturn]] void unknown_placeholder(const std::string& n, const std::map<std::string, std::string>& values) {
  std::string known;
  for (const auto& [k, v] : values) known += (known.empty() ? "" : ", ") + k;
  throw std::invalid_argument("placeholder {" + n + "} is not a parameter (known: " + known +
                              "; write {{ and }} for literal braces)");
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
         if (it == values.end()) unknown_placeholder(n, values);
         out += quote ? util::shell_quote(it->second) : it->second;
       });
  return out;
}

std::string fill_script(std::string_view t, const std::map<std::string, std::string>& values,
                        std::map<std::string, std::string>& env) {
  // A small model of how /bin/sh reads the template, enough to know what quotes surround each
  // placeholder: a stack of contexts (unquoted, "double quotes", `backquotes`, and $( ... )
  // with its parenthesis depth); 'single quotes' are read in one go. Should the model misread
  // an exotic script, the reference still cannot be evaluated: at worst its value is split into
  // words or shown with quote characters around it.
  enum class Ctx { plain, dquote, backquote, subst };
  struct Frame {
    Ctx ctx;
    int depth;  // open parentheses of a $( ... ) frame
  };
  std::vector<Frame> stack{{Ctx::plain, 0}};
  std::string out;
  auto ref = [&](const std::string& n, bool in_single) {
    const auto it = values.find(n);
    if (it == values.end()) unknown_placeholder(n, values);
    env[env::name(env::Var::param_quoted) + n] = it->second;
    const std::string var = "${HERD_P_" + n + "}";
    if (in_single) return "'\"" + var + "\"'";
    return stack.back().ctx == Ctx::dquote ? var : "\"" + var + "\"";
  };
  // A placeholder, a literal brace or a ${...} at t[i]: appends what it becomes and returns the
  // characters used (0: none of these).
  auto brace = [&](std::size_t i, bool in_single) -> std::size_t {
    const char c = t[i];
    if (!in_single && c == '$' && i + 1 < t.size() && t[i + 1] == '{') {
      const std::size_t close = t.find('}', i + 2);  // the shell's own ${VAR}: untouched
      const std::size_t end = close == std::string_view::npos ? t.size() : close + 1;
      out += t.substr(i, end - i);
      return end - i;
    }
    if ((c == '{' || c == '}') && i + 1 < t.size() && t[i + 1] == c) {
      out += c;
      return 2;
    }
    if (c == '{') {
      const std::size_t close = t.find('}', i + 1);
      if (close != std::string_view::npos && valid_param_name(t.substr(i + 1, close - i - 1))) {
        out += ref(std::string(t.substr(i + 1, close - i - 1)), in_single);
        return close + 1 - i;
      }
    }
    return 0;
  };
  std::size_t i = 0;
  while (i < t.size()) {
    const Ctx ctx = stack.back().ctx;
    const char c = t[i];
    if (const std::size_t used = brace(i, false)) {
      i += used;
      continue;
    }
    if (c == '\\' && i + 1 < t.size()) {  // an escaped character is never a quote
      out += t.substr(i, 2);
      i += 2;
      continue;
    }
    if (c == '$' && i + 1 < t.size() && t[i + 1] == '(') {
      out += "$(";
      i += 2;
      stack.push_back({Ctx::subst, 1});
      continue;
    }
    if (c == '`') {
      out += c;
      ++i;
      if (ctx == Ctx::backquote) stack.pop_back();
      else stack.push_back({Ctx::backquote, 0});
      continue;
    }
    if (ctx == Ctx::dquote) {
      out += c;
      ++i;
      if (c == '"') stack.pop_back();
      continue;
    }
    // Unquoted: at the top, in $( ... ) or in backquotes.
    if (c == '"') {
      stack.push_back({Ctx::dquote, 0});
    } else if (c == '\'') {
      out += c;
      ++i;
      while (i < t.size() && t[i] != '\'') {
        if (const std::size_t used = brace(i, true)) {
          i += used;
        } else {
          out += t[i++];
        }
      }
      if (i < t.size()) out += t[i++];  // the closing quote
      continue;
    } else if (ctx == Ctx::subst && c == '(') {
      ++stack.back().depth;
    } else if (ctx == Ctx::subst && c == ')' && --stack.back().depth == 0) {
      stack.pop_back();
    }
    out += c;
    ++i;
  }
  return out;
}

}  // namespace herd::sweep
