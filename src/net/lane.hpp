// Bulk lanes: big results between processes on plain TCP beside the data port.
//
// On the data port (ZeroMQ) every byte goes through libzmq's I/O thread, with a copy on each
// side, and CURVE seals it frame by frame on that one thread. A result bigger than the chunk
// size goes on a lane instead: the holder's reply (on the data port, so CURVE-encrypted when the
// cluster is) names a port of its LaneServer and a fresh offer (net/handshake.hpp). The fetcher
// connects and proves the offer; the holder writes the results straight from where it holds
// them (plain), or sealed record by record (net/aead.hpp) through one small staging buffer; the
// fetcher reads them straight into their final buffers and opens each record in place. One pass
// over the bytes on each side beyond the kernel's copy.
//
// Wire, byte-exact: the handshake of net/handshake.hpp (purpose "herd lane"; the fetcher is the
// connector and wants the bytes sealed when its cluster encrypts), then (holder -> fetcher), for
// each streamed result in the reply's order: its bytes, or, sealed, records of
// min(kLaneRecord, what is left of that result) bytes each (a record never spans two results;
// record numbers count on across results). The holder closes the connection after the last
// byte.
// A connection that does not prove an offer within the hello timeout is dropped; an offer works
// once; an offer nobody claims within the progress timeout is withdrawn (the fetcher's request
// then times out and fails over, as on the data port). A fetcher that cannot reach the lane at
// all (refused, unroutable, or still connecting when its request times out) asks that holder
// again without a lane from then on: a firewall costs speed, never data.
#pragma once

#include <poll.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "net/aead.hpp"
#include "net/buffer.hpp"
#include "net/handshake.hpp"
#include "protocol/messages.hpp"

namespace herd::net {

inline constexpr std::size_t kLaneRecord = 1 << 20;  // plaintext bytes per sealed record at most

/// The holder's side: a listener, an acceptor thread, a thread per transfer.
class LaneServer {
 public:
  /// Listens on `host` (the data port's bind address; "" or "*": every interface) at a port
  /// the kernel picks. `encrypt`: every transfer is sealed with a fresh key. Throws
  /// std::runtime_error naming the host when it cannot listen.
  LaneServer(const std::string& host, bool encrypt, std::chrono::milliseconds progress_timeout);
  /// Withdraws every offer, cuts every transfer under way, joins its threads.
  ~LaneServer();
  LaneServer(const LaneServer&) = delete;
  LaneServer& operator=(const LaneServer&) = delete;

  std::uint16_t port() const { return port_; }
  /// Offers `payloads`, to be sent in this order to the one fetcher that proves the returned
  /// lane's offer. Sealed when this server encrypts or the fetcher asks for it (AES-256-GCM when
  /// both have it in hardware, else ChaCha20-Poly1305).
  protocol::DataLane offer(std::vector<PayloadPtr> payloads);
  /// Offers not yet claimed, and transfers under way (for tests).
  std::size_t offers() const;
  std::size_t transfers() const;

 private:
  struct Offer {
    std::vector<PayloadPtr> payloads;
    std::chrono::steady_clock::time_point expires;
  };
  struct Transfer {
    std::thread thread;
    std::atomic<bool> done{false};
    int fd = -1;
  };
  void accept_loop();
  void start_transfer(Session session, Offer offer);
  void send_offer(Transfer& t, const Offer& offer, RecordCipher* cipher);

  bool encrypt_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<Gate> gate_;  // stepped by the acceptor thread; offers made from any thread
  int wake_fd_ = -1;
  std::uint16_t port_ = 0;
  mutable std::mutex mutex_;
  std::map<std::uint64_t, Offer> offers_;  // by the gate's tag
  std::uint64_t next_tag_ = 1;
  std::list<Transfer> transfers_;
  // Sealing buffers of finished transfers, for the next ones: a fresh one is a record's worth
  // of pages faulted in per transfer.
  std::vector<std::unique_ptr<unsigned char[]>> stages_;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
};

/// The fetcher's side of one lane: non-blocking, driven by the fetcher's poll loop.
class LaneReceiver {
 public:
  struct Item {
    protocol::TaskId id = 0;
    std::unique_ptr<Buffer> buffer;
    std::uint64_t received = 0;
  };
  /// Starts connecting to `host`:`lane.port`; `encrypt`: the bytes must come sealed (the
  /// cluster encrypts). Throws std::runtime_error naming the lane when the host does not
  /// resolve, no socket can be made or the offer is malformed.
  LaneReceiver(const std::string& host, const protocol::DataLane& lane, std::vector<Item> items, bool encrypt);
  ~LaneReceiver();
  LaneReceiver(const LaneReceiver&) = delete;
  LaneReceiver& operator=(const LaneReceiver&) = delete;

  int fd() const { return dialer_ ? dialer_->fd() : fd_; }
  /// What to poll for: the handshake's wants, then POLLIN.
  short events() const { return dialer_ ? dialer_->events() : POLLIN; }
  /// The connection itself is not made yet.
  bool connecting() const { return dialer_ && !dialer_->connected(); }
  /// After poll reported `revents`: moves what it can, at most about `budget` bytes; results
  /// complete are moved to `done`. Returns "" or why the lane failed; `unreachable` is set when
  /// the connection could not be made at all.
  std::string step(short revents, std::size_t budget, std::vector<Item>& done, bool& unreachable);
  /// Bytes received since the last call (progress for the fetcher's timeout).
  std::uint64_t take_progress() { return std::exchange(progress_, 0); }
  bool finished() const { return delivered_ >= items_.size(); }
  /// The results not complete yet (not all received, or not all opened), in order.
  std::vector<const Item*> unfinished() const;
  /// "host:port", for messages.
  const std::string& where() const { return where_; }

 private:
  class Opener;  // opens sealed records on a thread of its own while the next ones arrive
  std::string receive(std::size_t budget);
  void complete_current();
  /// Moves the results received and opened, in order, to `done`; "" or why a record failed.
  std::string deliver(std::vector<Item>& done);

  std::unique_ptr<Dialer> dialer_;  // until the handshake is done
  int fd_ = -1;                      // after it
  std::string where_;
  std::unique_ptr<RecordCipher> cipher_;
  std::vector<Item> items_;
  std::size_t current_ = 0;    // the result being received
  std::size_t delivered_ = 0;  // the first result not moved to `done` yet (received, perhaps not opened)
  std::unique_ptr<Opener> opener_;  // sealed lanes of several records; else records open inline
  // The record being read (sealed lanes): header, body (into the buffer), tag.
  unsigned char header_[kRecordHeader] = {};
  std::size_t header_have_ = 0;
  std::size_t body_len_ = 0, body_have_ = 0;
  unsigned char tag_[kRecordTag] = {};
  std::size_t tag_have_ = 0;
  std::uint64_t progress_ = 0;
};

}  // namespace herd::net
