// Results held by a worker: bytes shared between the executor that made them, the data port
// that serves them (zero-copy: a sent frame keeps a reference) and tasks that read them as
// inputs. Thread-safe: executors put and get, the I/O thread serves and frees.
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "common/data_port.hpp"
#include "protocol/messages.hpp"

namespace herd::worker {

class DataStore {
 public:
  void put(protocol::TaskId id, data::PayloadPtr bytes);
  data::PayloadPtr get(protocol::TaskId id) const;
  bool contains(protocol::TaskId id) const;
  void erase(protocol::TaskId id);
  std::size_t size() const;
  std::uint64_t bytes() const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<protocol::TaskId, data::PayloadPtr> data_;
  std::uint64_t total_ = 0;
};

}  // namespace herd::worker
