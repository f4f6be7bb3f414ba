#include "net/channel.hpp"

#include <poll.h>

#include <cerrno>

#include "common/logging.hpp"
#include "net/tcp.hpp"

namespace herd::net {

using protocol::MessageType;

namespace {
// The dialer speaks poll(2)'s flags, the poll items ZeroMQ's (ZMQ_POLLOUT is 2, POLLOUT 4).
short to_zmq(short events) {
  return static_cast<short>(((events & POLLIN) ? ZMQ_POLLIN : 0) | ((events & POLLOUT) ? ZMQ_POLLOUT : 0));
}
short from_zmq(short revents) {
  return static_cast<short>(((revents & ZMQ_POLLIN) ? POLLIN : 0) | ((revents & ZMQ_POLLOUT) ? POLLOUT : 0) |
                            ((revents & ZMQ_POLLERR) ? POLLERR : 0));
}
}  // namespace

void LinkChannel::send(const std::string& peer, zmq::message_t message, std::vector<zmq::message_t> payloads) {
  if (hub_ != nullptr) hub_->send(peer, message, payloads);
  else link_->send(message, payloads);
}

void LinkChannel::flush() {
  if (hub_ != nullptr) hub_->flush();
}

// ---------------------------------------------------------------------------------------------
// The scheduler's end.

SchedulerChannels::SchedulerChannels(zmq::socket_t& router, std::unique_ptr<LinkHub> hub)
    : router_(router), zmq_(router), hub_(std::move(hub)), link_(*hub_) {}

void SchedulerChannels::wait(std::chrono::milliseconds timeout) {
  first_.reset();
  backlog_ = false;
  links_ready_ = false;
  if (!hub_) {
    const auto start = Clock::now();
    first_ = protocol::receive(router_, true, timeout, receive_timeout_set_);
    // A receive that came back within 10 µs did not sleep: a backlog. Else one message a turn:
    // the next receive finds another already queued without a system call, where asking for
    // one more now costs libzmq a poll(2) and a getpid(2) when none is.
    backlog_ = first_ && Clock::now() - start < std::chrono::microseconds(10);
    return;
  }
  items_.assign({{static_cast<void*>(router_), 0, ZMQ_POLLIN, 0}, {nullptr, hub_->fd(), ZMQ_POLLIN, 0}});
  try {
    protocol::poll(items_, timeout);
  } catch (const zmq::error_t& e) {
    if (e.num() != EINTR) throw;
  }
  links_ready_ = (items_[1].revents & ZMQ_POLLIN) != 0;
  if ((items_[0].revents & ZMQ_POLLIN) != 0) first_ = protocol::try_receive(router_, true);
  backlog_ = (items_[0].revents & protocol::kQueued) != 0;
}

std::optional<protocol::Received> SchedulerChannels::next_zmq() {
  if (first_) {
    std::optional<protocol::Received> m = std::move(first_);
    first_.reset();
    return m;
  }
  return protocol::try_receive(router_, true);
}

void SchedulerChannels::step_links(Clock::time_point now, const std::function<bool(const std::string&)>& known,
                                   LinkEvents& out) {
  if (!hub_ || (!links_ready_ && now - last_link_step_ < std::chrono::milliseconds(100))) return;
  links_ready_ = false;
  last_link_step_ = now;
  hub_events_.claimed.clear();
  hub_events_.failed.clear();
  hub_events_.messages.clear();
  hub_->step(hub_events_, now);
  for (const std::string& peer : hub_events_.claimed) {
    if (!known(peer)) {  // left meanwhile
      hub_->close(peer);
      continue;
    }
    // Its last ZeroMQ message; everything after goes on the link.
    protocol::send<MessageType::link_switch>(zmq_, peer, {});
    hub_->start_writing(peer);
  }
  for (auto& m : hub_events_.messages) out.messages.push_back(std::move(m));
  for (auto& f : hub_events_.failed) out.broken.push_back(std::move(f));
}

bool SchedulerChannels::peer_switched(const std::string& peer) { return hub_ && hub_->peer_switched(peer); }

std::optional<SchedulerChannels::LinkOffer> SchedulerChannels::offer_link(const std::string& peer, bool encrypt) {
  if (!hub_) return std::nullopt;
  LinkOffer o;
  o.port = hub_->port();
  o.ticket = hub_->offer(peer, encrypt);
  return o;
}

void SchedulerChannels::close(const std::string& peer) {
  if (hub_) hub_->close(peer);
}

void SchedulerChannels::flush() {
  if (hub_) link_.flush();
}

void SchedulerChannels::drain(std::chrono::milliseconds timeout) {
  if (hub_) hub_->drain(timeout);
}

// ---------------------------------------------------------------------------------------------
// A worker's end.

WorkerChannels::WorkerChannels(zmq::socket_t& dealer, std::string scheduler_host)
    : dealer_(dealer), zmq_(dealer), host_(std::move(scheduler_host)) {}

WorkerChannels::~WorkerChannels() = default;

void WorkerChannels::start_link(std::uint16_t port, const OfferTicket& ticket, bool encrypt, Clock::time_point deadline) {
  where_ = (host_.find(':') != std::string::npos ? "[" + host_ + "]" : host_) + ":" + std::to_string(port);
  Hello hello;
  hello.flags = hello_flags(encrypt);
  try {
    dialer_ = std::make_unique<Dialer>(host_, std::to_string(port), kLinkPurpose, ticket, hello);
  } catch (const std::exception& e) {
    HERD_LOG(info) << "no control link to " << where_ << " (" << e.what() << "); staying on ZeroMQ";
    return;
  }
  state_ = State::dialling;
  deadline_ = deadline;
  // A connect refused at once: found out here, not after a turn.
  if (dialer_->step(0) == Dialer::State::failed) abandon(dialer_->error());
}

void WorkerChannels::abandon(const std::string& why) {
  HERD_LOG(info) << "no control link to " << where_ << " (" << why << "); staying on ZeroMQ";
  dialer_.reset();
  link_channel_.reset();
  link_.reset();
  state_ = State::none;
}

std::size_t WorkerChannels::add_poll_items(std::vector<zmq::pollitem_t>& items) {
  const std::size_t first = items.size();
  items.push_back({static_cast<void*>(dealer_), 0, ZMQ_POLLIN, 0});
  polled_link_ = state_ != State::none;
  if (state_ == State::dialling) {
    items.push_back({nullptr, dialer_->fd(), to_zmq(dialer_->events()), 0});
  } else if (state_ == State::waiting) {
    items.push_back({nullptr, link_->fd(), 0, 0});  // only its errors: nothing is read before the switch
  } else if (state_ == State::up) {
    items.push_back({nullptr, link_->fd(), static_cast<short>(ZMQ_POLLIN | (link_->want_write() ? ZMQ_POLLOUT : 0)), 0});
  }
  return first;
}

void WorkerChannels::switched() {
  if (state_ == State::dialling) {
    // Its ack is on its way on the link's own connection, which ZeroMQ's may overtake: the
    // switch waits for the dialer (the scheduler reads ZeroMQ from us meanwhile).
    switch_pending_ = true;
    return;
  }
  if (state_ != State::waiting) {
    // It admitted a link this worker gave up on, and writes there from now on: nothing more
    // would reach us.
    broken("the scheduler switched to a control link this worker gave up on");
    return;
  }
  // Everything the scheduler sent on ZeroMQ is read; ours goes on the link after this last one.
  protocol::send<MessageType::link_switch>(zmq_, "", {});
  state_ = State::up;
  HERD_LOG(info) << "control link to the scheduler at " << where_ << " is up";
}

void WorkerChannels::broken(const std::string& why) {
  HERD_LOG(error) << "control link to the scheduler at " << where_ << ": " << why
                  << "; the scheduler counts this worker lost; leaving";
  broken_ = true;
}

bool WorkerChannels::receive(const std::vector<zmq::pollitem_t>& items, std::size_t first,
                             std::vector<protocol::Received>& out) {
  const zmq::pollitem_t& z = items[first];
  // One message when it woke us, all when there is a backlog (protocol::kQueued): an empty
  // non-blocking receive costs libzmq a poll(2) and a getpid(2).
  const bool backlog = (z.revents & protocol::kQueued) != 0;
  for (int n = 0; n < 1000 && (z.revents & ZMQ_POLLIN) != 0; ++n) {
    auto msg = protocol::try_receive(dealer_, false);
    if (!msg) break;
    std::string error;
    const auto type = protocol::parse_header(*msg, error);
    if (type && *type == MessageType::link_switch) switched();
    else out.push_back(std::move(*msg));
    if (!backlog || switch_pending_) break;  // after the switch, nothing more comes on ZeroMQ
  }
  if (broken_) return false;
  if (!polled_link_) return true;
  const short revents = items[first + 1].revents;
  if (state_ == State::dialling) {
    if (revents == 0) return true;
    const Dialer::State s = dialer_->step(from_zmq(revents));
    if (s == Dialer::State::failed) {
      if (switch_pending_) broken("its handshake failed after the scheduler switched: " + dialer_->error());
      else abandon(dialer_->error());
    } else if (s == Dialer::State::done) {
      try {
        // Any size, as the DEALER took: a batch of many tasks may exceed what one message to
        // the scheduler may be.
        link_ = std::make_unique<Link>(dialer_->take(), 0, "the scheduler's link " + where_);
        link_channel_ = std::make_unique<LinkChannel>(*link_);
        dialer_.reset();
        state_ = State::waiting;
        if (std::exchange(switch_pending_, false)) switched();
      } catch (const std::exception& e) {
        if (switch_pending_) broken(e.what());
        else abandon(e.what());
      }
    }
    return !broken_;
  }
  if (state_ == State::waiting) {
    // The scheduler did not take it (a stale offer): nothing went on it yet.
    if ((revents & ZMQ_POLLERR) != 0) abandon("the scheduler closed it before taking it");
    return !broken_;
  }
  if (state_ != State::up) return true;  // switched back? never: up is for good
  if ((revents & ZMQ_POLLOUT) != 0) link_->flush();
  if ((revents & (ZMQ_POLLIN | ZMQ_POLLERR)) != 0) link_->receive(out);
  if (!link_->failed().empty()) {
    HERD_LOG(error) << "control link to the scheduler broke (" << link_->failed()
                    << "): what was on its way is lost, so the scheduler counts this worker lost; leaving";
    return false;
  }
  return true;
}

bool WorkerChannels::expire(Clock::time_point now) {
  if ((state_ == State::dialling || state_ == State::waiting) && now >= deadline_) {
    if (switch_pending_) broken("no acknowledgement on the link the scheduler switched to");
    else abandon("no answer by the offer's deadline");
  }
  return !broken_;
}

void WorkerChannels::drain(std::chrono::milliseconds timeout) {
  if (state_ == State::up) link_->drain(timeout);
}

}  // namespace herd::net
