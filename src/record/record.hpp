// The run record: what the scheduler writes about every task run, every pool event and every
// worker sample, so that a report (record/report.hpp) can show a whole night after the fact.
//
// File format (little-endian, byte-exact):
//   header   "HERDREC" <version: uint8 = kRecordVersion>                            (8 bytes)
//   record*  <length: uint32 = n> <kind: uint8> <body: n - 1 bytes> <crc32 of kind and body: uint32>
// Bodies are sequences of LEB128 varints (signed ones zigzag-encoded) and strings (a varint
// length, then the bytes). Names that repeat (functions, workers, pools, campaigns) are interned
// per file: a `name` record gives an id its text before the first record that uses it, so
// every file is readable alone (rotation starts a new table). A reader skips records of kinds
// it does not know, and stops at the first incomplete or damaged record with a warning naming
// the file and the offset: everything before it is read.
//
// Writing (Recorder): the scheduler's loop encodes into a buffer (no system call, no lock but
// one uncontended mutex per turn); a writer thread appends the buffers to the file once a
// second or once 1 MiB is waiting. Once a file has passed `max_bytes` (by at most one turn's
// records), it is renamed to FILE.1 (replacing the one before) and a fresh FILE is started: about
// twice max_bytes on disk at most.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

namespace herd::record {

inline constexpr std::uint8_t kRecordVersion = 1;
inline constexpr char kMagic[7] = {'H', 'E', 'R', 'D', 'R', 'E', 'C'};
inline constexpr std::size_t kHeaderBytes = 8;

enum class Kind : std::uint8_t {
  name = 1,           // an interned string: id, text
  task_run = 2,       // TaskRun
  pool_event = 3,     // PoolEvent
  worker_sample = 4,  // WorkerSample
  worker_event = 5,   // WorkerEvent
};

/// How a run ended.
enum class RunStatus : std::uint8_t {
  ok = 0,         // the function returned; its result is stored
  failed = 1,     // it raised (or its isolated child died, or its time limit passed)
  lost = 2,       // its worker died or left while it ran (it runs again elsewhere, or fails)
  cancelled = 3,  // stopped by cancel(force) or a restart
};
const char* status_name(RunStatus s);

/// One run of one task, every time on the scheduler's clock (unix microseconds). The worker's
/// phases are measured on the worker (durations, no clock of its own crosses the wire) and
/// placed back from the moment the scheduler heard the result.
struct TaskRun {
  std::uint64_t task = 0;       // task id
  std::string key;              // the user's key ("" = none: the display key is function-id)
  std::string function;
  std::string worker;           // worker name ("" = none: never placed)
  std::string campaign;         // detached campaign ("" = none)
  std::uint32_t thread = 0;     // on its worker: 0 = the I/O thread (inline run), n = executor n
  std::int64_t submitted_us = 0;  // the scheduler read its submit
  std::int64_t ready_us = 0;      // its inputs were all in memory
  std::int64_t placed_us = 0;     // sent to its worker
  std::int64_t start_us = 0;      // the function started (received - returning - running)
  std::int64_t end_us = 0;        // the function returned
  std::int64_t received_us = 0;   // the scheduler read its result
  std::uint64_t fetch_us = 0;     // on the worker: from its arrival until its last input was fetched
  std::uint64_t fetch_bytes = 0;  // inputs fetched from other workers
  std::uint32_t fetch_peers = 0;  // ... from how many
  std::uint64_t result_bytes = 0;
  RunStatus status = RunStatus::ok;
  std::uint32_t attempt = 0;      // runs of this task before this one (retries and re-runs)
  std::uint32_t preemptions = 0;  // of those, lost with a worker
  std::string error_type;         // when not ok
  std::string error;              // its message (at most kMaxErrorBytes)
};
inline constexpr std::size_t kMaxErrorBytes = 1024;

/// Something a pool did or saw.
struct PoolEvent {
  enum class What : std::uint8_t { submitted = 0, started = 1, ended = 2, failed = 3, cancelled = 4, scaled = 5 };
  std::int64_t time_us = 0;
  std::string pool;
  What what = What::submitted;
  std::string job;     // job id ("" for scaled)
  std::string reason;  // the batch system's reason, how it ended, why it scaled
  std::uint32_t target = 0, workers = 0, running = 0, pending = 0;  // the pool after the event
};
const char* what_name(PoolEvent::What w);

/// A worker's load, every few seconds (from its heartbeats).
struct WorkerSample {
  std::int64_t time_us = 0;
  std::string worker;
  double cpu = 0;                // percent of one core (400 = four cores busy)
  std::uint64_t memory = 0;      // resident bytes
  std::uint64_t memory_limit = 0;
  std::uint64_t spilled = 0;     // bytes spilled to its local directory
  std::uint32_t executing = 0;   // tasks running
  std::uint32_t nthreads = 0;
};

/// A worker joined or left.
struct WorkerEvent {
  enum class What : std::uint8_t { joined = 0, left = 1, lost = 2 };
  std::int64_t time_us = 0;
  std::string worker;
  What what = What::joined;
  std::string host, pool, job;
  std::uint32_t nthreads = 0;
  std::string why;  // left / lost: why
};
const char* what_name(WorkerEvent::What w);

/// Appends records to a byte buffer, interning names (pure: no IO).
class Encoder {
 public:
  void task_run(const TaskRun& r);
  void pool_event(const PoolEvent& e);
  void worker_sample(const WorkerSample& s);
  void worker_event(const WorkerEvent& e);
  /// The bytes so far (without the file header), for the writer to take.
  std::string& bytes() { return out_; }
  /// A new file starts: names are defined again.
  void reset_names() { names_.clear(); }

 private:
  std::uint64_t name(std::string_view text);
  void begin(Kind k);
  void end();
  std::string out_;
  std::size_t at_ = 0;  // where the open record starts
  std::unordered_map<std::string, std::uint64_t> names_;
};

/// Everything a set of record files holds, in file order.
struct Contents {
  std::vector<TaskRun> runs;
  std::vector<PoolEvent> pool_events;
  std::vector<WorkerSample> samples;
  std::vector<WorkerEvent> worker_events;
  std::vector<std::string> warnings;  // truncated or damaged files, read up to the damage
};

/// What to take from the files (all when empty).
struct Filter {
  std::int64_t since_us = 0;  // runs that ended at or after this; events and samples too
  std::int64_t until_us = 0;  // 0 = no end
  std::string campaign;       // only runs of this campaign
  std::string job;            // only runs on workers of this job (a prefix: "123" takes "123_4")
};

/// Reads `bytes` (one file's whole content, header included) into `out`; `what` names it in
/// warnings. Returns the records read.
std::size_t parse(std::string_view bytes, const std::string& what, Contents& out);
/// Reads FILE.1 (if there) and FILE, in that order, and applies `filter`.
/// @throws std::runtime_error when FILE is missing or is no record file.
Contents read_files(const std::string& path, const Filter& filter = {});
/// Applies `filter` to what was read (the job filter uses the worker events).
void apply(const Filter& filter, Contents& c);

/// The scheduler's writer: buffers encoded records, writes them off the caller's thread, rotates.
class Recorder {
 public:
  struct Options {
    std::string path;
    std::uint64_t max_bytes = 256ull << 20;  // per file; FILE.1 keeps the one before
  };
  /// Opens (appends to) the file, creating it with its header; a file that is not a record
  /// file is renamed to FILE.1 first. @throws std::runtime_error naming the path when it cannot.
  explicit Recorder(Options options);
  ~Recorder();  // writes what is buffered, then stops the writer
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  /// The loop's encoder; records go to the file at the next end_turn().
  Encoder& encoder() { return enc_; }
  /// Hands what was encoded to the writer thread (cheap; call once a turn).
  void end_turn();
  /// Writes everything handed over so far before returning (any thread: the report's).
  void flush();
  const std::string& path() const { return options_.path; }
  /// Bytes written and waiting (for the bench and tests).
  std::uint64_t bytes_recorded() const { return recorded_; }

 private:
  void writer_loop();
  struct Chunk {
    std::string bytes;
    bool rotate_after = false;  // the file is full: FILE becomes FILE.1 once this is written
  };
  Options options_;
  Encoder enc_;
  std::uint64_t file_bytes_ = 0;  // the current file's size once everything handed over is written
  std::uint64_t recorded_ = 0;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<Chunk> queue_;
  std::uint64_t queued_seq_ = 0, written_seq_ = 0;
  std::uint64_t queued_bytes_ = 0;
  bool urgent_ = false;  // write now (1 MiB waiting, a rotation, a flush), not at the next second
  bool stop_ = false;
  int fd_ = -1;
  std::thread writer_;
};

}  // namespace herd::record
