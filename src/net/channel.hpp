// How messages travel between the scheduler and a worker, decided here and nowhere else.
//
// A message goes one of two ways: ZeroMQ (the scheduler's ROUTER, a worker's DEALER; CURVE when
// the cluster encrypts) or a control link (net/link.hpp: plain TCP of herd's own, sealed
// records). Both are a Channel. A worker's messages travel on ZeroMQ until its link is up, then
// on the link; the hand-over keeps every message in order (net/link.hpp says how). The
// scheduler's IO shell talks to SchedulerChannels, a worker's to WorkerChannels: each sends to a
// peer and takes what arrives, and neither knows which way a message went. Clients and data
// ports use ZeroMQ alone.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <zmq.hpp>

#include "net/handshake.hpp"
#include "net/link.hpp"
#include "protocol/codec.hpp"

namespace herd::net {

/// One way messages travel to peers named by their ZeroMQ identity ("" where there is one peer).
class Channel {
 public:
  virtual ~Channel() = default;
  /// Sends one message (header and body, then payload frames), or queues it until flush().
  virtual void send(const std::string& peer, zmq::message_t message, std::vector<zmq::message_t> payloads) = 0;
  /// Writes what send() queued: the end of the owner's turn.
  virtual void flush() {}
};

/// ZeroMQ: a ROUTER (peers by identity) or a DEALER (its one peer).
class ZmqChannel final : public Channel {
 public:
  explicit ZmqChannel(zmq::socket_t& socket) : socket_(socket) {}
  void send(const std::string& peer, zmq::message_t message, std::vector<zmq::message_t> payloads) override {
    protocol::send(socket_, peer, std::move(message), std::move(payloads));
  }
  zmq::socket_t& socket() { return socket_; }

 private:
  zmq::socket_t& socket_;
};

/// Control links: the scheduler's hub (each worker's link by its identity; a turn's messages to
/// one worker go in one write, at flush()), or a worker's one link (written at once).
class LinkChannel final : public Channel {
 public:
  explicit LinkChannel(LinkHub& hub) : hub_(&hub) {}
  explicit LinkChannel(Link& link) : link_(&link) {}
  void send(const std::string& peer, zmq::message_t message, std::vector<zmq::message_t> payloads) override;
  void flush() override;

 private:
  LinkHub* hub_ = nullptr;
  Link* link_ = nullptr;
};

/// The scheduler's end: its ROUTER, and the control links when it offers them.
class SchedulerChannels {
 public:
  using Clock = std::chrono::steady_clock;
  /// `hub`: null when the scheduler offers no links (HERD_LINKS=0, or no port).
  SchedulerChannels(zmq::socket_t& router, std::unique_ptr<LinkHub> hub);

  /// protocol::send's sink: the peer's link once it carries that peer's messages, else ZeroMQ.
  void send(const std::string& peer, zmq::message_t message, std::vector<zmq::message_t> payloads) {
    Channel& way = hub_ && hub_->writing(peer) ? static_cast<Channel&>(link_) : static_cast<Channel&>(zmq_);
    way.send(peer, std::move(message), std::move(payloads));
  }
  /// Always ZeroMQ: a peer not registered (no link is ever read for it).
  void send_zmq(const std::string& peer, zmq::message_t message, std::vector<zmq::message_t> payloads) {
    zmq_.send(peer, std::move(message), std::move(payloads));
  }

  /// Sleeps until something arrives or `timeout` passes: in the ROUTER's receive (libzmq's
  /// cheapest wait) without links, else in one poll of two descriptors, the ROUTER's and the
  /// links' (however many workers). The first ZeroMQ message, if one came, is next_zmq()'s.
  void wait(std::chrono::milliseconds timeout);
  /// The ZeroMQ messages of this turn: the one wait() took, then, while `backlog()`, more
  /// without blocking; nullopt when none is queued.
  std::optional<protocol::Received> next_zmq();
  /// Messages were queued on the ROUTER when wait() returned: read on.
  bool backlog() const { return backlog_; }

  /// What the links did since the last step: messages read (in order per worker), links that
  /// broke once up (their workers are lost).
  struct LinkEvents {
    std::vector<protocol::Received> messages;
    std::vector<std::pair<std::string, std::string>> broken;  // peer, why
  };
  /// The links' turn, when due (their descriptor fired, or 100 ms passed; else nothing):
  /// accepts and admits new links, answers each claim by a peer `known` still with
  /// `link_switch` on ZeroMQ (its last message there), reads and writes.
  void step_links(Clock::time_point now, const std::function<bool(const std::string&)>& known, LinkEvents& out);
  /// A worker's `link_switch` came on ZeroMQ: its link is read from now on. False when it has
  /// no link (then the peer broke the protocol).
  bool peer_switched(const std::string& peer);
  /// A fresh link offered to a worker that joined (`encrypt`: sealed); nullopt without links.
  struct LinkOffer {
    std::uint16_t port = 0;
    OfferTicket ticket;
  };
  std::optional<LinkOffer> offer_link(const std::string& peer, bool encrypt);
  /// A peer left: its link (if any) closes once what is queued there is written.
  void close(const std::string& peer);
  /// The end of a turn: one write per worker for all the turn sent it.
  void flush();
  /// Writes what waits on every link, waiting at most `timeout` (the scheduler stopping).
  void drain(std::chrono::milliseconds timeout);
  bool links() const { return hub_ != nullptr; }
  /// Whether messages to `peer` travel on its link.
  bool on_link(const std::string& peer) const { return hub_ && hub_->writing(peer); }
  /// The links' port (0: none).
  std::uint16_t link_port() const { return hub_ ? hub_->port() : 0; }

 private:
  zmq::socket_t& router_;
  ZmqChannel zmq_;
  std::unique_ptr<LinkHub> hub_;
  LinkChannel link_;  // on hub_ (unused without one)
  std::optional<protocol::Received> first_;
  bool backlog_ = false;
  bool links_ready_ = false;
  int receive_timeout_set_ = -2;  // the ROUTER's receive timeout as last set (protocol::receive)
  Clock::time_point last_link_step_{};
  LinkHub::Events hub_events_;
  std::vector<zmq::pollitem_t> items_;
};

/// A worker's end: its DEALER to the scheduler, and its control link once up.
class WorkerChannels {
 public:
  using Clock = std::chrono::steady_clock;
  /// `scheduler_host`: where the link is dialled (the scheduler's address's host).
  WorkerChannels(zmq::socket_t& dealer, std::string scheduler_host);
  ~WorkerChannels();

  /// protocol::send's sink: the link once it is up, else the DEALER.
  void send(const std::string& peer, zmq::message_t message, std::vector<zmq::message_t> payloads) {
    Channel& way = state_ == State::up ? static_cast<Channel&>(*link_channel_) : static_cast<Channel&>(zmq_);
    way.send(peer, std::move(message), std::move(payloads));
  }

  /// After the hello: dials the link the scheduler offered (`encrypt`: it must be sealed; an
  /// offer without is refused), or stays on ZeroMQ, saying why. Given up at `deadline`.
  void start_link(std::uint16_t port, const OfferTicket& ticket, bool encrypt, Clock::time_point deadline);
  /// Appends what to poll (the DEALER, and the link's descriptor while there is one); returns
  /// the index of the first.
  std::size_t add_poll_items(std::vector<zmq::pollitem_t>& items);
  /// After poll: appends to `out`, in order, what the scheduler sent: the DEALER's messages (the
  /// one that woke it, or all while a backlog lasts) up to its `link_switch` (answered with
  /// ours, ZeroMQ's last), then the link's. False when the link broke once up: what was on its
  /// way is lost, so the scheduler counts this worker lost and it must leave.
  bool receive(const std::vector<zmq::pollitem_t>& items, std::size_t first, std::vector<protocol::Received>& out);
  /// Gives up a link not made by its deadline (staying on ZeroMQ). False as receive().
  bool expire(Clock::time_point now);
  bool on_link() const { return state_ == State::up; }
  /// Writes what waits on the link, waiting at most `timeout` (leaving).
  void drain(std::chrono::milliseconds timeout);

 private:
  // none, dialling (the handshake under way), waiting (made; the scheduler's link_switch has
  // not come on ZeroMQ yet), up (both ways on the link).
  enum class State { none, dialling, waiting, up };
  void abandon(const std::string& why);
  /// The link is needed but cannot be had: the worker must leave.
  void broken(const std::string& why);
  /// The scheduler's link_switch came: read the link from now on, and answer with ours.
  void switched();

  zmq::socket_t& dealer_;
  ZmqChannel zmq_;
  std::string host_;
  State state_ = State::none;
  std::unique_ptr<Dialer> dialer_;
  std::unique_ptr<Link> link_;
  std::unique_ptr<LinkChannel> link_channel_;
  std::string where_;  // "host:port", for messages
  Clock::time_point deadline_{};
  bool polled_link_ = false;  // add_poll_items added the link's item
  bool switch_pending_ = false;  // the scheduler's switch came before the dialer was done
  bool broken_ = false;
};

}  // namespace herd::net
