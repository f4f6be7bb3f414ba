// Moving results between processes, one implementation for everyone: a worker's data port
// serves them (serve_data), and workers (inputs, copies) and clients (gather) fetch them
// (DataClient).
//
// A request names results; the holder answers once (GetDataReply): small results ride in that
// reply as one frame each, results bigger than the chunk size follow as a stream of
// data_chunk messages, in order, each referencing the holder's bytes without a copy. The
// fetcher writes each chunk straight into the result's final buffer. A request fails only when
// nothing arrived for it for the progress timeout, whatever its size: a 256 MiB input over a
// slow link arrives, a holder that went silent is given up on.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <zmq.hpp>

#include "common/security.hpp"
#include "net/frames.hpp"
#include "protocol/codec.hpp"

namespace herd::net {

using protocol::TaskId;
class LaneServer;
class LaneReceiver;

/// Answers one GetDataRequest on a ROUTER socket: found results up to `chunk_bytes` inline,
/// bigger ones on a lane of `lanes` when there is one and the fetcher takes lanes, else as
/// data_chunk streams.
void serve_data(zmq::socket_t& router, const std::string& identity, const protocol::GetDataRequest& request,
                const std::function<PayloadPtr(TaskId)>& lookup, std::size_t chunk_bytes,
                LaneServer* lanes = nullptr);

/// A data port: a ROUTER bound on one interface (a CURVE server when the cluster encrypts; its
/// context then needs a ZAP handler, security::Auth), answering GetDataRequests from what
/// `lookup` finds, with a LaneServer beside it on the same interface for big results. Workers
/// serve their results on one; a client serves the big values it scatters on one.
class DataServer {
 public:
  /// Binds `host` ("0.0.0.0": every interface) at a port the kernel picks. Throws
  /// std::runtime_error naming the host when it cannot.
  DataServer(zmq::context_t& context, const security::Auth& auth, const std::string& host, std::size_t chunk_bytes,
             std::chrono::milliseconds progress_timeout);
  ~DataServer();
  DataServer(const DataServer&) = delete;
  DataServer& operator=(const DataServer&) = delete;
  /// "tcp://host:port", what peers connect to (a wildcard bind names a host others can reach).
  const std::string& address() const { return address_; }
  zmq::socket_t& socket() { return socket_; }
  /// Answers the requests waiting on the socket (at most `max`); malformed ones are logged and
  /// dropped.
  void serve(const std::function<PayloadPtr(TaskId)>& lookup, int max = 1000);
  LaneServer& lanes() { return *lanes_; }

 private:
  zmq::socket_t socket_;
  std::size_t chunk_bytes_;
  std::string address_;
  std::unique_ptr<LaneServer> lanes_;
};

/// What a DataClient reports. Every id asked for ends in exactly one of these.
struct DataEvents {
  std::function<void(const std::string& address, TaskId id, PayloadPtr bytes)> found;
  std::function<void(const std::string& address, TaskId id)> missing;  // the holder no longer has it
  /// Nothing (more) came from the holder for the progress timeout, or it answered nonsense.
  std::function<void(const std::string& address, const std::vector<TaskId>& ids, const std::string& why)> failed;
};

class DataClient {
 public:
  using Clock = std::chrono::steady_clock;
  DataClient(zmq::context_t& context, const security::Auth& auth, std::chrono::milliseconds progress_timeout);
  ~DataClient();
  DataClient(const DataClient&) = delete;
  DataClient& operator=(const DataClient&) = delete;

  /// Whether to ask holders for bulk lanes (on unless HERD_DATA_LANES=0).
  void take_lanes(bool on) { lanes_ = on; }
  /// Asks the data port at `address` for `ids` (one request, answered by events).
  void request(const std::string& address, std::vector<TaskId> ids, Clock::time_point now);
  /// Appends one poll item per open connection and lane; returns the index of the first.
  std::size_t add_poll_items(std::vector<zmq::pollitem_t>& items);
  /// After zmq::poll: reads whatever arrived on the connections polled from index `first`.
  void receive(const std::vector<zmq::pollitem_t>& items, std::size_t first, const DataEvents& events,
               Clock::time_point now);
  /// Fails requests that made no progress for the timeout (and drops their connection, so a
  /// later request starts afresh); closes connections idle for a long while.
  void expire(Clock::time_point now, const DataEvents& events);
  /// Why `address` let a request time out less than one timeout ago (it has said nothing
  /// since), else "". A worker does not ask such a peer again at once: every task waiting on it
  /// would otherwise find out for itself, a whole timeout each (a silent partition between two
  /// hosts would cost one timeout per task).
  std::string recently_silent(const std::string& address, Clock::time_point now);
  /// The peer at `address` left (the scheduler said so): its connection is closed now, unless
  /// a request to it is still in flight (that one ends by its answer or its timeout).
  void forget(const std::string& address);
  /// Requests not yet answered in full.
  std::size_t in_flight() const { return requests_.size(); }
  /// Open connections (for tests of descriptor growth).
  std::size_t connections() const { return peers_.size(); }
  /// Bytes received into streams in progress (progress for tests and status).
  std::uint64_t streaming_bytes() const;
  /// Holders whose lanes could not be reached: asked without a lane since (tests, status).
  const std::set<std::string>& lanes_unreachable() const { return no_lane_; }

 private:
  struct Stream {
    std::unique_ptr<Buffer> buffer;
    std::uint64_t received = 0;
  };
  struct Request {
    std::string address;
    std::vector<TaskId> waiting;               // not answered yet (the reply names them)
    std::map<TaskId, Stream> streams;          // announced in the reply, chunks coming
    std::unique_ptr<LaneReceiver> lane;       // the streams, when they come on a lane
    bool replied = false;
    Clock::time_point sent;
  };
  struct Silence {
    Clock::time_point since;
    std::string why;
  };
  std::map<std::string, Silence> silent_;  // peers that let a request time out lately
  struct Peer {
    zmq::socket_t socket;
    Clock::time_point last_used;
    Clock::time_point last_heard{};  // the last message from it: progress for its requests
  };
  zmq::socket_t& connect(const std::string& address, Clock::time_point now);
  void on_message(const std::string& address, protocol::Received& msg, const DataEvents& events, Clock::time_point now);
  void fail(std::uint64_t request_id, const std::string& why, const DataEvents& events);
  void fail_address(const std::string& address, const std::string& why, const DataEvents& events);
  void drop_peer(const std::string& address);
  void on_reply(const std::string& address, protocol::Received& msg, const DataEvents& events, Clock::time_point now);
  void on_lane(std::uint64_t request_id, short revents, const DataEvents& events, Clock::time_point now);
  /// The lane of `request_id` cannot be reached: its results not received yet (and `ids`, for a
  /// lane that could not even be started) are asked for again without one.
  void lane_unreachable(std::uint64_t request_id, const std::string& why, Clock::time_point now,
                        std::vector<TaskId> ids = {});
  void heard_from(const std::string& address, Clock::time_point now);

  zmq::context_t& context_;
  const security::Auth& auth_;
  std::chrono::milliseconds timeout_;
  std::map<std::string, Peer> peers_;
  std::vector<std::string> polled_;          // address of each connection's poll item from add_poll_items
  std::vector<std::uint64_t> polled_lanes_;  // request of each lane's poll item, after them
  bool lanes_ = true;
  std::set<std::string> no_lane_;            // holders whose lanes cannot be reached
  std::unordered_map<std::uint64_t, Request> requests_;
  std::uint64_t next_request_ = 1;
};

}  // namespace herd::net
