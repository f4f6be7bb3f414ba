#include "jobqueue/local_process_job_queue.hpp"

#include <signal.h>

#include "api/runtime.hpp"
#include "common/process.hpp"

namespace herd::jobqueue {

LocalProcessJobQueue::LocalProcessJobQueue(LocalProcessOptions options)
    : options_(std::move(options)) {}

LocalProcessJobQueue::~LocalProcessJobQueue() { close(); }

void LocalProcessJobQueue::start_one() {
  const std::string name = "local-" + std::to_string(started_++);
  std::vector<std::string> args = options_.worker_args;
  args.push_back("--name");
  args.push_back(name);
  process::SpawnOptions spawn;
  spawn.argv = {options_.executable};
  spawn.env = options_.env;
  spawn.env[detail::kRoleEnv] = "worker";
  spawn.env[detail::kRoleArgsEnv] = detail::join_role_args(args);
  // Workers die with the scheduler even if it is SIGKILLed.
  spawn.death_signal = SIGKILL;
  if (!options_.log_directory.empty()) spawn.stdout_path = options_.log_directory + "/" + name + ".log";
  children_.push_back({process::spawn(spawn), name});
}

void LocalProcessJobQueue::scale(std::size_t n) {
  target_ = n;
  while (children_.size() < target_) start_one();
  while (children_.size() > target_) {
    // Newest first: the oldest workers hold the most results.
    process::terminate(children_.back().pid, 5000);
    children_.pop_back();
  }
}

std::vector<std::string> LocalProcessJobQueue::poll() {
  std::vector<std::string> events;
  for (auto it = children_.begin(); it != children_.end();) {
    int status = 0;
    if (process::try_reap(it->pid, &status)) {
      events.push_back("worker " + it->name + " (pid " + std::to_string(it->pid) + ") " +
                       process::describe_status(status));
      it = children_.erase(it);
    } else {
      ++it;
    }
  }
  // Replace workers that died while still wanted, at most one per second so that a worker
  // that crashes at start-up does not turn into a fork storm.
  const auto now = std::chrono::steady_clock::now();
  if (children_.size() < target_ && now - last_restart_ > std::chrono::seconds(1)) {
    last_restart_ = now;
    try {
      start_one();
      events.push_back("started replacement worker " + children_.back().name);
    } catch (const std::exception& e) {
      events.push_back(std::string("cannot start a replacement worker: ") + e.what());
    }
  }
  return events;
}

void LocalProcessJobQueue::close() {
  target_ = 0;
  for (const auto& c : children_) ::kill(c.pid, SIGTERM);
  for (const auto& c : children_) process::terminate(c.pid, 3000);
  children_.clear();
}

}  // namespace herd::jobqueue
