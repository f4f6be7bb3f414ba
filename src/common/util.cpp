#include "common/util.hpp"

#include <cxxabi.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace herd::util {

std::string make_private_directories(const std::string& path) {
  if (path.empty()) return "";
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::path(path).lexically_normal();
  std::filesystem::path at;
  for (const auto& part : p) {
    at /= part;
    if (std::filesystem::is_directory(at, ec)) continue;
    if (::mkdir(at.c_str(), 0700) != 0 && errno != EEXIST) {
      return "cannot create the directory " + at.string() + ": " + std::strerror(errno);
    }
  }
  if (!std::filesystem::is_directory(p, ec)) return path + " is not a directory";
  return "";
}
namespace {

// Characters no POSIX shell gives a meaning to in a word (nor in an assignment's value).
bool shell_safe(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
         c == ',' || c == ':' || c == '/' || c == '=' || c == '+' || c == '@' || c == '%' || c == '-';
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Length of the valid UTF-8 sequence at s[i], or 0 when s[i] starts none.
std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return 1;
  std::size_t n = 0;
  char32_t cp = 0;
  if ((c & 0xE0) == 0xC0) {
    n = 2, cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3, cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4, cp = c & 0x07;
  } else {
    return 0;  // a continuation byte, or 0xF8..0xFF
  }
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  static constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};  // shorter forms are overlong
  if (cp < kMin[n] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return 0;
  return n;
}

}  // namespace

std::string hostname() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return {};
  return host;
}

std::string demangle(const char* mangled) {
  int status = 0;
  char* out = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string s = status == 0 && out != nullptr ? out : mangled;
  std::free(out);
  return s;
}

std::string shell_quote(std::string_view v, Quote when) {
  if (when == Quote::if_needed && !v.empty()) {
    bool safe = true;
    for (const char c : v) safe = safe && shell_safe(c);
    if (safe) return std::string(v);
  }
  std::string out = "'";
  for (const char c : v) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    out += items[i];
  }
  return out;
}

std::size_t invalid_utf8_at(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_sequence(s, i);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

std::string to_valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_sequence(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
      ++i;
    } else {
      out.append(s, i, n);
      i += n;
    }
  }
  return out;
}

std::string errno_text(int err) { return std::strerror(err); }

std::string format_bytes(std::uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0) std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else std::snprintf(buf, sizeof buf, v < 10 ? "%.1f %s" : "%.0f %s", v, units[u]);
  return buf;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long s = std::lround(seconds);
  char buf[32];
  if (s < 60) std::snprintf(buf, sizeof buf, "%ld s", s);
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  return buf;
}

std::string format_double(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

}  // namespace herd::util
