// Results moving between processes (common/data_port, common/data_lane): a data port serving
// on a real TCP socket, a DataClient fetching. Chunk-size edges, many results at once, and the
// progress rule: a slow transfer that keeps moving arrives, a silent holder is given up on in
// bounded time. Bulk lanes, plain and sealed: record edges, a record altered on the way, a lane
// nobody can reach, a holder gone mid-transfer, strays at the lane port.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "net/aead.hpp"
#include "support/keys.hpp"
#include "net/handshake.hpp"
#include "net/lane.hpp"
#include "net/data_port.hpp"

using namespace herd;
using namespace std::chrono_literals;
using net::PayloadPtr;

namespace {

PayloadPtr pattern(std::size_t size, unsigned seed) {
  auto b = net::Buffer::allocate(size);
  for (std::size_t i = 0; i < size; ++i) b->mutable_data()[i] = static_cast<char>((i * 131 + seed) & 0xff);
  return PayloadPtr(std::move(b));
}

security::Keys test_keys() { return herd::testing::make_keys(); }

bool same(const PayloadPtr& a, const PayloadPtr& b) {
  return a->size() == b->size() && std::memcmp(a->data(), b->data(), a->size()) == 0;
}

/// A data port in a thread: serves `store` in chunks of `chunk`, optionally pausing between
/// the messages it sends (a slow link), or answering nothing at all (a silent holder).
struct Port {
  zmq::context_t ctx{1};
  zmq::socket_t router{ctx, zmq::socket_type::router};
  std::string address;
  std::map<protocol::TaskId, PayloadPtr> store;
  std::size_t chunk = 64 << 10;
  std::chrono::milliseconds pause{0};
  std::atomic<bool> silent{false};
  std::atomic<bool> stop{false};
  std::thread thread;
  std::unique_ptr<net::LaneServer> lanes;  // big results on lanes when set
  std::uint16_t lane_port = 0;              // not 0: the reply names this port for the lane instead
  bool short_offer = false;                 // with lane_port: the reply's offer id is cut short

  security::Auth auth;  // with keys: CURVE and the ZAP handler that admits the cluster's key

  explicit Port(const std::optional<security::Keys>& keys = std::nullopt) {
    if (keys) {  // CURVE, as a cluster that encrypts
      auth.keys = keys;
      auth.zap = std::make_unique<security::ZapHandler>(ctx, keys->client_public);
      auth.server(router);
    }
    router.set(zmq::sockopt::linger, 0);
    router.bind("tcp://127.0.0.1:*");
    address = router.get(zmq::sockopt::last_endpoint);
  }
  void start() {
    thread = std::thread([this] {
      zmq::pollitem_t item{static_cast<void*>(router), 0, ZMQ_POLLIN, 0};
      while (!stop) {
        zmq::poll(&item, 1, 20ms);
        while (auto msg = protocol::try_receive(router, true)) {
          protocol::GetDataRequest req;
          std::string error;
          REQUIRE(protocol::decode<protocol::MessageType::get_data_request>(*msg, req, error));
          if (silent) continue;
          if (lane_port != 0 && (req.lanes & protocol::kTakesLane) != 0) {  // names another port
            protocol::GetDataReply reply;
            reply.request_id = req.request_id;
            std::vector<PayloadPtr> payloads;
            for (auto t : req.ids) {
              reply.streamed.push_back({t, store.at(t)->size()});
              payloads.push_back(store.at(t));
            }
            reply.lane = lanes->offer(std::move(payloads));
            reply.lane.port = lane_port;
            if (short_offer) reply.lane.offer.resize(5);
            protocol::send<protocol::MessageType::get_data_reply>(router, msg->identity, reply);
            continue;
          }
          if (pause.count() == 0) {
            net::serve_data(router, msg->identity, req, [&](protocol::TaskId id) {
              auto it = store.find(id);
              return it == store.end() ? nullptr : it->second;
            }, chunk, lanes.get());
            continue;
          }
          // Slow: the reply, then each chunk after a pause (what a slow link looks like from here).
          zmq::socket_t* out = &router;
          const std::string id = msg->identity;
          protocol::GetDataReply reply;
          reply.request_id = req.request_id;
          for (auto t : req.ids) reply.streamed.push_back({t, store.at(t)->size()});
          protocol::send<protocol::MessageType::get_data_reply>(*out, id, reply);
          for (auto t : req.ids) {
            const PayloadPtr& p = store.at(t);
            for (std::size_t off = 0; off < p->size(); off += chunk) {
              std::this_thread::sleep_for(pause);
              std::vector<zmq::message_t> frame;
              frame.push_back(net::zero_copy(p, off, chunk));
              protocol::send<protocol::MessageType::data_chunk>(*out, id, {req.request_id, t, off}, std::move(frame));
            }
          }
        }
      }
    });
  }
  /// Lanes beside the data port, sealed or plain.
  void with_lanes(bool encrypt, std::chrono::milliseconds timeout = 10000ms) {
    lanes = std::make_unique<net::LaneServer>("127.0.0.1", encrypt, timeout);
  }
  ~Port() {
    stop = true;
    if (thread.joinable()) thread.join();
  }
};

struct Fetcher {
  zmq::context_t ctx{1};
  security::Auth auth;  // no keys: plain, as with HERD_AUTH=off
  net::DataClient client;
  std::map<protocol::TaskId, PayloadPtr> got;
  std::vector<protocol::TaskId> missing;
  std::vector<std::pair<std::vector<protocol::TaskId>, std::string>> failed;
  net::DataEvents events;
  explicit Fetcher(std::chrono::milliseconds timeout, const std::optional<security::Keys>& keys = std::nullopt)
      : client(ctx, auth, timeout) {
    auth.keys = keys;  // with keys: CURVE to the port, and sealed lanes insisted on
    events.found = [this](const std::string&, protocol::TaskId id, PayloadPtr p) { got[id] = std::move(p); };
    events.missing = [this](const std::string&, protocol::TaskId id) { missing.push_back(id); };
    events.failed = [this](const std::string&, const std::vector<protocol::TaskId>& ids, const std::string& why) {
      failed.emplace_back(ids, why);
    };
  }
  /// Polls until nothing is in flight (or `until` holds) or `limit` passes; returns how long it took.
  std::chrono::milliseconds run(std::chrono::milliseconds limit, const std::function<bool()>& until = nullptr) {
    const auto t0 = std::chrono::steady_clock::now();
    while (client.in_flight() > 0 && std::chrono::steady_clock::now() - t0 < limit && !(until && until())) {
      std::vector<zmq::pollitem_t> items;
      const std::size_t first = client.add_poll_items(items);
      zmq::poll(items.data(), items.size(), 20ms);
      const auto now = std::chrono::steady_clock::now();
      client.receive(items, first, events, now);
      client.expire(now, events);
    }
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  }
};

}  // namespace

namespace {

/// Results of `sizes` (ids 1..n) held by `port`, asked for in one request with one id it does
/// not hold (99): every one arrives whole, the missing one is said so, nothing fails.
void fetch_sizes(Port& port, const std::vector<std::size_t>& sizes, Fetcher& f) {
  std::vector<protocol::TaskId> ids;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    port.store[i + 1] = pattern(sizes[i], static_cast<unsigned>(i));
    ids.push_back(i + 1);
  }
  ids.push_back(99);
  port.start();
  f.client.request(port.address, ids, std::chrono::steady_clock::now());
  f.run(30s);
  CHECK(f.failed.empty());
  CHECK(f.missing == std::vector<protocol::TaskId>{99});
  REQUIRE(f.got.size() == sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    INFO("size " << sizes[i]);
    CHECK(same(f.got.at(i + 1), port.store.at(i + 1)));
  }
}

}  // namespace

TEST_CASE("DataPort.Chunks.EveryEdgeArrivesWhole" * doctest::timeout(60)) {
  Port port;
  const std::size_t c = port.chunk;
  Fetcher f(5000ms);
  fetch_sizes(port, {0, 1, c - 1, c, c + 1, 2 * c, 3 * c + 7, 40 * c + 3}, f);
  CHECK(f.client.connections() == 1);
}

TEST_CASE("DataPort.Chunks.OneGiBArrivesWholeInRealChunks" * doctest::timeout(120)) {
  // The largest edge: 1 GiB in the chunk size workers really use, exactly a whole number of
  // chunks, and a second result one byte over, in one request.
  Port port;
  port.chunk = std::size_t{4} << 20;
  port.store[1] = pattern(std::size_t{1} << 30, 3);
  port.store[2] = pattern(port.chunk * 3 + 1, 4);
  port.start();
  Fetcher f(10000ms);
  f.client.request(port.address, {1, 2}, std::chrono::steady_clock::now());
  f.run(100s);
  CHECK(f.failed.empty());
  REQUIRE(f.got.size() == 2);
  CHECK(same(f.got.at(1), port.store.at(1)));
  CHECK(same(f.got.at(2), port.store.at(2)));
}

TEST_CASE("DataPort.Progress.SlowTransferLongerThanTheTimeoutArrives" * doctest::timeout(60)) {
  // 20 chunks, 150 ms apart: 3 s in all, six times the 500 ms timeout, never silent for long.
  Port port;
  port.pause = 150ms;
  port.store[1] = pattern(20 * port.chunk, 7);
  port.start();
  Fetcher f(500ms);
  f.client.request(port.address, {1}, std::chrono::steady_clock::now());
  const auto took = f.run(30s);
  CHECK(f.failed.empty());
  REQUIRE(f.got.count(1));
  CHECK(same(f.got.at(1), port.store.at(1)));
  CHECK(took > 2500ms);  // it really was slower than the timeout
}

TEST_CASE("DataPort.Progress.SilentHolderFailsInBoundedTime" * doctest::timeout(60)) {
  Port port;
  port.silent = true;
  port.store[1] = pattern(100, 1);
  port.start();
  Fetcher f(500ms);
  f.client.request(port.address, {1, 2}, std::chrono::steady_clock::now());
  const auto took = f.run(30s);
  REQUIRE(f.failed.size() == 1);
  CHECK(f.failed[0].first == std::vector<protocol::TaskId>{1, 2});
  CHECK(f.failed[0].second.find("no data from " + port.address + " for 500 ms") != std::string::npos);
  CHECK(took >= 500ms);
  CHECK(took < 3000ms);
  CHECK(f.client.connections() == 0);  // the connection was dropped, the next request starts afresh
  // For one more timeout the silent holder is not asked again (every task waiting on it would
  // otherwise wait a whole timeout of its own); then it is.
  const auto now = std::chrono::steady_clock::now();
  const std::string why = f.client.recently_silent(port.address, now);
  CHECK(why.find("no data from " + port.address + " for 500 ms") != std::string::npos);
  CHECK(why.find("ms ago") != std::string::npos);
  CHECK(f.client.recently_silent("tcp://127.0.0.1:1", now).empty());
  CHECK(f.client.recently_silent(port.address, now + 600ms).empty());
}

TEST_CASE("DataPort.Progress.AHolderThatAnswersAgainIsNoLongerSilent" * doctest::timeout(60)) {
  Port port;
  port.silent = true;
  port.store[1] = pattern(100, 1);
  port.start();
  Fetcher f(300ms);
  f.client.request(port.address, {1}, std::chrono::steady_clock::now());
  f.run(30s);
  REQUIRE(f.failed.size() == 1);
  REQUIRE(!f.client.recently_silent(port.address, std::chrono::steady_clock::now()).empty());
  // It answers again (a link back up): the next request, made anyway, gets the data, and the
  // holder is no longer remembered as silent.
  port.silent = false;
  f.client.request(port.address, {1}, std::chrono::steady_clock::now());
  f.run(30s);
  REQUIRE(f.got.count(1) == 1);
  CHECK(f.client.recently_silent(port.address, std::chrono::steady_clock::now()).empty());
}

TEST_CASE("DataPort.Unreachable.NobodyListensFailsInBoundedTime" * doctest::timeout(60)) {
  std::string address;
  {
    Port gone;  // bind, learn the port, close it: nothing listens there any more
    address = gone.address;
  }
  Fetcher f(500ms);
  f.client.request(address, {1}, std::chrono::steady_clock::now());
  f.run(30s);
  REQUIRE(f.failed.size() == 1);
  CHECK(f.got.empty());
}

// ------------------------------------------------------------------------------------------
// Bulk lanes (net/lane.hpp).

namespace {

/// Sizes around the chunk (what goes on a lane) and the record (how a sealed lane cuts it).
std::vector<std::size_t> lane_sizes(std::size_t chunk) {
  const std::size_t r = net::kLaneRecord;
  return {1, chunk, chunk + 1, r - 1, r, r + 1, 2 * r, 3 * r + 7};
}

void fetch_every_edge(bool sealed) {
  const std::optional<security::Keys> keys = sealed ? std::optional(test_keys()) : std::nullopt;
  Port port(keys);
  port.with_lanes(sealed);
  Fetcher f(5000ms, keys);
  fetch_sizes(port, lane_sizes(port.chunk), f);
  CHECK(f.client.lanes_unreachable().empty());
  CHECK(port.lanes->offers() == 0);  // the one offer was claimed
  // Asked again: a new lane, a new offer.
  f.got.clear();
  f.client.request(port.address, {8}, std::chrono::steady_clock::now());
  f.run(30s);
  REQUIRE(f.got.count(8) == 1);
  CHECK(same(f.got.at(8), port.store.at(8)));
}

/// What a holder sends before a lane's bytes: its challenge and its ack (net/handshake.hpp).
constexpr std::size_t kLaneHandshake = 36 + 44;

/// A proxy for every connection to a lane port: what the holder sends is passed on with one
/// bit flipped at byte `flip` of each connection's stream.
struct Tamper {
  int listen_fd = -1;
  std::uint16_t port = 0;
  std::atomic<bool> stop{false};
  std::thread thread;
  Tamper(std::uint16_t target, std::size_t flip) {
    listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listen_fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(listen_fd, 16) == 0);
    socklen_t len = sizeof a;
    ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    thread = std::thread([this, target, flip] {
      while (!stop) {
        pollfd l{listen_fd, POLLIN, 0};
        if (::poll(&l, 1, 50) <= 0) continue;
        const int in = ::accept(listen_fd, nullptr, nullptr);
        if (in < 0) continue;
        const int out = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in t{};
        t.sin_family = AF_INET;
        t.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        t.sin_port = htons(target);
        if (::connect(out, reinterpret_cast<sockaddr*>(&t), sizeof t) == 0) relay(in, out, flip);
        ::close(in);
        ::close(out);
      }
    });
  }
  static void relay(int in, int out, std::size_t flip) {
    std::vector<char> buf(1 << 16);
    std::size_t back = 0;
    pollfd fds[2] = {{in, POLLIN, 0}, {out, POLLIN, 0}};
    for (;;) {
      if (::poll(fds, 2, 5000) <= 0) return;
      if (fds[0].revents) {
        const ssize_t k = ::recv(in, buf.data(), buf.size(), 0);
        if (k <= 0) return;
        (void)!::send(out, buf.data(), static_cast<std::size_t>(k), MSG_NOSIGNAL);
      }
      if (fds[1].revents) {
        const ssize_t k = ::recv(out, buf.data(), buf.size(), 0);
        if (k <= 0) return;
        if (flip >= back && flip < back + static_cast<std::size_t>(k)) buf[flip - back] ^= 0x01;
        back += static_cast<std::size_t>(k);
        if (::send(in, buf.data(), static_cast<std::size_t>(k), MSG_NOSIGNAL) <= 0) return;
      }
    }
  }
  ~Tamper() {
    stop = true;
    thread.join();
    ::close(listen_fd);
  }
};

}  // namespace

TEST_CASE("DataPort.Lane.EveryEdgeArrivesWholePlain" * doctest::timeout(60)) { fetch_every_edge(false); }

TEST_CASE("DataPort.Lane.EveryEdgeArrivesWholeSealed" * doctest::timeout(60)) { fetch_every_edge(true); }

TEST_CASE("DataPort.Lane.OneGiBSealedArrivesWhole" * doctest::timeout(120)) {
  const auto keys = test_keys();
  Port port(keys);
  port.chunk = std::size_t{4} << 20;
  port.with_lanes(true);
  port.store[1] = pattern(std::size_t{1} << 30, 5);
  port.start();
  Fetcher f(10000ms, keys);
  f.client.request(port.address, {1}, std::chrono::steady_clock::now());
  f.run(100s);
  CHECK(f.failed.empty());
  REQUIRE(f.got.size() == 1);
  CHECK(same(f.got.at(1), port.store.at(1)));
}

TEST_CASE("DataPort.Lane.RecordAlteredOnTheWayIsRefusedNamingIt" * doctest::timeout(60)) {
  // One bit flipped in the second record's ciphertext: that record fails authentication, the
  // request fails saying so and how far it got, and nothing wrong is handed over.
  const auto keys = test_keys();
  Port port(keys);
  port.with_lanes(true);
  port.store[1] = pattern(3 * net::kLaneRecord, 9);
  const std::size_t second_record = net::kRecordHeader + net::kLaneRecord + net::kRecordTag;
  Tamper tamper(port.lanes->port(), kLaneHandshake + second_record + net::kRecordHeader + 1000);
  port.lane_port = tamper.port;
  port.start();
  Fetcher f(5000ms, keys);
  f.client.request(port.address, {1}, std::chrono::steady_clock::now());
  f.run(30s);
  CHECK(f.got.empty());
  REQUIRE(f.failed.size() == 1);
  CHECK(f.failed[0].first == std::vector<protocol::TaskId>{1});
  const std::string& why = f.failed[0].second;
  INFO(why);
  CHECK(why.find("is not authentic (byte " + std::to_string(net::kLaneRecord) + " of a result)") != std::string::npos);
  CHECK(why.find("(" + std::to_string(net::kLaneRecord) + " of " + std::to_string(3 * net::kLaneRecord) +
                 " bytes of a result received)") != std::string::npos);
}


TEST_CASE("DataPort.Lane.TamperedLastRecordOfAnEarlierResultNeverYieldsIt" * doctest::timeout(300)) {
  // A sealed lane of two results over 2 MiB (so records are opened on the opener thread while
  // the next ones arrive): the last record of the first result is altered on the way. Whenever
  // that record fails, the first result must not be handed over (its bytes would be the
  // record's, wiped to zeros): the fetch fails, and asked again of a good copy the values are
  // exact. 200 times, since which thread sees the failure first differs from run to run.
  const auto keys = test_keys();
  Port bad(keys);
  bad.with_lanes(true);
  Port good(keys);
  good.with_lanes(true);
  for (Port* p : {&bad, &good}) {
    p->store[1] = pattern(3 * net::kLaneRecord, 21);
    p->store[2] = pattern(net::kLaneRecord / 2, 22);
  }
  const std::size_t record = net::kRecordHeader + net::kLaneRecord + net::kRecordTag;
  Tamper tamper(bad.lanes->port(), kLaneHandshake + 2 * record + net::kRecordHeader + 4096);
  bad.lane_port = tamper.port;
  bad.start();
  good.start();
  Fetcher f(5000ms, keys);
  for (int round = 0; round < 200; ++round) {
    CAPTURE(round);
    f.got.clear();
    f.failed.clear();
    f.client.request(bad.address, {1, 2}, std::chrono::steady_clock::now());
    f.run(30s);
    REQUIRE(f.client.in_flight() == 0);
    CHECK(f.got.count(1) == 0);  // never handed over: not whole, not zeros, not anything
    REQUIRE_FALSE(f.failed.empty());
    bool one_failed = false;
    for (const auto& [ids, why] : f.failed) {
      for (auto id : ids) one_failed = one_failed || id == 1;
      CHECK(why.find("is not authentic") != std::string::npos);
    }
    CHECK(one_failed);
    // What failed comes again from a good copy, exact.
    std::vector<protocol::TaskId> again;
    for (const auto& [ids, why] : f.failed) again.insert(again.end(), ids.begin(), ids.end());
    f.failed.clear();
    f.client.request(good.address, again, std::chrono::steady_clock::now());
    f.run(30s);
    CHECK(f.failed.empty());
    REQUIRE(f.got.count(1) == 1);
    REQUIRE(f.got.count(2) == 1);
    CHECK(same(f.got.at(1), good.store.at(1)));
    CHECK(same(f.got.at(2), good.store.at(2)));
  }
}

TEST_CASE("DataPort.Lane.RecordAlteredInTheSecondResultTheFirstStillArrives" * doctest::timeout(60)) {
  // Results of 2 records and of 3 on one sealed lane, the first record of the second altered:
  // records are opened on a thread of their own while the next ones arrive, and still the
  // first result is handed over whole, the second fails naming its first byte, and nothing
  // past the bad record counts as received.
  const auto keys = test_keys();
  Port port(keys);
  port.with_lanes(true);
  port.store[1] = pattern(2 * net::kLaneRecord, 11);
  port.store[2] = pattern(3 * net::kLaneRecord, 12);
  const std::size_t record = net::kRecordHeader + net::kLaneRecord + net::kRecordTag;
  Tamper tamper(port.lanes->port(), kLaneHandshake + 2 * record + net::kRecordHeader + 5);
  port.lane_port = tamper.port;
  port.start();
  Fetcher f(5000ms, keys);
  f.client.request(port.address, {1, 2}, std::chrono::steady_clock::now());
  f.run(30s);
  REQUIRE(f.got.count(1) == 1);
  CHECK(same(f.got.at(1), port.store.at(1)));
  CHECK(f.got.count(2) == 0);
  REQUIRE(f.failed.size() == 1);
  CHECK(f.failed[0].first == std::vector<protocol::TaskId>{2});
  const std::string& why = f.failed[0].second;
  INFO(why);
  CHECK(why.find("is not authentic (byte 0 of a result)") != std::string::npos);
  CHECK(why.find("(0 of " + std::to_string(3 * net::kLaneRecord) + " bytes of a result received)") != std::string::npos);
}

namespace {

/// `port` holds results 1 and 2 and offers a lane the fetcher cannot use: both arrive whole over
/// the data port, nothing fails, and the holder is remembered as one whose lane is out of reach.
void fetch_without_the_lane(Port& port) {
  port.start();
  Fetcher f(5000ms);
  f.client.request(port.address, {1, 2}, std::chrono::steady_clock::now());
  f.run(30s);
  CHECK(f.failed.empty());
  REQUIRE(f.got.size() == 2);
  CHECK(same(f.got.at(1), port.store.at(1)));
  CHECK(same(f.got.at(2), port.store.at(2)));
  CHECK(f.client.lanes_unreachable() == std::set<std::string>{port.address});
}

}  // namespace

TEST_CASE("DataPort.Lane.NobodyAtTheLaneFetchesOverTheDataPortInstead" * doctest::timeout(60)) {
  // The reply names a port nobody listens on (a firewall that lets only the data port through
  // refuses the same way): the fetcher asks again without a lane, gets every value, and does not
  // try that holder's lane again.
  int dead_port = 0;
  {
    auto gone = std::make_unique<net::LaneServer>("127.0.0.1", false, 1000ms);
    dead_port = gone->port();
  }
  Port port;
  port.with_lanes(false);
  port.lane_port = static_cast<std::uint16_t>(dead_port);
  port.store[1] = pattern(5 * port.chunk + 3, 1);
  port.store[2] = pattern(2 * port.chunk, 2);
  fetch_without_the_lane(port);
}

TEST_CASE("DataPort.Lane.MalformedLaneIsNotUsedValuesComeOverTheDataPort" * doctest::timeout(60)) {
  // A reply whose lane cannot even be started (an offer id of 5 bytes; the same path as a host that
  // does not resolve or no descriptor left): nothing is lost, the results are asked for again
  // without a lane.
  Port port;
  port.with_lanes(false);
  port.lane_port = port.lanes->port();
  port.short_offer = true;
  port.store[1] = pattern(3 * port.chunk + 1, 1);
  port.store[2] = pattern(2 * port.chunk, 2);
  fetch_without_the_lane(port);
}

TEST_CASE("DataPort.Lane.HolderGoneMidTransferFailsSayingHowFar" * doctest::timeout(60)) {
  Port port;
  port.with_lanes(false);
  const std::size_t size = std::size_t{512} << 20;
  port.store[1] = pattern(size, 3);
  port.start();
  Fetcher f(5000ms);
  f.client.request(port.address, {1}, std::chrono::steady_clock::now());
  f.run(30s, [&] { return f.client.streaming_bytes() >= (8u << 20); });
  REQUIRE(f.client.streaming_bytes() >= (8u << 20));
  port.lanes.reset();  // the holder goes: its transfer is cut
  f.run(30s);
  CHECK(f.got.empty());
  REQUIRE(f.failed.size() == 1);
  CHECK(f.failed[0].first == std::vector<protocol::TaskId>{1});
  INFO(f.failed[0].second);
  CHECK(f.failed[0].second.find("its lane 127.0.0.1:") != std::string::npos);
  CHECK(f.failed[0].second.find(" of " + std::to_string(size) + " bytes of a result received)") != std::string::npos);
}

TEST_CASE("DataPort.Lane.StraysAreDroppedAndAnOfferWorksOnce" * doctest::timeout(60)) {
  net::LaneServer lanes("127.0.0.1", false, 5000ms);
  auto connect = [&] {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(lanes.port());
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    return fd;
  };
  // Reads until the server closes (returns the bytes) or 5 s pass (returns -1).
  auto drain = [](int fd) -> long {
    pollfd p{fd, POLLIN, 0};
    long n = 0;
    char buf[1 << 16];
    for (;;) {
      if (::poll(&p, 1, 5000) <= 0) return -1;
      const ssize_t k = ::recv(fd, buf, sizeof buf, 0);
      if (k <= 0) return n;
      n += k;
    }
  };
  // Proves `ticket` as a fetcher does; the connection once the handshake is done, else -1.
  auto dial = [&](const net::OfferTicket& ticket) {
    net::Dialer d("127.0.0.1", std::to_string(lanes.port()), "herd lane", ticket, net::Hello{});
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (d.step(0) == net::Dialer::State::working && std::chrono::steady_clock::now() < deadline) {
      pollfd p{d.fd(), d.events(), 0};
      (void)::poll(&p, 1, 50);
      if (d.step(p.revents) != net::Dialer::State::working) break;
    }
    return d.state() == net::Dialer::State::done ? d.take().fd : -1;
  };
  const auto payload = pattern(3 << 20, 1);
  const protocol::DataLane lane = lanes.offer({payload});
  REQUIRE(lane.offer.size() == net::kOfferId);
  REQUIRE(lane.secret.size() == 32);
  CHECK(lanes.offers() == 1);

  const int junk = connect();  // no hello: the challenge, then dropped at the first wrong byte
  (void)!::send(junk, "GET / HTTP/1.0\r\n\r\n", 18, MSG_NOSIGNAL);
  CHECK(drain(junk) == 36);
  ::close(junk);
  // The right id with a guessed secret, and a made-up id: refused after the challenge.
  CHECK(dial({lane.offer, std::string(32, '\0')}) == -1);
  CHECK(dial({std::string(16, 'x'), lane.secret}) == -1);
  CHECK(lanes.offers() == 1);  // the offer still stands

  const int real = dial({lane.offer, lane.secret});
  REQUIRE(real >= 0);
  CHECK(drain(real) == static_cast<long>(payload->size()));  // plain: this server does not encrypt
  ::close(real);
  CHECK(lanes.offers() == 0);
  CHECK(dial({lane.offer, lane.secret}) == -1);  // the same offer again: used up
}

TEST_CASE("DataPort.Lane.UnclaimedOfferIsWithdrawnAfterTheTimeout" * doctest::timeout(60)) {
  net::LaneServer lanes("127.0.0.1", true, 300ms);
  const auto payload = pattern(1 << 20, 1);
  const auto lane = lanes.offer({payload});
  CHECK(lane.secret.size() == 32);
  CHECK(lanes.offers() == 1);
  CHECK(payload.use_count() == 2);  // the offer holds the bytes
  const auto t0 = std::chrono::steady_clock::now();
  while (lanes.offers() > 0 && std::chrono::steady_clock::now() - t0 < 10s) std::this_thread::sleep_for(20ms);
  CHECK(lanes.offers() == 0);
  CHECK(payload.use_count() == 1);  // and lets go of them
  CHECK(std::chrono::steady_clock::now() - t0 >= 300ms);
}

TEST_CASE("DataPort.Buffer.PagesLentSliceBySliceLeaveTheValueRight" * doctest::timeout(60)) {
  // What result() does with a big result (include/herd/future.hpp): copy slice by slice, each
  // slice copied lending its pages to the next one's destination. Odd offsets on both sides
  // (a msgpack header before the bytes, malloc's header before the vector's), sizes off a page.
  for (const std::size_t size : {std::size_t{3} * (16u << 20) + 7, std::size_t{16u << 20} + 4095, std::size_t{5000}}) {
    INFO("size " << size);
    const std::size_t offset = 5;
    auto source = net::Buffer::allocate(offset + size);
    for (std::size_t i = 0; i < offset + size; ++i) source->mutable_data()[i] = static_cast<char>((i * 7 + 3) & 0xff);
    const std::vector<char> expected(source->data() + offset, source->data() + offset + size);
    const std::size_t slice = std::size_t{4} << 20;
    std::vector<char> out;
    out.reserve(size);
    const char* bytes = source->data() + offset;
    for (std::size_t done = 0, prev = 0; done < size;) {
      const std::size_t n = std::min(slice, size - done);
      if (done > 0) source->recycle(offset + prev, offset + done, out.data() + done, n);
      out.insert(out.end(), bytes + done, bytes + done + n);
      prev = done;
      done += n;
    }
    CHECK(out == expected);
    // The bytes not copied yet when the last slice was lent are still the source's own.
    CHECK(std::memcmp(source->data() + offset + size - 1, &expected.back(), 1) == 0);
  }
}

TEST_CASE("DataPort.Buffer.KeptBuffersAreReusedWithinTheirLimits" * doctest::timeout(60)) {
  // What a client does (Buffer::keep_for_reuse): buffers let go are kept, up to the limit, for
  // the next one of about their size. Off again at the end (the setting is the process's).
  struct Off {
    ~Off() { net::Buffer::keep_for_reuse(0); }
  } off;
  const std::size_t mib = 1 << 20;
  net::Buffer::keep_for_reuse(40 * mib);
  const char* first;
  {
    auto a = net::Buffer::allocate(16 * mib + 100);
    std::memset(a->mutable_data(), 1, a->size());
    first = a->data();
  }
  {
    auto small = net::Buffer::allocate(8 * mib);  // far smaller: not given the kept 16 MiB
    CHECK(small->data() != first);
    auto b = net::Buffer::allocate(16 * mib);  // a little smaller: the kept one
    CHECK(b->data() == first);
    CHECK(b->size() == 16 * mib);
    std::memset(b->mutable_data(), 2, b->size());  // all of it writable
    // Kept buffers lend no pages and give none back: copied out, they stay whole.
    std::vector<char> out(mib);
    b->recycle(0, mib, out.data(), out.size());
    b->release_prefix(2 * mib);
    CHECK(b->data()[0] == 2);
    CHECK(b->data()[2 * mib - 1] == 2);
  }
  {
    auto big = net::Buffer::allocate(41 * mib);  // over the limit: mapped afresh, unmapped after
    CHECK(big->data() != first);
  }
  const char* second;
  {
    // Both kept buffers are taken: the 8 MiB one and the 16 MiB one (24 MiB kept in all).
    auto c = net::Buffer::allocate(16 * mib);
    auto d = net::Buffer::allocate(8 * mib);
    CHECK(c->data() == first);
    second = d->data();
    auto e = net::Buffer::allocate(30 * mib);  // kept too when let go: 54 MiB, over 40
    (void)e;
  }
  {
    // Let go in the order e, d, c: keeping c (after e and d, 54 MiB) put the oldest, e, out.
    auto c = net::Buffer::allocate(30 * mib);
    CHECK(c->data() != first);
    auto d = net::Buffer::allocate(8 * mib);
    CHECK(d->data() == second);
    auto e = net::Buffer::allocate(16 * mib);
    CHECK(e->data() == first);
  }
  net::Buffer::keep_for_reuse(0);  // off: everything kept is let go, nothing kept from now
  auto g = net::Buffer::allocate(16 * mib);
  std::memset(g->mutable_data(), 3, g->size());
}

TEST_CASE("DataPort.Lane.ResultsReceivedIntoAKeptBufferArriveWhole" * doctest::timeout(60)) {
  // Two results of one size, fetched one after the other on sealed lanes: the second is read
  // and opened in the pages the first was received into, and carries its own bytes, not the
  // first's.
  struct Off {
    ~Off() { net::Buffer::keep_for_reuse(0); }
  } off;
  net::Buffer::keep_for_reuse(std::size_t{64} << 20);
  const auto keys = test_keys();
  Port port(keys);
  port.with_lanes(true);
  const std::size_t size = 3 * net::kLaneRecord + 7;
  port.store[1] = pattern(size, 1);
  port.store[2] = pattern(size, 2);
  port.start();
  Fetcher f(5000ms, keys);
  f.client.request(port.address, {1}, std::chrono::steady_clock::now());
  f.run(30s);
  REQUIRE(f.got.count(1) == 1);
  CHECK(same(f.got.at(1), port.store.at(1)));
  const char* where = f.got.at(1)->data();
  f.got.clear();  // the first result let go: its buffer is kept
  f.client.request(port.address, {2}, std::chrono::steady_clock::now());
  f.run(30s);
  CHECK(f.failed.empty());
  REQUIRE(f.got.count(2) == 1);
  CHECK(f.got.at(2)->data() == where);
  CHECK(same(f.got.at(2), port.store.at(2)));
}
