// `herd report`: a report of a run record, asked of a running scheduler (--scheduler) or read
// from the record file itself (--record, also after the scheduler is gone).
#include <CLI/CLI.hpp>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "common/util.hpp"
#include "cli/connect.hpp"
#include "record/report.hpp"

namespace herd::detail {

/// "2h", "30m", "90s", "1d" (that long ago), "2026-11-28 18:00[:00]" or with a T (local time),
/// or "@SECONDS" (unix time): unix milliseconds. Throws std::invalid_argument naming the forms.
std::int64_t parse_since(const std::string& text, std::int64_t now_ms) {
  const std::string forms = "--since '" + text +
                            "': give a time ago (90s, 30m, 2h, 1d), a local time (2026-11-28 18:00 or "
                            "2026-11-28T18:00:30) or @UNIX_SECONDS";
  if (text.empty()) throw std::invalid_argument(forms);
  if (text[0] == '@') {
    try {
      std::size_t used = 0;
      const long long s = std::stoll(text.substr(1), &used);
      if (used + 1 != text.size()) throw std::invalid_argument(forms);
      return s * 1000;
    } catch (const std::exception&) {
      throw std::invalid_argument(forms);
    }
  }
  const char unit = text.back();
  if (unit == 's' || unit == 'm' || unit == 'h' || unit == 'd') {
    try {
      std::size_t used = 0;
      const double n = std::stod(text.substr(0, text.size() - 1), &used);
      if (used + 1 != text.size() || n < 0) throw std::invalid_argument(forms);
      const double per = unit == 's' ? 1 : unit == 'm' ? 60 : unit == 'h' ? 3600 : 86400;
      return now_ms - static_cast<std::int64_t>(n * per * 1000);
    } catch (const std::exception&) {
      throw std::invalid_argument(forms);
    }
  }
  for (const char* fmt : {"%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M", "%Y-%m-%d"}) {
    std::tm tm{};
    const char* end = ::strptime(text.c_str(), fmt, &tm);
    if (end != nullptr && *end == '\0') {
      tm.tm_isdst = -1;
      const std::time_t t = std::mktime(&tm);
      if (t == -1) break;
      return static_cast<std::int64_t>(t) * 1000;
    }
  }
  throw std::invalid_argument(forms);
}

int report_main(const std::vector<std::string>& args) {
  CLI::App app{"herd report: a whole run on one page (or as a Chrome trace), from the scheduler's run record"};
  app.name("herd report");
  SchedulerArgs sched(app);
  std::string record_file, out = "", format = "html", since, campaign, job, title;
  app.add_option("--record", record_file,
                 "read this record file instead of asking a scheduler (herd status names it; works after the "
                 "scheduler is gone)");
  app.add_option("-o,--output", out, "where to write it ('-' = stdout; default herd-report.html or herd-trace.json)");
  app.add_option("--format", format, "html (one self-contained page) or trace (Chrome trace JSON, for Perfetto)")
      ->capture_default_str();
  app.add_option("--since", since, "only runs that ended since: 90s, 30m, 2h, 1d ago, a local time "
                                   "(2026-11-28 18:00) or @UNIX_SECONDS");
  app.add_option("--campaign", campaign, "only the runs of this detached campaign");
  app.add_option("--job", job, "only the runs on the workers of this batch job (12345 takes 12345_7 too)");
  app.add_option("--title", title, "the report's title");
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return util::usage_exit(app.exit(e));
  }
  if (format != "html" && format != "trace") {
    std::cerr << "herd report: unknown --format '" << format << "' (known: html, trace)\n";
    return 2;
  }
  if (record_file.empty() && sched.address.empty()) {
    std::cerr << "herd report: give --scheduler ADDR (or $HERD_SCHEDULER) to ask a running scheduler, or --record "
                 "FILE to read a record\n";
    return 2;
  }
  const std::int64_t now_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::int64_t since_ms = 0;
  try {
    if (!since.empty()) since_ms = parse_since(since, now_ms);
  } catch (const std::invalid_argument& e) {
    std::cerr << "herd report: " << e.what() << "\n";
    return 2;
  }
  if (out.empty()) out = format == "trace" ? "herd-trace.json" : "herd-report.html";
  std::string doc;
  try {
    if (!record_file.empty()) {
      record::Filter f;
      f.since_us = since_ms * 1000;
      f.campaign = campaign;
      f.job = job;
      const auto t0 = std::chrono::steady_clock::now();
      const record::Contents c = record::read_files(record_file, f);
      for (const auto& w : c.warnings) std::cerr << "herd report: warning: " << w << "\n";
      record::ReportOptions ro;
      if (!title.empty()) ro.title = title;
      ro.source = record_file;
      doc = format == "trace" ? record::trace_report(c, ro) : record::html_report(c, ro);
      if (out != "-") {
        std::cerr << "herd report: " << c.runs.size() << " task runs, " << c.pool_events.size() << " pool events, "
                  << c.samples.size() << " worker samples in "
                  << std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count()
                  << " ms\n";
      }
    } else {
      Client client = sched.connect("herd report");
      ReportRequestOptions ro;
      ro.format = format;
      ro.since = std::chrono::system_clock::time_point(std::chrono::milliseconds(since_ms));
      ro.campaign = campaign;
      ro.job = job;
      ro.title = title;
      doc = client.report(ro);
    }
  } catch (const std::exception& e) {
    std::cerr << "herd report: " << e.what() << "\n";
    return 1;
  }
  if (out == "-") {
    std::cout << doc;
    return 0;
  }
  std::ofstream f(out, std::ios::binary | std::ios::trunc);
  f.write(doc.data(), static_cast<std::streamsize>(doc.size()));
  f.close();
  if (!f) {
    std::cerr << "herd report: cannot write " << out << ": " << std::strerror(errno) << "\n";
    return 1;
  }
  std::cerr << "herd report: wrote " << out << " (" << doc.size() << " bytes)\n";
  return 0;
}

}  // namespace herd::detail
