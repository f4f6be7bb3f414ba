// Who may connect: CURVE encryption and a ZAP handler admitting only this cluster's key are on
// by default. Peers without the key, or without encryption at all, get no message through.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <herd/herd.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "common/security.hpp"
#include "protocol/codec.hpp"
#include "support/process_util.hpp"

using namespace std::chrono_literals;
namespace proto = herd::protocol;

namespace {

int triple(int x) { return 3 * x; }
HERD_TASK(triple);

/// Sends a well-formed client hello; true if any reply came back within `wait`.
bool hello_answered(zmq::socket_t& s, const std::string& address, std::chrono::milliseconds wait) {
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::rcvtimeo, static_cast<int>(wait.count()));
  s.connect(address);
  proto::HelloRequest h;
  h.role = static_cast<std::uint8_t>(proto::Role::client);
  s.send(proto::encode<proto::MessageType::hello_request>(h), zmq::send_flags::none);
  std::vector<zmq::message_t> reply;
  return zmq::recv_multipart(s, std::back_inserter(reply)).has_value();
}

std::pair<std::string, std::string> other_keypair() {
  std::array<char, 41> pub{}, sec{};
  zmq_curve_keypair(pub.data(), sec.data());
  return {pub.data(), sec.data()};
}

}  // namespace

TEST_CASE("Auth.KeyFile.CreatedPrivate") {
  const auto keys = herd::security::cluster_keys();
  REQUIRE(keys.has_value());  // on by default
  const char* file = std::getenv("HERD_KEY_FILE");
  const std::string path = file ? file : std::string(std::getenv("HOME")) + "/.herd/cluster.keys";
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
}

TEST_CASE("Auth.Refused.PlainAndWrongKeyPeers" * doctest::timeout(60)) {
  herd::LocalCluster cluster{1};
  const std::string address = cluster.start();
  herd::Client client{address};
  client.wait_for_workers(1, 20s);
  zmq::context_t ctx;
  {
    zmq::socket_t plain(ctx, zmq::socket_type::dealer);  // no encryption at all
    CHECK_FALSE(hello_answered(plain, address, 1000ms));
  }
  {
    zmq::socket_t wrong(ctx, zmq::socket_type::dealer);  // encrypted, but not our key
    const auto keys = *herd::security::cluster_keys();
    const auto [pub, sec] = other_keypair();
    wrong.set(zmq::sockopt::curve_serverkey, keys.server_public);
    wrong.set(zmq::sockopt::curve_publickey, pub);
    wrong.set(zmq::sockopt::curve_secretkey, sec);
    CHECK_FALSE(hello_answered(wrong, address, 1000ms));
  }
  {
    zmq::socket_t right(ctx, zmq::socket_type::dealer);  // control: the cluster key gets in
    herd::security::make_client(right, *herd::security::cluster_keys());
    CHECK(hello_answered(right, address, 5000ms));
  }
  // A worker's data port refuses strangers too (results are data worth protecting).
  CHECK(client.submit(triple, 5).result() == 15);
}

TEST_CASE("Auth.Refused.ClientWithAnotherClustersKeys" * doctest::timeout(60)) {
  herd::LocalCluster cluster{0};
  const std::string address = cluster.start();
  // This process's keys come from another file: another user's, or another cluster's (in a
  // private directory: a key file in /tmp itself would be refused, others can write there).
  char dir[] = "/tmp/herd-other-keys-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  const std::string other = std::string(dir) + "/cluster.keys";
  herd::process::SpawnOptions spawn;
  spawn.argv = {herd::process::self_executable(), "--test-case=Auth.Child.ConnectWithOtherKeys"};
  spawn.env["HERD_KEY_FILE"] = other;
  spawn.env["HERD_TEST_ADDRESS"] = address;
  spawn.stdout_path = other + ".log";
  const pid_t child = herd::process::spawn(spawn);
  int status = 0;
  ::waitpid(child, &status, 0);
  INFO(herd::testing::read_file(other + ".log"));
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("Auth.Child.ConnectWithOtherKeys" * doctest::skip(std::getenv("HERD_TEST_ADDRESS") == nullptr)) {
  herd::ClientOptions options;
  options.connect_timeout = 5000ms;
  // Told why, not left to time out.
  CHECK_THROWS_WITH_AS(herd::Client(std::getenv("HERD_TEST_ADDRESS"), options),
                       doctest::Contains("authentication failed: not this cluster's key"), herd::ConnectionError);
}

TEST_CASE("Auth.Off.PlainPeersWelcome" * doctest::timeout(60)) {
  // HERD_AUTH=off for a closed network (with an explicit listen address): the scheduler and
  // workers then accept plain peers.
  herd::LocalCluster cluster{1};
  cluster.env("HERD_AUTH", "off").env("HERD_LISTEN", "tcp://127.0.0.1:*");
  const std::string address = cluster.start();
  zmq::context_t ctx;
  zmq::socket_t plain(ctx, zmq::socket_type::dealer);
  CHECK(hello_answered(plain, address, 5000ms));
}
