// The CPU ring (see ring.hpp): setup, the transfer engine, and the reductions.
//
// Wire format. Each ring link is one TCP connection from rank r to rank r+1, used in one
// direction only (r -> r+1) once set up. Setup is the handshake of net/handshake.hpp (purpose
// "herd ring"): the offer is derived from the gang's token (ticket_from_token), which only the
// gang's members got, over the scheduler's CURVE link; rank r+1 accepts it, rank r dials it with
// hello a = its rank, b = the gang's size, wanting encryption unless HERD_AUTH=off; the
// acceptor admits only its predecessor of a gang of that size and answers with its own rank.
// Each side proves it holds the token for this connection's fresh nonces before anything else
// moves: a stray learns a random nonce and is dropped at its first wrong byte, at a hello
// without the proof, or after kHandshakeTimeout; a replayed hello fails on the new nonce.
// Pending connections are served side by side (a deadline each, a random one dropped when too
// many pile up), so junk cannot keep a gang from forming. The data of a link is sealed with the
// handshake's connector-to-acceptor key (fresh per connection), records of at most kRecord
// bytes (net/aead.hpp), unless encryption is off at both ends.
// A record that fails authentication aborts the gang. Without encryption the bytes go as they
// are. After setup, each operation on a link starts with a header, then the payload bytes
// (whose length both ends know, since every rank calls the same operations with the same counts):
//   op header: "HROP" | u32 sequence number of the operation on this communicator |
//              u8 kind (1 allreduce, 2 broadcast) | u8 DataType | u8 ReduceOp | u8 0 |
//              u32 root (broadcast) | u64 count (allreduce: elements; broadcast: bytes)
// so ranks that are out of step (different calls, or bytes left over from an aborted
// operation) fail with GangAborted instead of reducing garbage.
//
// Operations are a list of steps; in each step a rank sends a range of its buffer to the next
// rank and receives a range from the previous one (into a scratch ring to reduce, or straight
// into the buffer). A step's send may depend on an earlier receive (all-reduce: what rank r
// sends in step t is what it reduced in step t-1; broadcast: what it forwards is what it is
// receiving), and is released as that receive is processed, byte by byte (encrypted: record by
// record), so segments flow through the ring without waiting for whole chunks; a received
// segment is reduced while the kernel keeps receiving the next. Encrypted, a record is sealed
// from the buffer into a small staging buffer and opened straight into the buffer (or, to
// reduce, into a record-sized buffer reduced from at once): one pass over the data each way.
// One thread, non-blocking sockets and poll() on both links and an abort eventfd: nothing can
// deadlock on full kernel buffers, and abort() always wakes it.
#include "collective/ring.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>


#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <mutex>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "net/aead.hpp"
#include "net/bytes.hpp"
#include "net/handshake.hpp"
#include "net/tcp.hpp"
#include "common/util.hpp"
#include "herd/error.hpp"

namespace herd::collective {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kSocketBuffer = 4 << 20;              // SO_SNDBUF / SO_RCVBUF of a ring link
constexpr std::size_t kScratch = 4 << 20;           // receive ring of a reducing step
constexpr std::size_t kSegment = 256 << 10;         // reduce once this much has arrived
constexpr std::size_t kMaxRecv = 1 << 20;           // one recv() call at most
constexpr char kPurpose[] = "herd ring";
constexpr std::size_t kMaxToken = 4096;
constexpr char kOpMagic[4] = {'H', 'R', 'O', 'P'};
constexpr std::size_t kOpHeader = 24;
constexpr std::size_t kRecord = 256 << 10;                    // plaintext bytes per record at most
constexpr std::size_t kMinRecord = 64 << 10;                  // a partial step waits for this much
constexpr auto kHandshakeTimeout = std::chrono::seconds(10);  // for one accepted connection


[[noreturn]] void throw_sys(const std::string& what, int err = errno) {
  throw std::runtime_error("herd ring: " + what + ": " + util::errno_text(err));
}

void set_nonblocking(int fd) {
  if (!net::set_nonblocking(fd)) throw_sys("fcntl(O_NONBLOCK)");
}

// ------------------------------------------------------------------------------------------
// Keys and records (see the top of the file).

using net::kRecordTag;
using LinkCipher = net::RecordCipher;  // one direction of a link

std::pair<std::string, std::string> split_address(const std::string& address) {
  try {
    return net::split_address(address);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("herd ring: ") + e.what());
  }
}

using net::close_fd;
using net::set_liveness;
using net::set_nodelay;

// ------------------------------------------------------------------------------------------
// Reductions: dst[i] = dst[i] op src[i]. Integers wrap (summed as unsigned: no UB on overflow).

template <typename T>
struct Sum {
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    } else {
      return a + b;
    }
  }
};
template <typename T>
struct Max {
  static T apply(T a, T b) { return b > a ? b : a; }
};
template <typename T>
struct Min {
  static T apply(T a, T b) { return b < a ? b : a; }
};

template <typename T, template <typename> class Op>
void reduce_into(void* dst, const void* src, std::size_t count) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  for (std::size_t i = 0; i < count; ++i) d[i] = Op<T>::apply(d[i], s[i]);
}

template <template <typename> class Op>
void reduce_half(void* dst, const void* src, std::size_t count) {
  // Each hop reduces in float and rounds back to half; the owner of a chunk does all of its
  // hops, so every rank ends with the same bits.
  half* d = static_cast<half*>(dst);
  const half* s = static_cast<const half*>(src);
  for (std::size_t i = 0; i < count; ++i) d[i] = to_half(Op<float>::apply(to_float(d[i]), to_float(s[i])));
}

using ReduceFn = void (*)(void*, const void*, std::size_t);

template <template <typename> class Op>
ReduceFn reducer_for(DataType type) {
  switch (type) {
    case DataType::int32: return &reduce_into<std::int32_t, Op>;
    case DataType::int64: return &reduce_into<std::int64_t, Op>;
    case DataType::float16: return &reduce_half<Op>;
    case DataType::float32: return &reduce_into<float, Op>;
    case DataType::float64: return &reduce_into<double, Op>;
  }
  throw std::invalid_argument("herd ring: unknown DataType");
}

ReduceFn reducer(DataType type, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return reducer_for<Sum>(type);
    case ReduceOp::max: return reducer_for<Max>(type);
    case ReduceOp::min: return reducer_for<Min>(type);
  }
  throw std::invalid_argument("herd ring: unknown ReduceOp");
}

template <typename T>
void divide(void* buffer, std::size_t count, int n) {
  T* p = static_cast<T*>(buffer);
  const T d = static_cast<T>(n);
  for (std::size_t i = 0; i < count; ++i) p[i] = p[i] / d;
}

void divide_by(void* buffer, std::size_t count, DataType type, int n) {
  switch (type) {
    case DataType::int32: return divide<std::int32_t>(buffer, count, n);
    case DataType::int64: return divide<std::int64_t>(buffer, count, n);
    case DataType::float32: return divide<float>(buffer, count, n);
    case DataType::float64: return divide<double>(buffer, count, n);
    case DataType::float16: {
      half* p = static_cast<half*>(buffer);
      const auto d = static_cast<float>(n);
      for (std::size_t i = 0; i < count; ++i) p[i] = to_half(to_float(p[i]) / d);
      return;
    }
  }
}

// ------------------------------------------------------------------------------------------

/// One step of an operation, as seen by one rank.
struct Step {
  const char* send = nullptr;  // what goes to the next rank
  std::size_t send_len = 0;
  int gate = -1;               // the send is released as receive step `gate` is processed (-1: at once)
  char* recv = nullptr;        // where the previous rank's bytes end up
  std::size_t recv_len = 0;
  bool reduce = false;         // true: received into scratch (encrypted: plain_), then reduced into `recv`
};

class RingCommunicator final : public herd::detail::CommunicatorImpl {
 public:
  RingCommunicator(int rank, int size, int send_fd, int recv_fd, std::unique_ptr<LinkCipher> send_cipher,
                   std::unique_ptr<LinkCipher> recv_cipher)
      : rank_(rank), size_(size), send_fd_(send_fd), recv_fd_(recv_fd), send_cipher_(std::move(send_cipher)),
        recv_cipher_(std::move(recv_cipher)) {
    if (send_cipher_) out_.resize(4 + kRecord + kRecordTag);
    if (recv_cipher_) {
      in_.resize(4 + kRecord + kRecordTag);
      plain_.resize(kRecord);
    }
    abort_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (abort_fd_ < 0) {
      const int err = errno;
      close_fd(send_fd_);
      close_fd(recv_fd_);
      throw_sys("eventfd", err);
    }
  }
  ~RingCommunicator() override {
    close_fd(send_fd_);
    close_fd(recv_fd_);
    close_fd(abort_fd_);
  }
  RingCommunicator(const RingCommunicator&) = delete;
  RingCommunicator& operator=(const RingCommunicator&) = delete;

  void allreduce(void* buffer, std::size_t count, DataType type, ReduceOp op) override {
    check_aborted();
    const int n = size_;
    if (n > 1 && count > 0) {
      elem_ = size_of(type);
      reduce_ = reducer(type, op);
      auto* base = static_cast<char*>(buffer);
      // Chunk i: count/n elements, one more for the first count%n chunks.
      const std::size_t q = count / static_cast<std::size_t>(n), rem = count % static_cast<std::size_t>(n);
      auto chunk_begin = [&](int i) {
        const auto u = static_cast<std::size_t>(i);
        return (u * q + std::min(u, rem)) * elem_;
      };
      auto chunk_len = [&](int i) { return (q + (static_cast<std::size_t>(i) < rem ? 1 : 0)) * elem_; };
      auto mod = [n](int x) { return ((x % n) + n) % n; };
      begin_op(1, type, op, 0, count, true, true);
      for (int t = 0; t < 2 * n - 2; ++t) {
        const int s = mod(rank_ - t), r = mod(rank_ - t - 1);
        Step st;
        if (t == 0) st.gate = -1;
        st.send = base + chunk_begin(s);
        st.send_len = chunk_len(s);
        if (t > 0) st.gate = t;  // step t+1 (after the header) forwards what step t reduced
        st.recv = base + chunk_begin(r);
        st.recv_len = chunk_len(r);
        st.reduce = t < n - 1;
        steps_.push_back(st);
      }
      run("allreduce");
    }
    if (op == ReduceOp::avg && n > 1) divide_by(buffer, count, type, n);
  }

  void broadcast(void* buffer, std::size_t bytes, int root) override {
    check_aborted();
    if (size_ == 1 || bytes == 0) return;
    auto* p = static_cast<char*>(buffer);
    const int next = (rank_ + 1) % size_;
    begin_op(2, DataType::int32, ReduceOp::sum, root, bytes, rank_ != root, next != root);
    Step st;
    if (rank_ == root) {
      st.send = p;
      st.send_len = bytes;
    } else {
      st.recv = p;
      st.recv_len = bytes;
      if (next != root) {  // forward what arrives, as it arrives
        st.send = p;
        st.send_len = bytes;
        st.gate = 1;
      }
    }
    steps_.push_back(st);
    run("broadcast");
  }

  void barrier() override {
    std::int32_t one = 1;
    allreduce(&one, 1, DataType::int32, ReduceOp::sum);
  }

  void abort(const std::string& reason) override {
    {
      std::lock_guard lock(mutex_);
      if (aborted_.load()) return;
      reason_ = reason;
      aborted_.store(true);
    }
    const std::uint64_t one = 1;
    (void)!::write(abort_fd_, &one, sizeof one);
    // Wake the neighbours as well: their operations fail instead of waiting for us.
    if (send_fd_ >= 0) ::shutdown(send_fd_, SHUT_RDWR);
    if (recv_fd_ >= 0) ::shutdown(recv_fd_, SHUT_RDWR);
  }

  CollectiveBackend backend() const override { return CollectiveBackend::cpu_ring; }

 private:
  void check_aborted() {
    if (!aborted_.load()) return;
    std::lock_guard lock(mutex_);
    throw GangAborted(reason_);
  }

  /// Starts the step list with the operation header: sent when this rank sends anything in
  /// the operation, expected when it receives anything.
  void begin_op(int kind, DataType type, ReduceOp op, int root, std::size_t count, bool receives, bool sends) {
    header_out_.assign(kOpMagic, 4);
    net::append_u32(header_out_, seq_++);
    header_out_.push_back(static_cast<char>(kind));
    header_out_.push_back(static_cast<char>(type));
    header_out_.push_back(static_cast<char>(op));
    header_out_.push_back(0);
    net::append_u32(header_out_, static_cast<std::uint32_t>(root));
    net::append_u64(header_out_, count);
    steps_.clear();
    Step header;
    header.send = header_out_.data();
    header.send_len = sends ? kOpHeader : 0;
    header.recv = header_in_;
    header.recv_len = receives ? kOpHeader : 0;
    steps_.push_back(header);
  }

  /// A link failed: every later operation fails the same way, and the neighbours notice too.
  [[noreturn]] void fail(int peer, const char* opname, const std::string& what,
                         const char* how = "disconnected during") {
    const std::string reason = "rank " + std::to_string(peer) + " " + how + " " + opname + " (" + what +
                               "; seen by rank " + std::to_string(rank_) + ")";
    abort(reason);
    check_aborted();  // throws (the first reason wins, if an abort raced with us)
    throw GangAborted(reason);
  }

  std::size_t available(std::size_t step, std::size_t recv_step, std::size_t processed) const {
    const Step& st = steps_[step];
    if (st.gate < 0) return st.send_len;
    const auto gate = static_cast<std::size_t>(st.gate);
    if (recv_step > gate) return st.send_len;
    if (recv_step < gate) return 0;
    return std::min(st.send_len, processed);
  }

  void run(const char* opname) {
    const int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
    std::size_t scratch_size = 0;
    if (!recv_cipher_) {
      for (const Step& st : steps_) {
        if (st.reduce) scratch_size = std::max(scratch_size, std::min(st.recv_len, kScratch));
      }
    }
    if (scratch_.size() < scratch_size) scratch_.resize(scratch_size);
    const std::size_t ring = scratch_size;  // a multiple of every element size (or the whole step)

    const std::size_t nsteps = steps_.size();
    std::size_t ss = 0, sent = 0;                    // send cursor: step, bytes of it sent (sealed)
    std::size_t rs = 0, received = 0, processed = 0;  // receive cursor: step, bytes in, bytes done
    out_len_ = out_pos_ = 0;
    in_have_ = 0;

    auto reduce_pending = [&](bool all) {
      // Reduce the whole elements received and not yet reduced (or wait for a segment's worth).
      const Step& st = steps_[rs];
      std::size_t pending = (received - processed) / elem_ * elem_;
      if (pending == 0 || (!all && pending < kSegment && received != st.recv_len)) return false;
      while (pending > 0) {
        const std::size_t at = processed % ring;
        const std::size_t piece = std::min(pending, ring - at);
        reduce_(st.recv + processed, scratch_.data() + at, piece / elem_);
        processed += piece;
        pending -= piece;
      }
      return true;
    };

    for (;;) {
      // Skip finished (and empty) steps.
      while (rs < nsteps && processed == steps_[rs].recv_len) {
        if (rs == 0 && steps_[0].recv_len == kOpHeader &&
            std::memcmp(header_in_, header_out_.data(), kOpHeader) != 0) {
          fail(prev, opname,
               "its operation header differs from ours: a different call, count or type, or bytes left "
               "from an aborted operation",
               "is out of step in");
        }
        ++rs, received = 0, processed = 0;
      }
      while (ss < nsteps && sent == steps_[ss].send_len) ++ss, sent = 0;
      const bool sealed_left = out_pos_ < out_len_;  // a record still on its way out
      if (ss == nsteps && rs == nsteps && !sealed_left) return;
      if (aborted_.load()) check_aborted();

      bool progress = false, want_out = false, want_in = false;
      auto send_some = [&](const char* data, std::size_t len) -> std::size_t {
        const ssize_t k = ::send(send_fd_, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) {
          progress = true;
          return static_cast<std::size_t>(k);
        }
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
          want_out = true;
        } else if (k < 0 && errno == EINTR) {
          progress = true;  // try again
        } else {
          fail(next, opname, k < 0 ? util::errno_text(errno) : "send returned 0");
        }
        return 0;
      };
      auto recv_some = [&](char* dst, std::size_t room) -> std::size_t {
        const ssize_t k = ::recv(recv_fd_, dst, room, MSG_DONTWAIT);
        if (k > 0) {
          progress = true;
          return static_cast<std::size_t>(k);
        }
        if (k == 0) fail(prev, opname, "connection closed");
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          want_in = true;
        } else if (errno == EINTR) {
          progress = true;  // try again
        } else {
          fail(prev, opname, util::errno_text(errno));
        }
        return 0;
      };

      if (send_cipher_) {
        if (sealed_left) {
          out_pos_ += send_some(reinterpret_cast<const char*>(out_.data()) + out_pos_, out_len_ - out_pos_);
        } else if (ss < nsteps) {
          // Seal the next record: what is released of this step, kRecord at most; a step not
          // yet released to its end waits for kMinRecord (whole elements, when reduced).
          const Step& st = steps_[ss];
          const std::size_t avail = available(ss, rs, processed);
          std::size_t len = std::min(avail - sent, kRecord);
          if (avail < st.send_len) {
            if (st.reduce) len = len / elem_ * elem_;
            if (len < kMinRecord) len = 0;
          }
          if (len > 0) {
            send_cipher_->seal(st.send + sent, len, out_.data());
            out_len_ = 4 + len + kRecordTag;
            out_pos_ = 0;
            sent += len;
            progress = true;
          }
        }
      } else if (ss < nsteps) {
        const std::size_t avail = available(ss, rs, processed);
        if (avail > sent) sent += send_some(steps_[ss].send + sent, avail - sent);
      }

      if (rs < nsteps && recv_cipher_) {
        // Read one record (length, ciphertext, tag) whole, then open it into the buffer, or
        // into plain_ and reduce from there.
        const Step& st = steps_[rs];
        const std::size_t len = in_have_ >= 4 ? net::read_u32(reinterpret_cast<const char*>(in_.data())) : 0;
        const std::size_t want = in_have_ < 4 ? 4 - in_have_ : 4 + len + kRecordTag - in_have_;
        in_have_ += recv_some(reinterpret_cast<char*>(in_.data()) + in_have_, want);
        if (in_have_ == 4) {
          const std::size_t n = net::read_u32(reinterpret_cast<const char*>(in_.data()));
          if (n == 0 || n > kRecord || n > st.recv_len - processed || (st.reduce && n % elem_ != 0)) {
            fail(prev, opname, "a malformed record (" + std::to_string(n) + " bytes) arrived", "sent garbage during");
          }
        } else if (in_have_ > 4 && in_have_ == 4 + len + kRecordTag) {
          char* dst = st.reduce ? plain_.data() : st.recv + processed;
          if (!recv_cipher_->open(in_.data(), len, dst)) {
            fail(prev, opname, "a record failed authentication: not from this gang, or altered on the way",
                 "sent forged data during");
          }
          if (st.reduce) reduce_(st.recv + processed, plain_.data(), len / elem_);
          processed += len;
          received = processed;
          in_have_ = 0;
        }
      } else if (rs < nsteps) {
        const Step& st = steps_[rs];
        if (received < st.recv_len) {
          char* dst;
          std::size_t room;
          if (st.reduce) {
            const std::size_t at = received % ring;
            room = std::min({ring - at, ring - (received - processed), st.recv_len - received});
            dst = scratch_.data() + at;
          } else {
            room = st.recv_len - received;
            dst = st.recv + received;
          }
          room = std::min(room, kMaxRecv);
          if (room > 0) {
            received += recv_some(dst, room);
            if (!st.reduce) processed = received;
          }
        }
        // Reduce a segment's worth as it arrives, everything once the step is in, and whatever
        // is there while the socket is empty (otherwise we would only wait).
        if (st.reduce && reduce_pending(want_in || received == st.recv_len)) progress = true;
      }
      if (progress) continue;

      pollfd fds[3] = {};
      fds[0].fd = abort_fd_;
      fds[0].events = POLLIN;
      // The link to the next rank carries nothing back: readable means closed or reset.
      fds[1].fd = ss < nsteps || sealed_left ? send_fd_ : -1;
      fds[1].events = static_cast<short>(POLLIN | POLLRDHUP | (want_out ? POLLOUT : 0));
      fds[2].fd = want_in ? recv_fd_ : -1;
      fds[2].events = POLLIN | POLLRDHUP;
      if (!want_in && !want_out) {
        // Nothing to wait for cannot happen (a step with data left always wants something).
        throw std::logic_error("herd ring: transfer stalled");
      }
      const int rc = ::poll(fds, 3, -1);
      if (rc < 0) {
        if (errno == EINTR) continue;
        throw_sys("poll");
      }
      if (fds[0].revents) check_aborted();
      if (fds[1].revents & (POLLIN | POLLRDHUP | POLLERR | POLLHUP)) {
        char byte;
        const ssize_t k = ::recv(send_fd_, &byte, 1, MSG_DONTWAIT | MSG_PEEK);
        if (k == 0) fail(next, opname, "connection closed");
        if (k > 0) fail(next, opname, "unexpected data from the next rank");
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) fail(next, opname, util::errno_text(errno));
      }
    }
  }

  const int rank_, size_;
  int send_fd_ = -1, recv_fd_ = -1, abort_fd_ = -1;
  std::atomic<bool> aborted_{false};
  std::mutex mutex_;
  std::string reason_;
  // The operation in progress (one caller at a time).
  std::vector<Step> steps_;
  std::uint32_t seq_ = 0;
  std::string header_out_;
  char header_in_[kOpHeader] = {};
  std::vector<char> scratch_;
  std::size_t elem_ = 1;
  ReduceFn reduce_ = nullptr;
  // Encryption (nullptr: plain): the sealed record going out, the record coming in.
  std::unique_ptr<LinkCipher> send_cipher_, recv_cipher_;
  std::vector<unsigned char> out_;
  std::size_t out_len_ = 0, out_pos_ = 0;
  std::vector<unsigned char> in_;
  std::size_t in_have_ = 0;
  std::vector<char> plain_;
};

/// Size 1: nothing to talk to.
class SoloCommunicator final : public herd::detail::CommunicatorImpl {
 public:
  void allreduce(void*, std::size_t, DataType, ReduceOp) override { check(); }
  void broadcast(void*, std::size_t, int) override { check(); }
  void barrier() override { check(); }
  void abort(const std::string& reason) override {
    std::lock_guard lock(mutex_);
    if (!aborted_) reason_ = reason;
    aborted_ = true;
  }
  CollectiveBackend backend() const override { return CollectiveBackend::cpu_ring; }

 private:
  void check() {
    std::lock_guard lock(mutex_);
    if (aborted_) throw GangAborted(reason_);
  }
  std::mutex mutex_;
  bool aborted_ = false;
  std::string reason_;
};

}  // namespace

RingListener::RingListener(const std::string& host) {
  const bool any = host.empty() || host == "*";
  int fd = net::listen_on(host, kSocketBuffer, "herd ring");  // accepted sockets inherit the buffers
  std::string shown = host;
  if (any) {
    shown = util::hostname();
    if (shown.empty()) {
      close_fd(fd);
      throw_sys("gethostname");
    }
  }
  if (shown.find(':') != std::string::npos) shown = "[" + shown + "]";  // an IPv6 literal
  set_nonblocking(fd);
  fd_ = fd;
  address_ = shown + ":" + std::to_string(net::local_port(fd));
}

RingListener::~RingListener() { close_fd(fd_); }

RingListener::RingListener(RingListener&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), address_(std::move(other.address_)) {}

RingListener& RingListener::operator=(RingListener&& other) noexcept {
  if (this != &other) {
    close_fd(fd_);
    fd_ = std::exchange(other.fd_, -1);
    address_ = std::move(other.address_);
  }
  return *this;
}

int RingListener::release() { return std::exchange(fd_, -1); }

std::unique_ptr<herd::detail::CommunicatorImpl> make_ring(RingSetup setup, RingListener listener) {
  const int n = setup.size, rank = setup.rank;
  if (n < 1 || rank < 0 || rank >= n) {
    throw std::invalid_argument("herd ring: rank " + std::to_string(rank) + " of size " + std::to_string(n));
  }
  if (n == 1) return std::make_unique<SoloCommunicator>();
  if (setup.addresses.size() != static_cast<std::size_t>(n)) {
    throw std::invalid_argument("herd ring: " + std::to_string(setup.addresses.size()) + " addresses for " +
                                std::to_string(n) + " ranks");
  }
  if (setup.token.size() > kMaxToken) throw std::invalid_argument("herd ring: token longer than 4096 bytes");
  if (listener.fd() < 0) throw std::invalid_argument("herd ring: no listener");
  net::crypto_init();

  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  const std::string& next_address = setup.addresses[static_cast<std::size_t>(next)];
  const auto deadline = Clock::now() + setup.connect_timeout;
  const std::string me = "rank " + std::to_string(rank);
  const net::OfferTicket ticket = net::ticket_from_token(kPurpose, setup.token);
  const auto [host, port] = split_address(next_address);

  // Accept side: the gang's offer, for as long as the setup lasts; only rank `prev` of a gang of
  // this size gets in.
  net::Gate::Options options;
  options.purpose = kPurpose;
  options.who = "herd ring (" + me + ")";
  options.hello_timeout = kHandshakeTimeout;
  net::Gate gate(listener.release(), std::move(options));
  gate.offer(ticket, 0, deadline + std::chrono::seconds(1), false);
  const net::Gate::Decide decide = [&](std::uint64_t, const net::Hello& hello) -> std::optional<net::Ack> {
    if (hello.a != static_cast<std::uint32_t>(prev) || hello.b != static_cast<std::uint32_t>(n)) return std::nullopt;
    net::Ack ack;
    ack.cipher = net::choose_cipher(setup.encrypt, hello.flags);
    ack.a = static_cast<std::uint32_t>(rank);
    return ack;
  };
  std::vector<net::Session> admitted;
  net::Session in;  // from prev, once admitted

  // Connect side: a dialer per attempt (the next resolved address each time).
  net::Hello hello;
  hello.flags = net::hello_flags(setup.encrypt);
  hello.a = static_cast<std::uint32_t>(rank);
  hello.b = static_cast<std::uint32_t>(n);
  std::unique_ptr<net::Dialer> dialer;
  net::Session out;  // to next, once done
  unsigned attempt = 0;
  auto retry_at = Clock::now();
  std::string last_error = "no attempt";

  auto cleanup = [&] {
    close_fd(in.fd);
    close_fd(out.fd);
  };
  // The dialer's step; a refusal or a failure waits a moment and tries again (the next rank may
  // not listen yet).
  auto advance = [&](short revents) {
    const net::Dialer::State state = dialer->step(revents);
    if (state == net::Dialer::State::working) return;
    if (state == net::Dialer::State::done) {
      net::Session s = dialer->take();
      dialer.reset();
      if (s.ack.a == static_cast<std::uint32_t>(next)) {
        out = std::move(s);
        return;
      }
      close_fd(s.fd);
      last_error = "a peer that is not rank " + std::to_string(next) + " answered";
    } else {
      last_error = dialer->error();  // refused: not listening yet, or gone
      dialer.reset();
    }
    retry_at = Clock::now() + std::chrono::milliseconds(20);
  };
  try {
    while (out.fd < 0 || in.fd < 0) {
      if (setup.aborted) {
        if (std::string why = setup.aborted(); !why.empty()) throw GangAborted(me + ": ring setup aborted: " + why);
      }
      const auto now = Clock::now();
      if (now >= deadline) {
        std::string why = me + ": ring setup timed out after " + std::to_string(setup.connect_timeout.count()) + " ms: ";
        if (out.fd < 0) {
          why += "could not connect to rank " + std::to_string(next) + " at " + next_address + " (" + last_error + ")";
        } else {
          why += "rank " + std::to_string(prev) + " never connected (or was refused: wrong token?)";
        }
        throw GangAborted(why);
      }
      if (out.fd < 0 && !dialer && now >= retry_at) {
        try {
          dialer = std::make_unique<net::Dialer>(host, port, kPurpose, ticket, hello, kSocketBuffer, attempt++);
          set_nodelay(dialer->fd());
        } catch (const std::exception& e) {
          throw GangAborted(me + ": cannot reach rank " + std::to_string(next) + " (" + next_address + "): " + e.what());
        }
      }
      if (dialer) advance(0);
      if (in.fd < 0) {
        admitted.clear();
        gate.step(now, decide, admitted);
        for (net::Session& s : admitted) {
          if (in.fd < 0) in = std::move(s);
          else close_fd(s.fd);  // a second copy of prev: the first one stands
        }
      }
      if (out.fd >= 0 && in.fd >= 0) break;

      pollfd fds[2] = {{in.fd < 0 ? gate.fd() : -1, POLLIN, 0}, {dialer ? dialer->fd() : -1, dialer ? dialer->events() : short{0}, 0}};
      auto wake = deadline;
      if (!dialer && out.fd < 0) wake = std::min(wake, retry_at);
      if (in.fd < 0) {
        if (const auto d = gate.next_deadline()) wake = std::min(wake, *d);
      }
      const auto wait_ms = std::chrono::ceil<std::chrono::milliseconds>(wake - Clock::now()).count();
      const int rc = ::poll(fds, 2, static_cast<int>(std::clamp<long long>(wait_ms, 0, setup.aborted ? 50 : 1000)));
      if (rc < 0) {
        if (errno == EINTR) continue;
        throw_sys("poll");
      }
      if (dialer && fds[1].revents != 0) advance(fds[1].revents);
    }
  } catch (...) {
    cleanup();
    throw;
  }
  set_nodelay(in.fd);
  set_liveness(in.fd);
  set_liveness(out.fd);
  // Each link carries data one way: prev -> this rank (in), this rank -> next (out).
  auto send_cipher = std::move(out.send);
  auto recv_cipher = std::move(in.receive);
  return std::make_unique<RingCommunicator>(rank, n, std::exchange(out.fd, -1), std::exchange(in.fd, -1),
                                            std::move(send_cipher), std::move(recv_cipher));
}

}  // namespace herd::collective
