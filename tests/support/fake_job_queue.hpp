// A JobQueue test double: records what the pool asks for and lets the test decide what the
// "batch system" answers, when it answers (hold = true: nothing is answered until release()),
// and which jobs run or end. Answers arrive as they do from the real queues: through the
// CommandRunner, in its drain().
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "jobqueue/job_queue.hpp"

namespace herd::testing {

class FakeJobQueue : public jobqueue::JobQueue {
 public:
  struct State {
    std::map<std::string, jobqueue::JobInfo> jobs;
    std::vector<std::size_t> submissions;          // count of each submit() call
    std::vector<std::vector<std::string>> cancel_calls;  // ids of each cancel() call
    std::vector<std::string> cancelled;            // every id cancelled
    int polls = 0;                                 // poll() calls
    std::string refuse;                            // non-empty: submissions fail with this
    std::string poll_error;                        // non-empty: polls fail with this
    int next = 0;
    bool hold = false;                             // answers wait for release()
    std::deque<std::function<void()>> held;        // answers not given yet
    /// Gives the held answers (they run in the runner's next drain()).
    void release() {
      while (!held.empty()) {
        auto f = std::move(held.front());
        held.pop_front();
        f();
      }
    }
  };
  explicit FakeJobQueue(State& s) : s_(s) {}
  std::string kind() const override { return "fake"; }
  void submit(std::size_t count, SubmitDone done) override {
    s_.submissions.push_back(count);
    answer([this, count, done = std::move(done)] {
      jobqueue::SubmitResult r;
      if (!s_.refuse.empty()) {
        r.error = s_.refuse;
      } else {
        for (std::size_t i = 0; i < count; ++i) {
          const std::string id = "job" + std::to_string(s_.next++);
          s_.jobs[id] = {id, jobqueue::JobState::pending, "PENDING", "Priority"};
          r.ids.push_back(id);
        }
      }
      runner().complete([done, r] { done(r); });
    });
  }
  void cancel(const std::vector<std::string>& ids, CancelDone done) override {
    s_.cancel_calls.push_back(ids);
    answer([this, ids, done = std::move(done)] {
      for (const auto& id : ids) {
        s_.cancelled.push_back(id);
        if (auto it = s_.jobs.find(id); it != s_.jobs.end()) it->second.state = jobqueue::JobState::ended;
      }
      runner().complete([done] { done(""); });
    });
  }
  void poll(PollDone done) override {
    ++s_.polls;
    answer([this, done = std::move(done)] {
      jobqueue::PollResult r;
      if (!s_.poll_error.empty()) {
        r.error = s_.poll_error;
      } else {
        for (auto it = s_.jobs.begin(); it != s_.jobs.end();) {
          r.jobs.push_back(it->second);
          it = it->second.state == jobqueue::JobState::ended ? s_.jobs.erase(it) : std::next(it);
        }
      }
      runner().complete([done, r] { done(r); });
    });
  }
  void close() override { s_.jobs.clear(); }

 private:
  void answer(std::function<void()> f) {
    if (s_.hold) {
      s_.held.push_back(std::move(f));
    } else {
      f();
    }
  }
  State& s_;
};

}  // namespace herd::testing
