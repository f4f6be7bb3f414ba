// Reports of a run from its record (record.hpp): one self-contained HTML page (inline CSS, JS
// and SVG; no network: it opens from a laptop after `scp`), or Chrome trace JSON (Perfetto,
// chrome://tracing). Built by `herd report`, by the dashboard's /report and for
// Client::performance_report; pure functions of what was read.
#pragma once

#include <cstdint>
#include <string>

#include "record/record.hpp"

namespace herd::record {

struct ReportOptions {
  std::string title = "herd report";
  std::string source;                 // where the record came from (a file, a scheduler)
  std::size_t max_stream_runs = 100000;  // the stream draws at most this many runs: every failed
                                         //   or lost one, the slowest, then an even sample (the
                                         //   tables always count them all)
};

/// The HTML report.
std::string html_report(const Contents& c, const ReportOptions& options = {});
/// The same as Chrome trace JSON: one process per worker, one thread per slot, a slice per run
/// (its fetch as a slice before it), counters for memory and pool sizes, instants for events.
std::string trace_report(const Contents& c, const ReportOptions& options = {});

/// The line charts' script (herdChart), shared by the report and the dashboard's history.
const char* charts_js();
/// The stylesheet both pages share.
const char* page_css();

}  // namespace herd::record
