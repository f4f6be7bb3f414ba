#include "common/json.hpp"

#include <stdexcept>

#include "common/util.hpp"

namespace herd::json {

Json parse(std::string_view text) {
  try {
    // nlohmann refuses a document with bytes that are not UTF-8; they are read as dump() writes
    // them instead (a program's output, a results line of an older herd).
    if (util::invalid_utf8_at(text) != std::string_view::npos) return Json::parse(util::to_valid_utf8(text));
    return Json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    // nlohmann's message starts with its own tag ("[json.exception.parse_error.101] parse error
    // at line 1, column 8: ..."); the user needs only what follows it.
    std::string what = e.what();
    if (const auto close = what.find("] "); what.rfind("[json.exception.", 0) == 0 && close != std::string::npos) {
      what.erase(0, close + 2);
    }
    throw std::invalid_argument(what);
  }
}

std::string dump(const Json& value) { return value.dump(-1, ' ', false, Json::error_handler_t::replace); }

}  // namespace herd::json
