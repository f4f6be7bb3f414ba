// Small text and system helpers that several layers need, written once: the machine's name,
// readable C++ type names, shell quoting, trimming and joining text, and the way herd writes
// sizes, durations and numbers for people.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace herd::util {

/// This machine's name (gethostname), or "" when the system cannot tell.
std::string hostname();

/// A C++ type name as written in source ("std::vector<int>") from its mangled form (what
/// `typeid(T).name()` gives); the input itself when it is not a mangled name.
std::string demangle(const char* mangled);

/// When shell_quote() adds quotes.
enum class Quote {
  if_needed,  ///< only when `v` has a character a shell treats specially (or is empty)
  always,     ///< always, so that a generated script reads the same for every value
};
/// `v` as one word for a POSIX shell: in single quotes, an embedded quote written '\''.
/// @code
/// shell_quote("a b") == "'a b'";  shell_quote("it's") == "'it'\\''s'";  shell_quote("x.txt") == "x.txt"
/// @endcode
std::string shell_quote(std::string_view v, Quote when = Quote::if_needed);

/// `s` without leading and trailing white space (space, \t, \n, \r, \f, \v); a view into `s`.
std::string_view trim(std::string_view s);

/// The items with `sep` between them: join({"a", "b"}, ",") == "a,b".
std::string join(const std::vector<std::string>& items, std::string_view sep);

/// Offset of the first byte of `s` that does not belong to valid UTF-8 (a stray byte, a cut or
/// overlong sequence, a UTF-16 surrogate), or std::string_view::npos when all of `s` is UTF-8.
std::size_t invalid_utf8_at(std::string_view s);
/// `s` with each byte that does not belong to valid UTF-8 replaced by U+FFFD.
std::string to_valid_utf8(std::string_view s);

/// Creates directory `path` and the parents it lacks, each of them readable by this user alone
/// (0700: logs and task output may hold secrets); directories already there are left as they
/// are. "" when `path` is a directory afterwards, else why not (naming the path).
std::string make_private_directories(const std::string& path);

/// herd's exit status for a command line CLI11 refused: 2, the usage error of every herd
/// command, for CLI11's own codes (100 and up); 0 stays 0 (--help, --version).
inline int usage_exit(int cli11_code) { return cli11_code == 0 ? 0 : 2; }

/// std::strerror(err) as a string: "No such file or directory".
std::string errno_text(int err);

/// "1.5 GiB", "512 MiB", "12 KiB", "100 B" (powers of 1024).
std::string format_bytes(std::uint64_t bytes);

/// "1:02:03", "4:05" or "7 s"; "?" when `seconds` is negative or not finite (unknown).
std::string format_duration(double seconds);

/// The shortest text that reads back as the same double ("0.1", "32", "1e-05"), and "nan",
/// "inf", "-inf".
std::string format_double(double v);

}  // namespace herd::util
