// A small JSON reader and writer for the sweep's results log and for metrics printed as a JSON
// object. herd has no JSON dependency (Debian 12's Boost 1.74 predates Boost.JSON), and the
// sweep needs little: objects, arrays, strings, numbers, true/false/null.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace herd::sweep {

struct Json;
using JsonArray = std::vector<Json>;
using JsonObject = std::vector<std::pair<std::string, Json>>;  // keeps the order written

struct Json {
  // std::monostate is null. Arrays and objects are behind pointers so Json can be recursive.
  std::variant<std::monostate, bool, double, std::string, std::shared_ptr<JsonArray>,
               std::shared_ptr<JsonObject>>
      value;

  bool is_null() const { return value.index() == 0; }
  bool is_bool() const { return value.index() == 1; }
  bool is_number() const { return value.index() == 2; }
  bool is_string() const { return value.index() == 3; }
  bool is_array() const { return value.index() == 4; }
  bool is_object() const { return value.index() == 5; }
  double number() const { return std::get<2>(value); }
  const std::string& string() const { return std::get<3>(value); }
  const JsonArray& array() const { return *std::get<4>(value); }
  const JsonObject& object() const { return *std::get<5>(value); }
  /// Member `key` of an object, or nullptr (also when this is no object).
  const Json* find(std::string_view key) const;
};

/// Parses one JSON text (surrounding whitespace allowed); throws std::invalid_argument with
/// the offset and what was expected.
Json parse_json(std::string_view text);

/// A string as a JSON string literal, quotes included.
std::string json_quote(std::string_view s);
/// A number as JSON: the shortest text that reads back the same; NaN and infinities (which JSON
/// lacks) as null.
std::string json_number(double v);

/// Builds one JSON object, in order, without a DOM.
class JsonWriter {
 public:
  JsonWriter& field(std::string_view key, std::string_view v);
  JsonWriter& field(std::string_view key, const char* v) { return field(key, std::string_view(v)); }
  JsonWriter& field(std::string_view key, double v);
  JsonWriter& field(std::string_view key, int v) { return field(key, static_cast<double>(v)); }
  JsonWriter& field(std::string_view key, std::size_t v) { return field(key, static_cast<double>(v)); }
  JsonWriter& field(std::string_view key, bool v);
  JsonWriter& field(std::string_view key, const std::map<std::string, std::string>& v);
  JsonWriter& field(std::string_view key, const std::map<std::string, double>& v);
  JsonWriter& field(std::string_view key, const std::map<std::string, std::vector<double>>& v);
  /// The object's text, without a newline.
  std::string str() const { return text_ + "}"; }

 private:
  void key(std::string_view k);
  std::string text_ = "{";
};

/// Shortest round-trip text of a double ("0.1", "1e-05", "nan", "inf", "-inf").
std::string format_double(double v);

}  // namespace herd::sweep
