// Metrics from a command's output, by the sweep's convention (see include/herd/sweep.hpp):
//
//   herd-metric loss=0.52 acc=0.71        any number of name=number pairs per line; a metric
//   herd-metric loss=0.31                 reported again extends its history, the last wins
//   {"loss": 0.29, "acc": 0.80}           or: a JSON object on the last line of stdout, whose
//                                         numeric members are final values
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace herd::sweep {

struct ParsedMetrics {
  std::map<std::string, double> final;                 // last value of each metric
  std::map<std::string, std::vector<double>> history;  // every herd-metric report, in order
  std::string error;                                   // why the output is malformed ("" = fine)
};

/// The prefix of a metric line.
inline constexpr std::string_view kMetricPrefix = "herd-metric";

/// Parses stdout. `truncated` says the text is the tail of a longer output, so that its first
/// line may be cut and is not read.
ParsedMetrics parse_metrics(std::string_view output, bool truncated = false);

/// True for names the sweep accepts for parameters and metrics: [A-Za-z_][A-Za-z0-9_]* for
/// parameters (they become placeholders and environment variables), plus '.', '/', '-' and ':'
/// inside metric names ("val/loss", "top-1").
bool valid_param_name(std::string_view name);
bool valid_metric_name(std::string_view name);

}  // namespace herd::sweep
