// The one handshake of control links, bulk lanes and the ring (net/handshake), on real TCP
// sockets: both ends prove the offer and agree on fresh keys; no secret crosses the wire; a
// recorded hello is worth nothing on a new connection; wrong secrets, unknown, used and expired
// offers are refused; a flood of idle strangers is capped and the real peer still gets in; out
// of descriptors the gate drops connections instead of spinning on its listener. And the sealed
// records' change of key, and the log throttle the gate's lines go through.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/logging.hpp"
#include "net/aead.hpp"
#include "net/handshake.hpp"
#include "net/tcp.hpp"

using namespace herd;
using namespace std::chrono_literals;

namespace {

using Clock = std::chrono::steady_clock;
constexpr char kPurpose[] = "herd test";

std::unique_ptr<net::Gate> make_gate(std::size_t max_pending = 512, Clock::duration hello_timeout = 10s) {
  net::Gate::Options o;
  o.purpose = kPurpose;
  o.who = "test gate";
  o.max_pending = max_pending;
  o.hello_timeout = hello_timeout;
  return std::make_unique<net::Gate>(net::listen_on("127.0.0.1", 0, "test gate"), std::move(o));
}

std::uint16_t port_of(const net::Gate& g) { return net::local_port(g.listen_fd()); }

/// The gate's decision in these tests: sealed when asked, with the hello's `a` echoed plus one.
std::optional<net::Ack> decide(std::uint64_t, const net::Hello& h) {
  net::Ack ack;
  ack.cipher = net::choose_cipher(false, h.flags);
  ack.a = h.a + 1;
  return ack;
}

/// Drives a dialer and the gate until the dialer is done or failed (5 s at most); the gate's
/// admitted sessions are appended to `admitted`.
net::Dialer::State drive(net::Dialer& d, net::Gate& g, std::vector<net::Session>& admitted) {
  const auto deadline = Clock::now() + 5s;
  short revents = 0;
  while (Clock::now() < deadline) {
    if (d.step(revents) != net::Dialer::State::working) break;
    g.step(Clock::now(), decide, admitted);
    pollfd p[2] = {{d.fd(), d.events(), 0}, {g.fd(), POLLIN, 0}};
    (void)::poll(p, 2, 20);
    revents = p[0].revents;
  }
  g.step(Clock::now(), decide, admitted);
  return d.state();
}

int connect_loopback(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

/// A relay between a dialer and the gate that keeps what passes each way.
struct Recorder {
  int listen_fd = -1;
  std::uint16_t port = 0;
  std::string up, down;  // connector -> acceptor, acceptor -> connector
  std::thread thread;
  explicit Recorder(std::uint16_t target) {
    listen_fd = net::listen_on("127.0.0.1", 0, "recorder");
    port = net::local_port(listen_fd);
    thread = std::thread([this, target] {
      const int in = ::accept(listen_fd, nullptr, nullptr);
      const int out = connect_loopback(target);
      if (in < 0 || out < 0) return;
      char buf[4096];
      pollfd fds[2] = {{in, POLLIN, 0}, {out, POLLIN, 0}};
      for (;;) {
        if (::poll(fds, 2, 3000) <= 0) break;
        bool done = false;
        for (int i = 0; i < 2; ++i) {
          if (fds[i].revents == 0) continue;
          const ssize_t k = ::recv(fds[i].fd, buf, sizeof buf, 0);
          if (k <= 0) {
            done = true;
            break;
          }
          (i == 0 ? up : down).append(buf, static_cast<std::size_t>(k));
          (void)!::send(i == 0 ? out : in, buf, static_cast<std::size_t>(k), MSG_NOSIGNAL);
        }
        if (done) break;
      }
      ::close(in);
      ::close(out);
    });
  }
  ~Recorder() {
    if (thread.joinable()) thread.join();
    ::close(listen_fd);
  }
};

/// True when `fd`'s peer closes it within 5 s; what it sent before is appended to `got`.
bool closed_by_peer(int fd, std::string& got, net::Gate* g = nullptr) {
  std::vector<net::Session> admitted;
  const auto deadline = Clock::now() + 5s;
  while (Clock::now() < deadline) {
    if (g != nullptr) g->step(Clock::now(), decide, admitted);
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) != 1) continue;
    char b[256];
    const ssize_t k = ::recv(fd, b, sizeof b, MSG_DONTWAIT);
    if (k == 0) return true;
    if (k > 0) got.append(b, static_cast<std::size_t>(k));
    if (k < 0 && errno != EAGAIN) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("Handshake.Both.ProveTheOfferAndShareFreshKeys" * doctest::timeout(60)) {
  for (const bool encrypt : {false, true}) {
    CAPTURE(encrypt);
    auto gate = make_gate();
    const net::OfferTicket t = gate->offer(7, Clock::now() + 10s, true);
    CHECK(t.id.size() == net::kOfferId);
    CHECK(t.secret.size() == 32);
    net::Hello hello;
    hello.flags = net::hello_flags(encrypt);
    hello.a = 41;
    hello.b = 9;
    net::Dialer d("127.0.0.1", std::to_string(port_of(*gate)), kPurpose, t, hello);
    std::vector<net::Session> admitted;
    REQUIRE(drive(d, *gate, admitted) == net::Dialer::State::done);
    REQUIRE(admitted.size() == 1);
    net::Session in = std::move(admitted[0]);
    net::Session out = d.take();
    CHECK(in.tag == 7);
    CHECK(in.hello.a == 41);
    CHECK(in.hello.b == 9);
    CHECK(out.ack.a == 42);  // the acceptor's answer, proved by its MAC
    CHECK((out.ack.cipher != net::kCipherNone) == encrypt);
    CHECK(gate->offers() == 0);  // used once
    if (encrypt) {
      // Each direction its own key: what one end seals the other opens, and not its own way.
      REQUIRE(out.send);
      REQUIRE(in.receive);
      const std::string m = "forty-two";
      std::vector<unsigned char> rec(net::kRecordHeader + m.size() + net::kRecordTag);
      out.send->seal(m.data(), m.size(), rec.data());
      std::string back(m.size(), '\0');
      CHECK(in.receive->open(rec.data(), m.size(), back.data()));
      CHECK(back == m);
      in.send->seal(m.data(), m.size(), rec.data());
      CHECK(out.receive->open(rec.data(), m.size(), back.data()));
      CHECK(back == m);
      out.send->seal(m.data(), m.size(), rec.data());
      CHECK_FALSE(out.receive->open(rec.data(), m.size(), back.data()));  // the other direction's key
    } else {
      CHECK_FALSE(out.send);
      CHECK_FALSE(in.receive);
    }
    // The connection is theirs and works.
    REQUIRE(::send(out.fd, "x", 1, MSG_NOSIGNAL) == 1);
    char c = 0;
    pollfd p{in.fd, POLLIN, 0};
    REQUIRE(::poll(&p, 1, 2000) == 1);
    CHECK(::recv(in.fd, &c, 1, 0) == 1);
    CHECK(c == 'x');
    ::close(in.fd);
    ::close(out.fd);
  }
}

TEST_CASE("Handshake.Wire.NoSecretInTheClearAndARecordedHelloIsWorthNothing" * doctest::timeout(60)) {
  auto gate = make_gate();
  const net::OfferTicket t = gate->offer(1, Clock::now() + 10s, false);  // not once: a replay is tried below
  std::string recorded_hello;
  {
    Recorder rec(port_of(*gate));
    net::Dialer d("127.0.0.1", std::to_string(rec.port), kPurpose, t, net::Hello{});
    std::vector<net::Session> admitted;
    REQUIRE(drive(d, *gate, admitted) == net::Dialer::State::done);
    REQUIRE(admitted.size() == 1);
    ::close(admitted[0].fd);
    net::Session s = d.take();
    ::close(s.fd);
    rec.thread.join();
    CHECK(rec.up.size() == 96);     // the hello
    CHECK(rec.down.size() == 36 + 44);  // the challenge and the ack
    CHECK(rec.up.find(t.id) != std::string::npos);  // the offer is named...
    CHECK((rec.up + rec.down).find(t.secret) == std::string::npos);  // ...its secret never sent
    recorded_hello = rec.up;
  }
  // The same hello on a new connection: its proof was for another challenge.
  const int fd = connect_loopback(port_of(*gate));
  REQUIRE(fd >= 0);
  std::vector<net::Session> admitted;
  for (int i = 0; i < 10; ++i) gate->step(Clock::now(), decide, admitted);
  REQUIRE(::send(fd, recorded_hello.data(), recorded_hello.size(), MSG_NOSIGNAL) == 96);
  std::string got;
  CHECK(closed_by_peer(fd, got, gate.get()));
  CHECK(got.size() == 36);  // the challenge, nothing more
  CHECK(got.rfind("HNC1", 0) == 0);
  CHECK(admitted.empty());
  ::close(fd);
}

TEST_CASE("Handshake.Refused.WrongSecretUnknownUsedAndExpiredOffers" * doctest::timeout(60)) {
  auto gate = make_gate();
  const net::OfferTicket t = gate->offer(1, Clock::now() + 10s, true);
  const net::OfferTicket late = gate->offer(2, Clock::now() + 100ms, true);
  auto attempt = [&](const net::OfferTicket& ticket) {
    net::Dialer d("127.0.0.1", std::to_string(port_of(*gate)), kPurpose, ticket, net::Hello{});
    std::vector<net::Session> admitted;
    const auto state = drive(d, *gate, admitted);
    for (auto& s : admitted) ::close(s.fd);
    if (state == net::Dialer::State::done) ::close(d.take().fd);
    return std::make_pair(state, d.error());
  };
  auto [s1, e1] = attempt({t.id, std::string(32, 'w')});
  CHECK(s1 == net::Dialer::State::failed);
  CHECK(e1.find("refused the hello") != std::string::npos);
  CHECK(gate->offers() == 2);  // a wrong proof does not use the offer up
  CHECK(attempt({std::string(net::kOfferId, 'u'), t.secret}).first == net::Dialer::State::failed);
  CHECK(attempt(t).first == net::Dialer::State::done);
  CHECK(attempt(t).first == net::Dialer::State::failed);  // used
  std::this_thread::sleep_for(150ms);
  CHECK(attempt(late).first == net::Dialer::State::failed);  // expired
  CHECK(gate->offers() == 0);
  // Another purpose's MAC is no good here.
  net::Dialer other("127.0.0.1", std::to_string(port_of(*gate)), "herd other", gate->offer(3, Clock::now() + 10s),
                    net::Hello{});
  std::vector<net::Session> admitted;
  CHECK(drive(other, *gate, admitted) == net::Dialer::State::failed);
  CHECK(admitted.empty());
}

TEST_CASE("Handshake.Ack.WithoutEncryptionIsRefusedByAConnectorThatAskedForIt" * doctest::timeout(60)) {
  auto gate = make_gate();
  const net::OfferTicket t = gate->offer(1, Clock::now() + 10s, true);
  net::Hello hello;
  hello.flags = net::hello_flags(true);
  net::Dialer d("127.0.0.1", std::to_string(port_of(*gate)), kPurpose, t, hello);
  std::vector<net::Session> admitted;
  const auto state = [&] {
    const auto deadline = Clock::now() + 5s;
    short revents = 0;
    while (Clock::now() < deadline && d.step(revents) == net::Dialer::State::working) {
      // An acceptor that answers "none" whatever the connector asked (a broken or hostile one).
      gate->step(Clock::now(), [](std::uint64_t, const net::Hello&) { return std::optional<net::Ack>(net::Ack{}); },
                 admitted);
      pollfd p[2] = {{d.fd(), d.events(), 0}, {gate->fd(), POLLIN, 0}};
      (void)::poll(p, 2, 20);
      revents = p[0].revents;
    }
    return d.state();
  }();
  CHECK(state == net::Dialer::State::failed);
  CHECK(d.error().find("without encryption") != std::string::npos);
  for (auto& s : admitted) ::close(s.fd);
}

TEST_CASE("Handshake.Flood.PendingIsCappedAndTheRealPeerGetsIn" * doctest::timeout(120)) {
  auto gate = make_gate(64);
  std::vector<int> strays;
  std::vector<net::Session> admitted;
  for (int i = 0; i < 300; ++i) {
    const int fd = connect_loopback(port_of(*gate));
    REQUIRE(fd >= 0);
    if (i % 3 == 1) (void)::send(fd, "HNH1", 4, MSG_NOSIGNAL);  // then silence
    strays.push_back(fd);
    if (i % 20 == 0) gate->step(Clock::now(), decide, admitted);
  }
  for (int i = 0; i < 20; ++i) gate->step(Clock::now(), decide, admitted);
  CHECK(gate->pending() <= 64);
  CHECK(gate->pending() > 0);
  const net::OfferTicket t = gate->offer(5, Clock::now() + 10s, true);
  net::Dialer d("127.0.0.1", std::to_string(port_of(*gate)), kPurpose, t, net::Hello{});
  CHECK(drive(d, *gate, admitted) == net::Dialer::State::done);
  REQUIRE(admitted.size() == 1);
  CHECK(admitted[0].tag == 5);
  ::close(admitted[0].fd);
  ::close(d.take().fd);
  for (int fd : strays) ::close(fd);
}

TEST_CASE("Handshake.Timeout.SilentConnectionsAreDroppedAtTheirDeadline" * doctest::timeout(60)) {
  auto gate = make_gate(512, 200ms);
  const int fd = connect_loopback(port_of(*gate));
  REQUIRE(fd >= 0);
  std::string got;
  const auto t0 = Clock::now();
  CHECK(closed_by_peer(fd, got, gate.get()));
  CHECK(Clock::now() - t0 >= 150ms);
  CHECK(got.size() == 36);
  CHECK(gate->pending() == 0);
  ::close(fd);
}

TEST_CASE("Handshake.OutOfDescriptors.TheGateDropsConnectionsInsteadOfSpinning" * doctest::timeout(60)) {
  auto gate = make_gate();
  // 40 strangers connect; then this process may open only a few more descriptors, so the gate's
  // accept() fails with EMFILE while its listener stays readable.
  std::vector<int> strays;
  for (int i = 0; i < 40; ++i) {
    const int fd = connect_loopback(port_of(*gate));
    REQUIRE(fd >= 0);
    strays.push_back(fd);
  }
  rlimit old{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &old) == 0);
  int highest = 0;
  for (int fd : strays) highest = std::max(highest, fd);
  rlimit tight = old;
  tight.rlim_cur = static_cast<rlim_t>(highest + 6);  // room for about five accepted ones
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &tight) == 0);
  std::vector<net::Session> admitted;
  int wakeups = 0;
  const auto until = Clock::now() + 500ms;
  while (Clock::now() < until) {
    pollfd p{gate->fd(), POLLIN, 0};
    if (::poll(&p, 1, 20) == 1) {
      ++wakeups;
      gate->step(Clock::now(), decide, admitted);
    }
  }
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &old) == 0);
  INFO("wake-ups in 500 ms: " << wakeups);
  // Spinning would wake the loop every time it polls (~25 000 times in 500 ms here); dropping
  // empties the backlog in a few steps, after which nothing is left to wake it.
  CHECK(wakeups < 50);
  CHECK(gate->pending() <= 6);
  // And a real peer gets in once descriptors are free again.
  const net::OfferTicket t = gate->offer(9, Clock::now() + 10s, true);
  net::Dialer d("127.0.0.1", std::to_string(port_of(*gate)), kPurpose, t, net::Hello{});
  CHECK(drive(d, *gate, admitted) == net::Dialer::State::done);
  for (auto& s : admitted) ::close(s.fd);
  ::close(d.take().fd);
  for (int fd : strays) ::close(fd);
}

TEST_CASE("Records.Rekey.BothEndsChangeKeyInStepWithNothingOnTheWire") {
  const net::Key key = net::random_key();
  for (const std::uint32_t cipher : {net::kCipherChacha, net::kCipherAes}) {
    if (cipher == net::kCipherAes && !net::aes_available()) continue;
    CAPTURE(cipher);
    net::RecordCipher seal(cipher, key, 4, std::uint64_t{1} << 40);
    net::RecordCipher open(cipher, key, 4, std::uint64_t{1} << 40);
    net::RecordCipher never(cipher, key);  // the same key, never changed
    std::vector<std::vector<unsigned char>> records;
    for (int i = 0; i < 10; ++i) {
      const std::string m = "record " + std::to_string(i);
      std::vector<unsigned char> rec(net::kRecordHeader + m.size() + net::kRecordTag);
      seal.seal(m.data(), m.size(), rec.data());
      std::string back(m.size(), '\0');
      CHECK(open.open(rec.data(), m.size(), back.data()));
      CHECK(back == m);
      const bool under_first_key = i < 4;
      CHECK(never.open(rec.data(), m.size(), back.data()) == under_first_key);
    }
    CHECK(seal.rekeys() == 2);  // records 4 and 8 started a new key
    CHECK(open.rekeys() == 2);
  }
  // By bytes: 60-byte records under a 100-byte budget change key every record after the first.
  net::RecordCipher a(net::kCipherChacha, key, std::uint64_t{1} << 40, 100);
  net::RecordCipher b(net::kCipherChacha, key, std::uint64_t{1} << 40, 100);
  const std::string m(60, 'm');
  std::vector<unsigned char> rec(net::kRecordHeader + m.size() + net::kRecordTag);
  std::string back(m.size(), '\0');
  for (int i = 0; i < 5; ++i) {
    a.seal(m.data(), m.size(), rec.data());
    CHECK(b.open(rec.data(), m.size(), back.data()));
  }
  CHECK(a.rekeys() == 4);
  CHECK(b.rekeys() == 4);
}

TEST_CASE("Logging.Throttle.OneLineAPeriodSayingHowManyWereHeldBack") {
  log::Throttle t(std::chrono::seconds(10));
  const auto t0 = Clock::now();
  std::uint64_t held = 99;
  CHECK(t.allow(t0, held));
  CHECK(held == 0);
  for (int i = 1; i <= 1000; ++i) CHECK_FALSE(t.allow(t0 + std::chrono::milliseconds(i), held));
  CHECK(t.allow(t0 + std::chrono::seconds(11), held));
  CHECK(held == 1000);
  CHECK_FALSE(t.allow(t0 + std::chrono::seconds(12), held));
}
