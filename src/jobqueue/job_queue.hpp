// A pool of workers that the scheduler sizes: local processes now, Slurm jobs in
// slurm_job_queue. The scheduler calls poll() from its event loop; nothing here blocks long.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace herd::jobqueue {

class JobQueue {
 public:
  virtual ~JobQueue() = default;
  /// Name of the pool ("local", "cpu", "gpu", ...).
  virtual const std::string& name() const = 0;
  /// Wants `n` workers: starts or stops some.
  virtual void scale(std::size_t n) = 0;
  /// Workers asked for (the target of the last scale()).
  virtual std::size_t target() const = 0;
  /// Workers started and not known to have ended.
  virtual std::size_t live() const = 0;
  /// Reaps ended workers, replaces those that died while still wanted. Returns lines for the
  /// log about what happened ("worker local-2 exited with code 1").
  virtual std::vector<std::string> poll() = 0;
  /// Stops every worker; idempotent.
  virtual void close() = 0;
};

}  // namespace herd::jobqueue
