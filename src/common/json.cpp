#include "common/json.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace herd::sweep {
namespace {

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  Json document() {
    Json v = value(0);
    skip_space();
    if (i_ != s_.size()) fail("end of input");
    return v;
  }

 private:
  // Deep nesting is refused rather than allowed to exhaust the stack: the input can be any
  // program's output.
  static constexpr int kMaxDepth = 64;

  [[noreturn]] void fail(const char* expected) const {
    throw std::invalid_argument("at offset " + std::to_string(i_) + ": expected " + expected);
  }
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool literal(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) return false;
    i_ += word.size();
    return true;
  }

  Json value(int depth) {
    if (depth > kMaxDepth) fail("less nesting");
    skip_space();
    if (i_ >= s_.size()) fail("a value");
    Json out;
    const char c = s_[i_];
    if (c == '{') {
      ++i_;
      auto obj = std::make_shared<JsonObject>();
      skip_space();
      if (i_ < s_.size() && s_[i_] == '}') {
        ++i_;
      } else {
        for (;;) {
          skip_space();
          if (i_ >= s_.size() || s_[i_] != '"') fail("a string key");
          std::string k = string();
          skip_space();
          if (i_ >= s_.size() || s_[i_] != ':') fail("':'");
          ++i_;
          obj->emplace_back(std::move(k), value(depth + 1));
          skip_space();
          if (i_ < s_.size() && s_[i_] == ',') {
            ++i_;
            continue;
          }
          if (i_ < s_.size() && s_[i_] == '}') {
            ++i_;
            break;
          }
          fail("',' or '}'");
        }
      }
      out.value = std::move(obj);
    } else if (c == '[') {
      ++i_;
      auto arr = std::make_shared<JsonArray>();
      skip_space();
      if (i_ < s_.size() && s_[i_] == ']') {
        ++i_;
      } else {
        for (;;) {
          arr->push_back(value(depth + 1));
          skip_space();
          if (i_ < s_.size() && s_[i_] == ',') {
            ++i_;
            continue;
          }
          if (i_ < s_.size() && s_[i_] == ']') {
            ++i_;
            break;
          }
          fail("',' or ']'");
        }
      }
      out.value = std::move(arr);
    } else if (c == '"') {
      out.value = string();
    } else if (literal("true")) {
      out.value = true;
    } else if (literal("false")) {
      out.value = false;
    } else if (literal("null")) {
      out.value = std::monostate{};
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      out.value = number();
    } else {
      fail("a value");
    }
    return out;
  }

  double number() {
    const std::size_t start = i_;
    if (s_[i_] == '-') ++i_;
    auto digits = [&] {
      const std::size_t d = i_;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      return i_ > d;
    };
    if (!digits()) fail("a digit");
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (!digits()) fail("a digit after '.'");
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (!digits()) fail("an exponent");
    }
    double v = 0;
    const auto r = std::from_chars(s_.data() + start, s_.data() + i_, v);
    if (r.ec == std::errc::result_out_of_range) {
      // from_chars leaves v alone on overflow; JSON has no infinities, so a huge literal is
      // the closest thing there is.
      v = s_[start] == '-' ? -HUGE_VAL : HUGE_VAL;
    } else if (r.ec != std::errc()) {
      fail("a number");
    }
    return v;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  unsigned hex4() {
    if (i_ + 4 > s_.size()) fail("4 hex digits");
    unsigned v = 0;
    const auto r = std::from_chars(s_.data() + i_, s_.data() + i_ + 4, v, 16);
    if (r.ec != std::errc() || r.ptr != s_.data() + i_ + 4) fail("4 hex digits");
    i_ += 4;
    return v;
  }

  std::string string() {
    ++i_;  // the opening quote
    std::string out;
    for (;;) {
      if (i_ >= s_.size()) fail("a closing '\"'");
      const char c = s_[i_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("no control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) fail("an escape");
      const char e = s_[i_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && s_.substr(i_, 2) == "\\u") {
            i_ += 2;
            const unsigned low = hex4();
            if (low >= 0xDC00 && low < 0xE000) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            } else {
              fail("a low surrogate");
            }
          }
          append_utf8(out, cp);
          break;
        }
        default: fail("a valid escape");
      }
    }
  }

  std::string_view s_;
  std::size_t i_ = 0;
};

}  // namespace

const Json* Json::find(std::string_view key) const {
  if (!is_object()) return nullptr;
  for (const auto& [k, v] : object()) {
    if (k == key) return &v;
  }
  return nullptr;
}

Json parse_json(std::string_view text) { return Parser(text).document(); }

std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string format_double(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string json_number(double v) { return std::isfinite(v) ? format_double(v) : "null"; }

void JsonWriter::key(std::string_view k) {
  if (text_.size() > 1) text_ += ',';
  text_ += json_quote(k);
  text_ += ':';
}

JsonWriter& JsonWriter::field(std::string_view k, std::string_view v) {
  key(k);
  text_ += json_quote(v);
  return *this;
}

JsonWriter& JsonWriter::field(std::string_view k, double v) {
  key(k);
  text_ += json_number(v);
  return *this;
}

JsonWriter& JsonWriter::field(std::string_view k, bool v) {
  key(k);
  text_ += v ? "true" : "false";
  return *this;
}

JsonWriter& JsonWriter::field(std::string_view k, const std::map<std::string, std::string>& v) {
  key(k);
  text_ += '{';
  bool first = true;
  for (const auto& [name, value] : v) {
    if (!first) text_ += ',';
    first = false;
    text_ += json_quote(name) + ":" + json_quote(value);
  }
  text_ += '}';
  return *this;
}

JsonWriter& JsonWriter::field(std::string_view k, const std::map<std::string, double>& v) {
  key(k);
  text_ += '{';
  bool first = true;
  for (const auto& [name, value] : v) {
    if (!first) text_ += ',';
    first = false;
    text_ += json_quote(name) + ":" + json_number(value);
  }
  text_ += '}';
  return *this;
}

JsonWriter& JsonWriter::field(std::string_view k, const std::map<std::string, std::vector<double>>& v) {
  key(k);
  text_ += '{';
  bool first = true;
  for (const auto& [name, values] : v) {
    if (!first) text_ += ',';
    first = false;
    text_ += json_quote(name) + ":[";
    for (std::size_t i = 0; i < values.size(); ++i) text_ += (i ? "," : "") + json_number(values[i]);
    text_ += ']';
  }
  text_ += '}';
  return *this;
}

}  // namespace herd::sweep
