// herd_bench allreduce: the CPU ring all-reduce (src/collective/ring.cpp) over loopback TCP.
//
// n ranks are n threads of this process, each with its own RingListener on 127.0.0.1 and its
// own buffer, connected by make_ring() as gang members on different machines would be. For each
// (n, size): the median over several float32 sum all-reduces of the slowest rank's time, and
// beside it a raw TCP copy of the same number of bytes between two threads of this process over
// loopback (same socket options), which bounds what one ring link can carry.
//
//   algbw = bytes / time, busbw = algbw * 2(n-1)/n   (the nccl-tests definitions: busbw is what
//   each link carries, comparable with a link's raw bandwidth)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <latch>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <herd/collective.hpp>

#include "collective/ring.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int iterations(std::size_t bytes, bool small) {
  const auto it = static_cast<int>(std::clamp<std::size_t>((std::size_t{256} << 20) / bytes, 5, 200));
  return small ? std::min(it, 10) : it;
}

/// Seconds per copy of `bytes` from one thread to another over a loopback TCP connection
/// (median of `iters`); each copy is timed on the receiver from its "go" byte to the last byte.
double raw_tcp_seconds(std::size_t bytes, int iters) {
  const int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int buf = 4 << 20, one = 1;
  ::setsockopt(lfd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  ::setsockopt(lfd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(lfd, 1) != 0 ||
      ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    throw std::runtime_error("raw tcp: cannot listen");
  }
  std::vector<char> out(bytes, 'x');
  std::thread sender([&] {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) throw std::runtime_error("raw tcp: connect");
    for (int i = 0; i < iters; ++i) {
      char go;
      if (::recv(fd, &go, 1, MSG_WAITALL) != 1) break;
      for (std::size_t off = 0; off < bytes;) {
        const ssize_t k = ::send(fd, out.data() + off, bytes - off, MSG_NOSIGNAL);
        if (k <= 0) break;
        off += static_cast<std::size_t>(k);
      }
    }
    ::close(fd);
  });
  const int fd = ::accept(lfd, nullptr, nullptr);
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::vector<char> in(bytes);
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    (void)::send(fd, "g", 1, MSG_NOSIGNAL);
    std::size_t got = 0;
    while (got < bytes) {
      const ssize_t k = ::recv(fd, in.data() + got, bytes - got, 0);
      if (k <= 0) throw std::runtime_error("raw tcp: short read");
      got += static_cast<std::size_t>(k);
    }
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  sender.join();
  ::close(fd);
  ::close(lfd);
  return median(times);
}

/// Runs every size on one ring of n threads; returns the median seconds per size.
std::vector<double> ring_seconds(int n, const std::vector<std::size_t>& sizes, bool small) {
  using herd::collective::RingListener;
  std::vector<std::string> addresses(static_cast<std::size_t>(n));
  std::latch bound(n);
  std::vector<std::vector<std::vector<double>>> per_rank(static_cast<std::size_t>(n));  // [rank][size][iter]
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        RingListener listener("127.0.0.1");
        addresses[static_cast<std::size_t>(r)] = listener.address();
        bound.arrive_and_wait();
        herd::collective::RingSetup setup;
        setup.rank = r;
        setup.size = n;
        setup.addresses = addresses;
        setup.token = "bench";
        herd::Communicator comm(r, n, herd::collective::make_ring(setup, std::move(listener)));
        auto& times = per_rank[static_cast<std::size_t>(r)];
        for (std::size_t bytes : sizes) {
          std::vector<float> v(bytes / sizeof(float), 1.0f);
          comm.allreduce(v);  // warm-up (page faults, socket buffers)
          times.emplace_back();
          for (int i = 0, iters = iterations(bytes, small); i < iters; ++i) {
            std::fill(v.begin(), v.end(), 1.0f);
            comm.barrier();
            const auto t0 = Clock::now();
            comm.allreduce(v);
            times.back().push_back(std::chrono::duration<double>(Clock::now() - t0).count());
          }
          if (v.front() != static_cast<float>(n) || v.back() != static_cast<float>(n)) {
            throw std::runtime_error("allreduce bench: wrong sum");
          }
        }
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  std::vector<double> out;
  for (std::size_t s = 0; s < sizes.size(); ++s) {
    std::vector<double> slowest(per_rank[0][s].size(), 0.0);  // per iteration, the slowest rank
    for (const auto& rank_times : per_rank) {
      for (std::size_t i = 0; i < slowest.size(); ++i) slowest[i] = std::max(slowest[i], rank_times[s][i]);
    }
    out.push_back(median(slowest));
  }
  return out;
}

}  // namespace

/// herd_bench allreduce (see the top of this file); one JSON line per (n, size). `only`: these
/// sizes in bytes instead of the ladder.
void allreduce_bench(const std::vector<int>& ranks, bool small, const std::vector<std::size_t>& only) {
  std::vector<std::size_t> sizes = only;
  const std::size_t top = small ? (std::size_t{4} << 20) : (std::size_t{256} << 20);
  if (sizes.empty()) {
    for (std::size_t b = 1024; b <= top; b *= small ? 16 : 4) sizes.push_back(b);
    if (small && sizes.back() != top) sizes.push_back(top);
  }
  std::vector<double> raw;
  for (std::size_t bytes : sizes) raw.push_back(raw_tcp_seconds(bytes, iterations(bytes, small)));
  for (int n : ranks) {
    const std::vector<double> secs = ring_seconds(n, sizes, small);
    for (std::size_t s = 0; s < sizes.size(); ++s) {
      const double bytes = static_cast<double>(sizes[s]);
      const double algbw = bytes / secs[s] / 1e6;
      const double busbw = algbw * 2.0 * (n - 1) / n;
      const double raw_mbps = bytes / raw[s] / 1e6;
      std::printf(
          "{\"system\":\"herd\",\"bench\":\"allreduce\",\"ranks\":%d,\"bytes\":%zu,\"iterations\":%d,"
          "\"time_us\":%.1f,\"algbw_mb_per_s\":%.1f,\"busbw_mb_per_s\":%.1f,\"raw_tcp_us\":%.1f,"
          "\"raw_tcp_mb_per_s\":%.1f,\"busbw_fraction_of_raw\":%.3f}\n",
          n, sizes[s], iterations(sizes[s], small), secs[s] * 1e6, algbw, busbw, raw[s] * 1e6, raw_mbps,
          busbw / raw_mbps);
      std::fflush(stdout);
    }
  }
}
