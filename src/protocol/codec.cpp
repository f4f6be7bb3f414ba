#include "protocol/codec.hpp"

#include <poll.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <utility>

namespace herd::protocol {

void write_header(char* out, MessageType type) {
  std::memcpy(out, kMagic, 4);
  out[4] = static_cast<char>(kProtocolVersion);
  out[5] = static_cast<char>(type);
}

namespace {
// Every message type and its name: parse_header() accepts exactly these.
constexpr std::pair<MessageType, const char*> kTypes[] = {
#define HERD_MESSAGE_NAME(name, number, body) {MessageType::name, #name},
    HERD_MESSAGES(HERD_MESSAGE_NAME)
#undef HERD_MESSAGE_NAME
};
// The same, by number: parse_header() looks a type up once per message received.
constexpr auto kKnownType = [] {
  std::array<bool, 256> known{};
  for (const auto& entry : kTypes) known[static_cast<std::uint8_t>(entry.first)] = true;
  return known;
}();
}  // namespace

std::optional<MessageType> parse_header(const void* data, std::size_t size, std::string& error) {
  if (size < kHeaderSize || std::memcmp(data, kMagic, 4) != 0) {
    error = "not a herd message (no herd header in a frame of " + std::to_string(size) + " bytes)";
    return std::nullopt;
  }
  const auto* p = static_cast<const unsigned char*>(data);
  if (p[4] != kProtocolVersion) {
    error = "protocol version " + std::to_string(p[4]) + " is not supported (this is version " +
            std::to_string(kProtocolVersion) + ")";
    return std::nullopt;
  }
  const auto t = p[5];
  if (!kKnownType[t]) {
    error = "unknown message type " + std::to_string(t);
    return std::nullopt;
  }
  return static_cast<MessageType>(t);
}

bool decode_object(const void* data, std::size_t size, msgpack::zone& zone, msgpack::object& out,
                   std::string& error, const UnpackLimits& l) {
  try {
    std::size_t offset = 0;
    out = msgpack::unpack(zone, static_cast<const char*>(data), size, offset, nullptr, nullptr,
                          msgpack::unpack_limit(l.array, l.map, l.str, l.bin, l.ext, l.depth));
    if (offset != size) {
      error = "trailing bytes after the msgpack body";
      return false;
    }
    return true;
  } catch (const msgpack::insufficient_bytes&) {
    error = "truncated msgpack body";
  } catch (const msgpack::depth_size_overflow&) {
    error = "msgpack body nested too deeply";
  } catch (const msgpack::size_overflow& e) {
    error = std::string("msgpack body exceeds a size limit (") + e.what() + ")";
  } catch (const std::exception& e) {
    error = std::string("malformed msgpack body: ") + e.what();
  }
  return false;
}

WriteBuffer::WriteBuffer(std::size_t capacity) {
  if (capacity > 0) grow(capacity);
}

void WriteBuffer::grow(std::size_t n) {
  const std::size_t want = std::max(2 * capacity_, size_ + n);
  char* bigger = static_cast<char*>(std::realloc(data_, want));
  if (bigger == nullptr) throw std::bad_alloc();
  data_ = bigger;
  capacity_ = want;
}

zmq::message_t WriteBuffer::release() {
  zmq::message_t m(data_, size_, [](void* p, void*) { std::free(p); }, nullptr);
  data_ = nullptr;
  size_ = capacity_ = 0;
  return m;
}

namespace {
thread_local WriteBuffer t_scratch;
thread_local bool t_scratch_busy = false;
constexpr std::size_t kCopyAtMost = 16u << 10;  // bytes copied out of the scratch; more are handed over
constexpr std::size_t kKeepAtMost = 64u << 10;  // a scratch grown past this is let go after its message
}  // namespace

EncodeScratch::EncodeScratch() : buffer_(&own_), borrowed_(!t_scratch_busy) {
  if (borrowed_) {
    t_scratch_busy = true;
    buffer_ = &t_scratch;
    buffer_->clear();
  }
}

EncodeScratch::~EncodeScratch() {
  if (!borrowed_) return;
  t_scratch_busy = false;
  if (t_scratch.capacity() > kKeepAtMost) t_scratch = WriteBuffer();
}

zmq::message_t EncodeScratch::finish() {
  if (buffer_->size() > kCopyAtMost) return buffer_->release();
  zmq::message_t m(buffer_->data(), buffer_->size());
  buffer_->clear();
  return m;
}

namespace {
constexpr std::size_t kBatchCount = kHeaderSize + 2;  // where the array32's count starts
}  // namespace

void BatchWriter::clear() {
  // The header, a fixarray of 1 (the struct), then array32 with the count patched in by
  // message(): msgpack readers accept a wider-than-needed length.
  char start[kHeaderSize + 6] = {0, 0, 0, 0, 0, 0, static_cast<char>(0x91), static_cast<char>(0xdd), 0, 0, 0, 0};
  static_assert(kHeaderSize == 6, "the batch's fixed start follows the header");
  write_header(start, type_);
  bytes_.clear();
  bytes_.write(start, sizeof start);
  count_ = 0;
}

zmq::message_t BatchWriter::message(const std::vector<std::uint64_t>& after) {
  for (int i = 0; i < 4; ++i) bytes_.data()[kBatchCount + i] = static_cast<char>((count_ >> (24 - 8 * i)) & 0xff);
  if (after.empty()) return zmq::message_t(bytes_.data(), bytes_.size());
  // `after` packed behind the elements for the copy, then taken off again (no second buffer:
  // an sbuffer mallocs 8 KiB, on every round trip that releases a future).
  const std::size_t elements = bytes_.size();
  msgpack::pack(bytes_, after);
  zmq::message_t m(bytes_.data(), bytes_.size());
  bytes_.truncate(elements);
  static_cast<char*>(m.data())[kHeaderSize] = static_cast<char>(0x92);  // fixarray(2): the elements, then `after`
  return m;
}

void send(zmq::socket_t& socket, const std::string& identity, zmq::message_t message,
          std::vector<zmq::message_t> payloads) {
  if (!identity.empty()) socket.send(zmq::buffer(identity), zmq::send_flags::sndmore);
  socket.send(std::move(message), payloads.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore);
  for (std::size_t i = 0; i < payloads.size(); ++i) {
    socket.send(std::move(payloads[i]),
                i + 1 == payloads.size() ? zmq::send_flags::none : zmq::send_flags::sndmore);
  }
}

namespace {

/// One whole multipart message, waiting as `flags` say for its first part; nullopt when none
/// came (or a signal interrupted the wait: the caller's loop comes back).
std::optional<Received> receive_with(zmq::socket_t& socket, bool router, zmq::recv_flags flags) {
  Received r;
  zmq::message_t part;
  try {
    if (!socket.recv(part, flags)) return std::nullopt;
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return std::nullopt;
    throw;
  }
  bool more = part.more();
  if (router) {
    r.identity.assign(static_cast<const char*>(part.data()), part.size());
    if (!more) return r;  // an identity alone: no message (the caller reports the empty header)
    (void)socket.recv(r.message, zmq::recv_flags::none);  // the rest of a multipart is here
    more = r.message.more();
  } else {
    r.message = std::move(part);
  }
  while (more) {
    zmq::message_t next;
    (void)socket.recv(next, zmq::recv_flags::none);
    more = next.more();
    r.payloads.push_back(std::move(next));
  }
  return r;
}

}  // namespace

std::optional<Received> try_receive(zmq::socket_t& socket, bool router) {
  return receive_with(socket, router, zmq::recv_flags::dontwait);
}

std::optional<Received> receive(zmq::socket_t& socket, bool router, std::chrono::milliseconds timeout,
                                int& timeout_set) {
  const int ms = static_cast<int>(std::clamp<std::int64_t>(timeout.count(), 0, std::numeric_limits<int>::max()));
  if (ms != timeout_set) {
    socket.set(zmq::sockopt::rcvtimeo, ms);  // an option's field: no system call
    timeout_set = ms;
  }
  return receive_with(socket, router, zmq::recv_flags::none);
}

int poll(std::vector<zmq::pollitem_t>& items, std::chrono::milliseconds timeout) {
  thread_local std::vector<pollfd> fds;
  fds.resize(items.size());
  int ready = 0;
  for (std::size_t i = 0; i < items.size(); ++i) {
    zmq::pollitem_t& item = items[i];
    item.revents = 0;
    if (item.socket != nullptr) {
      int fd = -1;
      std::uint32_t events = 0;
      std::size_t size = sizeof fd;
      if (zmq_getsockopt(item.socket, ZMQ_FD, &fd, &size) != 0) throw zmq::error_t();
      size = sizeof events;
      if (zmq_getsockopt(item.socket, ZMQ_EVENTS, &events, &size) != 0) throw zmq::error_t();
      if ((events & ZMQ_POLLIN) != 0 && (item.events & ZMQ_POLLIN) != 0) {
        item.revents = ZMQ_POLLIN | kQueued;
        ++ready;
      }
      fds[i] = {fd, POLLIN, 0};
    } else {
      // zmq_poll's flags are its own (ZMQ_POLLOUT is 2, POLLOUT 4).
      const short want = static_cast<short>(((item.events & ZMQ_POLLIN) ? POLLIN : 0) |
                                            ((item.events & ZMQ_POLLOUT) ? POLLOUT : 0) |
                                            ((item.events & ZMQ_POLLPRI) ? POLLPRI : 0));
      fds[i] = {item.fd, want, 0};
    }
  }
  const int rc = ::poll(fds.data(), fds.size(), ready > 0 ? 0 : static_cast<int>(timeout.count()));
  if (rc < 0) {
    if (errno == EINTR) return ready;
    throw zmq::error_t();
  }
  if (rc == 0) return ready;
  ready = 0;
  for (std::size_t i = 0; i < items.size(); ++i) {
    zmq::pollitem_t& item = items[i];
    const short r = fds[i].revents;
    if (item.socket != nullptr) {
      if (r != 0) item.revents |= ZMQ_POLLIN;  // perhaps only commands: the reader finds out
    } else {
      if (r & POLLIN) item.revents |= ZMQ_POLLIN;
      if (r & POLLOUT) item.revents |= ZMQ_POLLOUT;
      if (r & POLLPRI) item.revents |= ZMQ_POLLPRI;
      if (r & ~(POLLIN | POLLOUT | POLLPRI)) item.revents |= ZMQ_POLLERR;
    }
    if (item.revents != 0) ++ready;
  }
  return ready;
}

std::string to_string(MessageType type) {
  for (const auto& [t, name] : kTypes) {
    if (t == type) return name;
  }
  return "type " + std::to_string(static_cast<int>(type));
}

}  // namespace herd::protocol
