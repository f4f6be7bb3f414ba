// Where a batch job's output goes, and its last lines: the job script's --output/--error
// patterns expanded for one job (%A, %a, %j, %x, %u, %%), and a bounded read of a file's end.
// Used to show why a job failed ("module: command not found") without hunting for files.
#pragma once

#include <string>
#include <vector>

namespace herd::jobqueue {

/// The --output and --error patterns of a batch script's #SBATCH lines (the last of each
/// wins); "" when absent. Slurm's default (slurm-%A_%a.out, stderr with stdout) applies then.
struct OutputPatterns {
  std::string output, error;
};
OutputPatterns sbatch_output_patterns(const std::string& script);

/// The file(s) of array task "A_a" (or plain job "J"): stdout's, then stderr's when it goes
/// elsewhere. Relative patterns are taken from `submit_dir`. Fields Slurm knows and we do not
/// (%j of an array task, %N, ...) match any text: the newest such file is taken.
std::vector<std::string> slurm_output_files(const OutputPatterns& patterns, const std::string& job_id,
                                            const std::string& job_name, const std::string& submit_dir);

/// The last `lines` lines of `path` (reads at most `max_bytes` from its end); empty when the
/// file cannot be read. `dropped` (optional) gets how many earlier lines are not returned
/// (counted in the part read only).
std::vector<std::string> last_lines(const std::string& path, std::size_t lines, std::size_t max_bytes = 1 << 20,
                                    std::size_t* dropped = nullptr);

}  // namespace herd::jobqueue
