// ZeroMQ frames and payloads, both ways, without copying the bytes: a received frame held as a
// payload, and a frame that references a payload's bytes.
#pragma once

#include <cstddef>
#include <cstdint>

#include <zmq.hpp>

#include "net/buffer.hpp"

namespace herd::net {

/// Bytes that arrived as one ZeroMQ frame.
class MessagePayload : public detail::Payload {
 public:
  explicit MessagePayload(zmq::message_t m) : m_(std::move(m)) {}
  const char* data() const override { return static_cast<const char*>(m_.data()); }
  std::size_t size() const override { return m_.size(); }

 private:
  zmq::message_t m_;
};

/// A frame referencing bytes [offset, offset + size) of `payload`, without a copy; the payload
/// lives until ZeroMQ has sent the frame.
zmq::message_t zero_copy(const PayloadPtr& payload, std::size_t offset = 0, std::size_t size = SIZE_MAX);

}  // namespace herd::net
