// toml++'s implementation lives here (TOML_IMPLEMENTATION): every other file of herd includes its
// declarations only (TOML_HEADER_ONLY=0, set by common/toml_file.hpp).
#define TOML_IMPLEMENTATION
#include "common/toml_file.hpp"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "common/util.hpp"

namespace herd::tomlfile {
namespace {

// Byte offset in `text` of a 1-based line and column; toml++ counts columns in code points.
std::size_t offset_of(std::string_view text, const toml::source_position& p) {
  std::size_t i = 0;
  for (toml::source_index line = 1; line < p.line; ++line) {
    i = text.find('\n', i);
    if (i == std::string_view::npos) return text.size();
    ++i;
  }
  for (toml::source_index col = 1; col < p.column && i < text.size(); ++col) {
    ++i;
    while (i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) ++i;  // a continuation byte
  }
  return i;
}

}  // namespace

Document parse(std::string text, std::string source) {
  Document doc;
  doc.source = std::move(source);
  doc.text = std::move(text);
  try {
    doc.root = toml::parse(std::string_view(doc.text), std::string_view(doc.source));
  } catch (const toml::parse_error& e) {
    throw std::invalid_argument(where(doc, e.source()) + ": " + std::string(e.description()));
  }
  return doc;
}

Document load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument("cannot read " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return parse(text.str(), path);
}

std::string where(const Document& doc, const toml::source_region& region) {
  if (region.begin.line == 0) return doc.source;
  return doc.source + ":" + std::to_string(region.begin.line) + ":" + std::to_string(region.begin.column);
}

std::optional<std::string> scalar_text(const Document& doc, const toml::node& value) {
  if (const auto* s = value.as_string()) return s->get();
  if (const auto* i = value.as_integer()) return std::to_string(i->get());
  if (const auto* b = value.as_boolean()) return b->get() ? "true" : "false";
  if (const auto* t = value.as_time()) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%02u:%02u:%02u", static_cast<unsigned>(t->get().hour),
                  static_cast<unsigned>(t->get().minute), static_cast<unsigned>(t->get().second));
    return std::string(buf);
  }
  if (const auto* f = value.as_floating_point()) {
    const toml::source_region& r = value.source();
    if (r.begin.line != 0 && r.begin.line == r.end.line) {
      const std::size_t a = offset_of(doc.text, r.begin), b = offset_of(doc.text, r.end);
      const std::string_view written = std::string_view(doc.text).substr(a, b > a ? b - a : 0);
      // As written unless the digits are grouped (1_000.5), which no program reads back.
      if (!written.empty() && written.find('_') == std::string_view::npos) return std::string(util::trim(written));
    }
    return util::format_double(f->get());
  }
  return std::nullopt;
}

std::string type_name(const toml::node& value) {
  switch (value.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    case toml::node_type::none: break;
  }
  return "nothing";
}

void require_utf8(std::string_view s, const std::string& what) {
  if (const std::size_t at = util::invalid_utf8_at(s); at != std::string_view::npos) {
    throw std::invalid_argument(what + " is not UTF-8 text (byte " + std::to_string(at) +
                                "), which a TOML file cannot hold");
  }
}

std::string write(const toml::table& root) {
  std::ostringstream out;
  out << toml::toml_formatter(root, toml::format_flags::none) << "\n";
  return out.str();
}

}  // namespace herd::tomlfile
