// The one handshake of every connection herd opens itself beside ZeroMQ: the control links
// (scheduler <- worker), the bulk lanes (holder <- fetcher) and the gang ring (rank r -> r+1).
//
// An *offer* is made over a channel that is already authenticated and encrypted (CURVE): an id
// (16 bytes, names the offer, not secret) and a secret (32 bytes, never sent again). The
// connector proves it holds the secret by a MAC over the acceptor's fresh challenge and the
// offer id; the acceptor proves it back in its ack. Both then derive the data keys of this one
// connection from the secret and the two fresh nonces. Nothing secret crosses the wire in
// clear, a recorded hello is worth nothing on another connection, and a connection that does
// not prove an offer within the hello timeout is dropped.
//
// Wire, byte-exact, integers little-endian, MAC = keyed BLAKE2b-256 under the offer's secret,
// P = the purpose ("herd link", "herd lane", "herd ring": a MAC of one is no good for another):
//   challenge (acceptor -> connector, at once on accept): "HNC1" | nonce_a (32 random bytes)
//   hello     (connector -> acceptor): "HNH1" | id (16) | u32 flags | u32 a | u32 b |
//             nonce_c (32 random bytes) | MAC(P "/hello" | nonce_a | id | flags | a | b | nonce_c)
//   ack       (acceptor -> connector): "HNA1" | u32 cipher | u32 a' |
//             MAC(P "/ack" | nonce_a | nonce_c | id | flags | a | b | cipher | a')
// flags: 1 = the connector wants the data encrypted, 2 = it has AES-256-GCM in hardware. a, b,
// a': the user's numbers (the ring: rank and size; its acceptor's rank). cipher: what the data
// is sealed with (net/aead.hpp: 0 none, 1 ChaCha20-Poly1305, 2 AES-256-GCM); the acceptor picks
// it, and a connector that wanted encryption refuses an ack without (no downgrade).
// Data keys: BLAKE2b-256(secret, P "/data/up" | nonce_a | nonce_c) for connector -> acceptor,
// "/data/down" for acceptor -> connector; records as net/aead.hpp says.
//
// The acceptor's side (Gate) serves every pending connection at once, non-blocking, each with a
// deadline; at most `max_pending` wait (a random one makes room for the next, so a flood of
// strays cannot crowd out the real peer); out of descriptors, it drops a pending one, or the
// newest connection, rather than spin on a listener that stays readable; its log lines are
// rate-limited. Both sides are driven by their owner's poll loop.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/logging.hpp"
#include "net/aead.hpp"

namespace herd::net {

inline constexpr std::size_t kOfferId = 16;
inline constexpr std::uint32_t kWantsEncryption = 1, kHasAes = 2;

/// What the connector says of itself, and what the acceptor answers.
struct Hello {
  std::uint32_t flags = 0;
  std::uint32_t a = 0, b = 0;
};
struct Ack {
  std::uint32_t cipher = kCipherNone;
  std::uint32_t a = 0;
};

/// The flags of a connector that wants encryption when `encrypt`, with AES when this machine
/// has it.
std::uint32_t hello_flags(bool encrypt);
/// The acceptor's usual choice: sealed when either side wants it, AES-256-GCM when both have
/// it in hardware, else ChaCha20-Poly1305.
std::uint32_t choose_cipher(bool acceptor_wants, std::uint32_t connector_flags);

/// One end of a connection the handshake admitted.
struct Session {
  int fd = -1;  // connected, non-blocking; the owner closes it
  std::uint64_t tag = 0;  // the offer's (acceptor side)
  Hello hello;            // the connector's
  Ack ack;                // the acceptor's
  std::unique_ptr<RecordCipher> send, receive;  // null when the cipher is none
};

/// An offer as it travels to the connector (over CURVE).
struct OfferTicket {
  std::string id;      // kOfferId bytes
  std::string secret;  // 32 bytes
};

/// A ring's members share one secret: the offer every member's Gate accepts and every member
/// dials, derived from the gang's token.
OfferTicket ticket_from_token(const std::string& purpose, const std::string& token);

/// The acceptor's side: a listener, the offers, the connections that have not proved one yet.
class Gate {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    std::string purpose;                 // "herd link", ...
    std::string who;                     // how log lines name it ("control links", ...)
    std::size_t max_pending = 512;       // connections that have not proved an offer yet
    Clock::duration hello_timeout = std::chrono::seconds(10);
  };
  /// Takes `listen_fd` (a listening socket; made non-blocking, closed by the destructor).
  /// Throws std::runtime_error when it cannot make its epoll descriptor.
  Gate(int listen_fd, Options options);
  ~Gate();
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;

  /// Readable when step() has something to do (an epoll descriptor: the listener and every
  /// pending connection).
  int fd() const { return epoll_fd_; }
  int listen_fd() const { return listen_fd_; }

  /// A fresh offer under `tag` (the owner's name for it, returned with the session), valid until
  /// `expires`; `once`: withdrawn by its first use. Offers may be made and withdrawn from any
  /// thread; everything else is the owner loop's.
  OfferTicket offer(std::uint64_t tag, Clock::time_point expires, bool once = true);
  /// An offer whose id and secret the caller gives (ticket_from_token).
  void offer(const OfferTicket& ticket, std::uint64_t tag, Clock::time_point expires, bool once);
  /// Withdraws every offer under `tag`.
  void withdraw(std::uint64_t tag);
  std::size_t offers() const {
    std::lock_guard lock(offers_mu_);
    return offers_.size();
  }
  std::size_t pending() const { return pending_.size(); }

  /// The acceptor's answer to a connection that proved the offer `tag`: the ack, or nullopt to
  /// refuse it.
  using Decide = std::function<std::optional<Ack>(std::uint64_t tag, const Hello& hello)>;
  /// Accepts, challenges, reads hellos, admits those that prove an offer (appended to
  /// `admitted`), drops the rest and the late. Never blocks.
  void step(Clock::time_point now, const Decide& decide, std::vector<Session>& admitted);
  /// The nearest deadline of a pending connection (for a poll's timeout), or nullopt.
  std::optional<Clock::time_point> next_deadline() const;

 private:
  struct Pending {
    std::string nonce;       // nonce_a
    std::size_t sent = 0;    // bytes of the challenge written
    std::string in;          // the hello so far
    Clock::time_point deadline;
  };
  struct OfferEntry {
    std::string secret;
    std::uint64_t tag = 0;
    Clock::time_point expires;
    bool once = true;
  };
  void accept_all(Clock::time_point now);
  /// False when the connection is to be dropped; sets `done` when it was admitted.
  bool serve(int fd, Pending& p, Clock::time_point now, const Decide& decide, std::vector<Session>& admitted);
  void drop(int fd);
  void drop_random();
  void refused(Clock::time_point now, const std::string& why);

  Options options_;
  int listen_fd_ = -1, epoll_fd_ = -1;
  int spare_fd_ = -1;  // kept open, given up to accept-and-drop when out of descriptors
  mutable std::mutex offers_mu_;
  std::unordered_map<std::string, OfferEntry> offers_;  // by id, under offers_mu_
  std::unordered_map<int, Pending> pending_;           // by descriptor
  std::vector<int> ready_;                              // descriptors epoll reported this step
  log::Throttle log_refused_{std::chrono::seconds(10)}, log_accept_{std::chrono::seconds(10)};
};

/// The connector's side of one connection: non-blocking, driven by its owner's poll loop.
class Dialer {
 public:
  /// Starts connecting to `host`:`port` (`attempt` picks among the addresses the host resolves
  /// to, modulo their number). Throws std::runtime_error naming the address when the host does
  /// not resolve, no socket can be made, or the ticket is malformed.
  Dialer(const std::string& host, const std::string& port, const std::string& purpose, const OfferTicket& ticket,
         Hello hello, int buffer_bytes = 0, unsigned attempt = 0);
  ~Dialer();
  Dialer(const Dialer&) = delete;
  Dialer& operator=(const Dialer&) = delete;

  int fd() const { return fd_; }
  /// What to poll for now.
  short events() const;
  enum class State { working, done, failed };
  /// After poll reported `revents` (or at once): goes as far as it can without blocking.
  State step(short revents);
  State state() const { return state_; }
  /// The TCP connection is made (the handshake may still be under way).
  bool connected() const { return phase_ != Phase::connecting; }
  /// Failed before the connection was made (refused, unroutable): nothing listens there for us.
  bool unreachable() const { return unreachable_; }
  /// Why it failed.
  const std::string& error() const { return error_; }
  /// Once done: the connection and its ciphers (the dialer no longer owns the descriptor).
  Session take();
  /// "host:port", for messages.
  const std::string& where() const { return where_; }

 private:
  enum class Phase { connecting, challenge, hello, ack, done };
  State fail(const std::string& why, bool unreachable = false);
  /// Reads into in_ up to `want` bytes; false when the peer closed or failed.
  bool read_up_to(std::size_t want);

  int fd_ = -1;
  int connect_errno_ = 0;
  Phase phase_ = Phase::connecting;
  State state_ = State::working;
  bool unreachable_ = false;
  std::string where_, purpose_, error_;
  std::string id_;
  Key secret_{};
  Hello hello_;
  std::string nonce_a_, nonce_c_;
  std::string in_, out_;
  std::size_t out_sent_ = 0;
  Session session_;
};

}  // namespace herd::net
