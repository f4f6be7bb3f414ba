// A JobQueue test double: records what the pool asks for and lets the test decide what the
// "batch system" answers and which jobs run or end.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "herd/error.hpp"
#include "jobqueue/job_queue.hpp"

namespace herd::testing {

class FakeJobQueue : public jobqueue::JobQueue {
 public:
  struct State {
    std::map<std::string, jobqueue::JobInfo> jobs;
    std::vector<std::size_t> submissions;   // count of each submit() call
    std::vector<std::string> cancelled;
    std::string refuse;                     // non-empty: submit() throws this
    int next = 0;
  };
  explicit FakeJobQueue(State& s) : s_(s) {}
  std::string kind() const override { return "fake"; }
  std::vector<std::string> submit(std::size_t count) override {
    s_.submissions.push_back(count);
    if (!s_.refuse.empty()) throw JobQueueError(s_.refuse);
    std::vector<std::string> ids;
    for (std::size_t i = 0; i < count; ++i) {
      const std::string id = "job" + std::to_string(s_.next++);
      s_.jobs[id] = {id, jobqueue::JobState::pending, "PENDING", "Priority"};
      ids.push_back(id);
    }
    return ids;
  }
  void cancel(const std::vector<std::string>& ids) override {
    for (const auto& id : ids) {
      s_.cancelled.push_back(id);
      if (auto it = s_.jobs.find(id); it != s_.jobs.end()) it->second.state = jobqueue::JobState::ended;
    }
  }
  jobqueue::PollResult poll() override {
    jobqueue::PollResult r;
    for (auto it = s_.jobs.begin(); it != s_.jobs.end();) {
      r.jobs.push_back(it->second);
      it = it->second.state == jobqueue::JobState::ended ? s_.jobs.erase(it) : std::next(it);
    }
    return r;
  }
  void close() override { s_.jobs.clear(); }

 private:
  State& s_;
};

}  // namespace herd::testing
