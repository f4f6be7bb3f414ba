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
#include "net/bytes.hpp"
#include "net/tcp.hpp"

namespace herd::net {

namespace {

using Clock = std::chrono::steady_clock;

constexpr char kHelloMagic[4] = {'H', 'D', 'L', '1'};
constexpr std::size_t kHello = 4 + kLaneToken;
constexpr int kSocketBuffer = 4 << 20;           // SO_SNDBUF / SO_RCVBUF of a lane
constexpr std::size_t kMaxSend = 8 << 20;         // one send() of plain bytes at most
constexpr std::size_t kMaxPending = 512;          // accepted, hello not read yet
constexpr auto kHelloTimeout = std::chrono::seconds(10);

std::string errno_text(int err) { return std::strerror(err); }

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
  if (encrypt_) net::crypto_init();
  listen_fd_ = net::listen_on(host, kSocketBuffer, "herd data lane");
  if (!net::set_nonblocking(listen_fd_)) {
    const int err = errno;
    net::close_fd(listen_fd_);
    throw std::runtime_error("herd data lane: fcntl(O_NONBLOCK): " + errno_text(err));
  }
  port_ = net::local_port(listen_fd_);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) {
    const int err = errno;
    net::close_fd(listen_fd_);
    throw std::runtime_error("herd data lane: eventfd: " + errno_text(err));
  }
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
  net::close_fd(listen_fd_);
  net::close_fd(wake_fd_);
}

protocol::DataLane LaneServer::offer(std::vector<PayloadPtr> payloads, bool fetcher_has_aes) {
  Offer o;
  o.payloads = std::move(payloads);
  o.expires = Clock::now() + timeout_;
  protocol::DataLane lane;
  lane.port = port_;
  lane.token = net::random_bytes(kLaneToken);
  if (encrypt_) {
    o.key = net::random_key();
    o.cipher = fetcher_has_aes && net::aes_available() ? net::kCipherAes : net::kCipherChacha;
    lane.key = net::key_bytes(o.key);
    lane.cipher = o.cipher;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  offers_.emplace(lane.token, std::move(o));
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
  std::vector<Pending> pending;
  std::vector<pollfd> fds;
  while (!stop_) {
    fds.clear();
    fds.push_back({listen_fd_, POLLIN, 0});
    fds.push_back({wake_fd_, POLLIN, 0});
    for (const Pending& p : pending) fds.push_back({p.fd, POLLIN, 0});
    // Wake for the nearest hello deadline, and now and then to withdraw stale offers and
    // reap finished transfers.
    auto wait = std::chrono::milliseconds(500);
    const auto now0 = Clock::now();
    for (const Pending& p : pending) {
      wait = std::min(wait, std::chrono::duration_cast<std::chrono::milliseconds>(p.deadline - now0) +
                                std::chrono::milliseconds(1));
    }
    if (::poll(fds.data(), fds.size(), static_cast<int>(std::max<std::int64_t>(0, wait.count()))) < 0 &&
        errno != EINTR) {
      HERD_LOG(error) << "herd data lane: poll: " << errno_text(errno);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    if (stop_) break;
    if (fds[1].revents & POLLIN) {
      std::uint64_t n;
      (void)!::read(wake_fd_, &n, sizeof n);
    }
    const auto now = Clock::now();
    // The hellos first, while `pending` is still what was polled (fds[2 + i] is pending[i]);
    // then the new connections, polled from the next turn on.
    for (std::size_t i = 0; i < pending.size(); ++i) {
      if ((fds[2 + i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      on_hello(pending[i]);
    }
    if (fds[0].revents & POLLIN) {
      for (;;) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;  // EAGAIN, or a connection reset before we took it
        if (pending.size() >= kMaxPending) {  // a flood: a random old one makes room
          const std::size_t victim = static_cast<std::size_t>(net::random_bytes(1)[0]) % pending.size();
          net::close_fd(pending[victim].fd);
          pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(victim));
        }
        pending.push_back({fd, {}, now + std::min<Clock::duration>(kHelloTimeout, timeout_)});
      }
    }
    for (auto it = pending.begin(); it != pending.end();) {
      if (it->fd >= 0 && now >= it->deadline) net::close_fd(it->fd);
      it = it->fd < 0 ? pending.erase(it) : std::next(it);
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
  for (Pending& p : pending) net::close_fd(p.fd);
}

void LaneServer::on_hello(Pending& p) {
  char buf[kHello];
  const ssize_t k = ::recv(p.fd, buf, kHello - p.hello.size(), 0);
  if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (k <= 0) {
    net::close_fd(p.fd);
    return;
  }
  p.hello.append(buf, static_cast<std::size_t>(k));
  // A stray is dropped at its first wrong byte of the magic.
  if (std::memcmp(p.hello.data(), kHelloMagic, std::min<std::size_t>(4, p.hello.size())) != 0) {
    net::close_fd(p.fd);
    return;
  }
  if (p.hello.size() < kHello) return;
  Offer offer;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = offers_.find(p.hello.substr(4));
    if (it == offers_.end()) {
      net::close_fd(p.fd);  // no such token, or it was used already
      return;
    }
    offer = std::move(it->second);
    offers_.erase(it);
  }
  start_transfer(std::exchange(p.fd, -1), std::move(offer));
}

void LaneServer::start_transfer(int fd, Offer offer) {
  std::lock_guard<std::mutex> lock(mutex_);
  Transfer& t = transfers_.emplace_back();
  t.fd = fd;
  t.thread = std::thread([this, &t, offer = std::move(offer)] {
    send_offer(t, offer);
    std::lock_guard<std::mutex> held(mutex_);
    net::close_fd(t.fd);
    t.done = true;
  });
}

void LaneServer::send_offer(Transfer& t, const Offer& offer) {
  const int fd = t.fd;
  // Blocking from here: the thread has nothing else to do. A fetcher that stops reading for
  // the whole progress timeout is given up on (its request fails over, as on the data port).
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout_.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout_.count() % 1000) * 1000);
  (void)::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  net::set_liveness(fd);

  std::unique_ptr<net::RecordCipher> cipher;
  std::unique_ptr<unsigned char[]> stage;
  if (offer.cipher != net::kCipherNone) {
    cipher = std::make_unique<net::RecordCipher>(offer.cipher, offer.key);
    {
      std::lock_guard lock(mutex_);
      if (!stages_.empty()) {
        stage = std::move(stages_.back());
        stages_.pop_back();
      }
    }
    if (!stage) stage.reset(new unsigned char[net::kRecordHeader + kLaneRecord + net::kRecordTag]);
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
        ok = send_all(fd, reinterpret_cast<const char*>(stage.get()), net::kRecordHeader + n + net::kRecordTag);
      } else {
        n = std::min(kMaxSend, size - off);
        ok = send_all(fd, data + off, n);
      }
      if (!ok) {
        const int err = errno;
        HERD_LOG(warning) << "herd data lane: sending stopped after " << sent << " of " << total
                          << " bytes: " << (err == EAGAIN || err == EWOULDBLOCK
                                                ? "the fetcher read nothing for " + std::to_string(timeout_.count()) + " ms"
                                                : errno_text(err));
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

// Opening a record (AES-GCM, ~0.25 ms a MiB here) and reading the next one off the socket
// (the kernel's copy and the first touch of the result's pages, ~0.5 ms a MiB) were one after
// the other on the fetcher's thread; the holder's sealing thread waited meanwhile. The opener
// takes the records in order (the cipher counts them) and opens each in place, in the result's
// buffer, while the fetcher's thread reads the next one into the bytes after it.
class LaneReceiver::Opener {
 public:
  Opener(std::unique_ptr<net::RecordCipher> cipher, std::size_t items)
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
    std::memcpy(job.header, header, net::kRecordHeader);
    std::memcpy(job.tag, tag, net::kRecordTag);
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
  /// Records of `item` queued and not opened yet.
  std::uint32_t pending(std::size_t item) {
    std::lock_guard lock(mu_);
    return pending_[item];
  }
  /// Waits until every record queued is opened.
  void drain() {
    std::unique_lock lock(mu_);
    idle_.wait(lock, [&] { return jobs_.empty() && !busy_; });
  }
  /// Whether a record failed: then the result it was in and where that record starts.
  bool failed(std::size_t& item, std::uint64_t& offset) {
    std::lock_guard lock(mu_);
    item = bad_item_;
    offset = bad_offset_;
    return failed_;
  }

 private:
  struct Job {
    unsigned char header[net::kRecordHeader];
    unsigned char tag[net::kRecordTag];
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

  std::unique_ptr<net::RecordCipher> cipher_;
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

LaneReceiver::LaneReceiver(const std::string& host, const protocol::DataLane& lane, std::vector<Item> items)
    : items_(std::move(items)) {
  const std::string port = std::to_string(lane.port);
  where_ = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + port;
  if (!lane.key.empty()) {
    net::Key key{};
    if (!net::key_from_bytes(lane.key, key)) {
      throw std::runtime_error("the lane " + where_ + " came with a key of " + std::to_string(lane.key.size()) +
                               " bytes");
    }
    try {
      cipher_ = std::make_unique<net::RecordCipher>(lane.cipher, key);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error("the lane " + where_ + ": " + e.what());
    }
  }
  if (lane.token.size() != kLaneToken) {
    throw std::runtime_error("the lane " + where_ + " came with a token of " + std::to_string(lane.token.size()) +
                             " bytes");
  }
  hello_.assign(kHelloMagic, 4);
  hello_ += lane.token;
  // Refused at once (nothing listens there): the first step() reports it as unreachable.
  std::string error;
  fd_ = net::connect_start(host, port, kSocketBuffer, connect_error_, error);
  if (fd_ < 0) throw std::runtime_error("the lane " + where_ + ": " + error);
  net::set_liveness(fd_);
  while (current_ < items_.size() && items_[current_].buffer->size() == 0) ++current_;  // nothing to read
  delivered_ = current_;
  if (cipher_) {
    std::uint64_t total = 0;
    for (const auto& item : items_) total += item.buffer->size();
    if (total > 2 * kLaneRecord) opener_ = std::make_unique<Opener>(std::move(cipher_), items_.size());
  }
}

LaneReceiver::~LaneReceiver() {
  opener_.reset();  // before the results it writes into
  net::close_fd(fd_);
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
    std::size_t bad = 0;
    std::uint64_t offset = 0;
    if (opener_->failed(bad, offset)) {
      // The results before the one that failed are whole and authentic: they count. How far
      // that one got is how far it was authentic (the bytes read past it count for nothing).
      while (delivered_ < bad && opener_->pending(delivered_) == 0) {
        done.push_back(std::move(items_[delivered_]));
        ++delivered_;
      }
      items_[bad].received = offset;
      for (std::size_t i = bad + 1; i < items_.size(); ++i) items_[i].received = 0;
      return "a record on its lane " + where_ + " is not authentic (byte " + std::to_string(offset) + " of a result)";
    }
  }
  while (delivered_ < current_ && (!opener_ || opener_->pending(delivered_) == 0)) {
    done.push_back(std::move(items_[delivered_]));
    ++delivered_;
  }
  return "";
}

std::string LaneReceiver::step(short revents, std::size_t budget, std::vector<Item>& done, bool& unreachable) {
  unreachable = false;
  if (state_ == State::connecting) {
    int err = connect_error_;
    if (err == 0) {
      if ((revents & (POLLOUT | POLLERR | POLLHUP)) == 0) return "";
      socklen_t len = sizeof err;
      if (::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    }
    if (err != 0) {
      unreachable = true;
      return "cannot connect to its lane " + where_ + ": " + errno_text(err);
    }
    state_ = State::hello;
  }
  if (state_ == State::hello) {
    const ssize_t k = ::send(fd_, hello_.data() + hello_sent_, hello_.size() - hello_sent_, MSG_NOSIGNAL);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return "";
    if (k < 0) return "its lane " + where_ + " failed: " + errno_text(errno);
    hello_sent_ += static_cast<std::size_t>(k);
    if (hello_sent_ < hello_.size()) return "";
    state_ = State::receiving;
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
    } else if (header_have_ < net::kRecordHeader) {
      to = reinterpret_cast<char*>(header_) + header_have_;
      want = net::kRecordHeader - header_have_;
    } else if (body_have_ < body_len_) {
      to = base + item.received + body_have_;
      want = body_len_ - body_have_;
    } else {
      to = reinterpret_cast<char*>(tag_) + tag_have_;
      want = net::kRecordTag - tag_have_;
    }
    const ssize_t k = ::recv(fd_, to, want, 0);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
    if (k <= 0) {
      return (k == 0 ? "the holder closed its lane " + where_ : "its lane " + where_ + " failed: " + errno_text(errno)) +
             " after " + std::to_string(item.received) + " of " + std::to_string(size) + " bytes of a result";
    }
    const auto got = static_cast<std::size_t>(k);
    moved += got;
    progress_ += got;
    if (!sealed) {
      item.received += got;
    } else if (header_have_ < net::kRecordHeader) {
      header_have_ += got;
      if (header_have_ == net::kRecordHeader) {
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
      if (tag_have_ == net::kRecordTag) {
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
