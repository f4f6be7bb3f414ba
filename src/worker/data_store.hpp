// Results held by a worker: msgpack bytes shared between the executor that made them, the data
// port that serves them (zero-copy, the ZeroMQ message keeps a reference) and tasks that read
// them as inputs.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <zmq.hpp>

#include "herd/detail/client_core.hpp"
#include "protocol/messages.hpp"

namespace herd::worker {

/// A buffer malloc'ed by msgpack::sbuffer (or received from ZeroMQ), freed when the last
/// reference goes.
class Bytes : public detail::Payload {
 public:
  Bytes(char* data, std::size_t size) : data_(data), size_(size) {}
  explicit Bytes(zmq::message_t message)
      : message_(std::make_unique<zmq::message_t>(std::move(message))),
        data_(static_cast<char*>(message_->data())), size_(message_->size()) {}
  ~Bytes() override {
    if (!message_) std::free(data_);
  }
  Bytes(const Bytes&) = delete;
  Bytes& operator=(const Bytes&) = delete;
  const char* data() const override { return data_; }
  std::size_t size() const override { return size_; }

 private:
  std::unique_ptr<zmq::message_t> message_;
  char* data_;
  std::size_t size_;
};

using BytesPtr = std::shared_ptr<const Bytes>;

/// A ZeroMQ message that references `bytes` without copying them.
zmq::message_t zero_copy_message(const BytesPtr& bytes);

class DataStore {
 public:
  void put(protocol::TaskId id, BytesPtr bytes);
  BytesPtr get(protocol::TaskId id) const;
  bool contains(protocol::TaskId id) const;
  void erase(protocol::TaskId id);
  std::size_t size() const;
  std::uint64_t bytes() const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<protocol::TaskId, BytesPtr> data_;
  std::uint64_t total_ = 0;
};

}  // namespace herd::worker
