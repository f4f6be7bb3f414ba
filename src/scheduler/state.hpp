// SchedulerState: everything the scheduler knows and decides, with no socket, no clock and no
// environment inside. The server (scheduler.hpp) decodes a message or notices time passing,
// calls the matching event here with the time it read (`Now`), and sends what the state put
// in its Outbox. Unit tests do the same with no process at all, and `bench/sim` drives it with
// thousands of virtual workers (as HyperQueue benchmarks its core with a null comm).
//
// What lives here: the task graph (task_graph.hpp), the worker and client registries, placement
// (resource shapes, per-shape ready queues and free-worker lists), gangs (state_gangs.cpp),
// suspects that run alone, work stealing, retirement, liveness (heartbeats and silent peers),
// what each pool could run (its backlog), and the counters behind `herd status`.
//
// Placement, in one paragraph: a task's resource needs are interned as a *shape* (shape 0 = no
// resources). Each shape has a priority queue of its ready tasks and a list of the workers that
// can take one more task of that shape *now* (free slot within the queue horizon, free
// resources, not retiring, draining or paused). schedule() repeatedly takes, among the shapes
// that have both, the ready task of highest priority and gives it to a holder of its inputs if
// one is free, else to the next free worker in round-robin order: O(shapes) per task, whatever
// the number of workers. A task that must wait (its shape's workers are busy, a gang, a suspect
// running alone, a walltime that is too short) waits alone: it never holds back another
// shape's tasks. A shape no connected worker offers is reported, with the reason, to the
// client (TaskState::no_worker) and in status.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "herd/detail/payload.hpp"

#include "protocol/messages.hpp"
#include "scheduler/flat_table.hpp"
#include "scheduler/jobs.hpp"
#include "scheduler/task_graph.hpp"

namespace herd::scheduler {

using WorkerId = std::uint32_t;
using ClientId = std::uint32_t;
using Clock = std::chrono::steady_clock;

/// The time, as the server read it for this event. The state never reads a clock.
struct Now {
  Clock::time_point mono{};
  std::int64_t unix_ms = 0;
  std::int64_t unix_us = 0;  // the same in microseconds (0: unknown; the run record's times)
  std::int64_t unix_s() const { return unix_ms / 1000; }
};

/// One ended run of a task, for the run record (the shell encodes it: record/record.hpp).
/// Times are unix microseconds on the scheduler's clock; the worker's phases are durations it
/// measured (protocol::TaskResult).
struct RunNote {
  TaskId id = 0;
  std::uint32_t function = 0;   // SchedulerState::function_name
  WorkerId worker = 0;          // SchedulerState::worker_name
  std::uint32_t thread = 0;
  std::int64_t submitted_us = 0, ready_us = 0, placed_us = 0, received_us = 0;
  std::uint64_t run_us = 0, return_us = 0, fetch_us = 0, fetch_bytes = 0, result_bytes = 0;
  std::uint32_t fetch_peers = 0;
  std::uint8_t status = 0;      // record::RunStatus: 0 ok, 1 failed, 2 lost, 3 cancelled
  std::uint32_t attempt = 0;    // runs of the task that ended before this one
  std::uint32_t preemptions = 0;  // workers lost while it ran
  std::string key;              // the user's key ("" = none)
  std::string campaign;
  std::string error_type, error;  // when not ok
};

struct StateOptions {
  std::uint32_t heartbeat_ms = 500;       // how often peers hear from us
  std::uint32_t timeout_ms = 10000;       // silence after which a peer is lost
  std::uint32_t allowed_failures = 3;     // worker deaths a task may be present at
  std::uint32_t queue_horizon_us = 20000; // expected work queued on a worker beyond its slots
  std::uint32_t max_queue_per_slot = 2000;
  // Tasks whose function is known to be this quick (expected run time, microseconds) go to a
  // worker this much work at a time, not one per idle thread, and are stolen only from a worker
  // stuck for 100 ms: each message to a worker (and each wake-up of its threads) costs more
  // than such a task, and a cluster of many workers would otherwise send every worker a few of
  // them per message. 0 = off.
  std::uint32_t batch_us = 1000;
  std::uint32_t retire_grace_s = 30;      // a retiring worker's running tasks may take this long
  bool full_results = false;              // journal on: keyed tasks send their whole result
  bool validate = false;                  // run validate() after every event (tests, debug builds;
                                          //   sampled when the state is big, see check())
  bool record = false;                    // note every ended run (run_notes) for the run record
};

/// The scheduler's view of one worker of a pool, for the pool's decisions.
struct PoolWorkerView {
  WorkerId id = 0;
  std::string job_id;
  bool idle = false;                          // nothing processing
  Clock::time_point idle_since;
  bool leaving = false;                       // retiring or about to expire: not capacity
  bool ending = false;                        // retiring on its own (a signal): its job may be requeued
};

/// What to send to one worker at the end of the turn, in this order.
struct WorkerOut {
  std::vector<TaskId> free;                               // free_keys: drop these results
  std::vector<std::pair<TaskId, herd::detail::PayloadPtr>> put;  // put_data: store these bytes
  std::vector<protocol::PutDataEvent> put_from;           // put_data: fetch it from a client
  std::vector<protocol::DepLocation> acquire;             // acquire_keys: copy from holders
  std::vector<protocol::ExecuteTask> execute;             // execute_tasks
  std::vector<TaskId> cancel;                             // cancel_tasks: hand back if not started
  std::vector<TaskId> abandon;                            // abandon_tasks: stop running ones too
  std::optional<protocol::RetiringEvent> retiring;        // retiring: the scheduler retires it
  std::vector<protocol::GangReadyEvent> gang_ready;
  std::vector<protocol::GangAbortEvent> gang_abort;
  bool heartbeat = false;
  std::optional<std::string> shutdown;                    // last: leave now, with this reason
  /// Sent: empty again, its lists' memory kept for the next turn's (a round trip's path
  /// allocates none of it).
  void reset();
};

struct ClientOut {
  protocol::TaskUpdatesEvent updates;
  protocol::ScatterInlineEvent scatter_inline;  // its data port is out of a worker's reach
  std::unordered_map<WorkerId, std::int32_t> address_index;  // worker -> updates.addresses
  bool heartbeat = false;
  std::optional<std::string> shutdown;
};

/// A worker that left the state this turn (lost, retired, said goodbye).
struct Departure {
  WorkerId id = 0;
  std::string name, pool, job_id, why;
  bool release_job = false;  // its pool should make sure its job is gone too
  bool worked = false;       // it ran tasks or held results (a job that crashed early did not)
  std::string address;       // its data port, closed now: peers forget their connections to it
  bool retired_by_pool = false;  // its pool let it go (shrinking): the job is on its way out
};

struct Outbox {
  std::unordered_map<WorkerId, WorkerOut> workers;
  /// The entry for worker `id`, made with one that an earlier turn's clear() kept.
  WorkerOut& worker(WorkerId id);
  std::unordered_map<ClientId, ClientOut> clients;
  std::vector<std::pair<std::string, std::vector<char>>> journal;  // (key, result) to record
  std::vector<Departure> departed;        // workers gone: forget their identities after sending
  std::vector<ClientId> clients_departed;
  bool cluster_changed = false;           // worker/slot counts changed: tell clients
  void clear();

 private:
  std::vector<decltype(workers)::node_type> spare_;  // a few emptied entries, for the next turns
};

/// One connected worker.
struct WorkerRec {
  WorkerId id = 0;
  std::string name, host, address, job_id, pool;
  std::uint32_t nthreads = 1;               // its thread slots, and one per seceded task
  std::vector<TaskId> seceded;              // processing tasks that gave their slot back (few)
  std::uint32_t core_tasks = 0;             // processing tasks of shapes that hold cores: they
                                            //   take cores ("cpus"), not thread slots
  std::map<std::string, double> resources;  // what it offers
  std::vector<double> offered;              // the same, by resource index
  std::vector<double> free;                 // by resource index: offered minus its processing tasks' needs
  FlatMap<TaskId, std::uint16_t> processing;  // sent to it and not answered yet -> shape
  FlatSet<TaskId> has;                      // results it holds
  std::deque<TaskId> order;                 // dispatch order, for stealing (may hold answered ids)
  Clock::time_point last_seen, idle_since, retire_since;
  Clock::time_point progressed;             // its last task result, or when work came to it idle
  bool nothing_to_steal = false;            // steal() found only tiny tasks queued, none sent since
  std::uint64_t memory_rss = 0;
  std::uint64_t memory_limit = 0;           // 0 = none
  std::uint32_t executing = 0;              // running now, as its last heartbeat said
  std::uint64_t spilled_bytes = 0;          // results on its disk, as its last heartbeat said
  std::string paused;                       // memory: it starts nothing new ("" = not paused)
  std::int64_t end_time = 0;                // unix seconds when its job ends (0 = never)
  std::vector<protocol::GpuInfo> gpus;
  bool retiring = false;                    // takes nothing new; leaves once drained and copied
  bool retired_by_pool = false;             // the pool shrinks (vs. walltime, drain signal)
  bool job_suspended = false;               // its batch job is suspended: silence is no death
  bool acquire_sent = false;                // its unique results were sent to other workers
  bool kept_for_data = false;               // its pool would let it go, but it holds results only
                                            //   it has and no worker stays to take them
  bool overloaded = false;                  // in overloaded_ (more processing than threads)
  // Suspects (tasks that were on a worker when it died) run alone, so a poison task cannot take
  // innocent neighbours down with it and make them KilledWorker too.
  TaskId suspect = 0;                       // the suspect it runs (alone)
  TaskId reserved_for = 0;                  // draining to run this suspect: takes nothing new
  TaskId reserved_gang = 0;                 // draining for this gang: takes nothing new
  TaskId held_by = 0;                       // its node is held for this multi-node task
                                            //   (state_multinode.cpp): draining for it, or
                                            //   running it (the first) or idle beside it
  std::vector<std::uint16_t> shapes;        // the shapes it offers
  std::vector<std::int32_t> free_pos;       // by shape: index in its free list, -1 = absent
  std::vector<std::int32_t> open_pos;       // by shape: index in its open list, -1 = absent
};

struct ClientRec {
  ClientId index = 0;
  std::string name;
  Clock::time_point last_seen;
};

struct ReadyItem {
  std::int32_t priority;
  std::uint64_t seq;
  TaskId id;
  bool operator<(const ReadyItem& o) const {
    return priority != o.priority ? priority < o.priority : seq > o.seq;
  }
};

/// The ready tasks of one shape: highest priority first, then the oldest (lowest seq).
/// The common case is a FIFO: items that arrive in that order (one priority, tasks ready in
/// submission order) are appended to a queue, O(1) each and no heap of millions to sift; an
/// item that would break the order goes to a heap beside it, and top() is the better head.
class ReadyQueue {
 public:
  void push(const ReadyItem& item) {
    if (head_ == fifo_.size() || !(fifo_.back() < item)) {
      if (head_ == fifo_.size()) {
        fifo_.clear();
        head_ = 0;
      }
      fifo_.push_back(item);
    } else {
      heap_.push_back(item);
      std::push_heap(heap_.begin(), heap_.end());
    }
  }
  bool empty() const { return head_ == fifo_.size() && heap_.empty(); }
  std::size_t size() const { return fifo_.size() - head_ + heap_.size(); }
  const ReadyItem& top() const { return from_heap() ? heap_.front() : fifo_[head_]; }
  void pop() {
    if (from_heap()) {
      std::pop_heap(heap_.begin(), heap_.end());
      heap_.pop_back();
      return;
    }
    ++head_;
    if (head_ == fifo_.size()) {
      fifo_.clear();
      head_ = 0;
    } else if (head_ >= 4096 && 2 * head_ >= fifo_.size()) {
      fifo_.erase(fifo_.begin(), fifo_.begin() + static_cast<std::ptrdiff_t>(head_));
      head_ = 0;
    }
  }
  /// Every item, in no particular order (stale ones included).
  template <typename F>
  void for_each(F&& f) const {
    for (std::size_t i = head_; i < fifo_.size(); ++i) f(fifo_[i]);
    for (const ReadyItem& item : heap_) f(item);
  }

 private:
  bool from_heap() const { return head_ == fifo_.size() || (!heap_.empty() && fifo_[head_] < heap_.front()); }
  std::vector<ReadyItem> fifo_;  // fifo_[head_..]: best first
  std::size_t head_ = 0;
  std::vector<ReadyItem> heap_;  // out-of-order arrivals, a max-heap
};

/// A resource shape: what a task needs on one worker (shape 0: nothing).
struct Shape {
  std::uint16_t id = 0;
  std::map<std::string, double> need;
  std::vector<std::pair<std::uint16_t, double>> need_ids;  // by resource index
  ReadyQueue ready;                 // its ready tasks (stale entries skipped lazily)
  std::vector<WorkerId> free;       // workers that can take one more task of it now
  std::vector<WorkerId> open;       // those of them with an idle thread (filled first)
  std::size_t cursor = 0;           // round-robin position in `free`
  std::size_t open_cursor = 0;      // and in `open`
  std::uint32_t offered_by = 0;     // connected, non-retiring workers that offer it
  bool unrunnable_dirty = false;    // ready tasks may need a no_worker note
  // Placement restrictions (TaskOptions::workers / pool), part of the shape: a worker offers
  // the shape only when it matches them too.
  std::vector<std::string> only;    // worker names, hosts or data ports (sorted; empty = any)
  bool loose = false;               // `only` is a preference (allow_other_workers)
  std::string pool;                 // only workers of this pool ("" = any)
  bool holds_cores = false;         // needs "cpus": its tasks hold cores, not a thread slot
};

/// A gang: N tasks placed together on N distinct workers, their results held back until every
/// rank succeeded, failed and retried as a whole (state_gangs.cpp).
struct Gang {
  TaskId id = 0;                      // = rank 0's task id
  std::uint32_t size = 0;
  std::vector<TaskId> members;        // by rank (0 = not submitted yet)
  std::uint32_t registered = 0;       // members submitted
  std::uint32_t ready = 0;            // members ready (counted when all are: `waiting`)
  std::uint32_t retries_left = 0;
  std::uint32_t attempt = 0;          // the current (or last) run; a retry is a new attempt
  std::uint32_t next_attempt = 0;
  bool waiting = false;               // every member ready; in gangs_waiting_
  bool running = false;               // placed; results of this attempt not all in
  bool failing = false;               // a rank failed: waiting for the others to stop
  bool requeue_free = false;          // the failure does not use up a retry (handed back)
  std::string never;                  // why no set of connected workers could ever hold it
  std::uint32_t outstanding = 0;      // members of this attempt not reported yet
  std::vector<std::uint32_t> worker;  // by rank: worker it runs on (this attempt)
  std::vector<bool> reported;         // by rank: its result of this attempt came in
  std::vector<std::unique_ptr<protocol::TaskResult>> done;  // by rank: held-back success
  std::unique_ptr<protocol::ErrorInfo> error;                // first failure of the attempt
  std::vector<protocol::GangJoinRequest> joins;              // by rank, this attempt
  std::uint32_t joined = 0;
};

class SchedulerState {
 public:
  explicit SchedulerState(StateOptions options);
  ~SchedulerState() = default;
  SchedulerState(const SchedulerState&) = delete;
  SchedulerState& operator=(const SchedulerState&) = delete;

  // ---- peers -------------------------------------------------------------------------------
  /// A worker's hello (already checked for version). Returns its id.
  WorkerId add_worker(const protocol::HelloRequest& hello, const Now& now);
  ClientId add_client(const protocol::HelloRequest& hello, const Now& now);
  /// The worker is gone (silent, dropped for a bad message, its job ended, said goodbye).
  /// `count_deaths`: false when it left on purpose, so its running tasks are not suspects.
  void worker_lost(WorkerId id, const std::string& why, bool count_deaths = true);
  void client_lost(ClientId id, const std::string& why);

  // ---- messages from workers ---------------------------------------------------------------
  /// Any message from the worker: it is alive.
  void heard_from_worker(WorkerId id, const Now& now);
  void heartbeat(WorkerId id, const protocol::HeartbeatEvent& hb, const Now& now);
  void task_results(WorkerId id, protocol::TaskResultsEvent& ev, const Now& now);
  /// herd::secede() / rejoin() in tasks running on `id`: a seceded task holds no thread slot,
  /// so the worker counts one thread more until it rejoins or ends.
  void task_seceded(WorkerId id, const protocol::SecedeEvent& ev, const Now& now);
  /// The worker leaves on purpose: acknowledged with a shutdown, then it is gone.
  void goodbye(WorkerId id, const std::string& reason);
  /// The worker asks to be retired (walltime, drain signal).
  void retire_request(WorkerId id, const std::string& reason, const Now& now);
  void gang_join(WorkerId id, const protocol::GangJoinRequest& req);

  // ---- messages from clients ---------------------------------------------------------------
  void heard_from_client(ClientId id, const Now& now);
  /// One task of a submission. `journaled`: its result from the journal of an earlier run
  /// (it is put on a worker instead of being computed). False with `error` set when the spec
  /// is not this client's to send.
  bool submit(ClientId id, const protocol::TaskSpec& spec, const std::vector<char>* journaled, std::string& error);
  void release(ClientId id, const std::vector<TaskId>& ids);
  void cancel(ClientId id, const std::vector<TaskId>& ids);
  /// cancel(force): as cancel, and the workers running them stop waiting for them (free the
  /// slot, discard the result, kill a shell command). Gang members are cancelled as a gang.
  void force_cancel(ClientId id, const std::vector<TaskId>& ids);
  /// Client::fire_and_forget: these tasks (and so their inputs) run to their end even after
  /// the client releases them or leaves; then they are forgotten.
  void fire_and_forget(ClientId id, const std::vector<TaskId>& ids);
  bool scatter(ClientId id, const protocol::ScatterRequest& req, herd::detail::PayloadPtr payload, std::string& error);

  // ---- detached campaigns (state_campaigns.cpp) --------------------------------------------
  // A task submitted with a campaign name (TaskSpec::campaign) is kept, result and all, when
  // its client releases it or leaves (its updates then go nowhere), until the campaign is
  // released. Any client may attach to a campaign by name: the campaign's tasks become its own
  // (their updates go to it from then on, to the last client that attached) and it gets
  // their states at once.
  /// Attaches client `id` to campaign `name`: fills `reply` (ok, the campaign's counts, its
  /// tasks in submission order, the finished ones' states). False when there is no such
  /// campaign (reply.error says so).
  bool attach_campaign(ClientId id, const std::string& name, protocol::CampaignReply& reply);
  /// Forgets campaign `name`: its tasks are released as a client's dropped futures are (an
  /// unfinished one no other task needs stops being run). False when there is no such campaign.
  bool release_campaign(const std::string& name);
  /// Every campaign with its counts, by name. O(tasks of all campaigns): for status.
  std::vector<protocol::CampaignInfo> campaigns() const;
  /// The campaign a task belongs to ("" = none).
  const std::string& campaign_of(TaskId id) const;
  /// A scheduler restarted with its journal: task `key` of `campaign` comes back, in the order
  /// the journal recorded them, owned by no client until one attaches. With its journaled
  /// result (`bytes`, put on a worker once one is there) or `on_disk` (the server reads it and
  /// calls journal_read()) it is done; with a journaled `error` (msgpack ErrorInfo) it fails
  /// with that error again; else it had not finished, and runs again from its `recipe` (its
  /// inputs found by key among the tasks restored before it). Otherwise (a recipe too large to
  /// journal, an input that was not a campaign's task, a gang's rank) it fails with
  /// herd::LostInRestart, saying why, rather than leave a future pending forever. Returns its id.
  TaskId restore_campaign_task(const std::string& campaign, const std::string& key, const std::vector<char>* bytes,
                               bool on_disk, const std::vector<char>* error, const std::vector<char>& recipe);
  /// The restore is over: forgets the keys it resolved inputs by.
  void restore_done() { restored_by_key_.clear(); }

  // ---- jobs of shell commands (state_jobs.cpp, jobs.hpp) -------------------------------------
  /// A new job (`herd submit`): its id, or 0 with `error` saying why not.
  std::uint64_t submit_job(protocol::JobSpec spec, const Now& now, std::string& error);
  /// Every job with its counts, in the order of their ids.
  std::vector<protocol::JobInfo> jobs() const;
  /// One job (and its failed tasks, or every task with `all_tasks`) into `reply`; false (and
  /// reply.error) when there is no such job.
  bool job_info(std::uint64_t id, bool all_tasks, protocol::JobReply& reply) const;
  /// Cancels what has not finished of job `id` (running tasks are stopped where they run).
  bool cancel_job(std::uint64_t id, const std::string& why, std::string& error);
  /// A new job of the failed tasks of job `id` (all its tasks unless `failed_only`).
  std::uint64_t resubmit_job(std::uint64_t id, bool failed_only, const Now& now, std::string& error);
  /// A scheduler restarted with its journal: one job record, in journal order.
  void restore_job_record(const std::vector<char>& bytes);
  /// client.replicate / scatter(broadcast): copies of each result on `n` workers (0 = every
  /// connected worker), copied tree-wise: each holder serves one new copy at a time, so the
  /// holders double with each round instead of one source sending n-1 copies. The copies are
  /// holders like any (placement prefers them; a lost one costs nothing while another is left).
  /// A result not computed yet is replicated once it is.
  void replicate(ClientId id, const std::vector<TaskId>& ids, std::uint32_t n);
  /// A result from the journal of an earlier run is being read from disk for task `id`: keep the
  /// task from running until journal_read(). False when the task does not need it any more.
  bool await_journal(TaskId id);
  /// The journal's read for `id` is done: `bytes` is the result (put on a worker), or null when
  /// it could not be read (the task runs after all).
  void journal_read(TaskId id, herd::detail::PayloadPtr bytes);
  /// The client could not fetch these results from `address`: point it at another holder, or
  /// have another worker copy them and point it there, or fail them with the reason (bounded).
  void client_fetch_failed(ClientId id, const protocol::FetchFailedEvent& ev);

  // ---- restart (state_restart.cpp) ---------------------------------------------------------
  struct Restarted {
    std::uint32_t stopped = 0;    // workers told to stop (all of them)
    std::uint32_t cancelled = 0;  // tasks cancelled (every client's)
  };
  /// Client::restart(): every worker is told to stop and leaves the state at once (its job is
  /// released to its pool, which cancels it and starts a replacement); every task a client
  /// holds a future for is cancelled with `why` (herd::CancelledError); and the task state is
  /// emptied: tasks, gangs, replications, relocations, suspects, journal reads and the journal
  /// records of this turn. Clients stay connected.
  Restarted restart(const std::string& why);

  // ---- pools -------------------------------------------------------------------------------
  /// Ready and processing tasks that a worker offering `offers` could run (an adaptive pool's
  /// demand), counted per shape, so O(shapes).
  std::size_t backlog(const std::map<std::string, double>& offers) const;
  /// The workers of pool `pool`, for its decisions. A worker whose job ends within
  /// `replace_lead_s` counts as leaving, so its successor is queued while it still works.
  std::vector<PoolWorkerView> pool_workers(const std::string& pool, std::uint32_t replace_lead_s, const Now& now) const;
  /// Stop giving `id` work; it leaves once its running tasks are done (or the grace is over)
  /// and the results only it holds are copied elsewhere. `by_pool`: the pool shrinks (its job
  /// is to be cancelled), rather than the worker asked: then the worker is told (`retiring`),
  /// with the seconds its running tasks have left, so they can checkpoint.
  void retire(WorkerId id, const std::string& why, bool by_pool, const Now& now);
  /// Results only worker `id` holds that someone still needs and that are not safe elsewhere
  /// (Task::safe_elsewhere: the client holds the value): what retiring it would have to move.
  /// `bytes`: their size in all. 0 for an unknown worker.
  std::uint32_t unique_results(WorkerId id, std::uint64_t* bytes = nullptr) const;
  /// The pool `pool` keeps these of its workers for their data (PoolState::kept): marked, for
  /// `herd status` and `herd explain`; its other workers are not kept.
  void set_kept_for_data(const std::string& pool, const std::vector<WorkerId>& kept);
  /// "2 result(s) only it has (16 B): nap-1, nap-2" (at most a few keys named).
  std::string kept_for_data_text(const WorkerRec& w) const;
  /// A pool saw job `job_id` end: its worker is gone, whatever its last heartbeat said.
  void job_ended(const std::string& pool, const std::string& job_id, const std::string& how);
  /// Whether worker `id`'s batch job is suspended (its pool knows): a suspended worker that
  /// goes silent is let go without a death charged to its tasks.
  void set_job_suspended(WorkerId id, bool suspended);

  // ---- time --------------------------------------------------------------------------------
  /// Heartbeats due, silent peers, retirements, work stealing, the queue horizon.
  void tick(const Now& now);
  /// Places what can run now. The server calls it once per turn, after the messages.
  void schedule(const Now& now);

  // ---- output ------------------------------------------------------------------------------
  Outbox& outbox() { return out_; }

  // ---- read access (status, logs, tests) ---------------------------------------------------
  const TaskGraph& graph() const { return graph_; }
  const std::unordered_map<WorkerId, WorkerRec>& workers() const { return workers_; }
  const WorkerRec* worker(WorkerId id) const;
  const std::unordered_map<ClientId, ClientRec>& clients() const { return clients_; }
  const std::unordered_map<TaskId, Gang>& gangs() const { return gangs_; }
  /// The resources a task of `t`'s shape needs.
  const std::map<std::string, double>& resources_of(const Task& t) const;
  /// Why `t` cannot run anywhere now ("" = it can, or it is not ready).
  std::string why_no_worker(const Task& t) const;
  /// The task with this key (a user key, or a display key "<function>-<hex id>"); nullptr when
  /// none. O(tasks): for `herd explain`, not the hot path.
  const Task* find_by_key(const std::string& key) const;
  /// Why `t` is not running (state_explain.cpp): its inputs, and each connected worker's reason.
  /// The pools' part is the server's (it holds them).
  protocol::TaskExplanation explain(const Task& t, const Now& now) const;
  /// Ready tasks no connected worker can run, by reason (for status).
  std::map<std::string, std::uint64_t> unrunnable() const;
  double avg_task_us() const { return avg_task_us_; }
  const StateOptions& options() const { return options_; }
  /// Checks every invariant (graph, registries, placement indexes, gangs); returns the first
  /// broken one, "" when all hold. O(tasks + workers x shapes).
  std::string validate() const;

  // Observability: totals, finishes per second, the newest task runs.
  static constexpr std::int64_t kThroughputWindow = 10;  // seconds of finishes_per_second kept
  struct Counters {
    std::uint64_t finished_total = 0, failed_total = 0;
    std::deque<std::pair<std::int64_t, std::uint64_t>> finishes_per_second;  // (unix s, count)
    std::deque<protocol::TaskEvent> events;                                  // newest last
    std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> runs_by_function;  // (ok, raised)
  };
  /// The counters, with `events` and `runs_by_function` written out from the compact records
  /// the state keeps per run (O(kept runs + functions): for status, not per task).
  const Counters& counters() const;

  // The run record (options().record): the runs that ended since the shell last took them.
  std::vector<RunNote>& run_notes() { return run_notes_; }
  /// The time of the events that follow (unix microseconds), for the runs' submit, ready and
  /// placement times; the shell sets it with each message it hands over.
  void set_clock(std::int64_t unix_us) { clock_us_ = unix_us; }
  const std::string& function_name(std::uint32_t index) const { return graph_.function_name(index); }
  /// A worker's name, also once it left ("" = never known).
  const std::string& worker_name(WorkerId id) const {
    static const std::string none;
    return id < worker_names_.size() ? worker_names_[id] : none;
  }

  /// Placement internals, for tests and the simulator.
  std::size_t shape_count() const;
  std::size_t ready_count() const;

 private:
  // Events end with this: apply the graph's effects, validate in test builds.
  void apply(Effects& fx);
  /// A result small enough to ride with its notice to the client (see apply()).
  void keep_inline(TaskId id, std::vector<char>& data);
  void check() const;
  WorkerRec* find_worker(WorkerId id);
  ClientRec* find_client(ClientId id);
  WorkerOut& out(WorkerId id) { return out_.worker(id); }

  // Shapes and placement (state_placement.cpp).
  std::uint16_t shape_of(const std::map<std::string, double>& resources, std::vector<std::string> only = {},
                         const std::string& pool = {}, bool loose = false);
  /// Whether `w` is one of the shape's `only` workers (by name, host or data port).
  static bool named(const WorkerRec& w, const Shape& s);
  /// What a shape asks, for "no connected worker offers ..." (resources and restrictions).
  static std::string describe_shape(const Shape& s);
  bool offers(const WorkerRec& w, const Shape& s) const;       // total resources fit
  bool can_take(const WorkerRec& w, const Shape& s) const;     // one more task now
  void refresh(WorkerRec& w);                                  // free-list membership
  void refresh_all();
  void push_ready(const Task& t);
  std::size_t capacity(const WorkerRec& w) const;
  /// Its processing tasks that hold a thread slot (those that hold cores do not).
  static std::size_t slot_tasks(const WorkerRec& w) { return w.processing.size() - w.core_tasks; }
  /// Expected run time of `t` (its function's moving average, microseconds); < 0 = unknown.
  double expected_us(const Task& t) const {
    return t.function < function_us_.size() ? function_us_[t.function] : -1;
  }
  /// Known to be quicker than batch_us: placed batch_us at a time, and stolen only from a
  /// worker whose queue has not moved for a while (kStalled in state_placement.cpp: stuck behind a long task).
  bool tiny(const Task& t) const {
    const double us = expected_us(t);
    return us >= 0 && us < options_.batch_us;
  }
  bool available(const WorkerRec& w) const;                    // takes new work at all
  /// A free worker for `t`: a holder of its inputs, else the next in round robin; `from` says
  /// which list it came from (s.open or s.free; nullptr when chosen for locality).
  WorkerRec* pick_worker(Shape& s, const Task& t, const Now& now, const std::vector<WorkerId>** from);
  /// Drops the stale entries at the head of s.ready; false when none is left.
  bool live_head(Shape& s);
  /// Sends `t` to `w`; returns its execute message in the outbox (gangs add their fields).
  protocol::ExecuteTask& dispatch(Task& t, WorkerRec& w);
  /// Sends a scattered value to the worker holding the fewest results: the payload, or where to
  /// fetch it (`source`, the client's data port).
  void dispatch_scatter(TaskId id, herd::detail::PayloadPtr payload, std::string source = {});
  void scatter_source_unreachable(Task& t, const std::string& why);
  void place_suspects(const Now& now);
  void note_unrunnable(Shape& s);
  void steal(const Now& now);
  void record_run(const Task* t, const WorkerRec& w, const protocol::TaskResult& r, const Now& now);
  /// The run record's note of a run that ended (status: record::RunStatus); nullptr when off.
  RunNote* note_run(Task& t, WorkerId w, std::uint8_t status, std::int64_t received_us);
  // Inputs and results that could not be fetched (a holder out of reach, or that lost them).
  void missing_input(WorkerRec& w, protocol::TaskResult& r, const Now& now);
  void drop_holder(TaskId id, WorkerId holder);
  bool avoided(const Task& t, WorkerId w) const;
  /// "worker NAME on HOST (tcp://...)" for a data port's address, for errors.
  std::string holder_text(const std::string& address) const;
  void relocated(TaskId id, WorkerId holder);
  void relocation_failed(TaskId id, const std::string& why);
  void tell_client(ClientId c, const Task& t, WorkerId holder);
  void progress_retirements(const Now& now);
  void remove_worker(WorkerId id, const std::string& why, bool count_deaths);

  // Gangs (state_gangs.cpp).
  enum class GangPlacement { placed, wait, never };
  void gang_member_added(const protocol::TaskSpec& spec);
  void gang_member_ready(const Task& member);
  void place_gangs(const Now& now);
  GangPlacement place_gang(Gang& g, const Now& now, bool may_reserve);
  bool gang_result(WorkerRec& w, protocol::TaskResult& r, const Now& now);
  void gang_failed(Gang& g, std::uint32_t rank, protocol::ErrorInfo error, bool uses_retry);
  void gang_settle(Gang& g);
  void gang_worker_lost(const WorkerRec& w, std::vector<TaskId>& processing);
  void cancel_gang(TaskId gang, const std::string& why);
  void release_gang_reservations(TaskId gang);

  // Multi-node tasks (state_multinode.cpp): one task holding workers on `nodes` distinct
  // hosts of one allocation (job id), all at once, for it alone; it runs on the first.
  struct MultiNodeRun {
    std::vector<WorkerId> workers;  // by node, the one that runs it first
    std::vector<std::string> hosts;
    std::string lost;               // a node was lost while it ran: the run fails with this
  };
  bool multinode(TaskId id) const { return !nodes_of_.empty() && nodes_of_.count(id) > 0; }
  void multinode_added(const protocol::TaskSpec& spec);
  void place_multinode(const Now& now);
  /// The result of a multi-node task's run came (any outcome): its nodes are let go; a failure
  /// while a node was lost takes that loss as its error.
  void multinode_result(WorkerRec& w, protocol::TaskResult& r);
  /// Worker `gone` (out of the registry already) held a node: the run it held fails (its head
  /// is told to stop), or the reservation is dropped. Its head's task leaves `processing`.
  void multinode_worker_lost(const WorkerRec& gone, const std::string& why, std::vector<TaskId>& processing);
  void release_nodes(TaskId id);
  std::string why_multinode_waits(const Task& t) const;
  std::unordered_map<TaskId, std::uint32_t> nodes_of_;   // task -> nodes it takes (multi-node tasks)
  std::vector<TaskId> multinode_waiting_;                // ready multi-node tasks, oldest first
  std::unordered_map<TaskId, MultiNodeRun> multinode_runs_;  // running ones
  std::unordered_map<TaskId, std::string> multinode_never_;  // why no allocation connected can hold it

  // Campaigns (state_campaigns.cpp).
  /// Task `id` joins campaign `name`; `journal`: its membership (with `spec` as its recipe) is
  /// journaled.
  void campaign_task_added(const std::string& name, TaskId id, ClientId client, const protocol::TaskSpec* journal);
  /// A campaign task failed for good: its error is journaled (a restarted scheduler gives it back).
  void journal_campaign_error(const Task& t);
  std::size_t campaign_size(const std::string& name) const;
  TaskId next_restored_ = 0;                 // ids of restored tasks: client index 0
  std::unordered_map<std::string, TaskId> restored_by_key_;  // during the restore: key -> task
  bool restoring_ = false;                   // restore_campaign_task: nothing is journaled again
  protocol::CampaignInfo campaign_info(const std::string& name) const;
  std::string validate_campaigns() const;

  // Jobs of shell commands (state_jobs.cpp).
  /// Cancels the jobs that --max-fails stopped, and puts the next tasks of jobs in the graph.
  void jobs_tick(const Now& now);
  void feed_jobs();
  void materialize(Job& job, std::uint64_t position);
  /// apply()'s: the job tasks that finished this event leave the graph, their outcomes kept.
  void job_tasks_finished(Effects& fx);
  void job_outcome(Job& job, std::uint64_t position, JobTaskState s, JobFailure failure);
  protocol::JobInfo job_summary(const Job& job) const;
  /// Client::restart(): the job tasks in the graph are gone; they run again.
  void jobs_restarted();
  std::string validate_jobs() const;
  std::map<std::uint64_t, Job> jobs_;
  std::uint64_t next_job_id_ = 1;
  struct JobTaskRef {
    std::uint64_t job = 0, position = 0;
  };
  std::unordered_map<TaskId, JobTaskRef> job_tasks_;  // job tasks in the graph
  std::vector<TaskId> jobs_finished_;                  // apply()'s, this event
  std::vector<std::uint64_t> jobs_to_cancel_;          // --max-fails reached
  std::int64_t last_unix_ms_ = 0;                      // the last schedule()'s time

  StateOptions options_;
  TaskGraph graph_;
  Effects fx_;
  Outbox out_;
  std::unordered_map<WorkerId, WorkerRec> workers_;
  std::unordered_map<ClientId, ClientRec> clients_;
  std::unordered_map<TaskId, Gang> gangs_;
  struct Campaign {
    std::vector<TaskId> tasks;               // in submission order (some may have left the graph)
    ClientId client = 0;                     // the client that submitted or attached last
  };
  std::map<std::string, Campaign> campaigns_;
  std::unordered_map<TaskId, std::string> campaign_of_;  // task -> campaign name (campaign tasks only)
  std::deque<TaskId> gangs_waiting_;         // gangs whose members are all ready, oldest first
  std::vector<Shape> shapes_;
  std::map<std::tuple<std::map<std::string, double>, std::vector<std::string>, std::string, bool>, std::uint16_t>
      shape_index_;
  std::map<std::string, std::uint16_t> resource_index_;
  std::unordered_set<WorkerId> overloaded_;  // workers queueing tasks beyond their threads
  std::vector<TaskId> suspects_;             // ready tasks that must run alone
  std::vector<TaskId> too_long_;             // ready tasks whose duration fits no worker now
  std::vector<TaskId> deferred_;             // schedule()'s, kept for their capacity
  std::vector<std::size_t> deferrals_;       // schedule()'s, by shape
  std::unordered_set<TaskId> held_;          // ready tasks whose journaled result is being read
  struct ScatterWaiting {  // waiting for a worker
    TaskId id = 0;
    herd::detail::PayloadPtr payload;
    std::string source;  // or the client's data port that holds it
  };
  std::vector<ScatterWaiting> scatter_backlog_;
  // Scatters whose worker could not reach the client's data port: the client sends them
  // through here instead (scatter_inline), and the next scatter_data of these ids carries them.
  std::unordered_set<TaskId> scatter_inline_wanted_;
  // Big scatters on their way from their client's data port to a worker: a worker lost while
  // fetching one is replaced by another (the client still holds the bytes), a few times.
  struct ScatterSource {
    std::string address;
    std::uint32_t losses = 0;
  };
  std::unordered_map<TaskId, ScatterSource> scatter_sources_;
  // This event's small results: (index of the task's notice in fx_.notify, the bytes).
  std::vector<std::pair<std::size_t, std::vector<char>>> inline_results_;
  std::unordered_map<std::string, WorkerId> by_address_;             // data port -> worker
  struct FetchTrouble {                      // a task whose inputs its workers could not fetch
    std::vector<WorkerId> avoid;             // not placed on them again (while others can)
    std::uint32_t reports = 0;
    // What they said, for the error if it never works: "on W (host), which could not reach H"
    // -> (times, the first such report's words).
    std::vector<std::pair<std::string, std::pair<std::uint32_t, std::string>>> log;
  };
  std::unordered_map<TaskId, FetchTrouble> trouble_;
  // (input, holder) -> workers that could not reach that holder for it; two make the copy
  // count as out of reach, and the input is computed again where it can be fetched.
  std::map<std::pair<TaskId, WorkerId>, std::vector<WorkerId>> unreachable_holders_;
  // (worker, holder) -> when the worker last could not reach the holder: tasks whose inputs
  // only that holder has go to other workers while any is free (a partition between two hosts
  // is learnt once, not once per task); forgotten after a few timeouts or when either leaves.
  std::map<std::pair<WorkerId, WorkerId>, Clock::time_point> cuts_;
  Clock::time_point last_now_{};
  struct Relocation {                        // a result the client could not fetch
    std::vector<ClientId> clients;
    std::string address, why;                // the holder that did not answer, and how
    std::uint32_t attempts = 0;
  };
  std::unordered_map<TaskId, Relocation> relocations_;
  struct Replication {                       // replicate(): copies wanted of a result
    std::uint32_t n = 0;                     // 0 = every worker
    std::vector<WorkerId> copying;           // told to acquire it, not answered yet
    std::uint32_t next_holder = 0;           // rotates the source each copy is sent to first
    std::uint32_t failures = 0;
  };
  std::unordered_map<TaskId, Replication> replications_;
  /// Sends the next round of copies of `id` (or forgets the replication when done or moot).
  void advance_replication(TaskId id);
  WorkerId next_worker_id_ = 1;
  ClientId next_client_index_ = 1;
  double avg_task_us_ = -1;                  // moving average of run time; < 0 until one finishes
  std::vector<double> function_us_;          // the same by function index (< 0: none finished yet)
  std::size_t extra_per_slot_ = 1;           // queue horizon: tasks queued per slot beyond it
  Clock::time_point last_heartbeat_{};
  // Runs are recorded compactly (no string per run); counters() writes them out.
  struct RunRecord {
    TaskId id = 0;
    std::uint32_t function = 0;   // TaskGraph's function index
    WorkerId worker = 0;          // its name: worker_names_
    std::int64_t start_ms = 0, end_ms = 0;
    bool ok = false;
    std::string key;              // the user's key ("" = the display key, made when written out)
  };
  mutable Counters counters_;
  std::vector<RunRecord> runs_;              // the newest runs, a ring of at most kMaxEvents
  std::size_t runs_next_ = 0;                // where the next run goes once the ring is full
  std::vector<std::pair<std::uint64_t, std::uint64_t>> runs_by_function_;  // by function index: (ok, raised)
  std::size_t retiring_ = 0;                 // workers retiring: progress_retirements has work
  std::vector<std::string> worker_names_;    // by worker id (names of workers gone stay for runs_)
  mutable std::uint64_t checks_ = 0;          // events seen by check() (validate mode)
  std::vector<RunNote> run_notes_;            // runs ended since the shell took them (options_.record)
  std::int64_t clock_us_ = 0;                 // set_clock()
};

}  // namespace herd::scheduler
