// The small helpers every layer shares (common/util.hpp) and the one progress bar
// (common/progress_bar.hpp) that herd::progress and a sweep draw.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <map>
#include <sstream>
#include <vector>

#include "common/progress_bar.hpp"
#include "common/util.hpp"
#include "herd/shell.hpp"

using namespace herd::util;

namespace {
struct Local {};
}  // namespace

TEST_CASE("Util.ShellQuote.OneWordThroughARealShell" * doctest::timeout(10)) {
  CHECK(shell_quote("x.txt") == "x.txt");
  CHECK(shell_quote("a b") == "'a b'");
  CHECK(shell_quote("it's") == "'it'\\''s'");
  CHECK(shell_quote("") == "''");
  CHECK(shell_quote("8", Quote::always) == "'8'");
  CHECK(shell_quote("", Quote::always) == "''");
  // What /bin/sh makes of each: the same bytes back, as one word, nothing expanded.
  const std::vector<std::string> values = {"plain", "a b", "it's", "", "*", "$HOME", "`id`", "$(id)", "a\nb",
                                           "\\", "\"", "tab\there", "caf\xc3\xa9", "-n", "!x", "{a,b}", "~"};
  for (const Quote q : {Quote::if_needed, Quote::always}) {
    std::string script = "for w in";
    for (const auto& v : values) script += " " + shell_quote(v, q);
    script += "; do printf '[%s]' \"$w\"; done";
    std::string expected;
    for (const auto& v : values) expected += "[" + v + "]";
    CHECK(herd::shell(herd::ShellCommand{script}).stdout_tail == expected);
  }
}

TEST_CASE("Util.Text.TrimAndJoin" * doctest::timeout(10)) {
  CHECK(trim("  a b \t\r\n") == "a b");
  CHECK(trim("\n\f\v") == "");
  CHECK(trim("") == "");
  CHECK(trim("x") == "x");
  CHECK(join({"1", "2", "3"}, ",") == "1,2,3");
  CHECK(join({"a"}, ", ") == "a");
  CHECK(join({}, ",") == "");
  CHECK(join({"", ""}, " ") == " ");
}

TEST_CASE("Util.Text.Utf8" * doctest::timeout(10)) {
  const std::string valid = "plain caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x90\x91";
  CHECK(invalid_utf8_at(valid) == std::string_view::npos);
  CHECK(to_valid_utf8(valid) == valid);
  CHECK(invalid_utf8_at("caf\xe9!") == 3);             // Latin-1
  CHECK(invalid_utf8_at("ab\xc3") == 2);               // cut short
  CHECK(invalid_utf8_at("\xc0\xaf") == 0);            // overlong '/'
  CHECK(invalid_utf8_at("\xed\xa0\x80") == 0);        // a UTF-16 surrogate
  CHECK(invalid_utf8_at("\xf4\x90\x80\x80") == 0);    // past U+10FFFF
  CHECK(invalid_utf8_at("\x80") == 0);                 // a lone continuation byte
  CHECK(to_valid_utf8("caf\xe9!") == "caf\xef\xbf\xbd!");
  CHECK(to_valid_utf8("\xff\xfe") == "\xef\xbf\xbd\xef\xbf\xbd");
}

TEST_CASE("Util.Format.BytesDurationsNumbers" * doctest::timeout(10)) {
  CHECK(format_bytes(100) == "100 B");
  CHECK(format_bytes(12 * 1024) == "12 KiB");
  CHECK(format_bytes(512ull << 20) == "512 MiB");
  CHECK(format_bytes(3ull << 29) == "1.5 GiB");
  CHECK(format_duration(7.2) == "7 s");
  CHECK(format_duration(245) == "4:05");
  CHECK(format_duration(3723) == "1:02:03");
  CHECK(format_duration(-1) == "?");
  CHECK(format_duration(std::nan("")) == "?");
  CHECK(format_double(0.1) == "0.1");
  CHECK(format_double(32) == "32");
  CHECK(format_double(1e-5) == "1e-05");
  CHECK(format_double(std::nan("")) == "nan");
  CHECK(format_double(-HUGE_VAL) == "-inf");
}

TEST_CASE("Util.System.HostnameAndDemangle" * doctest::timeout(10)) {
  char host[256] = {};
  REQUIRE(::gethostname(host, sizeof host - 1) == 0);
  CHECK(hostname() == host);
  CHECK(demangle(typeid(std::map<int, double>).name()) == "std::map<int, double, std::less<int>, std::allocator<std::pair<int const, double> > >");
  CHECK(demangle(typeid(Local).name()) == "(anonymous namespace)::Local");
  CHECK(demangle("not_mangled") == "not_mangled");
}

TEST_CASE("Util.ProgressBar.RedrawsOnATerminalAndPrintsLinesElsewhere" * doctest::timeout(10)) {
  CHECK(ProgressBar::cells(5, 10, 10) == "[#####-----] ");
  CHECK(ProgressBar::cells(0, 0, 4) == "[####] ");  // nothing to do is done
  CHECK(ProgressBar::cells(3, 3, 4) == "[####] ");
  {
    std::ostringstream out;
    ProgressBar bar(out, true);
    bar.update("1/3");
    bar.update("2/3");
    bar.print("failed: x");  // above the bar: the bar's line is erased first
    bar.update("3/3");
    bar.finish();
    CHECK(out.str() == "\r1/3\033[K\r2/3\033[K\r\033[Kfailed: x\n\r3/3\033[K\n");
  }
  {
    std::ostringstream out;
    ProgressBar bar(out, false);
    bar.update("1/3");
    bar.print("failed: x");
    bar.update("3/3");
    bar.finish();
    CHECK(out.str() == "1/3\nfailed: x\n3/3\n");
  }
  std::ostringstream not_a_terminal;
  CHECK(!is_terminal(not_a_terminal));
}
