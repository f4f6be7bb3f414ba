// herd's TOML is toml++'s (Debian: libtomlplusplus-dev), compiled once into libherd
// (toml_file.cpp) rather than in every file that includes it, and kept out of the public headers.
// What herd's configuration files (the scheduler's pools, a sweep file) need beyond toml++:
// messages that say file:line:column, the text of a value as it was written, and a writer.
#pragma once

#ifndef TOML_HEADER_ONLY
#define TOML_HEADER_ONLY 0
#endif
#include <toml++/toml.h>

#include <optional>
#include <string>
#include <string_view>

namespace herd::tomlfile {

/// A parsed file: its tables, and what was parsed (for where() and as_written()).
struct Document {
  toml::table root;
  std::string source;  ///< the file name in messages
  std::string text;    ///< the file's text
};

/// Parses TOML text.
/// @throws std::invalid_argument "SOURCE:LINE:COLUMN: what is wrong" (toml++'s parse_error).
Document parse(std::string text, std::string source);
/// Reads and parses a file; @throws std::invalid_argument when it cannot be read or parsed.
Document load(const std::string& path);

/// "SOURCE:LINE:COLUMN" where a value or a key begins ("SOURCE" when it was not parsed).
std::string where(const Document& doc, const toml::source_region& region);

/// A scalar as text: a string as it is; an integer in decimal; a float as written in the file
/// (1e-4 stays "1e-4", as on a command line); true/false; a time as HH:MM:SS (so that an
/// unquoted `walltime = 01:00:00` reads as Slurm means it). Empty for arrays, tables and dates.
std::optional<std::string> scalar_text(const Document& doc, const toml::node& value);

/// The type of a value as a user would name it: "a string", "an integer", "an array", ...
std::string type_name(const toml::node& value);

/// Throws std::invalid_argument("WHAT is not UTF-8 text...") unless `s` is valid UTF-8: TOML
/// holds Unicode text only, and a writer must not turn other bytes into different ones.
void require_utf8(std::string_view s, const std::string& what);

/// The table as TOML text: basic strings with escapes, no indentation.
std::string write(const toml::table& root);

}  // namespace herd::tomlfile
