// herd::gang(): the running member's communicator, made on first use through the rendezvous.
#include "collective/gang_runtime.hpp"
#include "common/security.hpp"
#include "collective/nccl.hpp"
#include "collective/ring.hpp"
#include "herd/error.hpp"

namespace herd::collective {

GangTicket*& current_gang() {
  thread_local GangTicket* ticket = nullptr;
  return ticket;
}

void GangSession::deliver(protocol::GangReadyEvent ready) {
  {
    std::lock_guard lock(mu_);
    ready_ = std::move(ready);
  }
  cv_.notify_all();
}

void GangSession::abort(const std::string& reason) {
  herd::detail::CommunicatorImpl* impl = nullptr;
  {
    std::lock_guard lock(mu_);
    if (aborted_.empty()) aborted_ = reason.empty() ? "gang aborted" : reason;
    impl = impl_;
    // abort() on the communicator while holding mu_: detach() takes mu_ too, so the
    // communicator cannot be destroyed in between.
    if (impl != nullptr) impl->abort(aborted_);
  }
  cv_.notify_all();
}

protocol::GangReadyEvent GangSession::wait_ready() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return ready_.has_value() || !aborted_.empty(); });
  if (!aborted_.empty()) throw GangAborted("gang aborted: " + aborted_);
  return *ready_;
}

void GangSession::attach(herd::detail::CommunicatorImpl* impl) {
  std::lock_guard lock(mu_);
  if (!aborted_.empty()) throw GangAborted("gang aborted: " + aborted_);
  impl_ = impl;
}

std::string GangSession::aborted() {
  std::lock_guard lock(mu_);
  return aborted_;
}

void GangSession::detach() {
  std::lock_guard lock(mu_);
  impl_ = nullptr;
}

}  // namespace herd::collective

namespace herd {

Communicator& gang(CollectiveBackend backend) {
  collective::GangTicket* ticket = collective::current_gang();
  if (ticket == nullptr) {
    throw std::logic_error("herd::gang() is only available inside a gang member "
                           "(submit the task with Client::submit_gang)");
  }
  if (ticket->communicator) return *ticket->communicator;
  collective::GangSession& session = *ticket->session;
  const bool has_gpu = collective::nccl_built() && ticket->device >= 0;
  if (backend == CollectiveBackend::nccl && !has_gpu) {
    throw std::invalid_argument(collective::nccl_built()
                                    ? "herd::gang(nccl): this gang member holds no GPU (submit it with TaskOptions::gpus(1))"
                                    : "herd::gang(nccl): herd was built without NCCL");
  }
  collective::RingListener listener(ticket->listen_host);
  protocol::GangJoinRequest join;
  join.gang = session.gang();
  join.attempt = session.attempt();
  join.rank = session.rank();
  join.ring_address = listener.address();
  join.has_gpu = has_gpu && backend != CollectiveBackend::cpu_ring;
  join.wanted = static_cast<std::uint8_t>(backend);
  if (join.rank == 0 && join.has_gpu) join.nccl_id = collective::nccl_unique_id();
  ticket->send(join);
  protocol::GangReadyEvent ready = session.wait_ready();
  if (!ready.error.empty()) throw GangAborted(ready.error);
  const int rank = static_cast<int>(session.rank());
  const int size = static_cast<int>(session.size());
  std::unique_ptr<detail::CommunicatorImpl> impl;
  if (ready.backend == static_cast<std::uint8_t>(CollectiveBackend::nccl)) {
    impl = collective::make_nccl(rank, size, ready.nccl_id, ticket->device, ticket->stream);
  } else {
    if (ready.ring_addresses.size() != session.size()) {
      throw GangAborted("gang rendezvous returned " + std::to_string(ready.ring_addresses.size()) +
                        " addresses for " + std::to_string(size) + " ranks");
    }
    collective::RingSetup setup;
    setup.rank = rank;
    setup.size = size;
    setup.addresses = std::move(ready.ring_addresses);
    setup.token = std::move(ready.token);
    setup.encrypt = security::ring_encryption();
    setup.aborted = [&session] { return session.aborted(); };
    impl = collective::make_ring(std::move(setup), std::move(listener));
  }
  session.attach(impl.get());
  ticket->communicator = std::make_unique<Communicator>(rank, size, std::move(impl));
  return *ticket->communicator;
}

}  // namespace herd
