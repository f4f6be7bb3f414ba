// Control links: a worker's messages to and from the scheduler on a TCP connection of herd's own,
// beside the scheduler's ROUTER.
//
// Through ZeroMQ every hop wakes three threads: the sender's I/O thread, the receiver's, then
// the receiver (docs/design-notes.md, "Control links"). On a link the sender writes
// the socket itself and the receiver's loop reads it itself: one wake-up per hop. Clients, the
// data ports and everything before a worker's link is up stay on ZeroMQ.
//
// Set-up, over the CURVE-authenticated ZeroMQ hello: the worker's HelloRequest says it takes a
// link; the scheduler's HelloReply offers one (the port of its LinkHub and a fresh offer of
// net/handshake.hpp, purpose "herd link"). The worker connects and proves the offer (wanting
// the link sealed when its cluster encrypts: an offer without encryption is refused then). The
// hand-over keeps every message in order:
//   1. the scheduler, once the offer is proved, sends `link_switch` on ZeroMQ (its last ZeroMQ
//      message to that worker) and writes to the worker on the link from then on;
//   2. the worker reads ZeroMQ up to that `link_switch`, then reads the link; it answers with
//      its own `link_switch` on ZeroMQ and writes on the link from then on;
//   3. the scheduler reads that worker's link once its `link_switch` came.
// A link the worker cannot make (a firewall, refused, no answer within a few seconds) or one the
// scheduler does not accept before step 1 costs speed, never data: both stay on ZeroMQ. A link
// that breaks after step 1 is the worker lost, as a ZeroMQ connection that breaks is (a
// reconnected DEALER is a new peer to the ROUTER): the scheduler runs its tasks elsewhere and the
// worker leaves. HERD_LINKS=0 keeps everything on ZeroMQ.
//
// Wire, byte-exact, after the handshake: each way, a stream of messages; a message is u32 n
// (frames, 1..2^20) and n times (u32 length | bytes): the header-and-body frame, then the
// payload frames. All integers little-endian. Sealed, the stream is cut into records of at most
// kLinkRecord bytes (net/aead.hpp) under the handshake's key of each direction, re-keyed as the
// records say.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <zmq.hpp>

#include "net/aead.hpp"
#include "net/handshake.hpp"
#include "protocol/codec.hpp"

namespace herd::net {

inline constexpr char kLinkPurpose[] = "herd link";     // of its handshake
inline constexpr std::size_t kLinkRecord = 256u << 10;  // plaintext bytes per sealed record at most
inline constexpr std::uint32_t kMaxFrames = 1u << 20;   // frames in one message at most

/// One link, either end: a connected non-blocking socket, what waits to be written, and what was
/// read but is not a whole message yet. Never blocks, except drain().
class Link {
 public:
  /// Takes the session the handshake made (its descriptor, made non-blocking and closed by the
  /// destructor; its ciphers, or none for a plain link). `max_frame`: the largest frame accepted
  /// (0: any up to 4 GiB). `peer`: how errors name the other end.
  Link(Session session, std::uint64_t max_frame, std::string peer);
  ~Link();
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  int fd() const { return fd_; }
  const std::string& peer() const { return peer_; }
  /// Queues the message (its frames copied) and, unless `corked`, writes what the socket takes
  /// now (a corked link is written by the next flush()). A failure is kept in failed().
  void send(const zmq::message_t& message, const std::vector<zmq::message_t>& payloads = {}, bool corked = false);
  /// Bytes wait to be written: poll for POLLOUT, then flush().
  bool want_write() const { return out_begin_ < out_.size(); }
  /// Writes what waits, as much as the socket takes.
  void flush();
  /// Reads what the socket has (about `budget` bytes at most) and appends each whole message to
  /// `out`, its identity left empty. A failure ("closed by the peer" at its end) is kept in
  /// failed(); the messages complete before it are still appended.
  void receive(std::vector<protocol::Received>& out, std::size_t budget = 1u << 20);
  /// Writes what waits, waiting at most `timeout` for the socket (a peer leaving).
  void drain(std::chrono::milliseconds timeout);
  /// "" while the link works, else why it failed.
  const std::string& failed() const { return error_; }
  /// Records a failure seen from outside (poll said the socket hung up).
  void mark_failed(const std::string& why) { fail(why); }

 private:
  void fail(const std::string& why);
  void append_sealed(const char* data, std::size_t n);
  bool parse_messages(std::vector<char>& buffer, std::size_t& begin, std::size_t end,
                      std::vector<protocol::Received>& out);

  int fd_ = -1;
  std::string peer_;
  std::uint64_t max_frame_;
  std::unique_ptr<RecordCipher> sealer_, opener_;
  std::string error_;
  std::vector<char> out_;  // bytes to write, from out_begin_
  std::size_t out_begin_ = 0;
  std::vector<char> plain_out_;  // a message's plaintext, before it is sealed
  std::vector<char> in_;  // read, from in_begin_ to in_end_
  std::size_t in_begin_ = 0, in_end_ = 0;
  std::size_t chunk_ = 4u << 10;  // room each read asks for (link.cpp: kFirstChunk .. kReadChunk)
  std::vector<char> plain_;  // opened records' plaintext, from plain_begin_ to plain_.size()
  std::size_t plain_begin_ = 0;
};


/// The scheduler's end: a listener, the offers, the connections whose hello is not read yet, and
/// every link by its worker's ZeroMQ identity; one epoll descriptor that is readable when any of
/// them wants attention, so the scheduler's loop polls two descriptors however many workers.
class LinkHub {
 public:
  /// Listens on `host` ("" or "*": every interface) at a port the kernel picks. Throws
  /// std::runtime_error naming the host when it cannot.
  LinkHub(const std::string& host, std::uint64_t max_frame, std::chrono::milliseconds offer_timeout);
  ~LinkHub();
  LinkHub(const LinkHub&) = delete;
  LinkHub& operator=(const LinkHub&) = delete;

  int fd() const { return epoll_fd_; }
  std::uint16_t port() const { return port_; }

  /// A fresh offer for the peer `owner`, claimed once within the offer timeout; `encrypt`: the
  /// link is sealed (it is too when the worker asks).
  OfferTicket offer(const std::string& owner, bool encrypt);

  /// What happened in a step.
  struct Events {
    std::vector<std::string> claimed;                          // owners whose offer was proved
    std::vector<std::pair<std::string, std::string>> failed;  // owner, why: its link broke
    std::vector<protocol::Received> messages;                  // in order per owner; identity = owner
  };
  /// Accepts, reads hellos, reads the links being read, writes what waits. Never blocks.
  void step(Events& events, std::chrono::steady_clock::time_point now);

  /// After `claimed`: messages to the owner go on its link from now on (its `link_switch` went on
  /// ZeroMQ first).
  void start_writing(const std::string& owner);
  /// The owner's `link_switch` came on ZeroMQ (after ours, so its link is claimed): its link is
  /// read from now on. False when it has no link.
  bool peer_switched(const std::string& owner);
  /// True when messages to `owner` go on its link.
  bool writing(const std::string& owner) const;
  /// Queues a message for the owner's link (writing(owner) must be true); flush() writes it, so
  /// that a turn's messages to one worker go in one write.
  void send(const std::string& owner, const zmq::message_t& message, const std::vector<zmq::message_t>& payloads);
  /// Writes what the sends since the last flush queued (the end of the scheduler's turn).
  void flush();
  /// The owner left: its offer is withdrawn; its link closes once what waits is written (at
  /// most the offer timeout), and nothing more is read from it.
  void close(const std::string& owner);
  /// Writes what waits on every link, waiting at most `timeout` (the scheduler stopping).
  void drain(std::chrono::milliseconds timeout);

  std::size_t links() const { return links_.size(); }
  std::size_t offers() const { return gate_->offers(); }
  /// Connections that have not proved an offer yet (tests).
  std::size_t pending() const { return gate_->pending(); }

 private:
  struct Entry {
    std::unique_ptr<Link> link;
    bool writing = false, reading = false, closing = false;
    std::uint32_t events = 0;  // registered with epoll
    std::chrono::steady_clock::time_point close_by{};
  };
  struct OfferEntry {
    std::string owner;
    bool encrypt = true;
    std::chrono::steady_clock::time_point expires;
  };
  void admit(Session session, Events& events);
  void update_events(Entry& e);

  std::unique_ptr<Gate> gate_;  // the listener and the connections proving an offer
  int epoll_fd_ = -1;           // the gate's descriptor and every link's
  std::uint16_t port_ = 0;
  std::uint64_t max_frame_;
  std::chrono::milliseconds timeout_;
  std::unordered_map<std::uint64_t, OfferEntry> offers_;  // by the gate's tag
  std::uint64_t next_tag_ = 1;
  std::vector<Session> admitted_;
  std::unordered_map<std::string, Entry> links_;        // by owner
  std::unordered_map<int, std::string> owner_of_fd_;
  std::unordered_set<std::string> dirty_;  // links to look at after this step's events
  std::vector<std::string> corked_;        // links with sends not written yet (flush)
  std::chrono::steady_clock::time_point last_sweep_{};
};

}  // namespace herd::net
