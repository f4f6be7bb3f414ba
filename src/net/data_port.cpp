#include "net/data_port.hpp"

#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <mutex>

#include "net/aead.hpp"
#include "net/lane.hpp"
#include "common/logging.hpp"
#include "net/interfaces.hpp"

namespace herd::net {

using protocol::MessageType;

namespace {
// A connection nobody used for this long is closed: workers come and go for days, and each
// connection holds a descriptor and ZeroMQ's buffers.
constexpr auto kIdleConnection = std::chrono::minutes(2);
// What one receive() reads from one lane at most before the caller's other sockets get a turn.
constexpr std::size_t kLaneBudget = 16 << 20;

}  // namespace

DataServer::DataServer(zmq::context_t& context, const security::Auth& auth, const std::string& host,
                       std::size_t chunk_bytes, std::chrono::milliseconds progress_timeout)
    : socket_(context, zmq::socket_type::router), chunk_bytes_(chunk_bytes) {
  auth.server(socket_);
  socket_.set(zmq::sockopt::sndhwm, 0);
  socket_.set(zmq::sockopt::linger, 0);
  try {
    socket_.bind("tcp://" + host + ":*");
  } catch (const zmq::error_t& e) {
    throw std::runtime_error("cannot bind the data port on " + host + ": " + e.what());
  }
  address_ = socket_.get(zmq::sockopt::last_endpoint);
  if (const auto pos = address_.find("0.0.0.0"); pos != std::string::npos) {
    address_.replace(pos, 7, reachable_host());
  }
  // Big results leave on bulk lanes beside the data port (net/lane.hpp), on the same
  // interface.
  lanes_ = std::make_unique<LaneServer>(host, auth.keys.has_value(), progress_timeout);
}

DataServer::~DataServer() = default;

void DataServer::serve(const std::function<PayloadPtr(TaskId)>& lookup, int max) {
  for (int n = 0; n < max; ++n) {
    auto msg = protocol::try_receive(socket_, true);
    if (!msg) return;
    std::string error;
    auto type = protocol::parse_header(*msg, error);
    protocol::GetDataRequest req;
    if (!type || *type != MessageType::get_data_request ||
        !protocol::decode<MessageType::get_data_request>(*msg, req, error)) {
      HERD_LOG(warning) << "ignoring a bad request on the data port: "
                        << (error.empty() ? "not a get_data_request" : error);
      continue;
    }
    serve_data(socket_, msg->identity, req, lookup, chunk_bytes_, lanes_.get());
  }
}

void serve_data(zmq::socket_t& router, const std::string& identity, const protocol::GetDataRequest& request,
                const std::function<PayloadPtr(TaskId)>& lookup, std::size_t chunk_bytes, LaneServer* lanes) {
  chunk_bytes = std::max<std::size_t>(chunk_bytes, 4096);
  protocol::GetDataReply reply;
  reply.request_id = request.request_id;
  std::vector<zmq::message_t> inline_frames;
  std::vector<std::pair<TaskId, PayloadPtr>> streams;
  for (TaskId id : request.ids) {
    PayloadPtr bytes = lookup(id);
    if (!bytes) {
      reply.missing.push_back(id);
    } else if (bytes->size() <= chunk_bytes) {
      reply.found.push_back(id);
      inline_frames.push_back(zero_copy(bytes));
    } else {
      reply.streamed.push_back({id, bytes->size()});
      streams.emplace_back(id, std::move(bytes));
    }
  }
  if (lanes != nullptr && (request.lanes & protocol::kTakesLane) != 0 && !streams.empty()) {
    std::vector<PayloadPtr> payloads;
    for (auto& [id, bytes] : streams) payloads.push_back(std::move(bytes));
    reply.lane = lanes->offer(std::move(payloads));
    protocol::send<MessageType::get_data_reply>(router, identity, reply, std::move(inline_frames));
    return;
  }
  protocol::send<MessageType::get_data_reply>(router, identity, reply, std::move(inline_frames));
  // The chunks reference the stored bytes: queueing them all costs no copy, and ZeroMQ
  // encrypts and sends one after the other while the receiver decrypts the previous ones.
  for (const auto& [id, bytes] : streams) {
    for (std::size_t offset = 0; offset < bytes->size(); offset += chunk_bytes) {
      std::vector<zmq::message_t> frame;
      frame.push_back(zero_copy(bytes, offset, chunk_bytes));
      protocol::send<MessageType::data_chunk>(router, identity, {request.request_id, id, offset}, std::move(frame));
    }
  }
}

DataClient::DataClient(zmq::context_t& context, const security::Auth& auth, std::chrono::milliseconds progress_timeout)
    : context_(context), auth_(auth), timeout_(progress_timeout) {}

DataClient::~DataClient() = default;

zmq::socket_t& DataClient::connect(const std::string& address, Clock::time_point now) {
  auto it = peers_.find(address);
  if (it == peers_.end()) {
    zmq::socket_t s(context_, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::rcvhwm, 0);
    auth_.client(s);
    s.connect(address);
    it = peers_.emplace(address, Peer{std::move(s), now}).first;
  }
  it->second.last_used = now;
  return it->second.socket;
}

void DataClient::drop_peer(const std::string& address) { peers_.erase(address); }

void DataClient::request(const std::string& address, std::vector<TaskId> ids, Clock::time_point now) {
  if (ids.empty()) return;
  const std::uint64_t rid = next_request_++;
  zmq::socket_t& s = connect(address, now);
  std::uint32_t lanes = 0;
  if (lanes_ && no_lane_.count(address) == 0) {
    lanes = protocol::kTakesLane;
  }
  protocol::send<MessageType::get_data_request>(s, "", {rid, ids, lanes});
  Request r;
  r.address = address;
  r.waiting = std::move(ids);
  r.sent = now;
  requests_.emplace(rid, std::move(r));
}

std::size_t DataClient::add_poll_items(std::vector<zmq::pollitem_t>& items) {
  const std::size_t first = items.size();
  polled_.clear();
  for (auto& [address, peer] : peers_) {
    items.push_back({static_cast<void*>(peer.socket), 0, ZMQ_POLLIN, 0});
    polled_.push_back(address);
  }
  polled_lanes_.clear();
  for (auto& [rid, r] : requests_) {
    if (!r.lane) continue;
    // zmq_poll's flags are its own (ZMQ_POLLOUT is 2, POLLOUT 4).
    const short want = (r.lane->events() & POLLOUT) != 0 ? ZMQ_POLLOUT : ZMQ_POLLIN;
    items.push_back({nullptr, r.lane->fd(), want, 0});
    polled_lanes_.push_back(rid);
  }
  return first;
}

void DataClient::receive(const std::vector<zmq::pollitem_t>& items, std::size_t first, const DataEvents& events,
                         Clock::time_point now) {
  for (std::size_t i = 0; i < polled_.size() && first + i < items.size(); ++i) {
    if ((items[first + i].revents & ZMQ_POLLIN) == 0) continue;
    const std::string address = polled_[i];
    // Bounded, so one fast peer cannot keep the caller from its other sockets.
    for (int n = 0; n < 256; ++n) {
      auto peer = peers_.find(address);
      if (peer == peers_.end()) break;  // dropped while reading
      auto msg = protocol::try_receive(peer->second.socket, false);
      if (!msg) break;
      peer->second.last_used = now;
      peer->second.last_heard = now;  // progress for every request on this connection
      if (!silent_.empty()) silent_.erase(peer->first);
      on_message(address, *msg, events, now);
    }
  }
  const std::size_t lanes_first = first + polled_.size();
  for (std::size_t i = 0; i < polled_lanes_.size() && lanes_first + i < items.size(); ++i) {
    const short z = items[lanes_first + i].revents;
    if (z == 0) continue;
    const short revents = static_cast<short>(((z & ZMQ_POLLIN) ? POLLIN : 0) | ((z & ZMQ_POLLOUT) ? POLLOUT : 0) |
                                             ((z & ZMQ_POLLERR) ? POLLERR : 0));
    on_lane(polled_lanes_[i], revents, events, now);
  }
}

void DataClient::heard_from(const std::string& address, Clock::time_point now) {
  auto peer = peers_.find(address);
  if (peer != peers_.end()) {
    peer->second.last_used = now;
    peer->second.last_heard = now;
  }
  if (!silent_.empty()) silent_.erase(address);
}

void DataClient::on_lane(std::uint64_t request_id, short revents, const DataEvents& events, Clock::time_point now) {
  auto it = requests_.find(request_id);
  if (it == requests_.end() || !it->second.lane) return;  // answered or dropped meanwhile
  const std::string address = it->second.address;
  LaneReceiver& lane = *it->second.lane;
  std::vector<LaneReceiver::Item> done;
  bool unreachable = false;
  const std::string why = lane.step(revents, kLaneBudget, done, unreachable);
  if (lane.take_progress() > 0) heard_from(address, now);
  for (auto& item : done) events.found(address, item.id, PayloadPtr(std::move(item.buffer)));
  if (unreachable) {
    lane_unreachable(request_id, why, now);
    return;
  }
  if (!why.empty()) {
    fail_address(address, why, events);
    return;
  }
  // found() may have dropped or answered the request (a caller reacting inside it): look again.
  it = requests_.find(request_id);
  if (it != requests_.end() && it->second.lane && it->second.lane->finished()) requests_.erase(it);
}

void DataClient::lane_unreachable(std::uint64_t request_id, const std::string& why, Clock::time_point now,
                                  std::vector<TaskId> ids) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return;
  const std::string address = it->second.address;
  if (it->second.lane) {
    for (const auto* item : it->second.lane->unfinished()) ids.push_back(item->id);
  }
  requests_.erase(it);
  if (no_lane_.insert(address).second) {
    HERD_LOG(warning) << "data port " << address << ": " << why
                      << "; fetching from it over the data port instead (slower; a firewall between "
                         "the hosts may allow only the data port)";
  }
  request(address, std::move(ids), now);
}

void DataClient::on_message(const std::string& address, protocol::Received& msg, const DataEvents& events,
                            Clock::time_point now) {
  std::string error;
  const MessageType type = protocol::parse_header(msg, error).value_or(MessageType::error);
  if (type == MessageType::get_data_reply) {
    on_reply(address, msg, events, now);
    return;
  }
  if (type == MessageType::data_chunk) {
    protocol::DataChunkEvent chunk;
    if (!protocol::decode<MessageType::data_chunk>(msg, chunk, error) || msg.payloads.size() != 1) {
      HERD_LOG(warning) << "bad data chunk from " << address << ": " << (error.empty() ? "no payload" : error);
      return;
    }
    auto it = requests_.find(chunk.request_id);
    if (it == requests_.end() || it->second.address != address) return;
    Request& r = it->second;
    auto s = r.streams.find(chunk.id);
    const zmq::message_t& frame = msg.payloads[0];
    if (s == r.streams.end() || chunk.offset != s->second.received ||
        chunk.offset + frame.size() > s->second.buffer->size()) {
      fail(chunk.request_id, "a chunk out of order or out of bounds for " + std::to_string(chunk.id), events);
      return;
    }
    std::memcpy(s->second.buffer->mutable_data() + chunk.offset, frame.data(), frame.size());
    s->second.received += frame.size();
    if (s->second.received == s->second.buffer->size()) {
      PayloadPtr done(std::move(s->second.buffer));
      r.streams.erase(s);
      events.found(address, chunk.id, std::move(done));
      if (r.streams.empty()) requests_.erase(it);
    }
    return;
  }
  HERD_LOG(warning) << "ignoring a message from data port " << address << ": "
                    << (error.empty() ? "unexpected " + protocol::to_string(type) : error);
}

void DataClient::on_reply(const std::string& address, protocol::Received& msg, const DataEvents& events,
                          Clock::time_point now) {
  std::string error;
  protocol::GetDataReply reply;
  if (!protocol::decode<MessageType::get_data_reply>(msg, reply, error)) {
    HERD_LOG(warning) << "bad data reply from " << address << ": " << error;
    return;
  }
  auto it = requests_.find(reply.request_id);
  if (it == requests_.end() || it->second.address != address) return;  // answered after we gave up on it
  Request& r = it->second;
  if (msg.payloads.size() != reply.found.size()) {
    fail(reply.request_id, "a data reply with " + std::to_string(msg.payloads.size()) + " payloads for " +
                               std::to_string(reply.found.size()) + " results",
         events);
    return;
  }
  const bool on_lane = reply.lane.port != 0 && !reply.streamed.empty();
  r.replied = true;
  r.waiting.clear();
  for (std::size_t i = 0; i < reply.found.size(); ++i) {
    events.found(address, reply.found[i], std::make_shared<MessagePayload>(std::move(msg.payloads[i])));
  }
  for (TaskId id : reply.missing) events.missing(address, id);
  std::vector<LaneReceiver::Item> items;
  for (const auto& s : reply.streamed) {
    try {
      auto buffer = Buffer::allocate(s.nbytes);
      if (on_lane) items.push_back({s.id, std::move(buffer), 0});
      else r.streams[s.id].buffer = std::move(buffer);
    } catch (const std::bad_alloc&) {
      r.streams.erase(s.id);
      events.failed(address, {s.id}, "cannot allocate " + std::to_string(s.nbytes) + " bytes for it");
    }
  }
  if (on_lane && !items.empty()) {
    std::vector<TaskId> ids;  // what to ask for again if the lane cannot even be started
    for (const auto& item : items) ids.push_back(item.id);
    try {
      // In an encrypted cluster the bytes must come sealed: the handshake refuses a holder that
      // would send them plain (not one of ours, or broken).
      r.lane = std::make_unique<LaneReceiver>(endpoint_host(address), reply.lane, std::move(items), auth_.keys.has_value());
      HERD_LOG(debug) << "data port " << address << ": " << reply.streamed.size() << " result(s) on its lane "
                      << r.lane->where();
    } catch (const std::exception& e) {
      // Unresolvable, no socket (out of descriptors), or a malformed lane: as good as unreachable.
      lane_unreachable(reply.request_id, e.what(), now, std::move(ids));
      return;
    }
  }
  if (r.streams.empty() && !r.lane) requests_.erase(it);
}

void DataClient::fail(std::uint64_t request_id, const std::string& why, const DataEvents& events) {
  auto it = requests_.find(request_id);
  if (it != requests_.end()) fail_address(it->second.address, why, events);
}

void DataClient::fail_address(const std::string& address, const std::string& why, const DataEvents& events) {
  // Everything in flight on this connection goes with it: the next request starts afresh.
  std::vector<std::pair<std::vector<TaskId>, std::string>> failed;
  for (auto it = requests_.begin(); it != requests_.end();) {
    if (it->second.address != address) {
      ++it;
      continue;
    }
    const Request& r = it->second;
    std::vector<TaskId> ids = r.waiting;
    std::string detail = why;
    for (const auto& [id, s] : r.streams) {
      ids.push_back(id);
      detail += " (" + std::to_string(s.received) + " of " + std::to_string(s.buffer->size()) + " bytes of a result received)";
    }
    if (r.lane) {
      for (const auto* item : r.lane->unfinished()) {
        ids.push_back(item->id);
        detail += " (" + std::to_string(item->received) + " of " + std::to_string(item->buffer->size()) +
                  " bytes of a result received)";
      }
    }
    failed.emplace_back(std::move(ids), std::move(detail));
    it = requests_.erase(it);
  }
  drop_peer(address);
  for (const auto& [ids, detail] : failed) events.failed(address, ids, detail);
}

void DataClient::expire(Clock::time_point now, const DataEvents& events) {
  auto last_heard = [&](const Request& r) {
    auto peer = peers_.find(r.address);
    return peer == peers_.end() ? r.sent : std::max(r.sent, peer->second.last_heard);
  };
  // A lane still connecting after a whole timeout: its SYNs are dropped (a firewall). The
  // holder answered on its data port, so its results are asked for again without a lane.
  std::vector<std::uint64_t> stuck;
  for (const auto& [rid, r] : requests_) {
    if (r.lane && r.lane->connecting() && now - last_heard(r) > timeout_) stuck.push_back(rid);
  }
  for (std::uint64_t rid : stuck) {
    const std::string why = "its lane " + requests_.at(rid).lane->where() + " did not answer for " +
                            std::to_string(timeout_.count()) + " ms";
    lane_unreachable(rid, why, now);
  }
  // A request fails when its connection has been silent for the whole timeout since it was
  // sent: a transfer that keeps moving (or a queue of replies ahead of it) is progress.
  std::vector<std::string> silent;
  for (const auto& [rid, r] : requests_) {
    if (now - last_heard(r) > timeout_ && std::find(silent.begin(), silent.end(), r.address) == silent.end()) {
      silent.push_back(r.address);
    }
  }
  for (const auto& address : silent) {
    const std::string why = "no data from " + address + " for " + std::to_string(timeout_.count()) + " ms";
    silent_[address] = {now, why};
    fail_address(address, why, events);
  }
  for (auto it = silent_.begin(); it != silent_.end();) {
    it = now - it->second.since > timeout_ ? silent_.erase(it) : std::next(it);
  }
  for (auto it = peers_.begin(); it != peers_.end();) {
    bool busy = false;
    for (const auto& [rid, r] : requests_) busy = busy || r.address == it->first;
    if (!busy && now - it->second.last_used > kIdleConnection) it = peers_.erase(it);
    else ++it;
  }
}

void DataClient::forget(const std::string& address) {
  silent_.erase(address);
  for (const auto& [rid, r] : requests_) {
    if (r.address == address) return;
  }
  drop_peer(address);
}

std::string DataClient::recently_silent(const std::string& address, Clock::time_point now) {
  auto it = silent_.find(address);
  if (it == silent_.end()) return "";
  const auto ago = std::chrono::duration_cast<std::chrono::milliseconds>(now - it->second.since);
  if (ago > timeout_) {
    silent_.erase(it);
    return "";
  }
  return it->second.why + ", " + std::to_string(ago.count()) + " ms ago (not asked again before " +
         std::to_string(timeout_.count()) + " ms have passed)";
}

std::uint64_t DataClient::streaming_bytes() const {
  std::uint64_t n = 0;
  for (const auto& [rid, r] : requests_) {
    for (const auto& [id, s] : r.streams) n += s.received;
    if (r.lane) {
      for (const auto* item : r.lane->unfinished()) n += item->received;
    }
  }
  return n;
}

}  // namespace herd::net
