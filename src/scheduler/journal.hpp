// The scheduler's journal (as HyperQueue's --journal): the results of finished tasks that have
// a user key, so that a scheduler restarted with the same journal does not recompute them when
// a client reconnects and submits them again (keys are stable across client sessions; task
// ids are not).
//
// File format, byte-exact: a sequence of records
//   [uint32 little-endian: length N of the body][uint32 little-endian: CRC-32 of the body]
//   [N bytes: msgpack array [key (str), result (bin)]]
// Loading stops at the first record that is short or fails its CRC (a scheduler killed while
// writing leaves a torn tail); the file is cut back to the last whole record before appending.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace herd::scheduler {

class Journal {
 public:
  /// Opens (creating if needed) and loads `path`. Throws std::runtime_error naming the file.
  explicit Journal(std::string path);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  /// The recorded result of `key`, or nullptr.
  const std::vector<char>* find(const std::string& key) const;
  /// Queues a record; written by the next flush().
  void append(const std::string& key, const std::vector<char>& result);
  /// Writes queued records (one write per scheduler turn, not one per task).
  void flush();

  std::size_t size() const { return entries_.size(); }
  std::size_t dropped_bytes() const { return dropped_bytes_; }  // torn tail cut at load
  const std::string& path() const { return path_; }

  static std::uint32_t crc32(const char* data, std::size_t size);

 private:
  std::string path_;
  int fd_ = -1;
  std::unordered_map<std::string, std::vector<char>> entries_;
  std::vector<char> pending_;
  std::size_t dropped_bytes_ = 0;
};

}  // namespace herd::scheduler
