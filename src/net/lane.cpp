#include "net/lane.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <stdexcept>

#include "common/logging.hpp"
#include "common/util.hpp"
#include "net/bytes.hpp"
#include "net/tcp.hpp"

namespace herd::net {

namespace {

using Clock = std::chrono::steady_clock;

constexpr char kPurpose[] = "herd lane";
constexpr int kSocketBuffer = 4 << 20;           // SO_SNDBUF / SO_RCVBUF of a lane
constexpr std::size_t kMaxSend = 8 << 20;         // one send() of plain bytes at most
constexpr auto kHelloTimeout = std::chrono::seconds(10);


/// Writes all of [p, p+n) on a blocking socket; false with errno set on failure.
bool send_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t k = ::send(fd, p, std::min(n, kMaxSend), MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      if (k == 0) errno = EPIPE;
      return false;
    }
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

}  // namespace

// ------------------------------------------------------------------------------------------
// The holder's side.

LaneServer::LaneServer(const std::string& host, bool encrypt, std::chrono::milliseconds progress_timeout)
    : encrypt_(encrypt), timeout_(progress_timeout) {
  crypto_init();
  const int listen_fd = listen_on(host, kSocketBuffer, "herd data lane");  // accepted sockets inherit the buffers
  port_ = local_port(listen_fd);
  Gate::Options options;
  options.purpose = kPurpose;
  options.who = "data lanes";
  options.hello_timeout = std::min<Clock::duration>(kHelloTimeout, timeout_);
  gate_ = std::make_unique<Gate>(listen_fd, std::move(options));
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) throw std::runtime_error("herd data lane: eventfd: " + util::errno_text(errno));
  acceptor_ = std::thread([this] { accept_loop(); });
}

LaneServer::~LaneServer() {
  stop_ = true;
  const std::uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
  if (acceptor_.joinable()) acceptor_.join();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    offers_.clear();
    for (Transfer& t : transfers_) {
      if (!t.done && t.fd >= 0) ::shutdown(t.fd, SHUT_RDWR);  // its send() fails at once
    }
  }
  for (Transfer& t : transfers_) {
    if (t.thread.joinable()) t.thread.join();
  }
  gate_.reset();
  close_fd(wake_fd_);
}

protocol::DataLane LaneServer::offer(std::vector<PayloadPtr> payloads) {
  Offer o;
  o.payloads = std::move(payloads);
  o.expires = Clock::now() + timeout_;
  std::uint64_t tag;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tag = next_tag_++;
    offers_.emplace(tag, o);
  }
  const OfferTicket ticket = gate_->offer(tag, o.expires, true);
  protocol::DataLane lane;
  lane.port = port_;
  lane.offer = ticket.id;
  lane.secret = ticket.secret;
  return lane;
}

std::size_t LaneServer::offers() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return offers_.size();
}

std::size_t LaneServer::transfers() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::size_t n = 0;
  for (const Transfer& t : transfers_) n += t.done ? 0 : 1;
  return n;
}

void LaneServer::accept_loop() {
  std::vector<Session> admitted;
  // The fetcher proved the offer: the bytes go sealed when this server encrypts or it asks.
  const Gate::Decide decide = [this](std::uint64_t, const Hello& hello) -> std::optional<Ack> {
    Ack ack;
    ack.cipher = choose_cipher(encrypt_, hello.flags);
    return ack;
  };
  while (!stop_) {
    pollfd fds[2] = {{gate_->fd(), POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    // Wake for the nearest hello deadline, and now and then to withdraw stale offers and
    // reap finished transfers.
    auto wait = std::chrono::milliseconds(500);
    if (const auto next = gate_->next_deadline()) {
      wait = std::min(wait, std::chrono::ceil<std::chrono::milliseconds>(*next - Clock::now()) + std::chrono::milliseconds(1));
    }
    if (::poll(fds, 2, static_cast<int>(std::max<std::int64_t>(0, wait.count()))) < 0 && errno != EINTR) {
      HERD_LOG(error) << "herd data lane: poll: " << util::errno_text(errno);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    if (stop_) break;
    if (fds[1].revents & POLLIN) {
      std::uint64_t n;
      (void)!::read(wake_fd_, &n, sizeof n);
    }
    const auto now = Clock::now();
    admitted.clear();
    gate_->step(now, decide, admitted);
    for (Session& session : admitted) {
      Offer offer;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = offers_.find(session.tag);
        if (it == offers_.end()) {  // expired between the gate's look and ours
          ::close(session.fd);
          continue;
        }
        offer = std::move(it->second);
        offers_.erase(it);
      }
      start_transfer(std::move(session), std::move(offer));
    }
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = offers_.begin(); it != offers_.end();) {
      it = now >= it->second.expires ? offers_.erase(it) : std::next(it);
    }
    for (auto it = transfers_.begin(); it != transfers_.end();) {
      if (!it->done) {
        ++it;
        continue;
      }
      it->thread.join();
      it = transfers_.erase(it);
    }
  }
}

void LaneServer::start_transfer(Session session, Offer offer) {
  std::lock_guard<std::mutex> lock(mutex_);
  Transfer& t = transfers_.emplace_back();
  t.fd = session.fd;
  t.thread = std::thread([this, &t, offer = std::move(offer), cipher = std::move(session.send)] {
    send_offer(t, offer, cipher.get());
    std::lock_guard<std::mutex> held(mutex_);
    close_fd(t.fd);
    t.done = true;
  });
}

void LaneServer::send_offer(Transfer& t, const Offer& offer, RecordCipher* cipher) {
  const int fd = t.fd;
  // Blocking from here: the thread has nothing else to do. A fetcher that stops reading for
  // the whole progress timeout is given up on (its request fails over, as on the data port).
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout_.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout_.count() % 1000) * 1000);
  (void)::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  set_liveness(fd);

  std::unique_ptr<unsigned char[]> stage;
  if (cipher != nullptr) {
    {
      std::lock_guard lock(mutex_);
      if (!stages_.empty()) {
        stage = std::move(stages_.back());
        stages_.pop_back();
      }
    }
    if (!stage) stage.reset(new unsigned char[kRecordHeader + kLaneRecord + kRecordTag]);
  }
  struct GiveBack {  // the stage goes back for the next transfer, however this one ends
    LaneServer& server;
    std::unique_ptr<unsigned char[]>& stage;
    ~GiveBack() {
      if (!stage) return;
      std::lock_guard lock(server.mutex_);
      if (server.stages_.size() < 4) server.stages_.push_back(std::move(stage));
    }
  } give_back{*this, stage};
  std::uint64_t total = 0, sent = 0;
  for (const auto& p : offer.payloads) total += p->size();
  for (const auto& p : offer.payloads) {
    const char* data = p->data();
    const std::size_t size = p->size();
    for (std::size_t off = 0; off < size && !stop_;) {
      bool ok;
      std::size_t n;
      if (cipher) {
        n = std::min(kLaneRecord, size - off);
        cipher->seal(data + off, n, stage.get());
        ok = send_all(fd, reinterpret_cast<const char*>(stage.get()), kRecordHeader + n + kRecordTag);
      } else {
        n = std::min(kMaxSend, size - off);
        ok = send_all(fd, data + off, n);
      }
      if (!ok) {
        const int err = errno;
        HERD_LOG(warning) << "herd data lane: sending stopped after " << sent << " of " << total
                          << " bytes: " << (err == EAGAIN || err == EWOULDBLOCK
                                                ? "the fetcher read nothing for " + std::to_string(timeout_.count()) + " ms"
                                                : util::errno_text(err));
        return;
      }
      off += n;
      sent += n;
    }
  }
  ::shutdown(fd, SHUT_WR);
}

// ------------------------------------------------------------------------------------------
// The fetcher's side.

// Opening a record and reading the next one off the socket (the kernel's copy and the first
// touch of the result's pages) would be one after the other on the fetcher's thread, with the
// holder's sealing thread waiting meanwhile (docs/design-notes.md, "Big results"). The opener
// takes the records in order (the cipher counts them) and opens each in place, in the result's
// buffer, while the fetcher's thread reads the next one into the bytes after it.
class LaneReceiver::Opener {
 public:
  Opener(std::unique_ptr<RecordCipher> cipher, std::size_t items)
      : cipher_(std::move(cipher)), pending_(items, 0), thread_([this] { run(); }) {}
  ~Opener() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    work_.notify_one();
    thread_.join();
  }
  Opener(const Opener&) = delete;
  Opener& operator=(const Opener&) = delete;

  void push(const unsigned char* header, char* data, std::size_t len, const unsigned char* tag, std::size_t item,
            std::uint64_t offset) {
    Job job;
    std::memcpy(job.header, header, kRecordHeader);
    std::memcpy(job.tag, tag, kRecordTag);
    job.data = data;
    job.len = len;
    job.item = item;
    job.offset = offset;
    {
      std::lock_guard lock(mu_);
      jobs_.push_back(job);
      ++pending_[item];
    }
    work_.notify_one();
  }
  /// Waits until every record queued is opened.
  void drain() {
    std::unique_lock lock(mu_);
    idle_.wait(lock, [&] { return jobs_.empty() && !busy_; });
  }
  /// One look, under one lock, at the results [from, upto): how many of them, from `from` on,
  /// have every record opened and authentic (`ready`); whether a record failed, and then in
  /// which result and where (no result from that one on is ready). Asked in two looks, a record
  /// that failed between them would count its result whole (its bytes wiped to zeros).
  struct Settled {
    std::size_t ready = 0;
    bool failed = false;
    std::size_t bad_item = 0;
    std::uint64_t bad_offset = 0;
  };
  Settled settle(std::size_t from, std::size_t upto) {
    std::lock_guard lock(mu_);
    Settled s;
    s.failed = failed_;
    s.bad_item = bad_item_;
    s.bad_offset = bad_offset_;
    const std::size_t end = failed_ ? std::min(upto, bad_item_) : upto;
    for (std::size_t i = from; i < end && pending_[i] == 0; ++i) ++s.ready;
    return s;
  }

 private:
  struct Job {
    unsigned char header[kRecordHeader];
    unsigned char tag[kRecordTag];
    char* data;
    std::size_t len;
    std::size_t item;
    std::uint64_t offset;
  };
  void run() {
    std::unique_lock lock(mu_);
    for (;;) {
      work_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      const Job job = jobs_.front();
      jobs_.pop_front();
      busy_ = true;
      lock.unlock();
      const bool ok = cipher_->open_in_place(job.header, job.data, job.len, job.tag);
      lock.lock();
      busy_ = false;
      if (!ok && !failed_) {
        failed_ = true;
        bad_item_ = job.item;
        bad_offset_ = job.offset;
      }
      --pending_[job.item];
      if (jobs_.empty()) idle_.notify_all();
    }
  }

  std::unique_ptr<RecordCipher> cipher_;
  std::mutex mu_;
  std::condition_variable work_, idle_;
  std::deque<Job> jobs_;
  std::vector<std::uint32_t> pending_;  // per result
  bool failed_ = false;
  std::size_t bad_item_ = 0;
  std::uint64_t bad_offset_ = 0;
  bool busy_ = false;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the rest is ready
};

LaneReceiver::LaneReceiver(const std::string& host, const protocol::DataLane& lane, std::vector<Item> items,
                           bool encrypt)
    : items_(std::move(items)) {
  const std::string port = std::to_string(lane.port);
  where_ = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + port;
  OfferTicket ticket;
  ticket.id = lane.offer;
  ticket.secret = lane.secret;
  Hello hello;
  hello.flags = hello_flags(encrypt);
  try {
    // Refused at once (nothing listens there): the first step() reports it as unreachable.
    dialer_ = std::make_unique<Dialer>(host, port, kPurpose, ticket, hello, kSocketBuffer);
  } catch (const std::exception& e) {
    throw std::runtime_error("the lane " + where_ + ": " + e.what());
  }
  set_liveness(dialer_->fd());
  while (current_ < items_.size() && items_[current_].buffer->size() == 0) ++current_;  // nothing to read
  delivered_ = current_;
}

LaneReceiver::~LaneReceiver() {
  opener_.reset();  // before the results it writes into
  dialer_.reset();
  close_fd(fd_);
}

std::vector<const LaneReceiver::Item*> LaneReceiver::unfinished() const {
  std::vector<const Item*> out;
  for (std::size_t i = delivered_; i < items_.size(); ++i) out.push_back(&items_[i]);
  return out;
}

void LaneReceiver::complete_current() {
  ++current_;
  while (current_ < items_.size() && items_[current_].buffer->size() == 0) ++current_;
}

std::string LaneReceiver::deliver(std::vector<Item>& done) {
  if (opener_) {
    // Everything received: what is left to open is a record or two; wait for it here.
    if (current_ >= items_.size() && delivered_ < items_.size()) opener_->drain();
    const Opener::Settled settled = opener_->settle(delivered_, current_);
    for (std::size_t i = 0; i < settled.ready; ++i) {
      done.push_back(std::move(items_[delivered_]));
      ++delivered_;
    }
    if (settled.failed) {
      // The results before the one that failed are whole and authentic: they counted above.
      // How far that one got is how far it was authentic (the bytes read past it count for
      // nothing).
      items_[settled.bad_item].received = settled.bad_offset;
      for (std::size_t i = settled.bad_item + 1; i < items_.size(); ++i) items_[i].received = 0;
      return "a record on its lane " + where_ + " is not authentic (byte " + std::to_string(settled.bad_offset) +
             " of a result)";
    }
    return "";
  }
  while (delivered_ < current_) {
    done.push_back(std::move(items_[delivered_]));
    ++delivered_;
  }
  return "";
}

std::string LaneReceiver::step(short revents, std::size_t budget, std::vector<Item>& done, bool& unreachable) {
  unreachable = false;
  if (dialer_) {
    const Dialer::State state = dialer_->step(revents);
    if (state == Dialer::State::working) return "";
    if (state == Dialer::State::failed) {
      unreachable = dialer_->unreachable();
      return "its lane " + where_ + ": " + dialer_->error();
    }
    Session session = dialer_->take();
    dialer_.reset();
    fd_ = session.fd;
    cipher_ = std::move(session.receive);
    if (cipher_) {
      std::uint64_t total = 0;
      for (const auto& item : items_) total += item.buffer->size();
      if (total > 2 * kLaneRecord) opener_ = std::make_unique<Opener>(std::move(cipher_), items_.size());
    }
    return "";  // the bytes come later: poll for them
  }
  if ((revents & (POLLIN | POLLERR | POLLHUP)) == 0) return deliver(done);
  const std::string why = receive(budget);
  std::string late = deliver(done);  // the results complete before a failure still count
  return why.empty() ? late : why;
}

std::string LaneReceiver::receive(std::size_t budget) {
  std::size_t moved = 0;
  const bool sealed = cipher_ || opener_;
  while (current_ < items_.size() && moved < budget) {
    Item& item = items_[current_];
    char* base = item.buffer->mutable_data();
    const std::size_t size = item.buffer->size();
    // Where the next bytes go: plain, straight into the result; sealed, the record's header, its
    // body (into the result, opened there in place) or its tag.
    char* to;
    std::size_t want;
    if (!sealed) {
      to = base + item.received;
      want = std::min(size - item.received, budget - moved);
    } else if (header_have_ < kRecordHeader) {
      to = reinterpret_cast<char*>(header_) + header_have_;
      want = kRecordHeader - header_have_;
    } else if (body_have_ < body_len_) {
      to = base + item.received + body_have_;
      want = body_len_ - body_have_;
    } else {
      to = reinterpret_cast<char*>(tag_) + tag_have_;
      want = kRecordTag - tag_have_;
    }
    const ssize_t k = ::recv(fd_, to, want, 0);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
    if (k <= 0) {
      return (k == 0 ? "the holder closed its lane " + where_ : "its lane " + where_ + " failed: " + util::errno_text(errno)) +
             " after " + std::to_string(item.received) + " of " + std::to_string(size) + " bytes of a result";
    }
    const auto got = static_cast<std::size_t>(k);
    moved += got;
    progress_ += got;
    if (!sealed) {
      item.received += got;
    } else if (header_have_ < kRecordHeader) {
      header_have_ += got;
      if (header_have_ == kRecordHeader) {
        body_len_ = read_u32(header_);
        const std::size_t due = std::min(kLaneRecord, size - item.received);
        if (body_len_ != due) {
          return "its lane " + where_ + " sent a record of " + std::to_string(body_len_) + " bytes where " +
                 std::to_string(due) + " were due";
        }
        body_have_ = 0;
        tag_have_ = 0;
      }
    } else if (body_have_ < body_len_) {
      body_have_ += got;
    } else {
      tag_have_ += got;
      if (tag_have_ == kRecordTag) {
        if (opener_) {
          opener_->push(header_, base + item.received, body_len_, tag_, current_, item.received);
        } else if (!cipher_->open_in_place(header_, base + item.received, body_len_, tag_)) {
          return "a record on its lane " + where_ + " is not authentic (byte " + std::to_string(item.received) +
                 " of a result)";
        }
        item.received += body_len_;
        header_have_ = 0;
      }
    }
    if (item.received == size) complete_current();
  }
  return "";
}

}  // namespace herd::net
