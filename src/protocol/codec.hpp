// Frames <-> structs for the messages in messages.hpp. Everything read from the network goes
// through decode() or decode_each() (batches read element by element), which apply unpack
// limits and never throw: a bad frame is an error string naming the problem, and the caller
// drops the peer that sent it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <optional>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "herd/detail/scratch_zone.hpp"
#include "protocol/direct_reader.hpp"
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

/// Bytes to decode: a view, such as a received message's body (after its header).
struct Bytes {
  const void* data = nullptr;
  std::size_t size = 0;
  Bytes() = default;
  Bytes(const void* d, std::size_t n) : data(d), size(n) {}
  Bytes(const zmq::message_t& m) : data(m.data()), size(m.size()) {}  // NOLINT: a view of all of it
};

/// Writes the header "HERD" <version> <type> (kHeaderSize bytes) to `out`.
void write_header(char* out, MessageType type);

/// Parses the header at the start of a message; on failure returns nullopt and says why in
/// `error`.
std::optional<MessageType> parse_header(const void* data, std::size_t size, std::string& error);
inline std::optional<MessageType> parse_header(const zmq::message_t& message, std::string& error) {
  return parse_header(message.data(), message.size(), error);
}

/// Bytes written by msgpack's packer, which writes every token (a byte to nine, mostly) through
/// write(): inlined here with the size known, where msgpack::sbuffer's write and
/// vector::insert are calls, on the path of every task a client packs.
class WriteBuffer {
 public:
  explicit WriteBuffer(std::size_t capacity = 0);
  ~WriteBuffer() { std::free(data_); }
  WriteBuffer(WriteBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), capacity_(std::exchange(o.capacity_, 0)) {}
  WriteBuffer& operator=(WriteBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(capacity_, o.capacity_);
    return *this;
  }
  WriteBuffer(const WriteBuffer&) = delete;
  WriteBuffer& operator=(const WriteBuffer&) = delete;
  void write(const char* p, std::size_t n) {
    if (capacity_ - size_ < n) grow(n);
    std::memcpy(data_ + size_, p, n);
    size_ += n;
  }
  char* data() { return data_; }
  const char* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::size_t capacity() const { return capacity_; }
  void clear() { size_ = 0; }  // keeps the memory
  void truncate(std::size_t n) { size_ = std::min(size_, n); }  // keeps the memory
  /// A ZeroMQ message that owns the bytes (ZeroMQ frees them); the buffer is empty after it.
  zmq::message_t release();

 private:
  void grow(std::size_t n);
  char* data_ = nullptr;
  std::size_t size_ = 0, capacity_ = 0;
};

/// encode()'s buffer: this thread's, kept between messages, or a fresh one while that one is in
/// use (a body whose packing encodes another message).
class EncodeScratch {
 public:
  EncodeScratch();
  ~EncodeScratch();
  EncodeScratch(const EncodeScratch&) = delete;
  EncodeScratch& operator=(const EncodeScratch&) = delete;
  WriteBuffer& buffer() { return *buffer_; }
  /// The packed message. A small one is copied into a ZeroMQ message: one allocation, where
  /// handing the buffer over costs two (ZeroMQ's reference count beside it) and a fresh buffer
  /// a third. A big one hands ZeroMQ the buffer itself, without a copy.
  zmq::message_t finish();

 private:
  WriteBuffer own_;
  WriteBuffer* buffer_;
  bool borrowed_;
};

/// The bodies of a round trip's messages (and TaskSpec, a batch's element): read by
/// DirectReader first, and packed and read with everything inlined (pack_into, decode_direct).
/// Any other goes through msgpack-c's calls alone (inlining all ~60 would add ~300 KB of code).
template <typename T>
inline constexpr bool kRoundTripBody = std::is_same_v<T, SubmitTasksRequest> || std::is_same_v<T, TaskSpec> ||
                                       std::is_same_v<T, ExecuteTasksEvent> || std::is_same_v<T, TaskResultsEvent> ||
                                       std::is_same_v<T, TaskUpdatesEvent> || std::is_same_v<T, KeysEvent>;

/// msgpack::pack with msgpack-c's packer and the buffer's writes inlined into one function.
template <typename T>
[[gnu::flatten]] void pack_inlined(WriteBuffer& buffer, const T& body) {
  msgpack::pack(buffer, body);
}

/// Packs `body` after `buffer`'s bytes.
template <typename T>
void pack_into(WriteBuffer& buffer, const T& body) {
  if constexpr (kRoundTripBody<T>) pack_inlined(buffer, body);
  else msgpack::pack(buffer, body);
}

/// `value` packed alone, as bytes (a journal record's body, for one).
template <typename T>
std::vector<char> pack_bytes(const T& value) {
  WriteBuffer buffer;
  pack_into(buffer, value);
  return {buffer.data(), buffer.data() + buffer.size()};
}

/// Header and body in one frame.
template <typename T>
zmq::message_t encode(MessageType type, const T& body) {
  EncodeScratch scratch;
  WriteBuffer& buffer = scratch.buffer();
  char header[kHeaderSize];
  write_header(header, type);
  buffer.write(header, kHeaderSize);
  pack_into(buffer, body);
  return scratch.finish();
}

/// Message T with its body; the body's type is checked against HERD_MESSAGES.
template <MessageType T>
zmq::message_t encode(const BodyOf<T>& body) {
  return encode(T, body);
}

/// Unpacks `data` into `out`, allocated in `zone` (valid while the zone is not cleared);
/// returns false with a reason on malformed input.
bool decode_object(const void* data, std::size_t size, msgpack::zone& zone, msgpack::object& out,
                   std::string& error, const UnpackLimits& limits = {});

inline DirectReader direct_reader(Bytes body, const UnpackLimits& l) {
  return DirectReader(body.data, body.size, l.array, l.map, l.str, l.bin, l.depth);
}

/// decode() by msgpack-c alone (unpack into a zone, then convert): the direct path's fallback,
/// and what test_direct_reader compares it with.
template <typename T>
bool decode_msgpack(Bytes body, T& out, std::string& error, const UnpackLimits& limits = {}) {
  detail::ScratchZone zone;
  msgpack::object object;
  if (!decode_object(body.data, body.size, zone.get(), object, error, limits)) return false;
  try {
    object.convert(out);
    return true;
  } catch (const std::exception& e) {
    error = std::string("message body does not match its type: ") + e.what();
    return false;
  }
}

/// The direct path of decode(), with everything it calls inlined into it (flatten): a struct
/// is read field by field through msgpack-c's MSGPACK_DEFINE templates, a call per field and
/// per level otherwise, which cost more than the reading.
template <typename T>
[[gnu::flatten]] bool decode_direct(Bytes body, T& out, const UnpackLimits& limits) {
  DirectReader reader = direct_reader(body, limits);
  reader.read(out);
  return reader.ok() && reader.at_end();
}

template <typename T>
bool decode(Bytes body, T& out, std::string& error, const UnpackLimits& limits = {}) {
  if constexpr (kRoundTripBody<T>) {
    // Into `out` as convert would; where it gives up, convert writes every field the body has
    // again, over what it left.
    if (decode_direct(body, out, limits)) return true;
  }
  return decode_msgpack(body, out, error, limits);
}

/// A message whose body has the form [[e0, e1, ...]] (a positional struct whose one field is a
/// vector, such as SubmitTasksRequest), packed one element at a time into a buffer that is kept
/// and reused:
/// the client packs each task as it is submitted, with no TaskSpec left waiting in a queue and
/// no fresh memory per batch. Decoders see the same bytes as encode(SubmitTasksRequest{...}).
class BatchWriter {
 public:
  explicit BatchWriter(MessageType type = MessageType::submit_tasks) : type_(type) { clear(); }
  template <typename T>
  [[gnu::flatten]] void add(const T& element) {  // inlined as pack_inlined's
    msgpack::packer<BatchWriter> pk(*this);
    pk.pack(element);
    ++count_;
  }
  std::uint32_t count() const { return count_; }
  std::size_t size() const { return bytes_.size(); }
  std::size_t capacity() const { return bytes_.capacity(); }
  /// The message, header and body (a copy: the buffer stays here for the next batch); `after`,
  /// when not empty, as the body's second field (SubmitTasksRequest::released).
  zmq::message_t message(const std::vector<std::uint64_t>& after = {});
  /// Empties it, keeping its memory.
  void clear();
  /// msgpack::packer's write target.
  void write(const char* data, std::size_t n) { bytes_.write(data, n); }

 private:
  WriteBuffer bytes_;  // header, fixarray(1), array32(count_), elements...
  std::uint32_t count_ = 0;
  MessageType type_;
};

/// One element of a batch, read afresh into `element`, inlined as decode_direct is.
template <typename T>
[[gnu::flatten]] void read_element(DirectReader& reader, T& element) {
  element = T{};
  reader.read(element);
}

/// decode_each's fast path (DirectReader). f sees no element until the whole body has
/// been read once, so that where the reader gives up (false), msgpack-c's path starts with
/// nothing done. One element (a round trip's submit) is read once; more are read twice, which
/// is still cheaper than msgpack-c's tree of objects.
template <typename T, typename F, typename S>
bool decode_each_direct(Bytes body, F& f, const UnpackLimits& limits, S* second) {
  const auto* bytes = static_cast<const unsigned char*>(body.data);
  // [[elements...]] or [[elements...], second]: a fixarray of 1 or 2, then the elements' array.
  if (body.size < 2 || (bytes[0] != 0x91 && bytes[0] != 0x92)) return false;
  DirectReader reader = direct_reader(Bytes(bytes + 1, body.size - 1), limits);
  std::size_t n;
  if (!reader.array_header(n)) return false;
  const DirectReader elements = reader;
  T element;
  for (std::size_t i = 0; i < n && reader.ok(); ++i) read_element(reader, element);
  reader.end_container();
  S tail{};
  if (bytes[0] == 0x92) reader.read(tail);
  if (!reader.ok() || !reader.at_end()) return false;
  if (second != nullptr && bytes[0] == 0x92) *second = std::move(tail);
  if (n == 1) {
    (void)f(element);
    return true;
  }
  DirectReader again = elements;
  for (std::size_t i = 0; i < n; ++i) {
    read_element(again, element);
    if (!f(element)) break;
  }
  return true;
}

/// Decodes a body [[e0, e1, ...], rest...] element by element into one reused T and calls f(t)
/// for each, in order (f returns false to stop); when given and the body has a second field,
/// converts that into `*second` first. Nothing else per element is kept, so a batch of tasks
/// costs the scheduler no vector of specs. False with a reason on malformed input.
template <typename T, typename F, typename S = std::vector<std::uint64_t>>
bool decode_each_msgpack(Bytes body_bytes, F&& f, std::string& error, const UnpackLimits& limits = {},
                         S* second = nullptr) {
  detail::ScratchZone zone;
  msgpack::object body;
  if (!decode_object(body_bytes.data, body_bytes.size, zone.get(), body, error, limits)) return false;
  if (body.type != msgpack::type::ARRAY || body.via.array.size < 1 ||
      body.via.array.ptr[0].type != msgpack::type::ARRAY) {
    error = "message body does not match its type: expected [[elements...]]";
    return false;
  }
  if (second != nullptr && body.via.array.size >= 2) {  // first: f may stop early
    try {
      body.via.array.ptr[1].convert(*second);
    } catch (const std::exception& e) {
      error = std::string("the second field of the message body does not match its type: ") + e.what();
      return false;
    }
  }
  const msgpack::object_array& elements = body.via.array.ptr[0].via.array;
  T element;
  for (std::uint32_t i = 0; i < elements.size; ++i) {
    try {
      element = T{};
      elements.ptr[i].convert(element);
    } catch (const std::exception& e) {
      error = "element " + std::to_string(i) + " of the message body does not match its type: " + e.what();
      return false;
    }
    if (!f(element)) return true;
  }
  return true;
}

/// decode_each_direct, or where it gives up, decode_each_msgpack (msgpack-c alone).
template <typename T, typename F, typename S = std::vector<std::uint64_t>>
bool decode_each(Bytes body_bytes, F&& f, std::string& error, const UnpackLimits& limits = {},
                 S* second = nullptr) {
  if constexpr (kRoundTripBody<T>) {
    if (decode_each_direct<T>(body_bytes, f, limits, second)) return true;
  }
  return decode_each_msgpack<T>(body_bytes, f, error, limits, second);
}

/// Sends [identity?][message][payloads...]; identity is skipped when empty. `message` is a
/// header and body from encode() or BatchWriter::message().
void send(zmq::socket_t& socket, const std::string& identity, zmq::message_t message,
          std::vector<zmq::message_t> payloads = {});

/// Sends message T with its body; the body's type is checked against HERD_MESSAGES.
template <MessageType T>
void send(zmq::socket_t& socket, const std::string& identity, const BodyOf<T>& body,
          std::vector<zmq::message_t> payloads = {}) {
  send(socket, identity, encode(T, body), std::move(payloads));
}

/// Sends message T to `identity` through a sink that chooses the way (the scheduler's: a peer's
/// control link, else the ROUTER): any type with send(identity, message, payloads).
template <MessageType T, typename Sink>
  requires requires(Sink& sink, const std::string& identity, zmq::message_t m, std::vector<zmq::message_t> p) {
    sink.send(identity, std::move(m), std::move(p));
  }
void send(Sink& sink, const std::string& identity, const BodyOf<T>& body, std::vector<zmq::message_t> payloads = {}) {
  sink.send(identity, encode(T, body), std::move(payloads));
}

/// One received multipart message, identity split off for ROUTER sockets.
struct Received {
  std::string identity;
  zmq::message_t message;               // header and body
  std::vector<zmq::message_t> payloads;  // the frames after it
  /// The body: the message's bytes after its header (empty when it has none).
  Bytes body() const {
    return message.size() < kHeaderSize
               ? Bytes()
               : Bytes(static_cast<const char*>(message.data()) + kHeaderSize, message.size() - kHeaderSize);
  }
};

/// The type in a received message's header; nullopt with a reason when it is not a herd
/// message of this version.
inline std::optional<MessageType> parse_header(const Received& msg, std::string& error) {
  return parse_header(msg.message, error);
}

/// Receives one whole multipart message without blocking; nullopt when none is queued.
std::optional<Received> try_receive(zmq::socket_t& socket, bool router);

/// Receives one whole multipart message, waiting up to `timeout` inside libzmq (its receive
/// timeout, which this sets); nullopt when none came or a signal interrupted the wait. For a
/// loop whose every wake-up arrives on this one socket: libzmq then makes the fewest system
/// calls a message can cost (one poll(2) to sleep, one to find its command queue empty), half
/// of what poll() below and a non-blocking receive cost together.
/// `timeout_set` is the caller's record of the socket's receive timeout (ms; start it at any
/// negative value other than -1): the option is set only when it changes, a call into libzmq
/// (~250 instructions) saved on most turns.
std::optional<Received> receive(zmq::socket_t& socket, bool router, std::chrono::milliseconds timeout,
                                int& timeout_set);

/// zmq::poll with fewer system calls, for the event loops: one poll(2) on the sockets' ZMQ_FDs
/// and the plain descriptors, after asking each socket its ZMQ_EVENTS once (so a message already
/// queued, whose signal was taken, is not slept on). zmq_poll polls twice and asks every socket
/// before and after, and each ask costs libzmq a poll(2) and a getpid(2) when the socket's
/// mailbox is idle: on a round trip's path most of the system calls (docs/design-notes.md). A socket may be reported readable with nothing to read (its descriptor
/// also signals commands): read it until try_receive gives nullopt, as the loops do. Socket
/// items may only ask for ZMQ_POLLIN. Returns the number of items with events; 0 on EINTR.
int poll(std::vector<zmq::pollitem_t>& items, std::chrono::milliseconds timeout);

/// Set in a socket item's revents by poll(), beside ZMQ_POLLIN, when the socket had a message
/// queued before poll() looked at the descriptors (its ZMQ_EVENTS said so): a backlog. Without
/// one, a loop may read one message and go on: the next poll() asks ZMQ_EVENTS anyway, and the
/// receive that would find the queue empty costs libzmq a poll(2) and a getpid(2).
inline constexpr short kQueued = 0x100;

std::string to_string(MessageType type);

/// Decodes the body of a received message as T's body; false with a reason when the message
/// has no body or the body does not match.
template <MessageType T>
bool decode(const Received& msg, BodyOf<T>& out, std::string& error) {
  if (msg.message.size() <= kHeaderSize) {
    error = to_string(T) + " without a body";
    return false;
  }
  return decode(msg.body(), out, error);
}

}  // namespace herd::protocol
