// Results held by a worker: bytes shared between the executor that made them, the data port
// that serves them (zero-copy: a sent frame keeps a reference) and tasks that read them as
// inputs. Thread-safe: executors put and get, the I/O thread serves and frees, the memory
// monitor spills.
//
// Spilling (as Dask's zict buffer): with a spill directory set, spill_until() writes the
// least-recently-used results held in memory to files there and drops them from memory. A
// spilled result stays in the store: get() maps its file (read back transparently, on demand
// and without an anonymous copy: the page cache holds it, reclaimable), and erase() removes the
// file. A write that fails (a full disk) is logged with the file and the reason, the file is
// removed and the result stays in memory: nothing is lost.
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>

#include "net/data_port.hpp"
#include "protocol/messages.hpp"

namespace herd::worker {

class DataStore {
 public:
  DataStore() = default;
  ~DataStore();
  DataStore(const DataStore&) = delete;
  DataStore& operator=(const DataStore&) = delete;

  /// Held in memory, as the most recently used.
  void put(protocol::TaskId id, net::PayloadPtr bytes);
  /// In memory: those bytes (now the most recently used); spilled: its file, mapped; else null.
  net::PayloadPtr get(protocol::TaskId id) const;
  bool contains(protocol::TaskId id) const;
  /// Forgets the result; a spilled one's file is removed.
  void erase(protocol::TaskId id);
  std::size_t size() const;
  /// Bytes of every result held, in memory or spilled.
  std::uint64_t bytes() const;

  // ---- spilling ------------------------------------------------------------------------------
  /// Spill into `directory` (an existing, private directory the store owns from now on: it is
  /// removed with its files by remove_spill_directory() and the destructor).
  void set_spill_directory(std::string directory);
  const std::string& spill_directory() const { return dir_; }
  /// Writes least-recently-used in-memory results to disk until at most `keep` bytes remain in
  /// memory (or nothing is left to spill, or a write fails). Returns the bytes spilled. After
  /// a failed write it tries again only a second later (a full disk stays full a while).
  std::uint64_t spill_until(std::uint64_t keep);
  std::uint64_t memory_bytes() const;   // results held in memory
  std::uint64_t spilled_bytes() const;  // results on disk only
  std::size_t spilled() const;          // how many are on disk only
  /// Why the last spill attempt failed ("" = it did not).
  std::string spill_error() const;
  /// Removes every spill file and the directory (the worker leaves).
  void remove_spill_directory();

 private:
  struct Entry {
    net::PayloadPtr bytes;               // null while spilled
    std::string path;                     // its file while spilled ("" = in memory)
    std::uint64_t size = 0;
    std::list<protocol::TaskId>::iterator lru;  // valid while in memory
  };
  std::string file_for(protocol::TaskId id) const;

  mutable std::mutex mu_;
  std::unordered_map<protocol::TaskId, Entry> data_;
  mutable std::list<protocol::TaskId> lru_;  // in-memory results, least recently used first
  std::uint64_t total_ = 0, memory_ = 0;
  std::size_t spilled_ = 0;
  std::string dir_;
  std::string spill_error_;
  std::chrono::steady_clock::time_point retry_after_{};  // after a failed write
  std::mutex spill_mu_;  // one spiller at a time (executors after a put, the memory monitor)
};

}  // namespace herd::worker
