// What herd::gang() needs from the worker it runs in, and nothing more: the worker gives each
// running gang member a GangTicket (thread-local) holding its GangSession, the mailbox between
// the member's thread and the worker's I/O thread (the rendezvous answer comes in there, and
// so does an abort from the scheduler).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "herd/collective.hpp"
#include "protocol/messages.hpp"

namespace herd::collective {

class GangSession {
 public:
  GangSession(protocol::TaskId gang, std::uint32_t attempt, std::uint32_t rank, std::uint32_t size)
      : gang_(gang), attempt_(attempt), rank_(rank), size_(size) {}

  protocol::TaskId gang() const { return gang_; }
  std::uint32_t attempt() const { return attempt_; }
  std::uint32_t rank() const { return rank_; }
  std::uint32_t size() const { return size_; }

  // I/O thread.
  void deliver(protocol::GangReadyEvent ready);
  /// Wakes the rendezvous and aborts the communicator (if one is attached), now or later.
  void abort(const std::string& reason);

  // Member's thread.
  /// Blocks until the rendezvous answer; throws GangAborted if the gang is aborted first.
  protocol::GangReadyEvent wait_ready();
  /// Abort reaches `impl` from now on; throws GangAborted if the gang was aborted already.
  void attach(herd::detail::CommunicatorImpl* impl);
  void detach();
  /// Why the gang was aborted ("" = it was not).
  std::string aborted();

 private:
  const protocol::TaskId gang_;
  const std::uint32_t attempt_, rank_, size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<protocol::GangReadyEvent> ready_;
  std::string aborted_;  // non-empty: why
  herd::detail::CommunicatorImpl* impl_ = nullptr;
};

struct GangTicket {
  std::shared_ptr<GangSession> session;
  std::string listen_host;                                     // where the ring listens
  std::function<void(const protocol::GangJoinRequest&)> send;  // to the scheduler, via I/O
  int device = -1;                                             // the member's first GPU
  void* stream = nullptr;                                      // its CUDA stream
  std::unique_ptr<Communicator> communicator;                  // made by herd::gang()
};

/// The gang member running on this thread (nullptr outside one); set by the worker.
GangTicket*& current_gang();

}  // namespace herd::collective
