// The scheduler's configuration file (TOML, read and written with toml++):
//
//   [scheduler]
//   listen = "tcp://0.0.0.0:8786"
//   metrics_open = true             # /metrics without the dashboard's token (Prometheus)
//
//   [pool.cpu]                      # one section per pool
//   kind = "slurm"                  # or "local"
//   partition = "cpu"
//   cores = 4
//   memory = "8G"
//   walltime = "01:00:00"
//   jobs = 2                        # initial size; or adapt_minimum / adapt_maximum
//   job_script_prologue = ["module load gcc/12", "source ~/venv/bin/activate"]
//   worker_extra_args = ["--load", "/home/me/libtasks.so"]
//   processes = 2                   # workers per node of a job, sharing its cores and memory
//   nodes = 1                       # nodes per job (one srun task per worker)
//   job_directives_skip = ["--mem"] # generated #SBATCH lines containing these are left out
//   job_script_epilogue = ["echo done"]
//   shebang = "#!/bin/bash -l"
//   submit_command_extra = ["--reservation=mine"]   # arguments of sbatch itself
//
//   [pool.cpu.env]                  # or, in the pool's table: env = ["OMP_NUM_THREADS=4"]
//   OMP_NUM_THREADS = "4"
//
//   [pool.cpu.resources]            # or resources = ["bigmem=1"]
//   bigmem = 1
//
// Every key of a pool is a SlurmOptions setter of the same name (queue = partition). Unknown
// keys are errors, so a typo cannot silently fall back to a default; every error names the file,
// line and column.
#pragma once

#include <istream>
#include <string>
#include <vector>

#include "herd/slurm.hpp"

namespace herd::jobqueue {

struct PoolConfig {
  std::string kind = "slurm";   // "slurm" or "local"
  SlurmOptions options;         // options().pool() is the pool's name
  int adapt_minimum = -1;       // >= 0: adaptive between minimum and maximum
  int adapt_maximum = -1;
  int idle_timeout_s = 60;      // adapt: retire a worker idle this long
};

struct SchedulerConfig {
  std::string listen;               // "" = command line or default
  bool metrics_open = false;        // the dashboard's /metrics needs no token
  std::vector<PoolConfig> pools;
};

/// Parses the file's text; throws std::invalid_argument "SOURCE:LINE:COLUMN: [pool.NAME] what".
SchedulerConfig parse_config(std::istream& in, const std::string& source);
SchedulerConfig load_config(const std::string& path);
/// The same configuration as TOML text (what SlurmCluster hands its scheduler): every option,
/// so that parse_config() gives back exactly these options, pools in the same order.
/// @throws std::invalid_argument naming an option whose text is not UTF-8 (TOML holds no other).
std::string to_toml(const SchedulerConfig& config);

}  // namespace herd::jobqueue
