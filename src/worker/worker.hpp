// A worker: one I/O thread (scheduler DEALER, data-port ROUTER, peer DEALERs) and a pool of
// executor threads. Tasks whose inputs live elsewhere wait while the I/O thread fetches the
// inputs from peers, in one request per peer per turn; finished tasks come back to the I/O
// thread through a queue and are reported to the scheduler in batches.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <zmq.hpp>

#include "collective/gang_runtime.hpp"
#include "common/config.hpp"
#include "common/security.hpp"
#include "protocol/codec.hpp"
#include "gpu/gpu.hpp"
#include "worker/data_store.hpp"

namespace herd::worker {

struct WorkerOptions {
  std::string scheduler;                    // scheduler address, e.g. tcp://127.0.0.1:40000
  std::string name;                         // "" = host:pid
  std::uint32_t nthreads = 1;               // task slots
  std::map<std::string, double> resources;  // custom resources it offers
  std::string listen_host;                  // interface for the data port ("" = guess)
  std::vector<std::string> load;            // task libraries to dlopen
  std::uint64_t memory_limit = 0;           // bytes of RSS (0 = Slurm's job memory, or none)
  Config config = Config::from_env();
};

class Worker {
 public:
  explicit Worker(WorkerOptions options);
  ~Worker();
  /// Connects, registers, serves until the scheduler says stop or is lost. Exit code.
  int run();
  static void request_stop();
  /// SIGTERM / walltime warning: drain (the first time), leave at once (the second time).
  static void request_drain();

 private:
  using Clock = std::chrono::steady_clock;
  struct Completion {
    protocol::TaskId id = 0;
    bool ok = false;
    BytesPtr bytes;
    protocol::ErrorInfo error;
    std::uint64_t duration_us = 0;
    bool missing_input = false;
    bool full_result = false;  // the whole result goes back (journal)
  };
  struct Pending {
    protocol::ExecuteTask task;
    std::uint32_t missing = 0;
  };
  struct Fetch {
    std::string address;
    std::vector<protocol::TaskId> ids;
    Clock::time_point sent;
  };

  bool connect();
  void executor_loop(std::size_t index);
  Completion execute(const protocol::ExecuteTask& task, const std::vector<int>& devices);
  void on_execute(protocol::ExecuteTasksEvent& ev);
  void on_cancel(const protocol::KeysEvent& ev);
  void on_acquire(const protocol::AcquireKeysEvent& ev);
  /// `herd logs`: answers the scheduler with this worker's log or a task's output.
  void on_logs_fetch(const zmq::message_t& body);
  bool queued_locked(protocol::TaskId id, const std::string& key);  // received, not started; run_mu_ held
  void on_data_request(protocol::Received& msg);
  void on_data_reply(const std::string& address, protocol::Received& msg);
  void request_inputs(std::map<std::string, std::vector<protocol::TaskId>>& wanted);
  void fetch_from_next_holder(protocol::TaskId dep,
                              std::map<std::string, std::vector<protocol::TaskId>>& wanted);
  void input_arrived(protocol::TaskId dep);
  void input_unavailable(protocol::TaskId dep);
  void make_runnable(protocol::ExecuteTask task);
  /// Devices for `need` GPUs from the free ones (whole devices for need >= 1, one shared
  /// device for a fraction); empty when they do not fit now. run_mu_ held.
  std::vector<int> pick_gpus(double need) const;
  void on_gang_message(protocol::MessageType type, const zmq::message_t& body);
  void drain_completions();
  void wake_io();  // any thread: the I/O thread leaves its poll and drains completions
  void memory_monitor();
  void over_memory_limit(std::uint64_t rss);
  void flush_results();
  /// Says goodbye and waits (bounded) for the scheduler's acknowledgement.
  void goodbye(const std::string& reason);
  zmq::socket_t& peer(const std::string& address);
  std::uint64_t rss_bytes() const;

  WorkerOptions options_;
  zmq::context_t context_{1};
  security::Auth auth_;  // before the sockets: the data port is a CURVE server
  zmq::socket_t sched_, data_;
  int wake_fd_ = -1;  // eventfd: "look at the completion queue" (wake_io), polled by run()
  std::string data_address_;
  DataStore store_;

  // Executor side.
  std::mutex run_mu_;
  std::condition_variable run_cv_;
  std::deque<protocol::ExecuteTask> runnable_;
  std::map<std::string, double> free_resources_;
  std::vector<gpu::Device> gpus_;    // devices this worker may use
  std::vector<double> gpu_free_;     // by device: 1 = free, 0 = taken (fractions shared)
  std::unordered_set<protocol::TaskId> cancelled_;  // cancelled while queued
  bool stopping_ = false;
  std::atomic<std::uint32_t> executing_{0};
  std::map<protocol::TaskId, std::string> running_;  // id -> key, guarded by run_mu_
  std::atomic<std::uint64_t> over_limit_rss_{0};     // set by the monitor: RSS past the limit
  std::thread monitor_;
  std::vector<std::thread> executors_;
  std::mutex done_mu_;
  std::vector<Completion> done_;
  std::vector<protocol::GangJoinRequest> gang_joins_;  // from members, for the I/O thread

  // Gang members on this worker: (gang, attempt) -> mailbox (made when the task arrives, so an
  // abort that comes before the member starts is kept).
  std::mutex gang_mu_;
  std::map<std::pair<protocol::TaskId, std::uint32_t>, std::shared_ptr<collective::GangSession>> gangs_;
  std::string ring_host_;  // where gang members' ring listeners bind

  // I/O side.
  std::unordered_map<protocol::TaskId, Pending> pending_;                       // awaiting inputs
  std::unordered_map<protocol::TaskId, std::vector<protocol::TaskId>> waiters_;  // input -> tasks
  std::unordered_map<protocol::TaskId, std::pair<std::vector<std::string>, std::size_t>> holders_;
  std::unordered_map<std::uint64_t, Fetch> fetches_;
  std::uint64_t next_request_ = 1;
  std::map<std::string, zmq::socket_t> peers_;
  std::vector<protocol::TaskResult> results_out_;
  std::vector<protocol::TaskId> acquired_out_;
  Clock::time_point last_from_scheduler_;
  std::int64_t end_time_ = 0;           // unix seconds when the batch job ends (0 = never)
  std::int64_t retire_before_s_ = 60;   // ask to retire this long before end_time_
  bool retire_asked_ = false;
  bool draining_ = false;               // a drain signal came: leave by drain_deadline_
  Clock::time_point drain_deadline_{};
  Clock::time_point last_heartbeat_{};
};

int run_worker(WorkerOptions options);

}  // namespace herd::worker
