// Frames <-> structs for the messages in messages.hpp. Everything read from the network goes
// through decode(), which applies unpack limits and never throws: a bad frame is an error
// string naming the problem, and the caller drops the peer that sent it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "protocol/messages.hpp"

namespace herd::protocol {

/// Upper bounds for what one msgpack body may declare (msgpack-c unpack_limit).
struct UnpackLimits {
  std::size_t array = 16u << 20;   // elements in one array (a batch of 1M tasks fits)
  std::size_t map = 1u << 16;      // entries in one map
  std::size_t str = 64u << 20;     // bytes in one string
  std::size_t bin = 1u << 30;      // bytes in one bin (task arguments)
  std::size_t ext = 1u << 20;      // bytes in one ext
  std::size_t depth = 32;          // nesting
};

/// Header frame: "HERD" <version> <type>.
zmq::message_t make_header(MessageType type);

/// Parses a header frame; on failure returns nullopt and says why in `error`.
std::optional<MessageType> parse_header(const zmq::message_t& frame, std::string& error);

/// Packs a body without an intermediate copy: the sbuffer's memory is handed to ZeroMQ.
template <typename T>
zmq::message_t encode(const T& body) {
  msgpack::sbuffer buffer(256);
  msgpack::pack(buffer, body);
  const std::size_t size = buffer.size();
  char* data = buffer.release();
  return zmq::message_t(data, size, [](void* p, void*) { std::free(p); }, nullptr);
}

/// Unpacks `frame` into `out`; returns false with a reason on malformed input.
bool decode_object(const void* data, std::size_t size, msgpack::object_handle& out,
                   std::string& error, const UnpackLimits& limits = {});

template <typename T>
bool decode(const zmq::message_t& frame, T& out, std::string& error,
            const UnpackLimits& limits = {}) {
  msgpack::object_handle handle;
  if (!decode_object(frame.data(), frame.size(), handle, error, limits)) return false;
  try {
    handle.get().convert(out);
    return true;
  } catch (const std::exception& e) {
    error = std::string("message body does not match its type: ") + e.what();
    return false;
  }
}

/// Sends [identity?][header][body][payloads...]; identity is skipped when empty.
void send(zmq::socket_t& socket, const std::string& identity, MessageType type,
          zmq::message_t body, std::vector<zmq::message_t> payloads = {});

/// One received multipart message, identity split off for ROUTER sockets.
struct Received {
  std::string identity;
  std::vector<zmq::message_t> frames;  // header, body, payloads
};

/// Receives one whole multipart message without blocking; nullopt when none is queued.
std::optional<Received> try_receive(zmq::socket_t& socket, bool router);

std::string to_string(MessageType type);

}  // namespace herd::protocol
