#include "net/handshake.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "common/util.hpp"
#include "net/bytes.hpp"
#include "net/tcp.hpp"

namespace herd::net {

namespace {

constexpr char kChallengeMagic[4] = {'H', 'N', 'C', '1'};
constexpr char kHelloMagic[4] = {'H', 'N', 'H', '1'};
constexpr char kAckMagic[4] = {'H', 'N', 'A', '1'};
constexpr std::size_t kNonce = 32, kMac = 32;
constexpr std::size_t kChallenge = 4 + kNonce;                          // 36
constexpr std::size_t kHello = 4 + kOfferId + 12 + kNonce + kMac;       // 96
constexpr std::size_t kAck = 4 + 8 + kMac;                              // 44
constexpr int kAcceptsPerStep = 256;  // then the pending ones get their turn


std::string hello_fields(const Hello& h) {
  std::string f;
  append_u32(f, h.flags);
  append_u32(f, h.a);
  append_u32(f, h.b);
  return f;
}

std::string ack_fields(const Ack& a) {
  std::string f;
  append_u32(f, a.cipher);
  append_u32(f, a.a);
  return f;
}

std::string mac(const Key& secret, const std::string& message) {
  const Key m = blake2b(message, &secret);
  return std::string(reinterpret_cast<const char*>(m.data()), m.size());
}

std::string hello_mac(const Key& secret, const std::string& purpose, const std::string& nonce_a, const std::string& id,
                      const Hello& h, const std::string& nonce_c) {
  return mac(secret, purpose + "/hello" + nonce_a + id + hello_fields(h) + nonce_c);
}

std::string ack_mac(const Key& secret, const std::string& purpose, const std::string& nonce_a, const std::string& nonce_c,
                    const std::string& id, const Hello& h, const Ack& a) {
  return mac(secret, purpose + "/ack" + nonce_a + nonce_c + id + hello_fields(h) + ack_fields(a));
}

/// The two data ciphers of a connection: (connector -> acceptor, acceptor -> connector).
std::pair<std::unique_ptr<RecordCipher>, std::unique_ptr<RecordCipher>> data_ciphers(
    std::uint32_t cipher, const Key& secret, const std::string& purpose, const std::string& nonce_a,
    const std::string& nonce_c) {
  if (cipher == kCipherNone) return {};
  Key up = blake2b(purpose + "/data/up" + nonce_a + nonce_c, &secret);
  Key down = blake2b(purpose + "/data/down" + nonce_a + nonce_c, &secret);
  auto a = std::make_unique<RecordCipher>(cipher, up);
  auto b = std::make_unique<RecordCipher>(cipher, down);
  wipe(up.data(), up.size());
  wipe(down.data(), down.size());
  return {std::move(a), std::move(b)};
}

bool to_key(const std::string& bytes, Key& key) { return key_from_bytes(bytes, key); }

}  // namespace

std::uint32_t hello_flags(bool encrypt) { return (encrypt ? kWantsEncryption : 0u) | (aes_available() ? kHasAes : 0u); }

std::uint32_t choose_cipher(bool acceptor_wants, std::uint32_t connector_flags) {
  if (!acceptor_wants && (connector_flags & kWantsEncryption) == 0) return kCipherNone;
  return (connector_flags & kHasAes) != 0 && aes_available() ? kCipherAes : kCipherChacha;
}

OfferTicket ticket_from_token(const std::string& purpose, const std::string& token) {
  const Key id = blake2b(purpose + "/offer id" + token, nullptr);
  const Key secret = blake2b(purpose + "/offer secret" + token, nullptr);
  OfferTicket t;
  t.id.assign(reinterpret_cast<const char*>(id.data()), kOfferId);
  t.secret = key_bytes(secret);
  return t;
}

// ---------------------------------------------------------------------------------------------
// The acceptor's side.

Gate::Gate(int listen_fd, Options options) : options_(std::move(options)), listen_fd_(listen_fd) {
  crypto_init();
  (void)set_nonblocking(listen_fd_);
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) {
    const int err = errno;
    close_fd(listen_fd_);
    throw std::runtime_error(options_.who + ": epoll_create1 failed: " + util::errno_text(err));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listen_fd_;
  (void)::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

Gate::~Gate() {
  for (auto& [fd, p] : pending_) ::close(fd);
  close_fd(listen_fd_);
  close_fd(epoll_fd_);
  close_fd(spare_fd_);
  std::lock_guard lock(offers_mu_);
  for (auto& [id, o] : offers_) wipe(o.secret.data(), o.secret.size());
}

OfferTicket Gate::offer(std::uint64_t tag, Clock::time_point expires, bool once) {
  OfferTicket t;
  t.id = random_bytes(kOfferId);
  t.secret = random_bytes(32);
  offer(t, tag, expires, once);
  return t;
}

void Gate::offer(const OfferTicket& ticket, std::uint64_t tag, Clock::time_point expires, bool once) {
  OfferEntry e;
  e.secret = ticket.secret;
  e.tag = tag;
  e.expires = expires;
  e.once = once;
  std::lock_guard lock(offers_mu_);
  offers_[ticket.id] = std::move(e);
}

void Gate::withdraw(std::uint64_t tag) {
  std::lock_guard lock(offers_mu_);
  for (auto it = offers_.begin(); it != offers_.end();) {
    if (it->second.tag == tag) it = offers_.erase(it);
    else ++it;
  }
}

void Gate::drop(int fd) {
  (void)::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
  pending_.erase(fd);
}

void Gate::drop_random() {
  if (pending_.empty()) return;
  auto it = pending_.begin();
  std::advance(it, random_below(static_cast<std::uint32_t>(pending_.size())));
  drop(it->first);
}

void Gate::refused(Clock::time_point now, const std::string& why) {
  std::uint64_t held = 0;
  if (log_refused_.allow(now, held)) {
    HERD_LOG(warning) << options_.who << ": refused a connection that " << why
                      << (held > 0 ? " (and " + std::to_string(held) + " more refused since the last such line)" : "");
  }
}

void Gate::accept_all(Clock::time_point now) {
  for (int n = 0; n < kAcceptsPerStep; ++n) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      if (err == EINTR || err == ECONNABORTED) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) return;
      if (err == EMFILE || err == ENFILE) {
        // Out of descriptors: the listener stays readable, so make room or the owner's loop
        // would spin on it. A pending stranger goes first; with none, the newest connection is
        // taken with the descriptor kept for this and closed (its peer retries, or was a stray).
        std::uint64_t held = 0;
        if (log_accept_.allow(now, held)) {
          HERD_LOG(warning) << options_.who << ": out of descriptors (" << util::errno_text(err) << "), dropping "
                            << (pending_.empty() ? "new connections" : "connections that have not proved an offer")
                            << (held > 0 ? " (" + std::to_string(held) + " more since the last such line)" : "");
        }
        if (!pending_.empty()) {
          drop_random();
          continue;
        }
        if (spare_fd_ >= 0) {
          close_fd(spare_fd_);
          const int victim = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
          if (victim >= 0) ::close(victim);
          spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
          if (victim >= 0) continue;
        }
        return;
      }
      std::uint64_t held = 0;
      if (log_accept_.allow(now, held)) HERD_LOG(warning) << options_.who << ": accept failed: " << util::errno_text(err);
      return;
    }
    if (pending_.size() >= options_.max_pending) drop_random();  // a flood: a random one makes room
    Pending p;
    p.nonce = random_bytes(kNonce);
    p.deadline = now + options_.hello_timeout;
    // The challenge goes at once: 36 bytes into a new connection's empty buffer fit.
    const std::string challenge = std::string(kChallengeMagic, 4) + p.nonce;
    const ssize_t k = ::send(fd, challenge.data(), challenge.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) p.sent = static_cast<std::size_t>(k);
    epoll_event ev{};
    ev.events = EPOLLIN | (p.sent < kChallenge ? EPOLLOUT : 0u);
    ev.data.fd = fd;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      ::close(fd);
      continue;
    }
    pending_.emplace(fd, std::move(p));
  }
}

bool Gate::serve(int fd, Pending& p, Clock::time_point now, const Decide& decide, std::vector<Session>& admitted) {
  if (p.sent < kChallenge) {
    const std::string challenge = std::string(kChallengeMagic, 4) + p.nonce;
    const ssize_t k = ::send(fd, challenge.data() + p.sent, challenge.size() - p.sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) p.sent += static_cast<std::size_t>(k);
    else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
    if (p.sent == kChallenge) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = fd;
      (void)::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &ev);
    }
  }
  char buf[kHello];
  while (p.in.size() < kHello) {
    const ssize_t k = ::recv(fd, buf, kHello - p.in.size(), MSG_DONTWAIT);
    if (k > 0) {
      p.in.append(buf, static_cast<std::size_t>(k));
      continue;
    }
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
    return false;  // closed, or failed
  }
  // Checked as it arrives: a stray is dropped at its first wrong byte of the magic.
  if (std::memcmp(p.in.data(), kHelloMagic, std::min<std::size_t>(4, p.in.size())) != 0) {
    refused(now, "sent no hello");
    return false;
  }
  if (p.in.size() < kHello) return true;
  const char* h = p.in.data();
  const std::string id(h + 4, kOfferId);
  Hello hello;
  hello.flags = read_u32(h + 4 + kOfferId);
  hello.a = read_u32(h + 8 + kOfferId);
  hello.b = read_u32(h + 12 + kOfferId);
  const std::string nonce_c(h + 16 + kOfferId, kNonce);
  const char* proof = h + 16 + kOfferId + kNonce;
  OfferEntry entry;
  {
    std::lock_guard lock(offers_mu_);
    auto offer = offers_.find(id);
    if (offer == offers_.end() || offer->second.expires < now) {
      if (offer != offers_.end()) offers_.erase(offer);
      offer = offers_.end();
    } else {
      entry = offer->second;
    }
    if (offer == offers_.end()) entry.secret.clear();
  }
  if (entry.secret.empty()) {
    refused(now, "named no offer (unknown, used or expired)");
    return false;
  }
  Key secret{};
  (void)to_key(entry.secret, secret);
  wipe(entry.secret.data(), entry.secret.size());
  const std::string expected = hello_mac(secret, options_.purpose, p.nonce, id, hello, nonce_c);
  if (!same_secret(expected.data(), proof, kMac)) {
    refused(now, "could not prove the offer it named");
    wipe(secret.data(), secret.size());
    return false;
  }
  const std::uint64_t tag = entry.tag;
  if (entry.once) {
    // A token works once, even when its owner turns the connection down below.
    std::lock_guard lock(offers_mu_);
    offers_.erase(id);
  }
  const std::optional<Ack> ack = decide(tag, hello);
  if (!ack) {
    refused(now, "proved an offer its owner turned down");
    wipe(secret.data(), secret.size());
    return false;
  }
  std::string out(kAckMagic, 4);
  out += ack_fields(*ack);
  out += ack_mac(secret, options_.purpose, p.nonce, nonce_c, id, hello, *ack);
  // 44 bytes into a socket that only carried 36 out: they fit at once.
  if (::send(fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT) != static_cast<ssize_t>(out.size())) {
    wipe(secret.data(), secret.size());
    return false;
  }
  Session s;
  s.tag = tag;
  s.hello = hello;
  s.ack = *ack;
  try {
    auto [up, down] = data_ciphers(ack->cipher, secret, options_.purpose, p.nonce, nonce_c);
    s.receive = std::move(up);
    s.send = std::move(down);
  } catch (const std::exception& e) {
    refused(now, std::string("asked for a cipher this machine lacks: ") + e.what());
    wipe(secret.data(), secret.size());
    return false;
  }
  wipe(secret.data(), secret.size());
  (void)::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  pending_.erase(fd);
  s.fd = fd;
  admitted.push_back(std::move(s));
  return true;
}

void Gate::step(Clock::time_point now, const Decide& decide, std::vector<Session>& admitted) {
  epoll_event events[64];
  for (int round = 0; round < 16; ++round) {
    const int n = ::epoll_wait(epoll_fd_, events, 64, 0);
    if (n <= 0) break;
    ready_.clear();
    bool listener = false;
    for (int i = 0; i < n; ++i) {
      if (events[i].data.fd == listen_fd_) listener = true;
      else ready_.push_back(events[i].data.fd);
    }
    for (const int fd : ready_) {
      auto it = pending_.find(fd);
      if (it == pending_.end()) continue;  // dropped meanwhile
      if (!serve(fd, it->second, now, decide, admitted)) {
        if (pending_.count(fd) != 0) drop(fd);
      }
    }
    if (listener) accept_all(now);
    if (n < 64) break;
  }
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.deadline <= now) {
      (void)::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, it->first, nullptr);
      ::close(it->first);
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  std::lock_guard lock(offers_mu_);
  for (auto it = offers_.begin(); it != offers_.end();) {
    if (it->second.expires < now) it = offers_.erase(it);
    else ++it;
  }
}

std::optional<Gate::Clock::time_point> Gate::next_deadline() const {
  std::optional<Clock::time_point> next;
  for (const auto& [fd, p] : pending_) {
    if (!next || p.deadline < *next) next = p.deadline;
  }
  return next;
}

// ---------------------------------------------------------------------------------------------
// The connector's side.

Dialer::Dialer(const std::string& host, const std::string& port, const std::string& purpose, const OfferTicket& ticket,
               Hello hello, int buffer_bytes, unsigned attempt)
    : purpose_(purpose), id_(ticket.id), hello_(hello) {
  where_ = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + port;
  if (ticket.id.size() != kOfferId) {
    throw std::runtime_error("the offer of " + where_ + " came with an id of " + std::to_string(ticket.id.size()) +
                             " bytes");
  }
  if (!to_key(ticket.secret, secret_)) {
    throw std::runtime_error("the offer of " + where_ + " came with a secret of " + std::to_string(ticket.secret.size()) +
                             " bytes");
  }
  std::string error;
  fd_ = connect_start(host, port, buffer_bytes, connect_errno_, error, attempt);
  if (fd_ < 0) throw std::runtime_error(where_ + ": " + error);
}

Dialer::~Dialer() {
  close_fd(fd_);
  wipe(secret_.data(), secret_.size());
}

short Dialer::events() const {
  switch (phase_) {
    case Phase::connecting:
    case Phase::hello:
      return POLLOUT;
    case Phase::challenge:
    case Phase::ack:
      return POLLIN;
    case Phase::done:
      break;
  }
  return 0;
}

Dialer::State Dialer::fail(const std::string& why, bool unreachable) {
  error_ = why;
  unreachable_ = unreachable;
  state_ = State::failed;
  close_fd(fd_);
  return state_;
}

bool Dialer::read_up_to(std::size_t want) {
  char buf[64];
  while (in_.size() < want) {
    const ssize_t k = ::recv(fd_, buf, std::min(sizeof buf, want - in_.size()), MSG_DONTWAIT);
    if (k > 0) {
      in_.append(buf, static_cast<std::size_t>(k));
      continue;
    }
    return k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
  }
  return true;
}

Dialer::State Dialer::step(short revents) {
  if (state_ != State::working) return state_;
  if (phase_ == Phase::connecting) {
    int err = connect_errno_;
    if (err == 0) {
      if ((revents & (POLLOUT | POLLERR | POLLHUP)) == 0) return state_;
      socklen_t len = sizeof err;
      if (::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    }
    if (err != 0) return fail("cannot connect to " + where_ + ": " + util::errno_text(err), true);
    phase_ = Phase::challenge;
  }
  if (phase_ == Phase::challenge) {
    if (!read_up_to(kChallenge)) return fail(where_ + " closed the connection before its challenge");
    if (std::memcmp(in_.data(), kChallengeMagic, std::min<std::size_t>(4, in_.size())) != 0) {
      return fail(where_ + " is not a herd " + purpose_.substr(purpose_.rfind(' ') + 1) + " (no challenge)");
    }
    if (in_.size() < kChallenge) return state_;
    nonce_a_ = in_.substr(4);
    nonce_c_ = random_bytes(kNonce);
    out_.assign(kHelloMagic, 4);
    out_ += id_;
    out_ += hello_fields(hello_);
    out_ += nonce_c_;
    out_ += hello_mac(secret_, purpose_, nonce_a_, id_, hello_, nonce_c_);
    in_.clear();
    phase_ = Phase::hello;
  }
  if (phase_ == Phase::hello) {
    const ssize_t k = ::send(fd_, out_.data() + out_sent_, out_.size() - out_sent_, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) out_sent_ += static_cast<std::size_t>(k);
    else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return fail("cannot write to " + where_ + ": " + util::errno_text(errno));
    }
    if (out_sent_ < out_.size()) return state_;
    phase_ = Phase::ack;
  }
  if (phase_ == Phase::ack) {
    if (!read_up_to(kAck)) return fail(where_ + " refused the hello (an offer unknown, used or expired there)");
    if (std::memcmp(in_.data(), kAckMagic, std::min<std::size_t>(4, in_.size())) != 0) {
      return fail(where_ + " answered the hello with no acknowledgement");
    }
    if (in_.size() < kAck) return state_;
    Ack ack;
    ack.cipher = read_u32(in_.data() + 4);
    ack.a = read_u32(in_.data() + 8);
    const std::string expected = ack_mac(secret_, purpose_, nonce_a_, nonce_c_, id_, hello_, ack);
    if (!same_secret(expected.data(), in_.data() + 12, kMac)) {
      return fail(where_ + " could not prove it holds the offer (not the peer it was offered by)");
    }
    if ((hello_.flags & kWantsEncryption) != 0 && ack.cipher == kCipherNone) {
      return fail(where_ + " offered a connection without encryption, which this side requires");
    }
    if (ack.cipher > kCipherAes || (ack.cipher == kCipherAes && !aes_available())) {
      return fail(where_ + " chose cipher " + std::to_string(ack.cipher) + ", which this machine lacks");
    }
    auto [up, down] = data_ciphers(ack.cipher, secret_, purpose_, nonce_a_, nonce_c_);
    session_.send = std::move(up);
    session_.receive = std::move(down);
    session_.hello = hello_;
    session_.ack = ack;
    phase_ = Phase::done;
    state_ = State::done;
  }
  return state_;
}

Session Dialer::take() {
  Session s = std::move(session_);
  s.fd = std::exchange(fd_, -1);
  return s;
}

}  // namespace herd::net
