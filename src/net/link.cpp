#include "net/link.hpp"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "common/logging.hpp"
#include "common/util.hpp"
#include "net/bytes.hpp"
#include "net/tcp.hpp"

namespace herd::net {

namespace {

// A link reads into a buffer that starts small and doubles its read size, up to kReadChunk,
// each time a read fills all the room it had: the scheduler holds one link per worker, and most
// carry small messages (10,000 idle workers cost 40 MiB at kReadChunk each, 40 at kFirstChunk).
constexpr std::size_t kFirstChunk = 4u << 10;
constexpr std::size_t kReadChunk = 64u << 10;




/// Removes what was consumed from the front of a buffer, once it is most of it.
void compact(std::vector<char>& buffer, std::size_t& begin, std::size_t& end) {
  if (begin == 0) return;
  if (begin == end) {
    begin = end = 0;
  } else if (begin >= buffer.size() / 2) {
    std::memmove(buffer.data(), buffer.data() + begin, end - begin);
    end -= begin;
    begin = 0;
  }
}

}  // namespace

Link::Link(Session session, std::uint64_t max_frame, std::string peer)
    : fd_(session.fd), peer_(std::move(peer)), max_frame_(max_frame) {
  set_nonblocking(fd_);
  set_nodelay(fd_);
  set_liveness(fd_);
  sealer_ = std::move(session.send);
  opener_ = std::move(session.receive);
  in_.resize(kFirstChunk);
}

Link::~Link() { close_fd(fd_); }

void Link::fail(const std::string& why) {
  if (error_.empty()) error_ = why;
}

void Link::append_sealed(const char* data, std::size_t n) {
  while (n > 0) {
    const std::size_t len = std::min(n, kLinkRecord);
    const std::size_t at = out_.size();
    out_.resize(at + kRecordHeader + len + kRecordTag);
    sealer_->seal(data, len, reinterpret_cast<unsigned char*>(out_.data() + at));
    data += len;
    n -= len;
  }
}

void Link::send(const zmq::message_t& message, const std::vector<zmq::message_t>& payloads, bool corked) {
  if (!error_.empty()) return;
  constexpr std::size_t kMaxFrame = 0xffffffffu;  // the length field's
  bool fits = message.size() <= kMaxFrame;
  for (const auto& p : payloads) fits = fits && p.size() <= kMaxFrame;
  if (!fits) {
    fail("a message to " + peer_ + " has a frame over 4 GiB, more than a link carries");
    return;
  }
  const bool was_empty = !want_write();
  std::vector<char>& plain = sealer_ ? plain_out_ : out_;
  if (sealer_) plain.clear();
  append_u32(plain, static_cast<std::uint32_t>(1 + payloads.size()));
  append_u32(plain, static_cast<std::uint32_t>(message.size()));
  const char* m = static_cast<const char*>(message.data());
  plain.insert(plain.end(), m, m + message.size());
  for (const auto& p : payloads) {
    append_u32(plain, static_cast<std::uint32_t>(p.size()));
    const char* d = static_cast<const char*>(p.data());
    plain.insert(plain.end(), d, d + p.size());
  }
  if (sealer_) append_sealed(plain.data(), plain.size());
  if (was_empty && !corked) flush();
}

void Link::flush() {
  while (error_.empty() && want_write()) {
    const ssize_t n = ::send(fd_, out_.data() + out_begin_, out_.size() - out_begin_, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      out_begin_ += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      break;
    } else {
      fail("cannot write to " + peer_ + ": " + util::errno_text(n < 0 ? errno : EPIPE));
    }
  }
  if (out_begin_ == out_.size()) {
    out_.clear();
    out_begin_ = 0;
  } else if (out_begin_ > (1u << 20) && out_begin_ >= out_.size() / 2) {
    out_.erase(out_.begin(), out_.begin() + static_cast<std::ptrdiff_t>(out_begin_));
    out_begin_ = 0;
  }
}

void Link::drain(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  flush();
  while (error_.empty() && want_write()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd_, POLLOUT, 0};
    (void)::poll(&p, 1, static_cast<int>(left.count()));
    flush();
  }
}

bool Link::parse_messages(std::vector<char>& buffer, std::size_t& begin, std::size_t end,
                          std::vector<protocol::Received>& out) {
  for (;;) {
    if (end - begin < 4) return true;
    const std::uint32_t frames = read_u32(buffer.data() + begin);
    if (frames == 0 || frames > kMaxFrames) {
      fail(peer_ + " sent a message of " + std::to_string(frames) + " frames (1 to " + std::to_string(kMaxFrames) +
           "): not a herd link, or out of step");
      return false;
    }
    std::size_t at = begin + 4;
    std::uint32_t complete = 0;
    for (; complete < frames; ++complete) {
      if (end - at < 4) break;
      const std::uint32_t len = read_u32(buffer.data() + at);
      if (max_frame_ > 0 && len > max_frame_) {
        fail(peer_ + " sent a frame of " + std::to_string(len) + " bytes, over the limit of " +
             std::to_string(max_frame_));
        return false;
      }
      if (end - at - 4 < len) break;
      at += 4 + len;
    }
    if (complete < frames) return true;  // the rest is still on its way
    protocol::Received r;
    std::size_t p = begin + 4;
    for (std::uint32_t i = 0; i < frames; ++i) {
      const std::uint32_t len = read_u32(buffer.data() + p);
      zmq::message_t frame(buffer.data() + p + 4, len);
      if (i == 0) r.message = std::move(frame);
      else r.payloads.push_back(std::move(frame));
      p += 4 + len;
    }
    out.push_back(std::move(r));
    begin = at;
  }
}

void Link::receive(std::vector<protocol::Received>& out, std::size_t budget) {
  std::size_t taken = 0;
  while (error_.empty() && taken < budget) {
    compact(in_, in_begin_, in_end_);
    if (in_.size() - in_end_ < chunk_) in_.resize(std::max(in_.size() * 2, in_end_ + chunk_));
    const std::size_t room = in_.size() - in_end_;
    const ssize_t n = ::recv(fd_, in_.data() + in_end_, room, MSG_DONTWAIT);
    if (n == 0) {
      fail(peer_ + " closed the link");
      break;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) fail("cannot read from " + peer_ + ": " + util::errno_text(errno));
      break;
    }
    in_end_ += static_cast<std::size_t>(n);
    taken += static_cast<std::size_t>(n);
    if (static_cast<std::size_t>(n) == room) chunk_ = std::min(chunk_ * 2, kReadChunk);  // more was waiting
    if (!opener_) {
      if (!parse_messages(in_, in_begin_, in_end_, out)) break;
      continue;
    }
    // Sealed: open every whole record into the plaintext, then read messages from it.
    while (in_end_ - in_begin_ >= kRecordHeader) {
      auto* header = reinterpret_cast<unsigned char*>(in_.data() + in_begin_);
      const std::uint32_t len = read_u32(header);
      if (len > kLinkRecord) {
        fail(peer_ + " sent a record of " + std::to_string(len) + " bytes (at most " + std::to_string(kLinkRecord) +
             "): not a herd link, or out of step");
        break;
      }
      const std::size_t whole = kRecordHeader + len + kRecordTag;
      if (in_end_ - in_begin_ < whole) break;
      char* data = in_.data() + in_begin_ + kRecordHeader;
      if (!opener_->open_in_place(header, data, len, reinterpret_cast<unsigned char*>(data + len))) {
        fail(peer_ + " sent a record that does not open (a wrong key, or altered on the way)");
        break;
      }
      plain_.insert(plain_.end(), data, data + len);
      in_begin_ += whole;
    }
    if (!error_.empty()) break;
    std::size_t plain_end = plain_.size();
    if (!parse_messages(plain_, plain_begin_, plain_end, out)) break;
    if (plain_begin_ == plain_end) {
      plain_.clear();
      plain_begin_ = 0;
    } else if (plain_begin_ >= plain_end / 2) {
      plain_.erase(plain_.begin(), plain_.begin() + static_cast<std::ptrdiff_t>(plain_begin_));
      plain_begin_ = 0;
    }
  }
  compact(in_, in_begin_, in_end_);
  if (in_end_ == 0 && in_.size() > 4 * kReadChunk) {  // a big message passed: let its memory go
    in_.assign(chunk_, 0);
    in_.shrink_to_fit();
  }
}

// ---------------------------------------------------------------------------------------------

LinkHub::LinkHub(const std::string& host, std::uint64_t max_frame, std::chrono::milliseconds offer_timeout)
    : max_frame_(max_frame), timeout_(offer_timeout) {
  const int listen_fd = listen_on(host, 0, "the scheduler's control links");
  port_ = local_port(listen_fd);
  Gate::Options options;
  options.purpose = kLinkPurpose;
  options.who = "control links";
  options.hello_timeout = std::min<std::chrono::steady_clock::duration>(timeout_, std::chrono::seconds(5));
  gate_ = std::make_unique<Gate>(listen_fd, std::move(options));
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) throw std::runtime_error("the scheduler's control links: epoll_create1 failed: " + util::errno_text(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = gate_->fd();
  (void)::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, gate_->fd(), &ev);
}

LinkHub::~LinkHub() {
  links_.clear();
  gate_.reset();
  close_fd(epoll_fd_);
}

OfferTicket LinkHub::offer(const std::string& owner, bool encrypt) {
  const std::uint64_t tag = next_tag_++;
  const auto expires = std::chrono::steady_clock::now() + timeout_;
  offers_[tag] = OfferEntry{owner, encrypt, expires};
  return gate_->offer(tag, expires, true);
}

void LinkHub::admit(Session session, Events& events) {
  auto offer = offers_.find(session.tag);
  if (offer == offers_.end()) {  // its owner left meanwhile
    ::close(session.fd);
    return;
  }
  const std::string owner = std::move(offer->second.owner);
  offers_.erase(offer);
  if (auto old = links_.find(owner); old != links_.end()) {  // a second claim for one peer
    owner_of_fd_.erase(old->second.link->fd());
    (void)::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, old->second.link->fd(), nullptr);
    links_.erase(old);
  }
  const int fd = session.fd;
  Entry e;
  e.link = std::make_unique<Link>(std::move(session), max_frame_, "the worker's link");
  owner_of_fd_[fd] = owner;
  Entry& placed = links_[owner] = std::move(e);
  epoll_event ev{};
  ev.events = 0;  // nothing is read before the worker's link_switch; errors are reported anyway
  ev.data.fd = fd;
  (void)::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  placed.events = 0;
  events.claimed.push_back(owner);
}

void LinkHub::update_events(Entry& e) {
  std::uint32_t want = 0;
  if (e.reading && !e.closing) want |= EPOLLIN;
  if (e.link->want_write()) want |= EPOLLOUT;
  if (want == e.events) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.fd = e.link->fd();
  (void)::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, e.link->fd(), &ev);
  e.events = want;
}

void LinkHub::step(Events& events, std::chrono::steady_clock::time_point now) {
  epoll_event ready[64];
  bool gate_ready = false;
  for (int round = 0; round < 16; ++round) {
    const int n = ::epoll_wait(epoll_fd_, ready, 64, 0);
    if (n <= 0) break;
    for (int i = 0; i < n; ++i) {
      const int fd = ready[i].data.fd;
      if (fd == gate_->fd()) {
        gate_ready = true;  // stepped below
        continue;
      }
      auto owner = owner_of_fd_.find(fd);
      if (owner == owner_of_fd_.end()) continue;
      auto it = links_.find(owner->second);
      if (it == links_.end()) continue;
      Entry& e = it->second;
      dirty_.insert(it->first);
      if ((ready[i].events & EPOLLOUT) != 0) e.link->flush();
      if (e.reading && !e.closing && (ready[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0) {
        const std::size_t before = events.messages.size();
        e.link->receive(events.messages);
        for (std::size_t m = before; m < events.messages.size(); ++m) events.messages[m].identity = owner->second;
      } else if ((ready[i].events & (EPOLLHUP | EPOLLERR)) != 0) {
        int err = 0;
        socklen_t len = sizeof err;
        (void)::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        e.link->mark_failed(err != 0 ? "the worker's link: " + util::errno_text(err) : "the worker hung up its link");
      }
    }
    if (n < 64) break;
  }
  // The connections proving an offer, and the offers past their time (looked at every 100 ms
  // with the links below, else only when the gate has news: not a system call more per step).
  const bool sweep = now - last_sweep_ >= std::chrono::milliseconds(100);
  if (gate_ready || sweep) {
    admitted_.clear();
    gate_->step(
      now,
      [this](std::uint64_t tag, const Hello& hello) -> std::optional<Ack> {
        auto offer = offers_.find(tag);
        if (offer == offers_.end()) return std::nullopt;  // its owner left
        Ack ack;
        ack.cipher = choose_cipher(offer->second.encrypt, hello.flags);
        return ack;
      },
      admitted_);
    for (Session& session : admitted_) admit(std::move(session), events);
    for (auto it = offers_.begin(); it != offers_.end();) {  // the gate forgot these too
      if (it->second.expires < now) it = offers_.erase(it);
      else ++it;
    }
  }
  // Links touched this step (and every link every 100 ms: the ones closing past their time):
  // report failures, close the ones whose peer left once written, keep epoll in step.
  // One link's look; false when it went.
  const auto look = [&](std::unordered_map<std::string, Entry>::iterator it) {
    Entry& e = it->second;
    if (e.link->want_write()) e.link->flush();
    const bool done_closing = e.closing && (!e.link->want_write() || now >= e.close_by);
    if (e.link->failed().empty() && !done_closing) {
      update_events(e);
      return true;
    }
    if (!e.closing) events.failed.emplace_back(it->first, e.link->failed());
    owner_of_fd_.erase(e.link->fd());
    (void)::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, e.link->fd(), nullptr);
    links_.erase(it);
    return false;
  };
  if (sweep) {
    last_sweep_ = now;
    for (auto it = links_.begin(); it != links_.end();) {
      auto next = std::next(it);
      (void)look(it);
      it = next;
    }
  } else {
    for (const std::string& owner : dirty_) {
      if (auto it = links_.find(owner); it != links_.end()) (void)look(it);
    }
  }
  dirty_.clear();
}

void LinkHub::start_writing(const std::string& owner) {
  if (auto it = links_.find(owner); it != links_.end()) it->second.writing = true;
}

bool LinkHub::peer_switched(const std::string& owner) {
  auto it = links_.find(owner);
  if (it == links_.end()) return false;
  it->second.reading = true;
  update_events(it->second);
  return true;
}

bool LinkHub::writing(const std::string& owner) const {
  auto it = links_.find(owner);
  return it != links_.end() && it->second.writing && !it->second.closing;
}

void LinkHub::send(const std::string& owner, const zmq::message_t& message, const std::vector<zmq::message_t>& payloads) {
  auto it = links_.find(owner);
  if (it == links_.end()) return;
  if (!it->second.link->want_write()) corked_.push_back(owner);  // the first since the last flush
  it->second.link->send(message, payloads, true);
}

void LinkHub::flush() {
  for (const std::string& owner : corked_) {
    auto it = links_.find(owner);
    if (it == links_.end()) continue;
    Entry& e = it->second;
    e.link->flush();
    if (e.link->want_write()) update_events(e);  // the rest when the socket takes it (EPOLLOUT)
    if (!e.link->failed().empty()) dirty_.insert(owner);  // reported by the next step
  }
  corked_.clear();
}

void LinkHub::close(const std::string& owner) {
  for (auto it = offers_.begin(); it != offers_.end();) {
    if (it->second.owner == owner) {
      gate_->withdraw(it->first);
      it = offers_.erase(it);
    } else {
      ++it;
    }
  }
  auto it = links_.find(owner);
  if (it == links_.end() || it->second.closing) return;
  it->second.closing = true;
  it->second.close_by = std::chrono::steady_clock::now() + timeout_;
  update_events(it->second);
  dirty_.insert(owner);
}

void LinkHub::drain(std::chrono::milliseconds timeout) {
  corked_.clear();  // drained below
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (auto& [owner, e] : links_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    e.link->drain(std::max(left, std::chrono::milliseconds(0)));
  }
}

}  // namespace herd::net
