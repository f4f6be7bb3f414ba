// Control links (net/link): a LinkHub on a real TCP port, a worker's end dialling it as the
// worker does (net/handshake). Messages in order both ways, plain and sealed, across record
// edges; an offer that works once; offers withdrawn after their timeout; garbage, an altered
// record and an oversized frame each a clear error naming the problem; a peer that leaves gets
// what was queued for it before its link closes.
#include <doctest/doctest.h>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "net/aead.hpp"
#include "net/bytes.hpp"
#include "net/handshake.hpp"
#include "net/link.hpp"
#include "net/tcp.hpp"
#include "protocol/codec.hpp"

using namespace herd;
using namespace std::chrono_literals;

namespace {

using Clock = std::chrono::steady_clock;

/// Steps the hub until `done` says so (or 5 s pass); every event is kept in `all`.
template <typename F>
bool step_until(net::LinkHub& hub, net::LinkHub::Events& all, F done) {
  const auto deadline = Clock::now() + 5s;
  while (Clock::now() < deadline) {
    net::LinkHub::Events ev;
    pollfd p{hub.fd(), POLLIN, 0};
    (void)::poll(&p, 1, 20);
    hub.step(ev, Clock::now());
    for (auto& c : ev.claimed) all.claimed.push_back(c);
    for (auto& f : ev.failed) all.failed.push_back(f);
    for (auto& m : ev.messages) all.messages.push_back(std::move(m));
    if (done()) return true;
  }
  return false;
}

/// The worker's end: dials the hub's port and proves `ticket` (wanting it sealed when
/// `encrypt`), stepping the hub meanwhile as the scheduler's loop does; the session once the
/// handshake is done, else one whose descriptor is -1.
net::Session dial(net::LinkHub& hub, net::LinkHub::Events& all, const net::OfferTicket& ticket, bool encrypt) {
  net::Hello hello;
  hello.flags = net::hello_flags(encrypt);
  net::Dialer d("127.0.0.1", std::to_string(hub.port()), net::kLinkPurpose, ticket, hello);
  const auto deadline = Clock::now() + 5s;
  short revents = 0;
  while (Clock::now() < deadline) {
    if (d.step(revents) != net::Dialer::State::working) break;
    net::LinkHub::Events ev;
    hub.step(ev, Clock::now());
    for (auto& c : ev.claimed) all.claimed.push_back(c);
    for (auto& f : ev.failed) all.failed.push_back(f);
    pollfd p[2] = {{d.fd(), d.events(), 0}, {hub.fd(), POLLIN, 0}};
    (void)::poll(p, 2, 20);
    revents = p[0].revents;
  }
  return d.state() == net::Dialer::State::done ? d.take() : net::Session{};
}

/// Reads from a worker's end until `n` messages came (or 5 s pass).
std::vector<protocol::Received> read_messages(net::Link& l, std::size_t n) {
  std::vector<protocol::Received> out;
  const auto deadline = Clock::now() + 5s;
  while (out.size() < n && Clock::now() < deadline && l.failed().empty()) {
    pollfd p{l.fd(), static_cast<short>(POLLIN | (l.want_write() ? POLLOUT : 0)), 0};
    (void)::poll(&p, 1, 20);
    if (p.revents & POLLOUT) l.flush();
    l.receive(out);
  }
  return out;
}

std::string text(const zmq::message_t& m) { return std::string(static_cast<const char*>(m.data()), m.size()); }

/// Message i: a header-and-body frame and (i % 3) payloads, one of them big every 50th.
zmq::message_t body_of(std::size_t i) { return zmq::message_t(std::string("message ") + std::to_string(i)); }
std::vector<zmq::message_t> payloads_of(std::size_t i) {
  std::vector<zmq::message_t> p;
  for (std::size_t k = 0; k < i % 3; ++k) {
    const std::size_t size = (i % 50 == 1 && k == 0) ? (net::kLinkRecord * 2 + 7) : k * 10;
    std::string bytes(size, '\0');
    for (std::size_t b = 0; b < size; ++b) bytes[b] = static_cast<char>((b * 31 + i + k) & 0xff);
    p.emplace_back(bytes);
  }
  return p;
}
void check_message(const protocol::Received& r, std::size_t i) {
  CHECK(text(r.message) == "message " + std::to_string(i));
  const auto want = payloads_of(i);
  REQUIRE(r.payloads.size() == want.size());
  for (std::size_t k = 0; k < want.size(); ++k) CHECK(text(r.payloads[k]) == text(want[k]));
}

struct Pair {
  std::unique_ptr<net::LinkHub> hub;
  std::unique_ptr<net::Link> worker;
  net::LinkHub::Events events;
};

/// A hub and one worker's link to it, claimed and switched both ways, as scheduler and worker do.
Pair linked(bool sealed, std::uint64_t max_frame = 0) {
  Pair p;
  p.hub = std::make_unique<net::LinkHub>("127.0.0.1", max_frame, 5000ms);
  const net::OfferTicket offer = p.hub->offer("w1", sealed);
  CHECK(offer.id.size() == net::kOfferId);
  CHECK(offer.secret.size() == 32);
  net::Session session = dial(*p.hub, p.events, offer, sealed);
  REQUIRE(session.fd >= 0);
  CHECK((session.send != nullptr) == sealed);
  p.worker = std::make_unique<net::Link>(std::move(session), max_frame, "the scheduler's link");
  REQUIRE(step_until(*p.hub, p.events, [&] { return !p.events.claimed.empty(); }));
  CHECK(p.events.claimed == std::vector<std::string>{"w1"});
  CHECK(p.hub->links() == 1);
  CHECK(p.hub->offers() == 0);
  CHECK_FALSE(p.hub->writing("w1"));
  p.hub->start_writing("w1");
  CHECK(p.hub->writing("w1"));
  CHECK(p.hub->peer_switched("w1"));
  p.events = {};
  return p;
}

void both_ways_in_order(bool sealed) {
  Pair p = linked(sealed);
  constexpr std::size_t kMessages = 400;
  for (std::size_t i = 0; i < kMessages; ++i) p.worker->send(body_of(i), payloads_of(i));
  REQUIRE(step_until(*p.hub, p.events, [&] {
    if (p.worker->want_write()) p.worker->flush();
    return p.events.messages.size() >= kMessages;
  }));
  REQUIRE(p.events.messages.size() == kMessages);
  for (std::size_t i = 0; i < kMessages; ++i) {
    CHECK(p.events.messages[i].identity == "w1");
    check_message(p.events.messages[i], i);
  }
  CHECK(p.events.failed.empty());
  // And back: the hub queues what the socket does not take, and writes it as it can.
  for (std::size_t i = 0; i < kMessages; ++i) p.hub->send("w1", body_of(i), payloads_of(i));
  {
    std::this_thread::sleep_for(50ms);  // long enough for written bytes to be readable on loopback
    std::vector<protocol::Received> early;
    p.worker->receive(early);
    CHECK(early.empty());  // corked until the turn's end
  }
  p.hub->flush();
  std::vector<protocol::Received> got;
  const auto deadline = Clock::now() + 5s;
  while (got.size() < kMessages && Clock::now() < deadline) {
    net::LinkHub::Events ev;
    p.hub->step(ev, Clock::now());
    auto more = read_messages(*p.worker, 1);
    for (auto& m : more) got.push_back(std::move(m));
  }
  REQUIRE(got.size() == kMessages);
  for (std::size_t i = 0; i < kMessages; ++i) check_message(got[i], i);
  CHECK(p.worker->failed().empty());
}

}  // namespace

TEST_CASE("ControlLink.Messages.ArriveInOrderBothWaysPlain" * doctest::timeout(60)) { both_ways_in_order(false); }

TEST_CASE("ControlLink.Messages.ArriveInOrderBothWaysSealedAcrossRecords" * doctest::timeout(60)) {
  both_ways_in_order(true);
}

TEST_CASE("ControlLink.Hub.AnOfferWorksOnceAndStraysAreDropped" * doctest::timeout(60)) {
  net::LinkHub hub("127.0.0.1", 0, 5000ms);
  const net::OfferTicket offer = hub.offer("w1", true);
  net::LinkHub::Events all;
  net::Session first = dial(hub, all, offer, true);
  REQUIRE(first.fd >= 0);
  REQUIRE(step_until(hub, all, [&] { return all.claimed.size() == 1; }));
  // The same offer again, an offer never made, the right id with a wrong secret: each refused.
  CHECK(dial(hub, all, offer, true).fd < 0);
  CHECK(dial(hub, all, {std::string(net::kOfferId, 'x'), offer.secret}, true).fd < 0);
  const net::OfferTicket second = hub.offer("w2", true);
  CHECK(dial(hub, all, {second.id, std::string(32, 'k')}, true).fd < 0);
  // Bytes that are no hello at all: the challenge, then the end.
  std::string error;
  int refused = 0;
  const int stray = net::connect_start("127.0.0.1", std::to_string(hub.port()), 0, refused, error);
  REQUIRE(stray >= 0);
  pollfd w{stray, POLLOUT, 0};
  REQUIRE(::poll(&w, 1, 5000) == 1);
  const std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\nmore";
  REQUIRE(::send(stray, junk.data(), junk.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(junk.size()));
  std::string got;
  bool closed = false;
  const auto deadline = Clock::now() + 5s;
  while (!closed && Clock::now() < deadline) {
    net::LinkHub::Events ev;
    hub.step(ev, Clock::now());
    CHECK(ev.claimed.empty());
    pollfd p{stray, POLLIN, 0};
    if (::poll(&p, 1, 20) == 1) {
      char b[64];
      const ssize_t k = ::recv(stray, b, sizeof b, MSG_DONTWAIT);
      if (k > 0) got.append(b, static_cast<std::size_t>(k));
      closed = k == 0;
    }
  }
  CHECK(closed);
  CHECK(got.size() == 36);
  CHECK(got.rfind("HNC1", 0) == 0);
  ::close(stray);
  CHECK(all.claimed == std::vector<std::string>{"w1"});
  CHECK(hub.links() == 1);
  CHECK(hub.offers() == 1);  // w2's still stands: a wrong proof does not use it up
  ::close(first.fd);
}

TEST_CASE("ControlLink.Hub.UnclaimedOfferIsWithdrawnAfterItsTimeout" * doctest::timeout(60)) {
  net::LinkHub hub("127.0.0.1", 0, 200ms);
  const net::OfferTicket offer = hub.offer("w1", false);
  CHECK(hub.offers() == 1);
  std::this_thread::sleep_for(300ms);
  net::LinkHub::Events ev;
  hub.step(ev, Clock::now());
  CHECK(hub.offers() == 0);
  net::LinkHub::Events all;
  CHECK(dial(hub, all, offer, false).fd < 0);
  CHECK(all.claimed.empty());
}

TEST_CASE("ControlLink.Hub.AnEncryptingWorkerRefusesAPlainLink" * doctest::timeout(60)) {
  // A hub that would not seal (its cluster has HERD_AUTH=off) and a worker whose cluster
  // encrypts: the hub seals because the worker asks; and a peer that answers "none" to a
  // worker that asked is refused (the dialer's no-downgrade rule, net/handshake).
  net::LinkHub hub("127.0.0.1", 0, 5000ms);
  net::LinkHub::Events all;
  net::Session s = dial(hub, all, hub.offer("w1", false), true);
  REQUIRE(s.fd >= 0);
  CHECK(s.ack.cipher != net::kCipherNone);
  CHECK(s.send != nullptr);
  ::close(s.fd);
}

TEST_CASE("ControlLink.Garbage.OnALinkIsAClearErrorNamingIt" * doctest::timeout(60)) {
  SUBCASE("a frame count out of range") {
    Pair p = linked(false);
    const unsigned char bad[4] = {0xff, 0xff, 0xff, 0xff};
    REQUIRE(::send(p.worker->fd(), bad, 4, MSG_NOSIGNAL) == 4);
    REQUIRE(step_until(*p.hub, p.events, [&] { return !p.events.failed.empty(); }));
    CHECK(p.events.failed[0].first == "w1");
    CHECK(p.events.failed[0].second.find("4294967295 frames") != std::string::npos);
    CHECK(p.hub->links() == 0);
    CHECK_FALSE(p.hub->writing("w1"));
  }
  SUBCASE("a sealed record altered on the way") {
    Pair p = linked(true);
    // A well-formed record header and a body sealed by nobody.
    std::string record(net::kRecordHeader + 40 + net::kRecordTag, 'z');
    net::write_u32(reinterpret_cast<unsigned char*>(record.data()), 40);
    REQUIRE(::send(p.worker->fd(), record.data(), record.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(record.size()));
    REQUIRE(step_until(*p.hub, p.events, [&] { return !p.events.failed.empty(); }));
    CHECK(p.events.failed[0].second.find("does not open") != std::string::npos);
  }
  SUBCASE("a record longer than a record may be") {
    Pair p = linked(true);
    unsigned char header[net::kRecordHeader];
    net::write_u32(header, static_cast<std::uint32_t>(net::kLinkRecord + 1));
    REQUIRE(::send(p.worker->fd(), header, sizeof header, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof header));
    REQUIRE(step_until(*p.hub, p.events, [&] { return !p.events.failed.empty(); }));
    CHECK(p.events.failed[0].second.find("sent a record of " + std::to_string(net::kLinkRecord + 1) + " bytes") !=
          std::string::npos);
  }
  SUBCASE("a frame over the limit") {
    Pair p = linked(false, 1000);
    p.worker->send(zmq::message_t(std::string(999, 'a')));  // within: arrives
    p.worker->send(zmq::message_t(std::string(2000, 'b')));
    REQUIRE(step_until(*p.hub, p.events, [&] { return !p.events.failed.empty(); }));
    REQUIRE(p.events.messages.size() == 1);
    CHECK(p.events.messages[0].message.size() == 999);
    CHECK(p.events.failed[0].second.find("a frame of 2000 bytes, over the limit of 1000") != std::string::npos);
  }
}

TEST_CASE("ControlLink.Close.WritesWhatWaitsThenEnds" * doctest::timeout(60)) {
  Pair p = linked(true);
  for (std::size_t i = 0; i < 20; ++i) p.hub->send("w1", body_of(i), payloads_of(i));
  p.hub->flush();
  p.hub->close("w1");
  CHECK_FALSE(p.hub->writing("w1"));
  std::vector<protocol::Received> got;
  const auto deadline = Clock::now() + 5s;
  while (p.worker->failed().empty() && Clock::now() < deadline) {
    net::LinkHub::Events ev;
    p.hub->step(ev, Clock::now());
    CHECK(ev.failed.empty());  // a peer that left is no failure
    pollfd q{p.worker->fd(), POLLIN, 0};
    (void)::poll(&q, 1, 20);
    p.worker->receive(got);
  }
  REQUIRE(got.size() == 20);
  for (std::size_t i = 0; i < 20; ++i) check_message(got[i], i);
  CHECK(p.worker->failed().find("closed the link") != std::string::npos);
  CHECK(p.hub->links() == 0);
}

TEST_CASE("ControlLink.Peer.GoneIsReportedOnce" * doctest::timeout(60)) {
  Pair p = linked(false);
  p.worker.reset();  // the worker's process ends: its socket closes
  REQUIRE(step_until(*p.hub, p.events, [&] { return !p.events.failed.empty(); }));
  CHECK(p.events.failed.size() == 1);
  CHECK(p.events.failed[0].first == "w1");
  CHECK(p.events.failed[0].second.find("closed the link") != std::string::npos);
  net::LinkHub::Events later;
  p.hub->step(later, Clock::now());
  CHECK(later.failed.empty());
}
