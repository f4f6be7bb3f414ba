// The scheduler process's server: the IO around SchedulerState (state.hpp). One thread, one
// ROUTER socket for clients and workers (CURVE), the worker pools (their job queues), the
// journal, the dashboard and `herd logs` routing. It decodes each message into an event of the
// state, passes the time it read, and sends what the state put in its outbox.
//
// Each turn drains what is queued on the socket (bounded by count and time, so a flood cannot
// starve heartbeats), applies it to the state, places what became ready, and only then sends:
// one ExecuteTasks per worker, one TaskUpdates per client, one FreeKeys per worker. So under
// load many tasks share one frame on every hop.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <zmq.hpp>

#include "common/config.hpp"
#include "net/channel.hpp"
#include "common/security.hpp"
#include "protocol/codec.hpp"
#include "jobqueue/command_runner.hpp"
#include "record/record.hpp"
#include "scheduler/journal.hpp"
#include "scheduler/pool.hpp"
#include "scheduler/state.hpp"

namespace herd::scheduler {

class HttpServer;
class History;

/// A report of `recorder`'s file (the dashboard's /report, the report_request message); any
/// thread. An error in the reply when there is no record or it cannot be read.
protocol::ReportReply make_report(record::Recorder* recorder, const protocol::ReportRequest& req);

struct SchedulerOptions {
  std::string listen = "tcp://127.0.0.1:*";  // ZeroMQ endpoint to bind
  int parent_fd = -1;          // read end of the owner's pipe: EOF means the owner died
  std::uint32_t retire_grace_s = 30;  // a retiring worker's running tasks may take this long
  std::string journal;                // file of finished keyed tasks ("" = none)
  std::string dashboard = "127.0.0.1:8787";  // HTTP dashboard host:port ("" = none; port 0 = a
                                             //   free one; a busy port falls back to a free one)
  bool metrics_open = false;  // the dashboard's /metrics needs no token (for Prometheus)
  std::string record;         // the run record file ("" = beside the journal, else in log_dir,
                              //   else a temporary file; config.record = 0: none)
  std::string log_dir;        // where local workers' logs go ("" = none)
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
  /// `herd explain`: the task's explanation from the core, and each pool's part (status.cpp).
  protocol::TaskExplanation explain(const protocol::StatusRequest& req) const;
  /// "http://127.0.0.1:8787/" once bind() started the dashboard ("" = none).
  const std::string& dashboard_url() const { return dashboard_url_; }
  /// The run record's file ("" = none).
  std::string record_path() const { return recorder_ ? recorder_->path() : std::string(); }

 private:
  using Clock = std::chrono::steady_clock;
  enum class Role : std::uint8_t { worker, client };
  struct Peer {
    Role role;
    std::uint32_t id;
  };

  static Now now();
  void handle(protocol::Received& msg, const Now& now);
  void handle_hello(const std::string& identity, protocol::Received& msg, const Now& now);
  void handle_worker(WorkerId id, protocol::MessageType type, protocol::Received& msg, const Now& now);
  void handle_client(ClientId id, protocol::MessageType type, protocol::Received& msg, const Now& now);
  void drop_peer(const std::string& identity, const std::string& why);
  Pool* find_pool(const std::string& name);
  void handle_scale(ClientId id, const protocol::ScalePoolRequest& req, const Now& now);
  /// `herd worker retire NAME` (ScalePoolRequest::action "retire"): fills the reply.
  void retire_by_name(const protocol::ScalePoolRequest& req, protocol::ScalePoolReply& reply, const Now& now);
  /// What a scale, adapt, pause, resume or retire left the pool at, for the reply.
  void describe_change(protocol::ScalePoolReply& reply, const Pool& pool, std::uint64_t submitted_before) const;
  /// The pool's status with its connected workers and the ones it keeps for data (status.cpp).
  protocol::PoolStatus pool_status(const Pool& pool) const;
  /// Client::restart(): the core stops every worker and empties the task state, the journal
  /// forgets its results; the reply waits (check_restarts) for the pools' new workers.
  void handle_restart(ClientId id, const protocol::RestartRequest& req, const Now& now);
  /// After each turn: answers the restarts whose workers are back, or whose time is up.
  void check_restarts(const Now& now);
  void step_pools(const Now& now);
  /// End of a turn: the turn's journal records go to the writer thread, what is queued for
  /// each worker goes out, and the clients' updates go out once their records are durable
  /// (held in held_updates_ meanwhile; a result is durable before any client hears of it).
  void flush();
  /// A worker that left on its own: its job is no capacity for its pool any more.
  void note_done(const Departure& d);
  /// Journal reads that completed (results kept on disk only): placed as scattered data.
  void drain_journal();
  /// Sends what is queued for worker `id` (before a logs question, so it knows its tasks).
  void flush_worker(WorkerId id);
  void broadcast_cluster_state();
  void send_error(const std::string& identity, const std::string& message);
  const std::string* identity_of(Role role, std::uint32_t id) const;
  // Observability (src/scheduler/status.cpp).
  void start_dashboard();
  void publish_dashboard();
  // Logs (src/scheduler/logs.cpp): `herd logs` requests, routed to the workers that hold them.
  void handle_logs_request(ClientId c, const protocol::LogsRequest& req);
  void on_worker_logs_reply(WorkerId w, const protocol::LogsReply& reply);
  void logs_worker_gone(WorkerId id, const std::string& name, const std::string& why);
  void expire_logs_queries();
  void finish_logs_query(std::uint64_t id);
  // The run record and the dashboard's history (src/scheduler/recording.cpp).
  void start_recording();
  void stop_recording();
  /// End of a turn: the runs the core noted, encoded, and the turn's records handed to the writer.
  void record_turn();
  void record_worker_joined(const protocol::HelloRequest& hello, const Now& now);
  void record_departure(const Departure& d, const Now& now);
  void record_heartbeat(WorkerId id, const protocol::HeartbeatEvent& hb, const Now& now);
  /// After a pool's step: its jobs that were submitted, started, ended or failed, and its size.
  void record_pool(Pool& pool, const PoolState::Ended& ended, const Now& now);
  void handle_report(ClientId c, const protocol::ReportRequest& req);

  /// Wakes run() from another thread: one empty message to socket_ from an inproc peer (bound
  /// and connected in the constructor), at most one in flight. run() sleeps inside the
  /// socket's own receive, libzmq's cheapest wait (protocol::receive), so whatever else must
  /// wake it (a finished batch-system command, the journal's writer or reader) comes this way.
  class Waker {
   public:
    static constexpr std::string_view kIdentity{"\x01herd-scheduler-wake"};  // its routing id
    /// Binds `router` to an inproc endpoint and connects to it.
    Waker(zmq::context_t& context, zmq::socket_t& router);
    void wake();   // any thread
    void woken();  // run(): its message was read; the next wake() sends another
   private:
    std::atomic<bool> pending_{false};
    std::mutex mu_;
    zmq::socket_t socket_;
  };

  /// How long a connection to the ROUTER may take to finish its handshake (ms).
  static constexpr std::uint32_t kHandshakeMs = 3000;
  /// The control links' turn (when due): messages read from links are handled, workers whose
  /// link broke are dropped.
  void step_links(const Now& now);

  SchedulerOptions options_;
  zmq::context_t context_{1};
  security::Auth auth_;  // before socket_: the ZAP handler must exist before the bind
  zmq::socket_t socket_;
  std::unique_ptr<Waker> waker_;  // after socket_, before commands_ and journal_ (which call it)
  std::string address_;
  std::string scheduler_id_;
  SchedulerState state_;
  // The run record (before commands_: a report being built there reads it until commands_ goes).
  std::shared_ptr<record::Recorder> recorder_;  // shared with reports being built
  bool record_temporary_ = false;                 // a file of our own in /tmp: removed at exit
  record::TaskRun run_scratch_;                   // record_turn's, reused
  std::unordered_map<WorkerId, Clock::time_point> last_sample_;  // a worker's load: every few s
  struct PoolSeen {                               // a pool's jobs as the record last wrote them
    bool known = false;
    std::uint32_t target = 0;
    std::map<std::string, jobqueue::JobState> jobs;
  };
  std::map<std::string, PoolSeen> pools_seen_;
  std::shared_ptr<History> history_;              // shared with the dashboard's threads
  std::unordered_map<std::string, Peer> peers_;               // identity -> peer
  std::unordered_map<WorkerId, std::string> worker_identity_;
  std::unordered_map<ClientId, std::string> client_identity_;
  jobqueue::CommandRunner commands_;  // batch-system commands and job-output reads, off the
                                      //   loop (before pools_: they use it until they go)
  std::vector<std::unique_ptr<Pool>> pools_;
  std::unique_ptr<Journal> journal_;
  DurableGate<protocol::TaskUpdatesEvent> held_updates_;  // waiting for their journal records
  // Job replies (`herd submit`, `herd job ...`) of this turn, and those waiting for their turn's
  // journal records: a shell told of a job (or of its tasks' outcomes) finds it after a restart.
  std::vector<std::pair<ClientId, protocol::JobReply>> job_replies_;
  DurableGate<protocol::JobReply> held_job_replies_;
  Clock::time_point last_pool_step_{};
  Clock::time_point last_state_broadcast_{};
  Clock::time_point started_ = Clock::now();
  std::unique_ptr<HttpServer> http_;
  std::string dashboard_url_;
  Clock::time_point last_publish_{};
  // Logs: requests waiting for workers' answers, and workers that left (for clear errors).
  struct LogsQuery {
    std::string client;                            // identity of the client that asked
    protocol::LogsRequest request;                 // as the client sent it
    std::map<WorkerId, std::string> waiting;       // workers not yet answered: id -> name
    protocol::LogsReply reply;                     // sources gathered so far
    std::vector<std::string> misses;               // workers' "not here" / "gone" answers
    Clock::time_point deadline;
  };
  std::map<std::uint64_t, LogsQuery> logs_queries_;
  std::uint64_t next_logs_query_ = 1;
  std::deque<std::pair<std::string, std::string>> departed_;  // (worker name, why), newest last
  struct PendingRestart {
    std::string client;               // identity of the client that asked
    protocol::RestartReply reply;     // stopped, wanted and cancelled filled in
    Clock::time_point deadline;
    std::uint32_t timeout_ms = 0;
  };
  std::vector<PendingRestart> restarts_;
  // How messages travel to and from peers (the ROUTER, and workers' control links when
  // offered); protocol::send's sink. Made by bind().
  std::unique_ptr<net::SchedulerChannels> channels_;
  net::SchedulerChannels::LinkEvents link_events_;
};

}  // namespace herd::scheduler
