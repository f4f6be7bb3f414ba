// herd's JSON is nlohmann-json's (Debian: nlohmann-json3-dev), kept out of the public headers:
// the API hands out JSON as text. What every reader and writer of herd's JSON must do alike is
// here: objects keep the order their members were written in (a results line starts with its
// trial, `herd status --json` with the scheduler), and text that is not UTF-8 (a program's
// output, a job's output file) is written with U+FFFD in place of the bad bytes rather than
// making the whole document fail.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace herd::json {

/// A JSON value whose objects keep their members in the order written (or read).
using Json = nlohmann::ordered_json;

/// Parses one JSON text (surrounding white space allowed). Bytes that are not UTF-8 read as
/// U+FFFD, as dump() writes them.
/// @throws std::invalid_argument with nlohmann's message: where (line, column) and what was
/// expected. Numbers too large for a double are errors too.
Json parse(std::string_view text);

/// The value as compact JSON text, on one line. NaN and infinities (which JSON lacks) are null.
std::string dump(const Json& value);

}  // namespace herd::json
