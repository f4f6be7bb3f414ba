// What another user of a shared login node can reach: 127.0.0.1 is shared by every user, so
// the probes here run as a second Unix user (herd-other, created by the tests; they need root,
// as CI runs them) against a real cluster of this user: the dashboard and its JSON and metrics,
// a worker's data port, a gang's ring port, the dashboard's port taken first, files and
// directories of someone else. Every test also checks that the owner still gets through, so a
// listener that refuses everyone cannot pass.
#include <doctest/doctest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <latch>
#include <string>
#include <thread>

#include <herd/herd.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "collective/ring.hpp"
#include "common/security.hpp"
#include "protocol/codec.hpp"
#include "support/http_get.hpp"
#include "support/other_user.hpp"
#include "support/process_util.hpp"

using namespace std::chrono_literals;
namespace proto = herd::protocol;
using herd::testing::hex;
using herd::testing::run_as_other;

namespace {

long square(long x) { return x * x; }
HERD_TASK(square);

const bool kRoot = ::geteuid() == 0;

std::string as_string(const zmq::message_t& m) { return std::string(static_cast<const char*>(m.data()), m.size()); }

/// A free loopback port (bound then released).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

}  // namespace

TEST_CASE("OtherUser.Dashboard.NothingWithoutTheToken" * doctest::timeout(90) * doctest::skip(!kRoot)) {
  herd::Client client{herd::LocalCluster{1}};
  client.wait_for_workers(1, 30s);
  CHECK(client.submit(square, 7L).result() == 49);
  const std::string url = client.status().dashboard;
  const herd::test::DashboardUrl u(url);
  REQUIRE(u.token.size() == 32);
  const std::string port = std::to_string(u.port);
  const std::string guessed = herd::security::random_hex(16);
  for (const std::string path : {"/", "/api/status", "/metrics"}) {
    CAPTURE(path);
    for (const std::string& query : {std::string(), "?token=" + guessed, std::string("?token="),
                                     "?token=" + u.token.substr(0, 31)}) {
      const auto other = run_as_other({"http", u.host, port, path + query});
      INFO(other.out);
      CHECK(other.get("status") == "403");
      CHECK(other.out.find("herd_workers") == std::string::npos);  // no metrics
      CHECK(other.out.find("local-0") == std::string::npos);       // no worker names
      CHECK(other.out.find("<title>herd dashboard") == std::string::npos);
    }
    // The owner, with the token the scheduler printed.
    const auto mine = herd::test::http_request(u.host, u.port, "GET", u.with_token(path));
    CHECK(mine.status == 200);
  }
  CHECK(herd::test::http_get(url, "/metrics").find("herd_workers 1\n") != std::string::npos);
  CHECK(herd::test::http_get(url, "/api/status").find("\"local-0\"") != std::string::npos);
  CHECK(herd::test::http_get(url, "/").find("<title>herd dashboard</title>") != std::string::npos);
}

TEST_CASE("OtherUser.DataPort.NoResultsWithoutTheKey" * doctest::timeout(90) * doctest::skip(!kRoot)) {
  herd::Client client{herd::LocalCluster{1}};
  client.wait_for_workers(1, 30s);
  auto f = client.submit(square, 12L);
  REQUIRE(f.result() == 144);
  const std::string key = f.key();
  const proto::TaskId id = std::stoull(key.substr(key.rfind('-') + 1), nullptr, 16);
  const auto status = client.status();
  REQUIRE(status.workers.size() == 1);
  const std::string data_port = status.workers[0].address;
  // The request a client sends a worker for a result.
  proto::GetDataRequest req;
  req.request_id = 7;
  req.ids = {id};
  const std::string message = as_string(proto::encode<proto::MessageType::get_data_request>(req));
  const auto keys = herd::security::cluster_keys();
  REQUIRE(keys.has_value());

  // Another user: plain ZeroMQ, then CURVE with a key of its own (even knowing the server's
  // public key). No reply; the second is told its key was refused.
  const auto plain = run_as_other({"zmq", data_port, hex(message)});
  INFO(plain.out);
  CHECK(plain.get("reply") == "none");
  const auto curve = run_as_other({"zmq", data_port, hex(message), "--curve", keys->server_public});
  INFO(curve.out);
  CHECK(curve.get("reply") == "none");
  CHECK(curve.get("handshake") == "auth-failed");

  // The owner, with the cluster's key: the result comes back.
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::rcvtimeo, 10000);
  herd::security::make_client(s, *keys);
  s.connect(data_port);
  s.send(zmq::buffer(message), zmq::send_flags::none);
  std::vector<zmq::message_t> reply;
  REQUIRE(zmq::recv_multipart(s, std::back_inserter(reply)).has_value());
  REQUIRE(reply.size() == 2);  // header and body, one payload
  proto::Received received;
  received.message = std::move(reply[0]);
  proto::GetDataReply r;
  std::string error;
  REQUIRE(proto::decode<proto::MessageType::get_data_reply>(received, r, error));
  CHECK(r.found == std::vector<proto::TaskId>{id});
}

TEST_CASE("OtherUser.Ring.NoDataAndTheGangForms" * doctest::timeout(90) * doctest::skip(!kRoot)) {
  // A gang of two forming: the other user connects to rank 1's ring port first, sends what
  // could be a hello, and gets the 36-byte challenge (a random nonce), then nothing, and is
  // dropped. Then rank 0 connects, the ring forms and reduces right.
  using herd::collective::make_ring;
  using herd::collective::RingListener;
  using herd::collective::RingSetup;
  std::vector<std::string> addresses(2);
  std::latch bound(2), probed(1);
  std::vector<std::vector<std::int64_t>> values(2, std::vector<std::int64_t>(100000));
  std::vector<std::string> errors(2);
  const std::string token = herd::security::random_hex(32);  // as the scheduler makes it
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      try {
        RingListener listener("127.0.0.1");
        addresses[static_cast<std::size_t>(r)] = listener.address();
        bound.arrive_and_wait();
        if (r == 0) probed.wait();
        RingSetup setup;
        setup.rank = r;
        setup.size = 2;
        setup.addresses = addresses;
        setup.token = token;
        herd::Communicator comm(r, 2, make_ring(std::move(setup), std::move(listener)));
        auto& v = values[static_cast<std::size_t>(r)];
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::int64_t>(i) * (r + 1);
        comm.allreduce(v);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  bound.wait();
  const std::string target = addresses[1];
  const std::string port = target.substr(target.rfind(':') + 1);
  std::string hello("HRH2\x02\0\0\0\0\0\0\0\x02\0\0\0\x01\0\0\0", 20);
  hello += herd::security::random_hex(32);  // 64 bytes: a nonce and a guessed proof
  const auto probe = run_as_other({"tcp", "127.0.0.1", port, hex(hello)});
  probed.count_down();
  for (auto& t : ranks) t.join();
  INFO(probe.out);
  CHECK(probe.get("connect") == "ok");
  CHECK(probe.get("received") == "36");  // the challenge, nothing else
  CHECK(probe.get("closed") == "yes");
  CHECK(errors[0] == "");
  CHECK(errors[1] == "");
  for (std::size_t i = 0; i < values[0].size(); i += 997) CHECK(values[0][i] == static_cast<std::int64_t>(i) * 3);
  CHECK(values[0] == values[1]);
}

TEST_CASE("OtherUser.Dashboard.TakenPortIsNeverOurs" * doctest::timeout(90) * doctest::skip(!kRoot)) {
  // The other user holds the port the dashboard asks for, serving a page of its own. The
  // scheduler says so and serves on another port; what it prints is its own dashboard.
  const int port = free_port();
  int out = -1;
  const pid_t squatter = herd::testing::start_as_other({"listen", "127.0.0.1", std::to_string(port), "60"}, &out);
  std::string line;
  for (char c; line.find('\n') == std::string::npos && ::read(out, &c, 1) == 1;) line += c;
  REQUIRE(line == "listening\n");
  char tmpl[] = "/tmp/herd-taken-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  std::string url;
  {
    herd::Client client{herd::LocalCluster{0}
                            .env("HERD_DASHBOARD_ADDRESS", "127.0.0.1:" + std::to_string(port))
                            .log_directory(dir)};
    url = client.status().dashboard;
    const herd::test::DashboardUrl u(url);
    CHECK(u.port != port);
    CHECK(herd::test::http_get(url, "/").find("not yours") == std::string::npos);
    CHECK(herd::test::http_get(url, "/api/status").find("\"scheduler_id\"") != std::string::npos);
  }
  const std::string log = herd::testing::read_file(dir + "/scheduler.log");
  INFO(log);
  CHECK(log.find("port " + std::to_string(port) + " on 127.0.0.1 is taken by herd-other") != std::string::npos);
  (void)herd::testing::finish_probe(squatter, out, 1s);
  std::filesystem::remove_all(dir);
}

TEST_CASE("OtherUser.Files.SomeoneElsesAreRefused" * doctest::timeout(60) * doctest::skip(!kRoot)) {
  const auto other = herd::testing::other_user();
  char tmpl[] = "/tmp/herd-owner-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  // A runtime directory someone else made first: never used.
  const std::string runtime = dir + "/run";
  REQUIRE(::mkdir(runtime.c_str(), 0700) == 0);
  REQUIRE(::chown(runtime.c_str(), other.uid, other.gid) == 0);
  const std::string refusal = runtime + " belongs to herd-other";
  CHECK_THROWS_WITH_AS(herd::security::private_directory(runtime), doctest::Contains(refusal.c_str()),
                       std::runtime_error);
  // Ours, made by the helper: 0700 and ours.
  const std::string mine = dir + "/mine";
  herd::security::private_directory(mine);
  struct stat st {};
  REQUIRE(::lstat(mine.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  CHECK(st.st_uid == ::getuid());
  herd::security::private_directory(mine);  // and accepted the next time

  // A key file of someone else's: refused, naming it (a worker starting with it says so).
  const std::string keys = dir + "/keys";
  REQUIRE(::mkdir(keys.c_str(), 0700) == 0);
  const std::string file = keys + "/cluster.keys";
  std::filesystem::copy_file(herd::security::key_file_path(), file);
  REQUIRE(::chown(file.c_str(), other.uid, other.gid) == 0);
  herd::process::SpawnOptions spawn;
  spawn.argv = {HERD_CLI_PATH, "worker", "--scheduler", "tcp://127.0.0.1:9"};
  spawn.env["HERD_KEY_FILE"] = file;
  spawn.stdout_path = dir + "/worker.log";
  const pid_t pid = herd::process::spawn(spawn);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const std::string log = herd::testing::read_file(dir + "/worker.log");
  INFO(log);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  CHECK(log.find(file + " (the cluster keys) belongs to herd-other") != std::string::npos);
  // The same file, ours again: no complaint about it (the worker then finds no scheduler).
  REQUIRE(::chown(file.c_str(), ::getuid(), ::getgid()) == 0);
  spawn.env["HERD_CONNECT_TIMEOUT_MS"] = "300";
  spawn.stdout_path = dir + "/worker2.log";
  const pid_t pid2 = herd::process::spawn(spawn);
  ::waitpid(pid2, &status, 0);
  const std::string log2 = herd::testing::read_file(dir + "/worker2.log");
  INFO(log2);
  CHECK(log2.find("cluster keys") == std::string::npos);
  CHECK(log2.find("no scheduler answered") != std::string::npos);
  std::filesystem::remove_all(dir);
}
