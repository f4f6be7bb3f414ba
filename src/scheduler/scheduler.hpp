// The scheduler: one thread, one ROUTER socket for clients and workers, the task graph, the
// worker registry, placement, and the job queue that sizes the worker pool.
//
// Each turn of the loop drains every message already queued on the socket, applies them to the
// graph, places what became ready, and only then sends: one ExecuteTasks per worker, one
// TaskUpdates per client, one FreeKeys per worker. So under load many tasks share one frame
// on every hop, and the per-task cost is a hash lookup and a vector push.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <queue>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <zmq.hpp>

#include "common/config.hpp"
#include "common/security.hpp"
#include "scheduler/journal.hpp"
#include "scheduler/pool.hpp"
#include "protocol/codec.hpp"
#include "scheduler/task_graph.hpp"

namespace herd::scheduler {

class HttpServer;

struct SchedulerOptions {
  std::string listen = "tcp://127.0.0.1:*";  // ZeroMQ endpoint to bind
  int parent_fd = -1;          // read end of the owner's pipe: EOF means the owner died
  std::uint32_t retire_grace_s = 30;  // a retiring worker's running tasks may take this long
  std::string journal;                // file of finished keyed tasks ("" = none)
  std::string dashboard = "127.0.0.1:8787";  // HTTP dashboard host:port ("" = none; port 0 = a
                                             //   free one; a busy port falls back to a free one)
  bool metrics_open = false;  // the dashboard's /metrics needs no token (for Prometheus)
  Config config = Config::from_env();
};

class Scheduler {
 public:
  explicit Scheduler(SchedulerOptions options);
  ~Scheduler();

  /// Binds the socket; returns the address peers connect to (port resolved).
  std::string bind();
  /// Gives the scheduler a worker pool; the pool sizes itself from its policy.
  void add_pool(std::unique_ptr<Pool> pool);
  /// Runs until stop() (from a signal handler: it only sets a flag) or the owner dies.
  int run();
  static void request_stop();
  /// Workers, tasks by state and function, throughput, pools and jobs, and the newest
  /// `max_events` task runs (src/scheduler/status.cpp).
  protocol::StatusReply status_snapshot(std::uint32_t max_events) const;
  /// "http://127.0.0.1:8787/" once bind() started the dashboard ("" = none).
  const std::string& dashboard_url() const { return dashboard_url_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct WorkerRec {
    std::uint32_t id = 0;
    std::string identity, name, host, address, job_id, pool;
    std::uint32_t nthreads = 1;
    std::map<std::string, double> resources;
    std::unordered_set<TaskId> processing;
    std::unordered_set<TaskId> has;
    Clock::time_point last_seen;
    std::uint64_t memory_rss = 0;
    std::uint32_t executing = 0;        // running now, as its last heartbeat said
    std::uint64_t memory_limit = 0;     // 0 = none
    std::int64_t end_time = 0;          // unix seconds when its job ends (0 = never)
    std::vector<protocol::GpuInfo> gpus;
    Clock::time_point idle_since;       // when processing last became empty
    bool retiring = false;              // no new tasks; leaves once drained and copied
    bool retired_by_pool = false;       // the pool shrinks (vs. walltime, drain signal)
    Clock::time_point retire_since;
    bool acquire_sent = false;          // its unique results were sent to other workers
    // Suspects (tasks that were on a worker when it died) run alone, so a poison task cannot
    // take innocent neighbours down with it and make them KilledWorker too.
    TaskId suspect = 0;                 // the suspect it runs (alone)
    TaskId reserved_for = 0;            // draining to run this suspect: takes nothing new
    std::vector<protocol::ExecuteTask> exec_out;
    std::vector<TaskId> free_out, cancel_out;
  };
  struct ClientRec {
    std::uint32_t index = 0;
    std::string identity, name;
    Clock::time_point last_seen;
    protocol::TaskUpdatesEvent out;
    std::unordered_map<std::uint32_t, std::int32_t> address_index;  // worker -> out.addresses
  };
  struct ReadyItem {
    std::int32_t priority;
    std::uint64_t seq;
    TaskId id;
    bool operator<(const ReadyItem& o) const {
      return priority != o.priority ? priority < o.priority : seq > o.seq;
    }
  };

  // Gangs (src/scheduler/gangs.cpp): N tasks placed together on N distinct workers, their
  // results held back until every rank succeeded, failed and retried as a whole.
  struct Gang {
    TaskId id = 0;                      // = rank 0's task id
    std::uint32_t size = 0;
    std::vector<TaskId> members;        // by rank (0 = not submitted yet)
    std::uint32_t registered = 0;       // members submitted
    std::uint32_t retries_left = 0;
    std::uint32_t attempt = 0;          // the current (or last) run; a retry is a new attempt
    std::uint32_t next_attempt = 0;
    bool running = false;               // placed; results of this attempt not all in
    bool failing = false;               // a rank failed: waiting for the others to stop
    bool requeue_free = false;          // the failure does not use up a retry (handed back)
    std::uint32_t outstanding = 0;      // members of this attempt not reported yet
    std::vector<std::uint32_t> worker;  // by rank: worker it runs on (this attempt)
    std::vector<bool> reported;         // by rank: its result of this attempt came in
    std::vector<std::unique_ptr<protocol::TaskResult>> done;  // by rank: held-back success
    std::unique_ptr<protocol::ErrorInfo> error;                // first failure of the attempt
    std::vector<protocol::GangJoinRequest> joins;              // by rank, this attempt
    std::uint32_t joined = 0;
  };
  enum class GangPlacement { placed, wait, set_aside, skip };
  void gang_member_added(const protocol::TaskSpec& spec);
  GangPlacement place_gang(const Task& member);
  /// True when `r` belongs to a gang and was dealt with here.
  bool gang_result(WorkerRec& w, protocol::TaskResult& r);
  void gang_join(WorkerRec& w, const protocol::GangJoinRequest& req);
  void gang_failed(Gang& g, std::uint32_t rank, protocol::ErrorInfo error, bool uses_retry);
  void gang_settle(Gang& g);
  /// Takes the gang members out of a lost worker's `processing` and fails their gangs.
  void gang_worker_lost(const WorkerRec& w, std::vector<TaskId>& processing);
  void cancel_gang(TaskId gang, const std::string& why);
  std::map<std::string, double> free_resources(const WorkerRec& w) const;
  void dispatch(Task& t, WorkerRec& w, protocol::ExecuteTask e);

  void handle(protocol::Received& msg);
  void handle_hello(const std::string& identity, const zmq::message_t& body);
  void handle_worker(WorkerRec& w, protocol::MessageType type, protocol::Received& msg);
  void handle_client(ClientRec& c, protocol::MessageType type, protocol::Received& msg);
  void drop_peer(const std::string& identity, const std::string& why);
  void worker_lost(std::uint32_t id, const std::string& why, bool count_deaths = true);
  void retire(WorkerRec& w, const std::string& why);
  void progress_retirements();
  void step_pools();
  Pool* find_pool(const std::string& name);
  void handle_scale(ClientRec& c, const protocol::ScalePoolRequest& req);
  void client_lost(std::uint32_t index, const std::string& why);
  void apply(Effects& fx);
  void schedule();
  WorkerRec* pick_worker(const Task& t);
  /// True while `w` runs a suspect alone or drains for one (see WorkerRec::suspect).
  bool isolated(WorkerRec& w);
  std::size_t capacity(const WorkerRec& w) const;
  void dispatch_scatter(TaskId id, zmq::message_t payload);
  /// End of a turn: the journal first (a result is durable before any client hears of it),
  /// then what is queued for each worker and client.
  void flush();
  /// Sends what is queued for `w` (tasks to run, keys to free, tasks to cancel).
  void flush_worker(WorkerRec& w);
  void tick();
  void broadcast_cluster_state();
  void send_error(const std::string& identity, const std::string& message);
  // Observability (src/scheduler/status.cpp).
  void record_run(const Task* t, const WorkerRec& w, const protocol::TaskResult& r);
  void start_dashboard();
  void publish_dashboard();
  // Logs (src/scheduler/logs.cpp): `herd logs` requests, routed to the workers that hold them.
  void handle_logs_request(ClientRec& c, const protocol::LogsRequest& req);
  void on_worker_logs_reply(WorkerRec& w, const zmq::message_t& body);
  void logs_worker_gone(const WorkerRec& w, const std::string& why);
  void expire_logs_queries();
  void finish_logs_query(std::uint64_t id);

  SchedulerOptions options_;
  zmq::context_t context_{1};
  security::Auth auth_;  // before socket_: the ZAP handler must exist before the bind
  zmq::socket_t socket_;
  std::string address_;
  std::string scheduler_id_;
  TaskGraph graph_;
  Effects fx_;
  std::priority_queue<ReadyItem> ready_;
  std::vector<TaskId> no_worker_;  // ready tasks no worker can ever fit (yet)
  std::unordered_map<TaskId, Gang> gangs_;
  std::unordered_map<std::string, std::pair<protocol::Role, std::uint32_t>> peers_;
  std::unordered_map<std::uint32_t, WorkerRec> workers_;
  std::unordered_map<std::uint32_t, ClientRec> clients_;
  std::unordered_map<TaskId, std::vector<char>> inline_results_;  // this turn's small results
  std::vector<std::pair<TaskId, zmq::message_t>> scatter_backlog_;  // waiting for a worker
  std::vector<std::unique_ptr<Pool>> pools_;
  std::unique_ptr<Journal> journal_;
  Clock::time_point last_pool_step_{};
  Clock::time_point last_state_broadcast_{};
  std::uint32_t next_worker_id_ = 1;
  std::uint32_t next_client_index_ = 1;
  double avg_task_us_ = -1;  // moving average of task run time; < 0 until one finishes
  bool cluster_changed_ = false;
  Clock::time_point last_heartbeat_{};
  // Observability: totals, finishes per second (last ~10 s), the newest task runs, and the
  // dashboard thread, which reads a snapshot published on request (never the live state).
  Clock::time_point started_ = Clock::now();
  std::uint64_t finished_total_ = 0, failed_total_ = 0;
  std::deque<std::pair<std::int64_t, std::uint64_t>> finishes_per_second_;  // (unix s, count)
  std::deque<protocol::TaskEvent> events_;
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> runs_by_function_;  // (ok, raised)
  std::unique_ptr<HttpServer> http_;
  std::string dashboard_url_;
  Clock::time_point last_publish_{};
  // Logs: requests waiting for workers' answers, and workers that left (for clear errors).
  struct LogsQuery {
    std::string client;                       // identity of the client that asked
    protocol::LogsRequest request;            // as the client sent it
    std::map<std::uint32_t, std::string> waiting;  // workers not yet answered: id -> name
    protocol::LogsReply reply;                // sources gathered so far
    std::vector<std::string> misses;          // workers' "not here" / "gone" answers
    Clock::time_point deadline;
  };
  std::map<std::uint64_t, LogsQuery> logs_queries_;
  std::uint64_t next_logs_query_ = 1;
  std::deque<std::pair<std::string, std::string>> departed_;  // (worker name, why), newest last
};

}  // namespace herd::scheduler
