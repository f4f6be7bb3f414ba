#include "jobqueue/local_process_job_queue.hpp"

#include <signal.h>

#include <algorithm>
#include <cstdlib>

#include "common/util.hpp"
#include "common/roles.hpp"
#include "common/process.hpp"
#include "common/env.hpp"

namespace herd::jobqueue {
namespace {
// A cancelled local worker gets SIGTERM (a drain); still there this long after, SIGKILL. Its
// worker has left the scheduler by then (a pool cancels a job once its worker is gone), so
// nothing of use is lost: this is for a process stuck in a task (Client::restart()).
constexpr auto kKillAfter = std::chrono::seconds(5);
}  // namespace

LocalProcessJobQueue::LocalProcessJobQueue(LocalProcessOptions options) : options_(std::move(options)) {
  if (const char* slices = env::get(env::Var::local_gpu_slices); slices && options_.gpu_slices.empty()) {
    const std::string all = slices;
    for (std::size_t start = 0; start <= all.size();) {
      const std::size_t end = std::min(all.find(';', start), all.size());
      if (end > start) options_.gpu_slices.push_back(all.substr(start, end - start));
      start = end + 1;
    }
    if (options_.gpu_slices.empty()) options_.gpu_slices.push_back("none");
  }
}

// The slice for a new worker: one no running worker holds, so two never share a GPU.
std::string LocalProcessJobQueue::take_gpu_slice(const std::string& id) {
  std::erase_if(gpu_slice_of_, [&](const auto& entry) { return !children_.count(entry.first); });
  std::vector<bool> held(options_.gpu_slices.size(), false);
  for (const auto& [job, slice] : gpu_slice_of_) held[slice] = true;
  for (std::size_t i = 0; i < held.size(); ++i) {
    if (!held[i] && options_.gpu_slices[i] != "none") {
      gpu_slice_of_[id] = i;
      return options_.gpu_slices[i];
    }
  }
  return "";  // CUDA_VISIBLE_DEVICES="" hides every device: a worker without GPUs
}

LocalProcessJobQueue::~LocalProcessJobQueue() { close(); }

void LocalProcessJobQueue::submit(std::size_t count, SubmitDone done) {
  SubmitResult res;
  std::vector<std::string>& ids = res.ids;
  // Like a Slurm pool's: the directory is made when missing, readable by this user alone.
  if (const std::string why = util::make_private_directories(options_.log_directory); !why.empty()) {
    res.error = "cannot start local workers: their log directory: " + why;
    count = 0;
  }
  for (std::size_t i = 0; i < count; ++i) {
    const std::string id = "local-" + std::to_string(started_++);
    std::vector<std::string> args = options_.worker_args;
    args.insert(args.end(), {"--name", id});
    process::SpawnOptions spawn;
    spawn.argv = {options_.executable};
    spawn.env = options_.env;
    spawn.env[detail::kRoleEnv] = "worker";
    spawn.env[detail::kRoleArgsEnv] = detail::join_role_args(args);
    spawn.env[env::name(env::Var::job_id)] = id;
    if (!options_.gpu_slices.empty()) {
      spawn.env["CUDA_VISIBLE_DEVICES"] = take_gpu_slice(id);
      spawn.unset_env.push_back(kGpuSlicesEnv);
    }
    spawn.death_signal = SIGKILL;  // workers die with the scheduler, even if it is SIGKILLed
    if (!options_.log_directory.empty()) spawn.stdout_path = options_.log_directory + "/" + id + ".log";
    try {
      children_[id] = process::spawn(spawn);
    } catch (const std::exception& e) {
      res.error = std::string("cannot start a local worker: ") + e.what();
      break;
    }
    ids.push_back(id);
  }
  runner().complete([done = std::move(done), res = std::move(res)] { done(res); });
}

void LocalProcessJobQueue::cancel(const std::vector<std::string>& ids, CancelDone done) {
  for (const auto& id : ids) {
    if (auto it = children_.find(id); it != children_.end()) {
      ::kill(it->second, SIGTERM);
      kill_at_.try_emplace(id, std::chrono::steady_clock::now() + kKillAfter);
    }
  }
  runner().complete([done = std::move(done)] { done(""); });
}

void LocalProcessJobQueue::poll(PollDone done) {
  PollResult r;
  for (auto it = children_.begin(); it != children_.end();) {
    int status = 0;
    if (auto k = kill_at_.find(it->first); k != kill_at_.end() && std::chrono::steady_clock::now() >= k->second) {
      ::kill(it->second, SIGKILL);  // cancelled and still there: as scancel's KillWait
      kill_at_.erase(k);
    }
    if (process::try_reap(it->second, &status)) {
      kill_at_.erase(it->first);
      const std::string how = process::describe_status(status);
      r.jobs.push_back({it->first, JobState::ended, "EXITED", how});
      r.log.push_back("worker " + it->first + " (pid " + std::to_string(it->second) + ") " + how);
      it = children_.erase(it);
    } else {
      r.jobs.push_back({it->first, JobState::running, "RUNNING", ""});
      ++it;
    }
  }
  runner().complete([done = std::move(done), r = std::move(r)] { done(r); });
}

void LocalProcessJobQueue::close() {
  for (const auto& [id, pid] : children_) ::kill(pid, SIGTERM);
  for (const auto& [id, pid] : children_) process::terminate(pid, 3000);
  children_.clear();
}

}  // namespace herd::jobqueue
