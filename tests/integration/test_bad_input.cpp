// Untrusted input on the scheduler's port: garbage, truncated and hostile msgpack, oversized
// frames, unknown types, wrong versions, messages out of order. Only the bad peer is dropped;
// a well-behaved client keeps working throughout; the scheduler's memory stays flat.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <herd/herd.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "common/security.hpp"
#include "protocol/codec.hpp"
#include "support/process_util.hpp"

using namespace std::chrono_literals;
using namespace herd::testing;
namespace proto = herd::protocol;

namespace {

int twice(int x) { return 2 * x; }
HERD_TASK(twice);

/// One attacking connection: sends the frames, then reads what (if anything) comes back.
struct Attacker {
  zmq::context_t ctx;
  zmq::socket_t s{ctx, zmq::socket_type::dealer};
  // With the cluster's key: the hardest case is a peer that is let in and then misbehaves.
  explicit Attacker(const std::string& address) {
    if (auto keys = herd::security::cluster_keys()) herd::security::make_client(s, *keys);
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::rcvtimeo, 200);
    s.connect(address);
  }
  void send(std::vector<std::string> frames) {
    for (std::size_t i = 0; i < frames.size(); ++i) {
      s.send(zmq::buffer(frames[i]), i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }
  /// Types of the messages the scheduler answered with (drained until a short timeout).
  std::vector<proto::MessageType> replies() {
    std::vector<proto::MessageType> out;
    while (true) {
      std::vector<zmq::message_t> frames;
      auto r = zmq::recv_multipart(s, std::back_inserter(frames));
      if (!r) break;
      std::string error;
      if (auto t = proto::parse_header(frames[0], error)) out.push_back(*t);
    }
    return out;
  }
};

std::string header(proto::MessageType t, std::uint8_t version = proto::kProtocolVersion) {
  std::string h = "HERD";
  h.push_back(static_cast<char>(version));
  h.push_back(static_cast<char>(t));
  return h;
}

template <typename T>
std::string body(const T& v) {
  msgpack::sbuffer b;
  msgpack::pack(b, v);
  return std::string(b.data(), b.size());
}

std::string client_hello() {
  proto::HelloRequest h;
  h.role = static_cast<std::uint8_t>(proto::Role::client);
  h.name = "attacker";
  return body(h);
}

/// Every kind of bad input once, each from a fresh connection.
void attack_round(const std::string& address, std::mt19937& rng, bool huge) {
  std::uniform_int_distribution<int> byte(0, 255);
  auto random_bytes = [&](std::size_t n) {
    std::string s(n, '\0');
    for (auto& c : s) c = static_cast<char>(byte(rng));
    return s;
  };
  { Attacker a(address); a.send({random_bytes(1 + rng() % 64)}); }                        // noise
  { Attacker a(address); a.send({random_bytes(106)}); }                                   // bad header
  { Attacker a(address); a.send({random_bytes(106), random_bytes(10)}); }                 // ... with a payload
  { Attacker a(address); a.send({header(proto::MessageType::hello_request, 99) + client_hello()}); }  // version
  { Attacker a(address); a.send({header(static_cast<proto::MessageType>(99)) + "x"}); }   // unknown type 99
  { Attacker a(address); a.send({std::string("HERD\x06", 5)}); }                        // a header cut short
  {
    std::string whole = client_hello();
    Attacker a(address);
    a.send({header(proto::MessageType::hello_request) + whole.substr(0, whole.size() / 2)});  // truncated
  }
  {
    std::string deep(5000, '\x81');  // a map of a map of a map ... (depth 5000)
    deep += '\xa1';
    deep += 'k';
    Attacker a(address);
    a.send({header(proto::MessageType::hello_request) + deep});
  }
  {
    const char huge_len[] = {'\xdd', '\x7f', '\xff', '\xff', '\xff'};  // array of 2^31 elements, no data
    Attacker a(address);
    a.send({header(proto::MessageType::hello_request) + std::string(huge_len, sizeof huge_len)});
  }
  {
    // Registered as a client, then a worker-only message, then garbage for a submit.
    Attacker a(address);
    a.send({header(proto::MessageType::hello_request) + client_hello()});
    a.send({header(proto::MessageType::task_results) + body(proto::TaskResultsEvent{})});
    a.send({header(proto::MessageType::submit_tasks) + random_bytes(200)});
  }
  {
    // A submit whose ids claim another client's namespace.
    Attacker a(address);
    a.send({header(proto::MessageType::hello_request) + client_hello()});
    proto::SubmitTasksRequest req;
    proto::TaskSpec t;
    t.id = 1;  // client index 0: nobody's
    t.function = "twice";
    req.tasks.push_back(t);
    a.send({header(proto::MessageType::submit_tasks) + body(req)});
  }
  if (huge) {
    // Bigger than the scheduler's HERD_MAX_MESSAGE_BYTES: ZeroMQ drops the connection when the
    // frame's declared size arrives, before the bytes are read.
    Attacker a(address);
    a.send({header(proto::MessageType::hello_request) + std::string(64u << 20, 'x')});
  }
}

}  // namespace

TEST_CASE("BadInput.Fuzz.OnlyTheBadPeerIsDropped" * doctest::timeout(180)) {
  herd::LocalCluster cluster{1};
  cluster.env("HERD_MAX_MESSAGE_BYTES", std::to_string(16 << 20));
  const std::string address = cluster.start();
  const pid_t scheduler = cluster.scheduler_pid();
  herd::Client client{address};
  client.wait_for_workers(1, 20s);
  CHECK(client.submit(twice, 1).result() == 2);

  std::mt19937 rng(42);
  {
    // One frame of 1 GiB.
    Attacker a(address);
    a.send({header(proto::MessageType::hello_request) + std::string(std::size_t{1} << 30, 'x')});
  }
  attack_round(address, rng, true);  // warm-up: first allocations, socket buffers
  CHECK(client.submit(twice, 2).result() == 4);
  const std::uint64_t before = rss_bytes(scheduler);
  for (int round = 0; round < 200; ++round) {
    attack_round(address, rng, round % 50 == 0);
    if (round % 20 == 0) CHECK(client.submit(twice, round).result(10s) == 2 * round);
  }
  CHECK(client.submit(twice, 21).result(10s) == 42);
  const std::uint64_t after = rss_bytes(scheduler);
  MESSAGE("scheduler RSS before " << before / 1024 << " KiB, after 200 attack rounds " << after / 1024 << " KiB");
  CHECK(after < before + (8u << 20));  // flat, allowing allocator noise
  CHECK(alive(scheduler));
}

TEST_CASE("BadInput.Replies.NamingTheProblem" * doctest::timeout(60)) {
  herd::LocalCluster cluster{0};
  const std::string address = cluster.start();
  {
    // A wrong version in the hello body gets a refusal that says so.
    proto::HelloRequest h;
    h.role = static_cast<std::uint8_t>(proto::Role::client);
    h.protocol = 77;
    Attacker a(address);
    a.send({header(proto::MessageType::hello_request) + body(h)});
    proto::Received received;
    REQUIRE(a.s.recv(received.message));
    proto::HelloReply reply;
    std::string error;
    REQUIRE(proto::decode<proto::MessageType::hello_reply>(received, reply, error));
    CHECK_FALSE(reply.ok);
    CHECK(reply.error.find("protocol version 77") != std::string::npos);
  }
  {
    // Work without a hello: told to go away, nothing executed.
    Attacker a(address);
    a.send({header(proto::MessageType::submit_tasks) + body(proto::SubmitTasksRequest{})});
    const auto replies = a.replies();
    REQUIRE(replies.size() == 1);
    CHECK(replies[0] == proto::MessageType::shutdown);
  }
}
