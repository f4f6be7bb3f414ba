// herd wire protocol: every message between clients, the scheduler and workers is here.
//
// Transport: ZeroMQ. Clients and workers hold a DEALER connected to the scheduler's ROUTER;
// workers also bind a ROUTER ("data port") that serves results to peers and clients, who
// connect to it with a DEALER.
//
// Framing, byte-exact (ZeroMQ multipart; the ROUTER side sees an identity frame first):
//   frame 0  header and body in one frame (one frame fewer to seal, send and open per message):
//              bytes 0-5  'H' 'E' 'R' 'D' <version: uint8 = kProtocolVersion> <MessageType>
//              bytes 6-   body: one msgpack object, the struct named for the MessageType below
//   frame 1+ payloads: raw bytes (msgpack-encoded task results), only for messages that say so;
//            kept out of the body so large results are sent and received without a copy.
//
// Encoding choices: structs that are rare (hello) use MSGPACK_DEFINE_MAP so fields can be
// added later; structs on the hot path (one per task) use MSGPACK_DEFINE (a positional array),
// because a map repeats every field name for every task. Changing a positional struct means
// bumping kProtocolVersion, which the header carries and the hello checks.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <msgpack.hpp>

namespace herd::protocol {

inline constexpr std::uint8_t kProtocolVersion = 11;
inline constexpr char kMagic[4] = {'H', 'E', 'R', 'D'};
inline constexpr std::size_t kHeaderSize = 6;

/// Task ids are unique within a scheduler: (client index << 40) | per-client sequence number.
using TaskId = std::uint64_t;

// Every message: its type number, the body it carries (the struct below) and who sends it to
// whom. The enum, the names parse_header() accepts and the body type of each message
// (protocol::Body<type>, used by the typed send/decode in codec.hpp) all come from this list,
// so the mapping lives in code, not in comments.
#define HERD_MESSAGES(X)                                                                             \
  /* client|worker -> scheduler */                                                                \
  X(hello_request, 1, HelloRequest)                                                                \
  X(heartbeat, 2, HeartbeatEvent)           /* both directions */                                  \
  X(submit_tasks, 3, SubmitTasksRequest)    /* client -> scheduler (decode_each<TaskSpec>) */        \
  X(release_keys, 4, KeysEvent)             /* client dropped its last future for these tasks */   \
  X(cancel_tasks, 5, KeysEvent)             /* client -> scheduler; scheduler -> worker */         \
  X(scatter_data, 6, ScatterRequest)        /* + 1 payload unless source, client -> scheduler */   \
  X(task_results, 7, TaskResultsEvent)      /* worker -> scheduler */                              \
  X(goodbye, 8, GoodbyeEvent)               /* peer is leaving on purpose */                       \
  X(scale_pool, 9, ScalePoolRequest)        /* client -> scheduler */                              \
  X(retire_request, 10, GoodbyeEvent)       /* worker asks to be retired (walltime, SIGTERM) */    \
  X(status_request, 11, StatusRequest)      /* client -> scheduler */                              \
  X(restart_request, 12, RestartRequest)    /* client -> scheduler: Client::restart() */           \
  X(replicate, 13, ReplicateRequest)        /* client -> scheduler: copies on n workers */         \
  X(gang_join, 14, GangJoinRequest)         /* worker -> scheduler: a member wants the others */    \
  X(logs_request, 15, LogsRequest)          /* client -> scheduler (`herd logs`) */                \
  X(worker_logs_reply, 16, LogsReply)       /* worker -> scheduler (answers logs_fetch) */         \
  X(fetch_failed, 17, FetchFailedEvent)     /* client -> scheduler: a result's holder did not answer */ \
  X(force_cancel_tasks, 18, KeysEvent)      /* client -> scheduler: cancel(force): stop running ones too */ \
  X(fire_and_forget, 19, KeysEvent)         /* client -> scheduler: run these even once released */ \
  /* scheduler -> client|worker */                                                                \
  X(hello_reply, 20, HelloReply)                                                                   \
  X(task_updates, 21, TaskUpdatesEvent)     /* scheduler -> client */                              \
  X(cluster_state, 22, ClusterStateEvent)   /* scheduler -> client */                              \
  X(execute_tasks, 23, ExecuteTasksEvent)   /* scheduler -> worker */                              \
  X(free_keys, 24, KeysEvent)               /* scheduler -> worker: drop these results */          \
  X(put_data, 25, PutDataEvent)             /* + 1 payload unless source, scheduler -> worker */   \
  X(shutdown, 26, GoodbyeEvent)             /* scheduler -> worker|client: exit now */             \
  X(scale_reply, 27, ScalePoolReply)        /* scheduler -> client */                              \
  X(acquire_keys, 28, AcquireKeysEvent)     /* scheduler -> worker: copy these from holders */     \
  X(status_reply, 29, StatusReply)          /* scheduler -> client */                              \
  X(restart_reply, 30, RestartReply)        /* scheduler -> client: the workers are back (or not) */ \
  X(gang_ready, 32, GangReadyEvent)         /* scheduler -> worker: every member joined */         \
  X(gang_abort, 33, GangAbortEvent)         /* scheduler -> worker: a member failed */             \
  X(logs_reply, 34, LogsReply)              /* scheduler -> client */                              \
  X(logs_fetch, 35, LogsRequest)            /* scheduler -> worker: your log / a task's output */  \
  X(abandon_tasks, 36, AbandonTasksEvent)   /* scheduler -> worker: stop waiting for these running ones */ \
  X(peers_gone, 37, PeersGoneEvent)         /* scheduler -> worker|client: data ports now closed */ \
  X(task_seceded, 39, SecedeEvent)          /* worker -> scheduler: running tasks left / took back their slots */ \
  X(campaign_request, 43, CampaignRequest)  /* client -> scheduler: list, attach to or release campaigns */ \
  X(campaign_reply, 44, CampaignReply)      /* scheduler -> client */                              \
  X(retiring, 45, RetiringEvent)            /* scheduler -> worker: the pool retires you; checkpoint */ \
  X(link_switch, 47, LinkSwitchEvent)      /* scheduler <-> worker, on ZeroMQ: the sender's last message there; the rest on its control link (net/link.hpp) */ \
  X(scatter_inline, 46, ScatterInlineEvent) /* scheduler -> client: send these scatters through me */ \
  X(job_request, 61, JobRequest)            /* client -> scheduler: submit, list, inspect, cancel jobs (`herd submit`, `herd job`) */ \
  X(job_reply, 62, JobReply)                /* scheduler -> client */                              \
  /* data port (worker ROUTER) <-> peers and clients */                                           \
  X(get_data_request, 40, GetDataRequest)                                                          \
  X(get_data_reply, 41, GetDataReply)       /* + one payload per found key */                      \
  X(data_chunk, 42, DataChunkEvent)         /* + 1 payload: a piece of a streamed result */        \
  /* the run record (record/report.hpp) */                                                      \
  X(report_request, 100, ReportRequest)     /* client -> scheduler: a report of its run record */  \
  X(report_reply, 101, ReportReply)         /* scheduler -> client */                              \
  /* any direction */                                                                             \
  X(error, 60, ErrorEvent)                  /* the peer refused a message; says why */

enum class MessageType : std::uint8_t {
#define HERD_MESSAGE_ENUM(name, number, body) name = number,
  HERD_MESSAGES(HERD_MESSAGE_ENUM)
#undef HERD_MESSAGE_ENUM
};

/// Role a peer declares in its hello.
enum class Role : std::uint8_t { client = 1, worker = 2 };

/// Task states as the scheduler tracks them (waiting -> ready -> processing -> memory | erred).
enum class TaskState : std::uint8_t {
  waiting = 0,     // some input is not in memory yet
  ready = 1,       // inputs available, no worker has it
  processing = 2,  // sent to a worker
  memory = 3,      // result held by one or more workers
  erred = 4,       // failed; error recorded
  cancelled = 5,   // cancelled by the client before it finished
  no_worker = 6,   // (update only, not final) ready, but no connected worker can run it now:
                   //   TaskUpdate::error.message says why; a later update supersedes it
};

/// A GPU a worker may use.
struct GpuInfo {
  std::string id;            // as the batch system named it ("3", "GPU-8f1c...")
  std::string name;          // model ("" when unknown)
  std::uint64_t memory = 0;  // bytes (0 when unknown)
  MSGPACK_DEFINE_MAP(id, name, memory);
};

struct HelloRequest {
  std::uint32_t protocol = kProtocolVersion;  // must equal the scheduler's kProtocolVersion
  std::uint8_t role = 0;                      // Role
  std::string name;                           // human name, e.g. "local-3" or the host:pid
  std::string host;                           // hostname of the peer
  std::int64_t pid = 0;                       // process id on that host
  // worker only:
  std::uint32_t nthreads = 0;                 // task slots (threads)
  std::string data_address;                   // tcp://host:port of the worker's data port
  std::map<std::string, double> resources;    // custom resources, e.g. {"gpu": 1}
  std::uint64_t memory_limit = 0;             // bytes, 0 = none
  std::string job_id;                         // batch-system job id, "" outside Slurm
  std::string pool;                           // name of the pool that launched it ("" = none)
  std::int64_t end_time = 0;                  // unix seconds when its job's time runs out (0 = never)
  std::vector<GpuInfo> gpus;                  // its GPUs (also counted in resources["gpu"])
  bool links = false;                         // it takes a control link (net/link.hpp)
  MSGPACK_DEFINE_MAP(protocol, role, name, host, pid, nthreads, data_address, resources,
                     memory_limit, job_id, pool, end_time, gpus, links);
};

struct HelloReply {
  std::uint32_t protocol = kProtocolVersion;  // the scheduler's version
  bool ok = false;                            // false: see error, the peer must disconnect
  std::string error;                          // why the hello was refused
  std::uint32_t peer_index = 0;               // client index (task id prefix) or worker id
  std::uint32_t heartbeat_ms = 0;             // how often the peer must send a heartbeat
  std::uint32_t timeout_ms = 0;               // silence after which either side gives up
  std::string scheduler_id;                   // random id of this scheduler instance
  std::uint64_t max_message_bytes = 0;        // largest message the scheduler accepts (0 = unknown):
                                              //   a task or scatter over it fails alone, before sending
  // A control link offered to a worker (net/link.hpp, net/handshake.hpp); port 0: none.
  std::uint32_t link_port = 0;
  std::string link_offer;                     // the offer's id (16 bytes), works once
  std::string link_secret;                    // its secret (32 bytes)
  MSGPACK_DEFINE_MAP(protocol, ok, error, peer_index, heartbeat_ms, timeout_ms, scheduler_id, max_message_bytes,
                     link_port, link_offer, link_secret);
};

/// Sent on ZeroMQ as the sender's last message there: what follows goes on the control link.
struct LinkSwitchEvent {
  std::uint32_t link = 1;
  MSGPACK_DEFINE(link);
};

/// Workers that left: their data ports' addresses, so that clients and workers close their
/// connections to them at once (a long run with worker churn keeps its descriptors flat).
struct PeersGoneEvent {
  std::vector<std::string> addresses;
  MSGPACK_DEFINE(addresses);
};

struct HeartbeatEvent {
  std::uint64_t memory_rss = 0;  // worker: resident bytes of the process (0 from clients)
  std::uint32_t executing = 0;   // worker: tasks running now
  std::uint64_t stored = 0;      // worker: results held
  std::uint64_t spilled_bytes = 0;  // worker: of those, bytes written to its local directory
  std::string paused;            // worker: why it starts no new task (memory), "" = it does
  double cpu = 0;                // worker: CPU time of its process since the last heartbeat, in
                                 //   percent of one core (for the run record and the dashboard)
  MSGPACK_DEFINE_MAP(memory_rss, executing, stored, spilled_bytes, paused, cpu);
};

/// A dependency edge: the result of task `id` is substituted into the arguments.
struct ArgRef {
  TaskId id = 0;         // task whose result is needed
  std::uint32_t arg = 0; // index of the function parameter it fills
  std::int32_t elem = -1;  // -1: the whole parameter; >= 0: element of an array parameter
  MSGPACK_DEFINE(id, arg, elem);
};

struct TaskSpec {
  TaskId id = 0;                            // unique id (see TaskId)
  std::string function;                     // registry name, e.g. "add" or "herd::shell"
  std::vector<char> args;                   // msgpack array, one entry per parameter; nil where
                                            //   an ArgRef fills it in
  std::vector<ArgRef> refs;                 // dependency edges
  std::string key;                          // user-chosen name, "" = "<function>-<id>"
  std::int32_t priority = 0;                // higher runs first among ready tasks
  std::uint32_t retries = 0;                // times to re-run a task that throws
  std::map<std::string, double> resources;  // custom resources it needs on one worker
  bool want_result = true;                  // client holds a future for it
  std::uint32_t duration_s = 0;             // run time it needs: not placed on a worker whose
                                            //   job ends sooner (0 = unknown)
  TaskId gang = 0;                          // gang id (= rank 0's task id), 0 = not in a gang
  std::uint32_t gang_rank = 0;              // rank of this member
  std::uint32_t gang_size = 0;              // members (all submitted together, ranks 0..n-1)
  std::uint32_t timeout_ms = 0;             // time limit of one run (0 = none): the worker fails
                                            //   it at the deadline and frees its slot
  std::vector<std::string> workers;         // only on these workers (names, hosts or data ports;
                                            //   empty = any)
  bool allow_other_workers = false;         // `workers` is a preference, not a restriction
  std::string pool;                         // only on workers of this pool ("" = any)
  std::string campaign;                     // detached campaign it belongs to ("" = none): kept
                                            //   with its result when its client releases it or
                                            //   leaves, until the campaign is released
  bool isolated = false;                    // run in a child process of the worker, which can
                                            //   be killed (time limit, cancel(force)) and whose
                                            //   crash fails only this task (herd::TaskCrashed)
  std::uint64_t isolated_memory = 0;        // isolated: bytes of address space the child may add
                                            //   to what it inherits (RLIMIT_AS; 0 = no cap)
  std::uint32_t preemptions = 0;            // times it may be preempted (checkpointable): runs
                                            //   that fail while their worker drains, counted
                                            //   apart from retries
  std::uint32_t nodes = 0;                  // whole nodes it takes (TaskOptions::nodes; 0 = an
                                            //   ordinary task): workers on this many distinct
                                            //   hosts of one allocation (job id), held for it
                                            //   alone; it runs once, on the first
  // Fields are only ever appended: msgpack-c leaves a field the sender did not have at its default.
  MSGPACK_DEFINE(id, function, args, refs, key, priority, retries, resources, want_result, duration_s,
                 gang, gang_rank, gang_size, timeout_ms, workers, allow_other_workers, pool, campaign,
                 isolated, isolated_memory, preemptions, nodes);
};

// The client packs these with protocol::BatchWriter, one spec at a time, and sends a long
// map() as several messages of ~64 KiB; the scheduler reads them with protocol::decode_each.
struct SubmitTasksRequest {
  std::vector<TaskSpec> tasks;  // in submission order; dependencies come before dependents
  // Released after these tasks were taken, as a release_keys would (the client's futures of
  // earlier tasks dropped meanwhile): one message, not two, on a round trip's path.
  std::vector<TaskId> released;
  MSGPACK_DEFINE(tasks, released);
};

struct KeysEvent {
  std::vector<TaskId> ids;  // tasks concerned
  MSGPACK_DEFINE(ids);
};

struct ScatterRequest {
  TaskId id = 0;      // id the client chose for the scattered value
  std::string key;    // user name for it, "" = "scatter-<id>"
  std::string source; // "": 1 payload frame follows. Else the client's own data port, which
                      //   serves the value under `id` until it is in memory on a worker: big
                      //   values go there straight, streamed, not through the scheduler.
  std::uint64_t nbytes = 0;  // the value's size (with a source)
  MSGPACK_DEFINE(id, key, source, nbytes);
};

/// The worker chosen for a scatter with a source could not fetch it (the client's data port is
/// out of its reach: a firewall, another network): the client sends these through the
/// scheduler instead, as one payload each (scatter_data without a source).
/// The error type of a scatter whose worker could not fetch it from the client's data port.
inline constexpr const char* kScatterSourceUnreachable = "herd::ScatterSourceUnreachable";

struct ScatterInlineEvent {
  std::vector<TaskId> ids;
  std::string reason;  // what the worker saw, for the client's log
  MSGPACK_DEFINE(ids, reason);
};

/// client.replicate(futures, n), scatter(value, broadcast): copies of these results on `n`
/// workers (0 = every connected worker).
struct ReplicateRequest {
  std::vector<TaskId> ids;
  std::uint32_t n = 0;
  MSGPACK_DEFINE(ids, n);
};

struct ErrorInfo {
  std::string type;     // demangled C++ exception type, e.g. "std::runtime_error"
  std::string message;  // what()
  std::string task;     // key of the task that raised it (root cause for dependents)
  std::string worker;   // name of the worker it ran on ("" if it never ran)
  MSGPACK_DEFINE(type, message, task, worker);
};

struct DepLocation {
  TaskId id = 0;                       // an input of the task
  std::vector<std::string> holders;    // data ports of the workers holding it
  MSGPACK_DEFINE(id, holders);
};

struct TaskResult {
  TaskId id = 0;                // task
  bool ok = false;              // true: result stored on the worker; false: see error
  std::uint64_t nbytes = 0;     // size of the stored result
  std::vector<char> inline_data;  // the result itself when small (<= kInlineResultBytes)
  ErrorInfo error;              // when !ok
  std::uint64_t duration_us = 0;  // wall time of the function call
  bool missing_input = false;   // !ok because an input could not be fetched: not a task error
  bool handed_back = false;     // !ok because the worker gave it back unstarted: not an error
  std::vector<DepLocation> unreachable;  // missing_input: inputs whose holders (these data
                                         //   ports) did not answer; the holders are alive as far
                                         //   as this worker knows, it could not reach them
  std::vector<DepLocation> not_held;     // missing_input: holders that said they no longer have it
  bool preempted = false;       // !ok while its worker drained (SIGTERM, walltime, retiring):
                                //   counted against the task's preemptions, not its retries
  // The worker's phases of this run, for the scheduler's run record (record/record.hpp):
  // durations on the worker's own clock, so no clock crosses the wire.
  std::uint64_t fetch_us = 0;     // from the task's arrival until its last input was fetched (0: none fetched)
  std::uint64_t fetch_bytes = 0;  // inputs it fetched from other workers
  std::uint32_t fetch_peers = 0;  // ... from how many of them
  std::uint64_t return_us = 0;    // from the function's end until this notice was sent
  std::uint32_t thread = 0;       // where it ran: 0 the worker's I/O thread (inline), n executor n
  MSGPACK_DEFINE(id, ok, nbytes, inline_data, error, duration_us, missing_input, handed_back, unreachable,
                 not_held, preempted, fetch_us, fetch_bytes, fetch_peers, return_us, thread);
};

/// Results up to this size travel with the completion notice, so the client's gather needs no
/// extra round trip to the worker. Larger ones stay on the worker until fetched.
inline constexpr std::size_t kInlineResultBytes = 4096;

struct TaskResultsEvent {
  std::vector<TaskResult> results;  // finished tasks, in completion order
  std::vector<TaskId> acquired;     // inputs this worker fetched from peers and now holds too
  std::vector<DepLocation> acquire_failed;  // copies asked for (acquire_keys) that no holder
                                            //   listed here gave (they did not answer or no
                                            //   longer had it)
  MSGPACK_DEFINE(results, acquired, acquire_failed);
};

/// The client could not fetch these results from the data port at `address` (it did not
/// answer within the timeout). The scheduler points the client at another holder, has another
/// worker fetch a copy, or fails them with the reason.
struct FetchFailedEvent {
  std::vector<TaskId> ids;
  std::string address;  // the data port that did not answer
  std::string why;      // e.g. "no data from tcp://10.0.0.7:4411 for 10000 ms"
  MSGPACK_DEFINE(ids, address, why);
};

/// herd::secede() / rejoin() inside running tasks: a seceded task no longer holds one of its
/// worker's thread slots (the worker runs another task beside it, the scheduler sends it one
/// more), a rejoined one holds one again. A seceded task that finishes gives back nothing.
struct SecedeEvent {
  std::vector<TaskId> seceded;
  std::vector<TaskId> rejoined;
  MSGPACK_DEFINE_MAP(seceded, rejoined);
};

struct TaskUpdate {
  TaskId id = 0;                   // task
  std::uint8_t state = 0;          // TaskState: memory, erred or cancelled
  std::int32_t location = -1;      // index into TaskUpdatesEvent::addresses (memory only)
  std::uint64_t nbytes = 0;        // size of the result
  std::vector<char> inline_data;   // the result when small
  ErrorInfo error;                 // erred / cancelled
  MSGPACK_DEFINE(id, state, location, nbytes, inline_data, error);
};

struct TaskUpdatesEvent {
  std::vector<std::string> addresses;  // data ports referenced by TaskUpdate::location
  std::vector<TaskUpdate> updates;
  MSGPACK_DEFINE(addresses, updates);
};

/// One worker pool (local processes or Slurm jobs) as the scheduler sees it.
struct PoolStatus {
  std::string name;                          // pool name
  std::string kind;                          // "local" or "slurm"
  std::uint32_t target = 0;                  // workers wanted now
  bool adaptive = false;                     // target follows the backlog
  std::uint32_t minimum = 0, maximum = 0;    // adapt bounds
  std::uint32_t pending = 0;                 // jobs queued (submitted, not running)
  std::uint32_t running = 0;                 // jobs running
  std::uint32_t workers = 0;                 // workers of this pool connected
  std::map<std::string, std::uint32_t> pending_reasons;  // e.g. {"Priority": 3}
  std::string paused;                        // why submissions are paused ("" = not paused)
  std::string last_error;                    // last submission error (sbatch's own words)
  std::uint64_t submitted = 0, failed_submissions = 0;  // totals
  std::string last_failure;                  // last job that failed: how, and the end of its
                                             //   output file ("" = none failed)
  std::uint32_t crashes = 0;                 // jobs in a row that ended before their worker
                                             //   connected (or just after): a crash loop backs
                                             //   off, then pauses (see `paused`)
  std::uint32_t stalled = 0;                 // jobs suspended, stopped or held
  std::string batch_error;                   // the batch system does not answer (squeue failed
                                             //   or timed out): since when, why, next try ("" = ok)
  double last_answer_s = -1;                 // seconds since the batch system last answered a
                                             //   poll (-1 = not yet)
  std::uint32_t workers_per_job = 1;         // processes x nodes of each job
  std::uint32_t walltime_s = 0;              // jobs' time limit (0 = none)
  std::uint32_t retire_before_s = 0;         // workers retire this long before it
  // Appended (herd pools / herd pool pause): paused by the user (`herd pool pause`): no job is
  // submitted until `herd pool resume`; and the workers the pool would let go but keeps because
  // they hold results only they have, each "NAME: holds N result(s) only it has (SIZE): KEYS".
  bool user_paused = false;
  std::vector<std::string> kept_for_data;
  std::uint32_t cores_per_job = 0;           // for `herd scale POOL --cores C`
  std::int64_t memory_per_job = 0;           // bytes, for `herd scale POOL --memory M` (0 = none asked)
  MSGPACK_DEFINE_MAP(name, kind, target, adaptive, minimum, maximum, pending, running, workers,
                     pending_reasons, paused, last_error, submitted, failed_submissions, last_failure,
                     crashes, stalled, batch_error, last_answer_s, workers_per_job, walltime_s, retire_before_s,
                     user_paused, kept_for_data, cores_per_job, memory_per_job);
};

struct ClusterStateEvent {
  std::uint32_t workers = 0;        // connected workers
  std::uint32_t threads = 0;        // their task slots in total
  std::vector<PoolStatus> pools;    // every pool of the scheduler
  MSGPACK_DEFINE_MAP(workers, threads, pools);
};

struct ScalePoolRequest {
  std::uint64_t request_id = 0;  // echoed in the reply
  std::string pool;              // "" = the only (or first) pool
  bool adaptive = false;         // false: fixed size `target`; true: adapt(minimum, maximum)
  std::uint32_t target = 0;
  std::uint32_t minimum = 0, maximum = 0;
  std::uint32_t idle_timeout_s = 0;  // adapt: retire workers idle this long (0 = default)
  // A fixed size in other units than workers (>= 0 = given; the largest number of jobs any
  // of them needs wins): whole jobs, cores, memory in bytes.
  std::int64_t jobs = -1, cores = -1, memory = -1;
  // adapt()'s pace (Dask's Adaptive): -1 / 0 = the pool's current value.
  std::int64_t interval_ms = -1;          // between two decisions (0 = every step)
  std::int64_t target_duration_ms = 0;    // the backlog is cleared in about this much work per slot
  std::uint32_t wait_count = 0;           // decisions in a row that ask for a shrink before one
  // Appended (the shell's `herd pool pause|resume POOL`, `herd worker retire NAME`): "" = scale
  // or adapt as above; "pause": the pool submits no job until "resume" (its workers stay);
  // "retire": the worker named `worker` drains its tasks, hands on the results only it holds,
  // and leaves (a fixed-size pool shrinks by its job, so that it is not replaced).
  std::string action;
  std::string worker;
  MSGPACK_DEFINE_MAP(request_id, pool, adaptive, target, minimum, maximum, idle_timeout_s, jobs, cores, memory,
                     interval_ms, target_duration_ms, wait_count, action, worker);
};

struct ScalePoolReply {
  std::uint64_t request_id = 0;  // from the request
  bool ok = false;
  std::string error;             // e.g. sbatch's "invalid partition specified: nope"
  // Appended: what changed, for `herd scale/adapt/pool/worker retire` to print.
  std::string pool;                          // the pool changed (the retired worker's pool)
  std::uint32_t before = 0, after = 0;       // workers wanted before and after
  bool adaptive = false;                     // after: follows the backlog
  std::uint32_t minimum = 0, maximum = 0;    // after: adapt bounds
  std::uint32_t submitted = 0;               // jobs submitted for this change
  std::uint32_t retiring = 0;                // workers of the pool retiring now
  std::vector<std::string> kept_for_data;    // as PoolStatus::kept_for_data
  bool user_paused = false;                  // after: paused by the user
  std::string worker;                        // retire: the worker
  std::uint32_t workers_per_job = 1;
  std::string note;                          // retire: what happens to its tasks and results
  MSGPACK_DEFINE_MAP(request_id, ok, error, pool, before, after, adaptive, minimum, maximum, submitted, retiring,
                     kept_for_data, user_paused, worker, workers_per_job, note);
};

/// Client::restart(): every worker stopped (and replaced by its pool), every task of every
/// client cancelled, the journal's results forgotten. The reply comes once as many pool
/// workers as before are connected again, or after `timeout_ms` with how many came back.
struct RestartRequest {
  std::uint64_t request_id = 0;  // echoed in the reply
  std::uint32_t timeout_ms = 0;  // how long the scheduler waits for the new workers
  MSGPACK_DEFINE_MAP(request_id, timeout_ms);
};

struct RestartReply {
  std::uint64_t request_id = 0;  // from the request
  bool ok = false;               // false: see error (the workers did not all come back in time)
  std::string error;
  std::uint32_t stopped = 0;     // workers told to stop
  std::uint32_t wanted = 0;      // of those, workers a pool replaces (waited for)
  std::uint32_t workers = 0;     // workers connected when the reply was sent
  std::uint32_t cancelled = 0;   // tasks cancelled (of every client)
  MSGPACK_DEFINE_MAP(request_id, ok, error, stopped, wanted, workers, cancelled);
};

/// Detached campaigns (TaskOptions::campaign): tasks submitted under a name live on when their
/// client releases them or leaves; any client finds them by name (attach: it gets their futures
/// and their updates from then on), lists them, or releases them. All maps: rare messages.
enum class CampaignOp : std::uint8_t {
  list = 0,     // every campaign, with its counts
  attach = 1,   // the campaign's tasks, in submission order, and the states of the finished ones
  release = 2,  // forget the campaign: its tasks are released as a client's futures are
};

struct CampaignRequest {
  std::uint64_t request_id = 0;  // echoed in the reply
  std::uint8_t op = 0;           // CampaignOp
  std::string name;              // attach / release: the campaign
  MSGPACK_DEFINE_MAP(request_id, op, name);
};

/// One campaign and where its tasks stand.
struct CampaignInfo {
  std::string name;
  std::uint64_t total = 0;       // tasks submitted under it
  std::uint64_t done = 0;        // results in memory
  std::uint64_t failed = 0;      // erred or cancelled (or gone from the graph)
  std::uint64_t pending = 0;     // waiting, ready or processing
  std::string client;            // the client its updates go to ("" = none: detached)
  MSGPACK_DEFINE_MAP(name, total, done, failed, pending, client);
};

/// One task of an attached campaign: what a client needs to make its future.
struct CampaignTask {
  TaskId id = 0;
  std::string key;               // the user's key ("" = the display key "<function>-<id>")
  std::string function;          // registry name
  MSGPACK_DEFINE(id, key, function);
};

struct CampaignReply {
  std::uint64_t request_id = 0;         // from the request
  bool ok = false;                      // false: see error (e.g. no campaign of that name)
  std::string error;
  std::vector<CampaignInfo> campaigns;  // list: all, by name; attach / release: the one
  std::vector<CampaignTask> tasks;      // attach: every task, in submission order
  TaskUpdatesEvent current;             // attach: the finished ones' states (as task_updates);
                                        //   the others' come as task_updates when they finish
  MSGPACK_DEFINE_MAP(request_id, ok, error, campaigns, tasks, current);
};

// ---- jobs of shell commands (`herd submit`, `herd jobs`, `herd job ...`) ----------------------
// A job is held by the scheduler (state_jobs.cpp), not by the client that submitted it: an
// array of a million tasks is one JobSpec (its index ranges), and the scheduler makes each
// task when it is about to run. All maps: rare messages, and fields will be added.

/// One command of a job: an array's template, or one named task of a job file.
struct JobTaskDef {
  std::uint64_t id = 0;                     // the task's id in its job (a job file's; arrays: unused)
  std::string name;                         // a job file's task name ("" = none)
  std::vector<std::string> argv;            // program and arguments (run without a shell)
  std::string script;                       // or a /bin/sh -c script ("" = argv)
  std::map<std::string, std::string> env;   // extra environment
  std::string cwd;                          // working directory ("" = the submitter's)
  std::map<std::string, double> resources;  // what it needs on one worker (cpus, gpu, memory, ...)
  std::int32_t priority = 0;
  std::uint32_t time_limit_ms = 0;          // 0 = none
  std::uint32_t retries = 0;                // runs again a failed task up to this many times
  std::string pool;                         // only on workers of this pool ("" = any)
  std::vector<std::uint64_t> deps;          // ids of tasks of the same job it waits for
  std::uint32_t nodes = 0;                  // whole nodes it takes (as TaskSpec::nodes; 0 = a slot
                                            //   of one worker)
  MSGPACK_DEFINE_MAP(id, name, argv, script, env, cwd, resources, priority, time_limit_ms, retries, pool, deps,
                     nodes);
};

struct JobSpec {
  std::string name;
  JobTaskDef task;                          // the command of a one-task job or an array
  std::vector<std::uint64_t> array;         // array ids as ranges, triples (first, last, step)
  std::vector<std::string> entries;         // --each-line: task i gets entries[i] (HERD_ENTRY)
  std::vector<JobTaskDef> tasks;            // a job file's tasks (then `task` is unused)
  std::vector<std::uint64_t> after;         // jobs that must finish first, each task ok
  std::int64_t max_fails = -1;              // cancel the rest once more tasks failed (-1 = never)
  std::string stdout_path, stderr_path;     // patterns (%{JOB_ID}, %{TASK_ID}, %{CWD},
                                            //   %{SUBMIT_DIR}); "" = not kept
  std::string stream_dir;                   // "" = a file per task; else every task's output,
                                            //   framed, in one file per worker in this directory
  std::string submit_dir;                   // where it was submitted from (absolute)
  std::string submitted_by;                 // user@host
  MSGPACK_DEFINE_MAP(name, task, array, entries, tasks, after, max_fails, stdout_path, stderr_path, stream_dir,
                     submit_dir, submitted_by);
};

enum class JobOp : std::uint8_t {
  submit = 0,    // spec: a new job; the reply names its id
  list = 1,      // every job (and every campaign)
  info = 2,      // one job, with its failed tasks (and, with `all_tasks`, every task)
  cancel = 3,    // cancels what has not finished
  resubmit = 4,  // runs again the failed (and cancelled) tasks of a job, as a new job
};

struct JobRequest {
  std::uint64_t request_id = 0;  // echoed in the reply
  std::uint8_t op = 0;           // JobOp
  std::uint64_t job = 0;         // info, cancel, resubmit
  JobSpec spec;                  // submit
  bool all_tasks = false;        // info: every task's state, not only the failed ones (a job
                                 //   file's tasks come all, always); resubmit: every task, not
                                 //   only the failed ones
  MSGPACK_DEFINE_MAP(request_id, op, job, spec, all_tasks);
};

/// A job and where its tasks stand.
struct JobInfo {
  std::uint64_t id = 0;
  std::string name;
  std::string state;             // waiting, running, finished, failed, cancelled
  std::uint64_t total = 0, waiting = 0, running = 0, ok = 0, failed = 0, cancelled = 0;
  std::int64_t submitted_ms = 0, finished_ms = 0;  // unix milliseconds (0 = not yet)
  std::string command;           // shell-quoted, for the listing
  std::string stdout_path, stderr_path, stream_dir, submit_dir, cwd;
  std::vector<std::uint64_t> after;
  MSGPACK_DEFINE_MAP(id, name, state, total, waiting, running, ok, failed, cancelled, submitted_ms, finished_ms,
                     command, stdout_path, stderr_path, stream_dir, submit_dir, cwd, after);
};

/// One task of a job (info).
struct JobTaskInfo {
  std::uint64_t id = 0;
  std::string name;              // a job file's task name
  std::string state;             // waiting, running, ok, failed, cancelled
  std::int32_t exit_code = 0;    // failed: the command's exit code (-1: it did not exit: time limit, lost...)
  std::string error;             // failed: why, with the last lines of stderr
  std::string cwd;               // its working directory (for its output files)
  MSGPACK_DEFINE_MAP(id, name, state, exit_code, error, cwd);
};

struct JobReply {
  std::uint64_t request_id = 0;
  bool ok = false;
  std::string error;
  std::uint64_t job = 0;                 // submit, resubmit: the new job's id
  std::vector<JobInfo> jobs;             // list: all; info, cancel: the one
  std::vector<JobTaskInfo> tasks;        // info: the failed tasks (all with all_tasks)
  std::vector<CampaignInfo> campaigns;   // list: the detached campaigns of C++ clients
  MSGPACK_DEFINE_MAP(request_id, ok, error, job, jobs, tasks, campaigns);
};

/// What a job's task runs on its worker ("herd::job_task", src/task/job_task.cpp): its
/// command with the job's output settings; the worker fills in the placeholders.
struct JobTaskRun {
  std::uint64_t job = 0, task = 0;
  std::string entry;                        // --each-line: its line
  bool has_entry = false;
  JobTaskDef def;
  std::string stdout_path, stderr_path, stream_dir, submit_dir;
  MSGPACK_DEFINE_MAP(job, task, entry, has_entry, def, stdout_path, stderr_path, stream_dir, submit_dir);
};

/// `herd status`, Client::status() and the dashboard: one snapshot of the scheduler's state.
/// All status structs are maps: they are rare, and fields will be added.
struct StatusRequest {
  std::uint64_t request_id = 0;  // echoed in the reply
  std::uint32_t max_events = 0;  // task stream entries wanted (newest last; 0 = none)
  // `herd explain` / Client::explain(): explain this task instead (the reply's `explanation`;
  // the rest of the snapshot is left empty). By key (a user key or a display key) or by id.
  bool explain = false;
  std::string explain_key;
  std::uint64_t explain_id = 0;
  MSGPACK_DEFINE_MAP(request_id, max_events, explain, explain_key, explain_id);
};

/// Why a task is not running (`herd explain`, Client::explain()), as HyperQueue's task explain.
struct TaskExplanation {
  bool found = false;
  std::string key;                          // the task's key ("" when not found)
  std::string function;
  std::string state;                        // waiting, ready, processing, memory, erred, cancelled
  std::string summary;                      // one line: where it runs, or why it does not
  std::vector<std::string> inputs;          // waiting: inputs not in memory yet, "key (state)"
  std::vector<std::string> workers;         // ready: each connected worker, "name: why not there"
  std::vector<std::string> pools;           // each pool: whether a worker it brings could run it
  bool never = false;                       // no connected worker and no pool can ever run it
  std::map<std::string, double> resources;  // what it needs
  std::uint32_t duration_s = 0;             // its declared duration (0 = none)
  MSGPACK_DEFINE_MAP(found, key, function, state, summary, inputs, workers, pools, never, resources, duration_s);
};

struct WorkerStatus {
  std::uint32_t id = 0;                     // scheduler's worker number
  std::string name;                         // e.g. "local-3" or the host:pid
  std::string host;                         // hostname
  std::string address;                      // data port
  std::string job_id;                       // batch-system job id ("" outside Slurm)
  std::string pool;                         // pool that launched it ("" = none)
  std::uint32_t nthreads = 0;               // task slots
  std::uint32_t processing = 0;             // tasks sent to it and not finished (may exceed slots)
  std::uint32_t executing = 0;              // tasks running now, as its last heartbeat said
  std::uint64_t stored = 0;                 // results it holds
  std::uint64_t memory_rss = 0;             // bytes resident, as its last heartbeat said
  std::uint64_t memory_limit = 0;           // bytes, 0 = none
  std::map<std::string, double> resources;  // custom resources it offers, e.g. {"gpu": 1}
  std::int64_t end_time = 0;                // unix seconds when its job ends (0 = never)
  bool retiring = false;                    // draining: takes no new tasks
  double last_seen_s = 0;                   // seconds since its last message
  std::vector<GpuInfo> gpus;                // its GPUs: id, model, memory
  std::uint64_t spilled_bytes = 0;          // results it wrote to its local directory (bytes)
  std::string paused;                       // why it starts no new task ("" = not paused)
  bool link = false;                        // its messages travel on a control link (false: ZeroMQ)
  std::string kept_for_data;                // appended: its pool would let it go, but it holds results
                                            //   only it has: "N result(s) (SIZE): KEYS" ("" = not kept)
  MSGPACK_DEFINE_MAP(id, name, host, address, job_id, pool, nthreads, processing, executing, stored,
                     memory_rss, memory_limit, resources, end_time, retiring, last_seen_s, gpus,
                     spilled_bytes, paused, link, kept_for_data);
};

struct JobStatus {
  std::string pool;    // pool that submitted it
  std::string id;      // "12345_0" (Slurm array task) or "local-3"
  std::string state;   // "pending", "running", "ended"
  std::string detail;  // the batch system's own state (PENDING, RUNNING, ...)
  std::string reason;  // pending reason (Priority, Resources, ...), or how it ended
  std::string worker;  // name of the worker it runs ("" = none connected yet)
  std::string output;  // its output file(s), ", "-separated ("" = not kept / unknown)
  std::vector<std::string> output_tail;  // ended in failure: the last lines of its output
  MSGPACK_DEFINE_MAP(pool, id, state, detail, reason, worker, output, output_tail);
};

/// One finished task run, for the task stream (what ran where, when).
struct TaskEvent {
  std::string key;          // display key
  std::string function;     // registry name
  std::string worker;       // worker name
  std::int64_t start_ms = 0;  // unix milliseconds when the function started (end - duration)
  std::int64_t end_ms = 0;    // unix milliseconds when the scheduler heard it finished
  bool ok = true;           // false: it raised
  MSGPACK_DEFINE_MAP(key, function, worker, start_ms, end_ms, ok);
};

struct StatusReply {
  std::uint64_t request_id = 0;             // from the request
  std::string scheduler_id;                 // random id of this scheduler instance
  std::string address;                      // where peers connect
  std::string dashboard;                    // http://host:port/?token=... of the dashboard ("" = none)
  std::int64_t now_ms = 0;                  // unix milliseconds when the snapshot was taken
  double uptime_s = 0;                      // seconds since the scheduler started
  std::uint32_t clients = 0;                // clients connected
  std::vector<WorkerStatus> workers;        // connected workers, by id
  std::map<std::string, std::uint64_t> tasks;  // tasks in the graph by state name
  std::map<std::string, std::map<std::string, std::uint64_t>> functions;  // function -> state -> n
                                            //   in the graph, plus "finished_total" and
                                            //   "failed_total": its runs since start
  std::uint64_t finished_total = 0;         // task runs that succeeded since start
  std::uint64_t failed_total = 0;           // task runs that raised since start
  double throughput = 0;                    // tasks finished per second over the last 10 s
  std::vector<PoolStatus> pools;            // every pool of the scheduler
  std::vector<JobStatus> jobs;              // every live job of every pool
  std::vector<TaskEvent> events;            // newest task runs (at most max_events), oldest first
  std::map<std::string, std::uint64_t> no_worker;  // ready tasks no connected worker can run,
                                                   //   by reason (e.g. "no connected worker offers {gpu: 1}")
  std::string journal;                      // the journal's state in one line ("" = no journal),
                                            //   e.g. "BEHIND: 12 records (48 KiB) not on disk..."
  bool journal_failing = false;             // the journal cannot write (disk full, I/O error)
  std::uint64_t journal_behind = 0;         // records not on disk yet
  bool auth_off = false;                    // HERD_AUTH=off: no authentication, no encryption
  TaskExplanation explanation;              // asked with StatusRequest::explain
  std::vector<CampaignInfo> campaigns;      // detached campaigns, by name
  std::string record;                       // the run record's file ("" = none; `herd report --record`)
  MSGPACK_DEFINE_MAP(request_id, scheduler_id, address, dashboard, now_ms, uptime_s, clients, workers,
                     tasks, functions, finished_total, failed_total, throughput, pools, jobs, events, no_worker,
                     journal, journal_failing, journal_behind, auth_off, explanation, campaigns, record);
};

/// A report of the scheduler's run record (`herd report`, Client::performance_report): built
/// off the scheduler's loop, from the record file.
struct ReportRequest {
  std::uint64_t request_id = 0;
  std::int64_t since_us = 0;   // runs that ended at or after this (unix microseconds; 0 = from the start)
  std::int64_t until_us = 0;   // ... and up to this (0 = now)
  std::string campaign;        // only this campaign's runs ("" = all)
  std::string job;             // only runs on workers of this job ("" = all)
  std::string format = "html"; // "html" or "trace" (Chrome trace JSON)
  std::string title;           // the report's title ("" = herd report)
  MSGPACK_DEFINE_MAP(request_id, since_us, until_us, campaign, job, format, title);
};

struct ReportReply {
  std::uint64_t request_id = 0;
  std::string error;                  // "" = document holds the report
  std::string document;
  std::vector<std::string> warnings;  // a damaged or truncated record, read up to the damage
  std::string record;                 // the record file it was built from
  MSGPACK_DEFINE_MAP(request_id, error, document, warnings, record);
};

struct AcquireKeysEvent {
  std::vector<DepLocation> keys;  // fetch each from its holders and keep a copy
  MSGPACK_DEFINE(keys);
};

struct ExecuteTask {
  TaskId id = 0;                            // task
  std::string function;                     // registry name
  std::vector<char> args;                   // as in TaskSpec
  std::vector<ArgRef> refs;                 // as in TaskSpec
  std::vector<DepLocation> inputs;          // where each distinct input lives
  std::string key;                          // display key (for errors and logs)
  std::map<std::string, double> resources;  // what it holds while it runs
  bool full_result = false;                 // send the whole result back (the journal keeps it)
  TaskId gang = 0;                          // as in TaskSpec
  std::uint32_t gang_rank = 0, gang_size = 0;
  std::uint32_t gang_attempt = 0;           // which run of the gang (a retry is a new attempt)
  std::uint32_t timeout_ms = 0;             // as in TaskSpec (appended: see TaskSpec)
  bool isolated = false;                    // as in TaskSpec (appended)
  std::uint64_t isolated_memory = 0;        // as in TaskSpec (appended)
  std::vector<std::string> nodes;           // a multi-node task (TaskSpec::nodes): the hosts it
                                            //   holds, this worker's first (appended)
  MSGPACK_DEFINE(id, function, args, refs, inputs, key, resources, full_result, gang, gang_rank,
                 gang_size, gang_attempt, timeout_ms, isolated, isolated_memory, nodes);
};

/// Running tasks the worker must stop waiting for (cancel(force)): each is reported failed
/// with `reason` at once, its slot and resources freed, its result discarded when it comes,
/// a shell command killed. Unstarted ones are handed back as for cancel_tasks.
struct AbandonTasksEvent {
  std::vector<TaskId> ids;
  std::string reason;  // e.g. "cancelled while running (cancel(force))"
  MSGPACK_DEFINE_MAP(ids, reason);
};

struct ExecuteTasksEvent {
  std::vector<ExecuteTask> tasks;
  std::vector<TaskId> free;  // dropped before these tasks are taken, as a free_keys would
  MSGPACK_DEFINE(tasks, free);
};

struct PutDataEvent {
  TaskId id = 0;       // key under which the worker stores the value
  std::string source;  // "": the payload frame that follows. Else the data port (a client's)
                       //   to fetch it from; the worker reports it as a task result either way
                       //   (herd::ScatterSourceUnreachable when it could not fetch it)
  MSGPACK_DEFINE(id, source);
};

/// The scheduler retires this worker (its pool shrinks: scale() down, adapt(), idle): it gets
/// no new task, and its running tasks are handed back to other workers once `seconds` have
/// passed. The worker turns this_task().draining() true and seconds_left() to `seconds`, so a
/// checkpointable task saves its state and gives up before then. Not sent to a worker that
/// asked to retire itself (retire_request: a drain signal or its walltime): it knows.
struct RetiringEvent {
  std::string reason;         // e.g. "pool local shrinks"
  std::uint32_t seconds = 0;  // time its running tasks have left: the scheduler's grace
                              //   (retire_grace_s), bounded by the job's end
  MSGPACK_DEFINE_MAP(reason, seconds);
};

struct GoodbyeEvent {
  std::string reason;  // why the peer leaves / is told to leave
  MSGPACK_DEFINE_MAP(reason);
};

/// GetDataRequest::lanes: what the fetcher can take besides data_chunk messages.
inline constexpr std::uint32_t kTakesLane = 1;  // a bulk lane (net/lane.hpp)

struct GetDataRequest {
  std::uint64_t request_id = 0;  // echoed in the reply
  std::vector<TaskId> ids;       // results wanted
  std::uint32_t lanes = 0;       // kTakesLane
  MSGPACK_DEFINE(request_id, ids, lanes);
};

/// Where the streamed results of one reply come instead of data_chunk messages: a TCP
/// connection to the holder's lane port, which the fetcher opens and proves the offer on
/// (net/handshake.hpp); the handshake also settles whether the bytes are sealed.
struct DataLane {
  std::uint16_t port = 0;   // 0: no lane, data_chunk messages follow
  std::string offer;        // the offer's id (16 bytes), for this reply only
  std::string secret;       // its secret (32 bytes): never sent again
  MSGPACK_DEFINE(port, offer, secret);
};

/// A result too big to travel as one frame: it follows as data_chunk messages.
struct StreamedData {
  TaskId id = 0;
  std::uint64_t nbytes = 0;      // its whole size; chunks arrive in order, offsets 0..nbytes
  MSGPACK_DEFINE(id, nbytes);
};

struct GetDataReply {
  std::uint64_t request_id = 0;  // from the request
  std::vector<TaskId> found;     // one payload frame follows per entry, in this order
  std::vector<TaskId> missing;   // not held by this worker
  std::vector<StreamedData> streamed;  // held, and sent after this reply: on the lane, in this
                                       // order, or else as data_chunk messages
  DataLane lane;
  MSGPACK_DEFINE(request_id, found, missing, streamed, lane);
};

/// One piece of a streamed result; its payload frame holds bytes [offset, offset + size).
/// Pieces of one result come in order on one connection, so a receiver writes each straight
/// into the result's final buffer, and a transfer that keeps moving is never cut short.
struct DataChunkEvent {
  std::uint64_t request_id = 0;  // the GetDataRequest it answers
  TaskId id = 0;                 // the result
  std::uint64_t offset = 0;      // where this piece goes
  MSGPACK_DEFINE(request_id, id, offset);
};

/// Gang rendezvous: each member's communicator binds a ring listener and joins; when all
/// members of the attempt have joined, each gets everybody's address (and NCCL's id).
struct GangJoinRequest {
  TaskId gang = 0;
  std::uint32_t attempt = 0;
  std::uint32_t rank = 0;
  std::string ring_address;     // "host:port" of this member's ring listener
  bool has_gpu = false;         // the member holds a GPU and NCCL is built in
  std::uint8_t wanted = 0;      // herd::CollectiveBackend the member asked for
  std::vector<char> nccl_id;    // rank 0 with has_gpu: a fresh ncclUniqueId
  MSGPACK_DEFINE(gang, attempt, rank, ring_address, has_gpu, wanted, nccl_id);
};

struct GangReadyEvent {
  TaskId gang = 0;
  std::uint32_t attempt = 0;
  std::uint8_t backend = 0;                 // herd::CollectiveBackend chosen for all ranks
  std::vector<std::string> ring_addresses;  // by rank
  std::string token;                        // secret of this gang attempt: the ring derives its key from it
  std::vector<char> nccl_id;                // rank 0's, when backend is nccl
  std::string error;                        // non-empty: the join was refused (why)
  MSGPACK_DEFINE(gang, attempt, backend, ring_addresses, token, nccl_id, error);
};

struct GangAbortEvent {
  TaskId gang = 0;
  std::uint32_t attempt = 0;
  std::string reason;  // e.g. "rank 2 of 4 (train-5) raised std::runtime_error: ..."
  MSGPACK_DEFINE(gang, attempt, reason);
};

/// Logs (`herd logs`, Client::worker_logs / task_output / logs). The client asks the
/// scheduler, which answers job output files itself and routes worker logs and task output to
/// the workers that hold them (logs_fetch / worker_logs_reply), then answers once. All maps:
/// rare messages, fields will be added.
enum class LogsKind : std::uint8_t {
  any = 0,     // a worker name, else a job id, else a task key (what `herd logs NAME` means)
  worker = 1,  // worker log ring(s); target "" = every worker
  task = 2,    // captured output of a task (target = its key, or `task` = its id)
  job = 3,     // a batch job's output file(s) (target = the job id)
};

struct LogsRequest {
  std::uint64_t request_id = 0;  // echoed in the reply
  std::uint8_t kind = 0;         // LogsKind
  std::string target;            // worker name, task key or job id ("" with worker: every worker)
  TaskId task = 0;               // task id when the client holds the future (0 = by key)
  std::uint32_t lines = 0;       // newest lines wanted per source (0 = 100)
  MSGPACK_DEFINE_MAP(request_id, kind, target, task, lines);
};

struct LogLine {
  std::int64_t time_ms = 0;  // unix milliseconds when the line was captured (0 = unknown)
  std::uint8_t stream = 0;   // 0 herd's own log, 1 stdout, 2 stderr, 3 herd::task_log()
  std::string text;          // one line, without its newline (long lines are cut)
  MSGPACK_DEFINE(time_ms, stream, text);
};

struct LogSource {
  std::string kind;             // "worker", "task" or "job"
  std::string name;             // worker name, task key or job id
  std::string worker;           // worker it was read from ("" = the scheduler read a file)
  std::string path;             // job: the file(s) read
  std::vector<LogLine> lines;   // oldest first
  std::uint64_t dropped = 0;    // older lines the source no longer holds (or were not asked for)
  std::string note;             // e.g. "still running", or how output was attributed
  MSGPACK_DEFINE_MAP(kind, name, worker, path, lines, dropped, note);
};

struct LogsReply {
  std::uint64_t request_id = 0;    // from the request
  bool ok = false;                 // false: nothing found, see error
  std::string error;               // e.g. "no worker, job or task named 'x'"
  std::vector<LogSource> sources;  // one per worker / task run / job file
  MSGPACK_DEFINE_MAP(request_id, ok, error, sources);
};

struct ErrorEvent {
  std::string message;  // e.g. "unknown message type 99"
  MSGPACK_DEFINE_MAP(message);
};

/// The body each message type carries: Body<MessageType::x>::type (from HERD_MESSAGES).
template <MessageType T>
struct Body;
#define HERD_MESSAGE_BODY(name, number, body) \
  template <>                                 \
  struct Body<MessageType::name> {            \
    using type = body;                        \
  };
HERD_MESSAGES(HERD_MESSAGE_BODY)
#undef HERD_MESSAGE_BODY
template <MessageType T>
using BodyOf = typename Body<T>::type;

}  // namespace herd::protocol
