// Results moving between processes (common/data_port): a data port serving on a real TCP
// socket, a DataClient fetching. Chunk-size edges, many results at once, and the progress
// rule: a slow transfer that keeps moving arrives, a silent holder is given up on in bounded
// time.
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <map>
#include <thread>

#include "common/data_port.hpp"

using namespace herd;
using namespace std::chrono_literals;
using data::PayloadPtr;

namespace {

PayloadPtr pattern(std::size_t size, unsigned seed) {
  auto b = data::Buffer::allocate(size);
  for (std::size_t i = 0; i < size; ++i) b->mutable_data()[i] = static_cast<char>((i * 131 + seed) & 0xff);
  return PayloadPtr(std::move(b));
}

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

  Port() {
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
          if (pause.count() == 0) {
            data::serve_data(router, msg->identity, req, [&](protocol::TaskId id) {
              auto it = store.find(id);
              return it == store.end() ? nullptr : it->second;
            }, chunk);
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
              frame.push_back(data::zero_copy(p, off, chunk));
              protocol::send<protocol::MessageType::data_chunk>(*out, id, {req.request_id, t, off}, std::move(frame));
            }
          }
        }
      }
    });
  }
  ~Port() {
    stop = true;
    if (thread.joinable()) thread.join();
  }
};

struct Fetcher {
  zmq::context_t ctx{1};
  security::Auth auth;  // no keys: plain, as with HERD_AUTH=off
  data::DataClient client;
  std::map<protocol::TaskId, PayloadPtr> got;
  std::vector<protocol::TaskId> missing;
  std::vector<std::pair<std::vector<protocol::TaskId>, std::string>> failed;
  data::DataEvents events;
  explicit Fetcher(std::chrono::milliseconds timeout) : client(ctx, auth, timeout) {
    events.found = [this](const std::string&, protocol::TaskId id, PayloadPtr p) { got[id] = std::move(p); };
    events.missing = [this](const std::string&, protocol::TaskId id) { missing.push_back(id); };
    events.failed = [this](const std::string&, const std::vector<protocol::TaskId>& ids, const std::string& why) {
      failed.emplace_back(ids, why);
    };
  }
  /// Polls until nothing is in flight or `limit` passes; returns how long it took.
  std::chrono::milliseconds run(std::chrono::milliseconds limit) {
    const auto t0 = std::chrono::steady_clock::now();
    while (client.in_flight() > 0 && std::chrono::steady_clock::now() - t0 < limit) {
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

TEST_CASE("DataPort.Chunks.EveryEdgeArrivesWhole" * doctest::timeout(60)) {
  Port port;
  const std::size_t c = port.chunk;
  const std::vector<std::size_t> sizes = {0, 1, c - 1, c, c + 1, 2 * c, 3 * c + 7, 40 * c + 3};
  for (std::size_t i = 0; i < sizes.size(); ++i) port.store[i + 1] = pattern(sizes[i], static_cast<unsigned>(i));
  port.start();
  Fetcher f(5000ms);
  std::vector<protocol::TaskId> ids;
  for (std::size_t i = 0; i < sizes.size(); ++i) ids.push_back(i + 1);
  ids.push_back(99);  // not held
  f.client.request(port.address, ids, std::chrono::steady_clock::now());
  f.run(30s);
  CHECK(f.failed.empty());
  CHECK(f.missing == std::vector<protocol::TaskId>{99});
  REQUIRE(f.got.size() == sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    INFO("size " << sizes[i]);
    CHECK(same(f.got.at(i + 1), port.store.at(i + 1)));
  }
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
