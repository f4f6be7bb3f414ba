// The CPU backend of herd::Communicator: a ring over TCP between the members of a gang.
//
// all-reduce = reduce-scatter + all-gather (the bandwidth-optimal ring: each rank sends and
// receives 2(n-1)/n of the buffer); broadcast = a pipelined pass along the ring from the root;
// barrier = a one-element all-reduce. Sends and receives progress together (non-blocking
// sockets, poll), so a ring of full kernel buffers cannot deadlock.
//
// Setup: every rank binds a RingListener first, then the addresses of all ranks are exchanged
// through the scheduler (the gang rendezvous), then make_ring() connects rank r to rank r+1 and
// accepts rank r-1. Both ends of a link prove, by a challenge and response, that they hold the
// gang's token (sent to the members only, over the scheduler's CURVE link) before anything
// else moves, then the data travels encrypted and authenticated (libsodium AEAD, a fresh key per
// connection) unless encryption is off at both ends. Strays and floods of connections are
// handled beside the real peer, never before it. abort() (from any thread) wakes every blocked
// call, which throws herd::GangAborted; a peer that disconnects (or sends data that fails
// authentication) makes the operation throw GangAborted naming it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "herd/collective.hpp"

namespace herd::collective {

/// A listening TCP socket on `host` (an address or name of this machine), ephemeral port.
class RingListener {
 public:
  explicit RingListener(const std::string& host);
  ~RingListener();
  RingListener(RingListener&& other) noexcept;
  RingListener& operator=(RingListener&& other) noexcept;
  RingListener(const RingListener&) = delete;
  RingListener& operator=(const RingListener&) = delete;
  /// "host:port" for the other ranks to connect to.
  const std::string& address() const { return address_; }
  int fd() const { return fd_; }
  /// Hands the socket over (the listener no longer closes it).
  int release();

 private:
  int fd_ = -1;
  std::string address_;
};

struct RingSetup {
  int rank = 0;
  int size = 1;
  std::vector<std::string> addresses;  // every rank's RingListener::address(), by rank
  std::string token;                   // secret of this gang attempt (from the rendezvous)
  bool encrypt = true;                 // encrypt the data (off: HERD_AUTH=off; the link is encrypted
                                       //   when either end wants it)
  std::chrono::milliseconds connect_timeout{60000};
  /// Polled every 50 ms while connecting: a non-empty answer (why) stops the setup with
  /// GangAborted. The operations themselves are aborted with CommunicatorImpl::abort().
  std::function<std::string()> aborted;
};

/// Connects the ring; throws GangAborted (naming the rank it could not reach) on failure.
std::unique_ptr<herd::detail::CommunicatorImpl> make_ring(RingSetup setup, RingListener listener);

}  // namespace herd::collective
