// The sweep's results files: `PREFIX.jsonl`, an append-only log (one line per finished run and
// per early-stopping decision; what a resumed sweep reads), and `PREFIX.csv`, one row per trial
// with its latest final outcome (what a person opens). Each line reaches the file with one
// write(2) as soon as its run ends, so killing the sweep loses nothing that finished; a line
// cut short by a crash is skipped when the file is read back.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "herd/sweep.hpp"

namespace herd::sweep {

/// One line of the log.
struct RunRecord {
  TrialResult result;
  bool final = true;        // this row is the trial's outcome (not an intermediate rung)
  std::string stderr_tail;  // end of the command's stderr, when it failed
  std::string finished_at;  // ISO 8601, UTC
};

std::string to_json_line(const RunRecord& r);
/// Reads a line written by to_json_line; throws std::invalid_argument if it is not one.
RunRecord from_json_line(const std::string& line);
/// Current time as 2024-05-01T12:34:56Z.
std::string utc_now();
/// One CSV field, quoted when it needs to be (RFC 4180).
std::string csv_field(const std::string& s);

class ResultsStore {
 public:
  /// No files: everything stays in memory.
  ResultsStore() = default;
  /// Opens (creates) PREFIX.jsonl, locks it against a second sweep, reads what is there and
  /// rewrites PREFIX.csv from it. `param_names` and `objective` order the CSV's columns.
  /// @throws herd::Error when a file cannot be opened or another sweep holds the lock.
  ResultsStore(const std::string& prefix, std::vector<std::string> param_names, std::string objective,
               bool with_budget);
  ~ResultsStore();
  ResultsStore(const ResultsStore&) = delete;
  ResultsStore& operator=(const ResultsStore&) = delete;

  /// Lines read from an earlier run, in file order.
  const std::vector<RunRecord>& previous() const { return previous_; }
  /// Lines of the log that could not be read (e.g. the last one, cut by a kill).
  std::size_t unreadable_lines() const { return unreadable_; }

  /// Appends to the log and, for a final record, to the CSV. Throws herd::Error on I/O errors.
  void append(const RunRecord& record);

  const std::string& jsonl_path() const { return jsonl_path_; }
  const std::string& csv_path() const { return csv_path_; }

 private:
  void write_all(int fd, const std::string& text, const std::string& path);
  void rewrite_csv();
  std::string csv_row(const RunRecord& r) const;
  bool add_columns(const RunRecord& r);

  std::string jsonl_path_, csv_path_;
  int jsonl_fd_ = -1, csv_fd_ = -1;
  std::vector<RunRecord> previous_;
  std::size_t unreadable_ = 0;
  std::string objective_;
  bool with_budget_ = false;
  // The CSV's rows: the latest final record per trial, in the order trials first finished.
  std::vector<RunRecord> rows_;
  std::map<std::string, std::size_t> row_of_;
  std::vector<std::string> param_columns_, metric_columns_;
};

}  // namespace herd::sweep
