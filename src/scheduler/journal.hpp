// The scheduler's journal (as HyperQueue's --journal): the results of finished tasks that have
// a user key, so that a scheduler restarted with the same journal does not recompute them when
// a client reconnects and submits them again (keys are stable across client sessions; task
// ids are not).
//
// File format, byte-exact (unchanged since the first journal, so old files load):
//   a sequence of records
//   [uint32 little-endian: length N of the body][uint32 little-endian: CRC-32 of the body]
//   [N bytes: msgpack array [key (str), result (bin)]]
// CRC-32 is the usual one (ISO-HDLC: polynomial 0x04C11DB7 reflected, init and final xor
// 0xFFFFFFFF; boost::crc_32_type). A record is valid when its length fits the file, its CRC
// matches and its body is exactly that array.
//
// Loading: a damaged record in the middle (a flipped bit, a block the disk lost) is skipped:
// the loader resynchronises on the next valid record, keeps every record after it and logs the
// file and offset of what it skipped. Bytes after the last valid record (a scheduler killed while
// writing leaves a torn tail) are cut before appending.
//
// Writing never blocks the event loop: append() only encodes and queues in memory, flush()
// hands the turn's records to a writer thread, which writes them (one pwritev per batch; the
// batches queued while it was busy go out together) and makes them durable with one fdatasync
// per batch. durable() says how far it got; wake_fd() becomes readable when that moves, so a
// loop can poll it beside its sockets. A write that fails (disk full, I/O error) never aborts
// the scheduler: the records stay in memory, the writer retries with a growing pause, and
// failing()/status() say so and how far behind the file is, until it catches up.
//
// One writer only: a lock file beside the journal (`PATH.lock`, flock) records the pid and host
// of the scheduler that holds it; a second scheduler is refused with them.
//
// Detached campaigns (TaskOptions::campaign) are journaled too, as records of the same format
// whose key starts with 0x1E (no task key does): "\x1E<campaign>\x1F<task key>" says the task
// belongs to the campaign (in submission order); its "result" is the task's recipe (what the
// scheduler needs to run it again: see SchedulerState, state_campaigns.cpp), or empty when the
// recipe was too large to keep. "\x1E<campaign>\x1F" says the campaign was released (its
// members, their results and errors are forgotten). "\x1D<task key>" records the error a
// campaign task failed with (msgpack protocol::ErrorInfo); a later result of the same key wins.
// A loader that predates them keeps entries nobody can submit. Records whose key is 0x1C alone
// are jobs of shell commands (`herd submit`, state_jobs.cpp), kept in order for the restore.
//
// Results larger than Options::memory_bytes are not kept in the scheduler's memory once they
// are on disk: only their place in the file is, and read() fetches them on a reader thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <zmq.hpp>

namespace herd::scheduler {

/// The journal key of a campaign record: task `key` is a member of `campaign` ("" = the
/// campaign was released).
inline std::string campaign_record_key(const std::string& campaign, const std::string& key) {
  return std::string(1, '\x1e') + campaign + '\x1f' + key;
}
/// The journal key of every record of a job of shell commands (state_jobs.cpp): its bytes say
/// which job and what (a submission, outcomes, a cancel); loaded in order, never an entry.
inline std::string job_record_key() { return std::string(1, '\x1c'); }
/// The journal key of the error a campaign's task `key` failed with.
inline std::string campaign_error_key(const std::string& key) { return std::string(1, '\x1d') + key; }

class Journal {
 public:
  struct Options {
    /// Results up to this size stay in memory; larger ones are read back from the file.
    std::size_t memory_bytes = std::size_t{1} << 20;
    /// fdatasync each batch (off only for benchmarks that measure what it costs).
    bool sync = true;
    /// Pause before retrying a failed write: doubles from `retry_min` up to `retry_max`.
    std::chrono::milliseconds retry_min{250}, retry_max{10000};
    /// Records kept in memory while the disk refuses them; past this, new records are not
    /// journaled (they are counted in lost(): recomputed after a restart, never wrong).
    std::size_t max_behind_bytes = std::size_t{512} << 20;
    /// Called instead of signalling wake_fd() (from the writer's, the reader's or the caller's
    /// thread): for a loop that sleeps on something other than wake_fd(). Quick, no locks.
    std::function<void()> on_wake;
  };
  /// A damaged stretch of the file that loading skipped.
  struct Skipped {
    std::uint64_t offset = 0, length = 0;
  };
  /// A read() that completed: the result's bytes, or why they could not be read.
  struct ReadDone {
    std::uint64_t tag = 0;
    std::string key;
    zmq::message_t bytes;
    std::string error;  // "" = ok
  };

  /// Takes the lock, opens (creating if needed) and loads `path`, and starts the writer.
  /// Throws std::runtime_error naming the file (and, when another scheduler holds it, that
  /// scheduler's pid and host).
  explicit Journal(std::string path, Options options);
  explicit Journal(std::string path) : Journal(std::move(path), Options{}) {}
  /// Hands over what is queued and waits (at most a few seconds) for the writer to finish.
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  /// True when `key` has a recorded result (in memory or on disk only).
  bool contains(const std::string& key) const { return entries_.count(key) > 0; }
  /// The recorded result of `key` when it is in memory; nullptr when absent or on disk only
  /// (then read() fetches it).
  const std::vector<char>* find(const std::string& key) const;
  /// Queues a record (no IO). Returns its sequence number: once durable() reaches it, the
  /// record is on disk. Returns the previous number when the record cannot be kept (lost()).
  std::uint64_t append(const std::string& key, std::vector<char> result);
  /// Client::restart(): every result recorded so far is forgotten, now and when a scheduler
  /// loads the file later. A record with an empty key marks the point (loading forgets what
  /// came before it; a loader that predates it keeps an entry nobody can submit: a task's key
  /// is never empty).
  void forget_all();
  /// Hands the records appended since the last flush to the writer (one batch, one fdatasync).
  void flush();
  /// Fetches the result of `key` (which contains()) on the reader thread; it comes back from
  /// poll() with `tag`.
  void read(const std::string& key, std::uint64_t tag);

  /// Readable (eventfd) when durable() moved, the writer's state changed or a read completed
  /// (without Options::on_wake, which is called instead).
  int wake_fd() const { return wake_fd_; }
  /// Clears wake_fd() and returns the reads that completed since the last call.
  std::vector<ReadDone> poll();
  /// Waits until everything appended and flushed is durable or `timeout` passed.
  bool wait_durable(std::chrono::milliseconds timeout);

  std::uint64_t appended() const { return appended_; }
  std::uint64_t durable() const { return durable_seq_.load(); }
  /// True while the writer cannot write: records wait in memory and are retried.
  bool failing() const { return failing_.load(); }
  /// Records appended but not on disk yet, and their bytes.
  std::uint64_t behind_records() const { return appended_ - durable(); }
  std::uint64_t behind_bytes() const { return next_offset_ - durable_offset_.load(); }
  /// Records that could not be journaled (the backlog passed max_behind_bytes).
  std::uint64_t lost() const { return lost_; }
  /// One line for `herd status`, the dashboard and the log, e.g. "/x.journal: 1200 records,
  /// 3.2 MiB, on disk" or "/x.journal: BEHIND: 12 records (48 KiB) not on disk for 30 s: No
  /// space left on device; next try in 4 s".
  std::string status() const;

  std::size_t size() const { return entries_.size(); }
  /// A member of a campaign not released, in the order recorded.
  struct CampaignMember {
    std::string campaign, key;
    /// The recipe journaled with it, as loaded (empty for members appended since, and after
    /// drop_recipes()).
    std::vector<char> recipe;
  };
  const std::vector<CampaignMember>& campaign_members() const { return campaign_members_; }
  /// Frees the loaded recipes (once the scheduler has restored its campaigns).
  void drop_recipes();
  /// The job records (key job_record_key()) as loaded, in order; dropped by drop_recipes().
  const std::vector<std::vector<char>>& job_records() const { return job_records_; }
  /// The recorded error (msgpack protocol::ErrorInfo) of campaign task `key`, when it failed
  /// and has no result since; nullptr otherwise.
  const std::vector<char>* error_of(const std::string& key) const;
  /// Result bytes held in memory (small results, and large ones not yet on disk).
  std::size_t memory_bytes() const { return memory_bytes_; }
  std::size_t dropped_bytes() const { return dropped_bytes_; }  // torn tail cut at load
  const std::vector<Skipped>& skipped() const { return skipped_; }  // damage skipped at load
  const std::string& path() const { return path_; }
  /// Batches written and fdatasync calls made (for benchmarks and tests).
  std::uint64_t batches_written() const { return batches_written_.load(); }

  static std::uint32_t crc32(const char* data, std::size_t size);

 private:
  struct Entry {
    std::uint64_t offset = 0;  // of the result's bytes in the file
    std::uint64_t size = 0;
    std::uint64_t seq = 0;     // 0 = loaded
    std::shared_ptr<const std::vector<char>> bytes;  // null = on disk only
  };
  // A record on its way to the file: its header and msgpack prefix, and the result's bytes
  // (shared with the entry until it is on disk). The writer fills in the CRC.
  struct Record {
    std::vector<char> head;  // [len][crc][0x92][key][bin header]
    std::shared_ptr<const std::vector<char>> bytes;
    bool crc_done = false;
  };
  struct Batch {
    std::uint64_t last_seq = 0;
    std::uint64_t offset = 0, end = 0;
    std::vector<Record> records;
  };
  struct ReadRequest {
    std::uint64_t tag = 0;
    std::string key;
    std::uint64_t offset = 0, size = 0;
  };

  void lock();
  void load();
  void writer_loop();
  void reader_loop();
  void wake();
  bool write_batches(std::vector<Batch*>& batches, std::string& error);
  void release_durable(std::uint64_t seq);
  /// Applies a campaign record (a key starting with 0x1E or 0x1D) with its bytes (a member's
  /// recipe is kept only when `loading`); false when `key` is not one.
  bool take_campaign_record(const std::string& key, const std::vector<char>* bytes, bool loading);
  void erase_entry(const std::string& key);

  std::string path_;
  Options options_;
  int fd_ = -1, lock_fd_ = -1, wake_fd_ = -1;
  // Event-loop thread only.
  std::unordered_map<std::string, Entry> entries_;
  std::vector<CampaignMember> campaign_members_;
  std::vector<std::vector<char>> job_records_;  // loaded only
  std::unordered_map<std::string, std::vector<char>> errors_;  // campaign task key -> ErrorInfo
  Batch staged_;
  std::uint64_t appended_ = 0;
  std::uint64_t next_offset_ = 0;  // where the next record goes
  std::uint64_t lost_ = 0;
  std::size_t memory_bytes_ = 0;
  std::size_t dropped_bytes_ = 0;
  std::vector<Skipped> skipped_;
  std::deque<std::pair<std::uint64_t, std::string>> to_release_;  // (seq, key) of large results
  // Shared with the writer and reader threads (mu_), or atomic.
  mutable std::mutex mu_;
  std::condition_variable cv_, reader_cv_, durable_cv_;
  std::deque<Batch> queue_;               // handed over, not on disk yet
  std::deque<ReadRequest> reads_;
  std::vector<ReadDone> reads_done_;
  std::string error_;                     // last write error while failing
  std::chrono::steady_clock::time_point failing_since_{}, next_try_{};
  bool stop_ = false;
  std::atomic<std::uint64_t> durable_seq_{0}, durable_offset_{0}, batches_written_{0};
  std::atomic<bool> failing_{false};
  std::thread writer_, reader_;
};

/// Messages to clients held until the journal records of their turn are on disk, released in
/// the order they were held (a client never hears of turn N+1 before turn N). IO-free.
template <typename Message>
class DurableGate {
 public:
  /// Holds `m` for `client` until record `seq` is durable.
  void hold(std::uint64_t seq, std::uint32_t client, Message m) { held_.push_back({seq, client, std::move(m)}); }
  bool empty() const { return held_.empty(); }
  std::size_t size() const { return held_.size(); }
  /// Calls send(client, message) for what may go: everything up to `durable`, or everything
  /// when `all` (the journal is failing: results are not held hostage to a full disk).
  template <typename Send>
  void release(std::uint64_t durable, bool all, Send&& send) {
    while (!held_.empty() && (all || held_.front().seq <= durable)) {
      Held h = std::move(held_.front());
      held_.pop_front();
      send(h.client, std::move(h.message));
    }
  }

 private:
  struct Held {
    std::uint64_t seq;
    std::uint32_t client;
    Message message;
  };
  std::deque<Held> held_;
};

}  // namespace herd::scheduler
