// What a sweep reads and writes: metrics in a command's output (including malformed output),
// command templates and shell quoting, JSON, and the results files (CSV + JSON lines), with a
// log cut short by a kill.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <herd/error.hpp>

#include "herd/shell.hpp"
#include "sweep/command.hpp"
#include "common/json.hpp"
#include "common/util.hpp"
#include "sweep/metrics.hpp"
#include "sweep/progress.hpp"
#include "sweep/results.hpp"

using namespace herd::sweep;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string temp_prefix(const char* name) {
  const std::string dir = "/tmp/herd-sweep-unit-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  return dir + "/" + name;
}

/// What /bin/sh makes of a command line: its words, one per line.
std::string sh_words(const std::string& line) {
  const herd::ShellResult r = herd::shell(herd::ShellCommand{"for w in " + line + "; do echo \"[$w]\"; done"});
  return r.stdout_tail;
}

}  // namespace

TEST_CASE("Sweep.Metrics.LinesWithHistory" * doctest::timeout(10)) {
  const ParsedMetrics m = parse_metrics(
      "starting\n"
      "herd-metric loss=0.9 acc=0.5\n"
      "epoch 1 done\n"
      "  herd-metric loss=0.5\n"
      "herd-metric loss=0.25 acc=0.75 val/loss=0.3 top-1=+1e-1\n"
      "bye\n");
  CHECK(m.error.empty());
  CHECK(m.final.at("loss") == 0.25);
  CHECK(m.final.at("acc") == 0.75);
  CHECK(m.final.at("val/loss") == 0.3);
  CHECK(m.final.at("top-1") == 0.1);
  CHECK(m.history.at("loss") == std::vector<double>{0.9, 0.5, 0.25});
  CHECK(m.history.at("acc") == std::vector<double>{0.5, 0.75});
}

TEST_CASE("Sweep.Metrics.JsonOnTheLastLine" * doctest::timeout(10)) {
  const ParsedMetrics m = parse_metrics(
      "herd-metric loss=0.9\n"
      "{\"loss\": 0.125, \"acc\": 1, \"model\": \"runs/a.pt\", \"diverged\": null, \"lr\": \"1e-3\", \"nested\": {\"a\": 1}}\n\n");
  CHECK(m.error.empty());
  CHECK(m.final.at("loss") == 0.125);  // the JSON value is final
  CHECK(m.final.at("acc") == 1);
  CHECK(m.final.at("lr") == 0.001);
  CHECK(std::isnan(m.final.at("diverged")));
  CHECK(m.final.count("model") == 0);
  CHECK(m.final.count("nested") == 0);
  CHECK(m.history.at("loss") == std::vector<double>{0.9});
}

TEST_CASE("Sweep.Metrics.MalformedOutputIsAFailureWithTheReason" * doctest::timeout(10)) {
  const ParsedMetrics bad_value = parse_metrics("herd-metric loss=0.5\nherd-metric loss=abc\n");
  CHECK(bad_value.error.find("line 2") != std::string::npos);
  CHECK(bad_value.error.find("'loss=abc' is not name=number") != std::string::npos);
  CHECK(bad_value.final.at("loss") == 0.5);  // what was readable is kept

  CHECK(parse_metrics("herd-metric\n").error.find("no name=value") != std::string::npos);
  CHECK(!parse_metrics("herd-metric loss 0.5\n").error.empty());
  CHECK(!parse_metrics("herd-metric 9lives=1\n").error.empty());

  const ParsedMetrics bad_json = parse_metrics("training...\n{\"loss\": 0.5,\n");
  CHECK(bad_json.error.find("malformed JSON object on the last line") != std::string::npos);
  CHECK(!parse_metrics("{\"loss\": 0.5} trailing\n").error.empty());

  // Not ours: other words, and JSON that is not on the last line.
  CHECK(parse_metrics("herd-metrics are great\nherd-metricloss=1\n").error.empty());
  CHECK(parse_metrics("{\"loss\": oops}\nlast line\n").error.empty());
  CHECK(parse_metrics("").final.empty());
  // A JSON object with bytes that are not UTF-8 (a Latin-1 name) still gives its metrics.
  const ParsedMetrics latin1 = parse_metrics("{\"loss\": 0.25, \"run\": \"caf\xe9\"}\n");
  CHECK(latin1.error.empty());
  CHECK(latin1.final.at("loss") == 0.25);
}

TEST_CASE("Sweep.Metrics.TruncatedOutputSkipsTheCutLine" * doctest::timeout(10)) {
  const ParsedMetrics m = parse_metrics("ic loss=garbage\nherd-metric loss=0.5\n", true);
  CHECK(m.error.empty());
  CHECK(m.final.at("loss") == 0.5);
}

TEST_CASE("Sweep.Command.PlaceholdersAndQuoting" * doctest::timeout(10)) {
  const std::map<std::string, std::string> v = {
      {"lr", "0.01"}, {"name", "it's a b"}, {"empty", ""}, {"glob", "*"}, {"trial", "abc"}};
  CHECK(fill_template("train --lr {lr} --out runs/{trial}", v, true) == "train --lr 0.01 --out runs/abc");
  CHECK(fill_template("echo {name}", v, true) == "echo 'it'\\''s a b'");
  CHECK(fill_template("echo {name}", v, false) == "echo it's a b");
  CHECK(fill_template("echo ${HOME} {{lr}} {a,b} '{print $1}'", v, true) == "echo ${HOME} {lr} {a,b} '{print $1}'");
  CHECK(placeholders("a {lr} {x} ${y} {{z}} {p q}") == std::set<std::string>{"lr", "x"});
  CHECK_THROWS_WITH_AS(fill_template("--lr {lrr}", v, true), doctest::Contains("{lrr}"), std::invalid_argument);
  // Through a real shell: each value stays one word, nothing is expanded.
  CHECK(sh_words(fill_template("{name} {empty} {glob} {lr}", v, true)) == "[it's a b]\n[]\n[*]\n[0.01]\n");
  CHECK(herd::util::shell_quote("a$(rm -rf x)`b`") == "'a$(rm -rf x)`b`'");
  CHECK(herd::util::shell_quote("-3.5e-4") == "-3.5e-4");
}

TEST_CASE("Sweep.Command.ValuesAreNeverEvaluatedByTheShell" * doctest::timeout(30)) {
  // Values that would run a command if a shell evaluated them, placed in the template inside
  // double quotes, single quotes, no quotes and $( ... ): run through a real /bin/sh, each comes
  // out as the same text, one word, and no file appears.
  const std::string dir = temp_prefix("noeval");
  std::filesystem::create_directories(dir);
  const std::map<std::string, std::string> v = {
      {"a", "$(touch X)"}, {"b", "`touch X`"}, {"c", "\"; touch X; \""}, {"d", "'; touch X; '"}, {"e", "a b  *"}};
  const std::string want = "[$(touch X)]\n[`touch X`]\n[\"; touch X; \"]\n['; touch X; ']\n[a b  *]\n";
  for (const std::string tmpl : {
           R"SH(printf '[%s]\n' "{a}" "{b}" "{c}" "{d}" "{e}")SH",
           R"SH(printf '[%s]\n' {a} {b} {c} {d} {e})SH",
           R"SH(printf '[%s]\n' '{a}' '{b}' '{c}' '{d}' '{e}')SH",
           R"SH(printf '[%s]\n' "$(printf %s "{a}")" "$(printf %s {b})" "x$(echo "{c}" | cut -c1-100)" \
                "$( (printf %s '{d}') )" "{e}" | sed 's/\[x/[/')SH",
       }) {
    CAPTURE(tmpl);
    std::map<std::string, std::string> env;
    herd::ShellCommand cmd{fill_script(tmpl, v, env)};
    cmd.env = env;
    cmd.cwd = dir;
    const herd::ShellResult r = herd::shell(cmd);
    INFO(cmd.script << "\n" << r.stderr_tail);
    CHECK(r.exit_code == 0);
    CHECK(r.stdout_tail == want);
    CHECK_FALSE(std::filesystem::exists(dir + "/X"));
    CHECK(env.at("HERD_P_a") == "$(touch X)");
  }
  // Backquotes in the template: still no evaluation of the value.
  std::map<std::string, std::string> env;
  herd::ShellCommand cmd{fill_script("echo `echo {a}` `echo {c}`", v, env)};
  cmd.env = env;
  cmd.cwd = dir;
  CHECK(herd::shell(cmd).exit_code == 0);
  CHECK_FALSE(std::filesystem::exists(dir + "/X"));
  // The control: the same text filled in as plain quoted text would have run the command.
  herd::ShellCommand naive{fill_template(R"SH(echo "{a}")SH", v, true)};
  naive.cwd = dir;
  (void)herd::shell(naive);
  CHECK(std::filesystem::exists(dir + "/X"));
  std::filesystem::remove_all(dir);
  // Literal braces, the shell's own ${VAR} and unknown placeholders behave as documented.
  std::map<std::string, std::string> e2;
  CHECK(fill_script("echo ${HOME} {{a}} {a,b} '{print $1}' {e}", v, e2) ==
        "echo ${HOME} {a} {a,b} '{print $1}' \"${HERD_P_e}\"");
  CHECK_THROWS_WITH_AS(fill_script("--lr {lrr}", v, e2), doctest::Contains("{lrr}"), std::invalid_argument);
}

TEST_CASE("Sweep.Json.RoundTrip" * doctest::timeout(10)) {
  // A results line with every awkward value a run can leave: quotes, backslashes, control
  // characters, Unicode, bytes that are not UTF-8 (a program's raw output), NaN and infinity.
  RunRecord r;
  r.result.id = "t\"1\\";
  r.result.index = 7;
  r.result.params = {{"name", "a\"b\\c\n\t\x01\u00e9\U0001f600"}, {"lr", "1e-4"}};
  r.result.budget = "3";
  r.result.status = herd::TrialStatus::failed;
  r.final = false;
  r.result.metrics = {{"loss", 0.1}, {"big", 1e300}, {"nan", std::nan("")}, {"inf", HUGE_VAL}};
  r.result.history = {{"loss", {1, 0.5}}};
  r.result.exit_code = -3;
  r.result.wall_time_s = 1.25;
  r.result.attempts = 2;
  r.stderr_tail = std::string("bad \xff\xfe bytes\n");
  const std::string line = to_json_line(r);
  CHECK(line.find('\n') == std::string::npos);  // one line
  CHECK(line.rfind("{\"trial\":", 0) == 0);     // members in the order written
  const RunRecord back = from_json_line(line);
  CHECK(back.result.id == r.result.id);
  CHECK(back.result.index == 7);
  CHECK(back.result.params == r.result.params);
  CHECK(back.result.budget == "3");
  CHECK(back.result.status == herd::TrialStatus::failed);
  CHECK(!back.final);
  CHECK(back.result.metrics.at("loss") == 0.1);
  CHECK(back.result.metrics.at("big") == 1e300);
  CHECK(std::isnan(back.result.metrics.at("nan")));  // JSON has no NaN: null, read back as NaN
  CHECK(std::isnan(back.result.metrics.at("inf")));
  CHECK(back.result.history.at("loss") == std::vector<double>{1, 0.5});
  CHECK(back.result.exit_code == -3);
  CHECK(back.result.wall_time_s == 1.25);
  CHECK(back.result.attempts == 2);
  CHECK(back.stderr_tail == "bad \xef\xbf\xbd\xef\xbf\xbd bytes\n");  // U+FFFD for each bad byte
  // A line of an older herd, which wrote such bytes as they were, reads the same way.
  CHECK(from_json_line("{\"trial\":\"a\",\"params\":{},\"status\":\"ok\",\"stderr_tail\":\"x\xffy\"}").stderr_tail ==
        "x\xef\xbf\xbdy");

  using herd::json::parse;
  CHECK(parse(R"("\u00e9\ud83d\ude00")") == "\xc3\xa9\xf0\x9f\x98\x80");
  CHECK_THROWS_WITH_AS(parse("{\"a\": 1"), doctest::Contains("line 1, column 8"), std::invalid_argument);
  CHECK_THROWS_AS(parse("[1,]"), std::invalid_argument);
  CHECK_THROWS_AS(parse("[1e999]"), std::invalid_argument);
  CHECK_THROWS_AS(parse(std::string(1000, '[')), std::invalid_argument);
  // Deep nesting from a program's output is read without recursion, not a crash.
  CHECK(parse(std::string(100000, '[') + std::string(100000, ']')).is_array());
  CHECK(herd::util::format_double(0.1) == "0.1");
  CHECK(herd::util::format_double(32) == "32");
}

TEST_CASE("Sweep.Results.CsvAndJsonLinesAndACutLine" * doctest::timeout(10)) {
  const std::string prefix = temp_prefix("store");
  std::filesystem::remove(prefix + ".jsonl");
  std::filesystem::remove(prefix + ".csv");
  RunRecord a;
  a.result.id = "aaaa";
  a.result.index = 0;
  a.result.params = {{"lr", "0.1"}, {"note", "x, \"y\""}};
  a.result.status = herd::TrialStatus::ok;
  a.result.metrics = {{"loss", 0.5}};
  a.result.history = {{"loss", {0.9, 0.5}}};
  a.result.attempts = 1;
  a.result.worker = "w1";
  a.result.job_id = "123_4";
  a.finished_at = utc_now();
  RunRecord b = a;
  b.result.id = "bbbb";
  b.result.index = 1;
  b.result.params["lr"] = "0.01";
  b.result.status = herd::TrialStatus::failed;
  b.result.error = "exit code 3: boom";
  b.result.metrics = {{"loss", 0.7}, {"acc", 0.1}};  // a new metric column: the CSV is rewritten
  {
    ResultsStore store(prefix + ".csv", {"lr", "note"}, "loss", false);  // the extension is dropped
    CHECK(store.previous().empty());
    store.append(a);
    store.append(b);
    CHECK(store.csv_path() == prefix + ".csv");
    CHECK(store.jsonl_path() == prefix + ".jsonl");
  }
  std::string csv = read_file(prefix + ".csv");
  CHECK(csv ==
        "trial,index,status,lr,note,loss,acc,exit_code,wall_time_s,attempts,worker,job_id,host,error,finished_at\n"
        "aaaa,0,ok,0.1,\"x, \"\"y\"\"\",0.5,,0,0,1,w1,123_4,,," + a.finished_at + "\n"
        "bbbb,1,failed,0.01,\"x, \"\"y\"\"\",0.7,0.1,0,0,1,w1,123_4,,exit code 3: boom," + a.finished_at + "\n");
  // A kill in the middle of a line: the line is skipped, the next append starts a fresh line.
  { std::ofstream(prefix + ".jsonl", std::ios::app) << "{\"trial\":\"cccc\",\"par"; }
  RunRecord b2 = b;
  b2.result.status = herd::TrialStatus::ok;
  b2.result.error.clear();
  {
    ResultsStore store(prefix, {"lr", "note"}, "loss", false);
    REQUIRE(store.previous().size() == 2);
    CHECK(store.unreadable_lines() == 1);
    CHECK(store.previous()[0].result.history.at("loss") == std::vector<double>{0.9, 0.5});
    CHECK(store.previous()[1].result.error == "exit code 3: boom");
    CHECK(store.previous()[1].result.params.at("note") == "x, \"y\"");
    // A second sweep on the same files is refused while this one holds them.
    CHECK_THROWS_WITH_AS(ResultsStore(prefix, {}, "", false), doctest::Contains("in use"), herd::Error);
    store.append(b2);  // a rerun replaces the trial's row
  }
  csv = read_file(prefix + ".csv");
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 3);
  CHECK(csv.find("bbbb,1,ok") != std::string::npos);
  CHECK(csv.find("failed") == std::string::npos);
  ResultsStore again(prefix, {}, "", false);
  CHECK(again.previous().size() == 3);
  CHECK(again.unreadable_lines() == 1);
  std::filesystem::remove_all(std::filesystem::path(prefix).parent_path());
}

TEST_CASE("Sweep.Progress.LinesOrABarRedrawnInPlace" * doctest::timeout(10)) {
  herd::TrialResult a;
  a.id = "aaaa";
  a.params = {{"lr", "0.1"}};
  a.status = herd::TrialStatus::ok;
  a.metrics = {{"loss", 0.5}};
  a.wall_time_s = 1.25;
  herd::TrialResult b = a;
  b.status = herd::TrialStatus::failed;
  b.error = "exit code 3";
  Counts c;
  c.total = 2;
  {
    // Not a terminal: a line per trial, counted.
    std::ostringstream out;
    ProgressView view(herd::Progress::automatic, out, false, {"lr"}, "loss");
    CHECK(view.mode() == herd::Progress::lines);
    c.ok = 1;
    view.trial_done(a, c, false);
    c.failed = 1;
    view.trial_done(b, c, false);
    view.finish(c);
    CHECK(out.str() == "[1/2] ok      lr=0.1  loss=0.5  1.2 s\n"
                       "[2/2] failed  lr=0.1  loss=0.5  (exit code 3)  1.2 s\n");
  }
  {
    // A terminal: the bar redrawn in place; only the failure gets a line of its own, above it.
    std::ostringstream out;
    ProgressView view(herd::Progress::automatic, out, true, {"lr"}, "loss");
    CHECK(view.mode() == herd::Progress::bar);
    c = Counts{};
    c.total = 2;
    c.ok = 1;
    view.trial_done(a, c, false);
    c.failed = 1;
    view.trial_done(b, c, false);
    view.finish(c);
    const std::string s = out.str();
    CHECK(s.rfind("\r[############------------] 1/2 ok 1, running 0, ", 0) == 0);
    CHECK(s.find("\r\033[Kfailed  lr=0.1  loss=0.5  (exit code 3)  1.2 s\n\r[########################] 2/2 ok 1, failed 1") !=
          std::string::npos);
    CHECK(s.back() == '\n');
    CHECK(std::count(s.begin(), s.end(), '\n') == 2);
  }
}
