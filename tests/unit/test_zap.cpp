// Who gets through a herd CURVE server socket (common/security): the cluster's client key, not
// a stranger's key that completes CURVE's handshake, and nobody at all once the ZAP handler is
// gone (ZMQ_ZAP_ENFORCE_DOMAIN: a dead authentication thread fails closed instead of open).
#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include <zmq.hpp>

#include "common/security.hpp"
#include "support/keys.hpp"

using namespace herd;
using namespace std::chrono_literals;

namespace {


/// Sends one message from a fresh DEALER with `keys`; true when the server's ROUTER gets it
/// within `wait`.
bool gets_through(zmq::context_t& ctx, zmq::socket_t& server, const std::string& address, const security::Keys& keys,
                  std::chrono::milliseconds wait) {
  zmq::socket_t client(ctx, zmq::socket_type::dealer);
  client.set(zmq::sockopt::linger, 0);
  security::make_client(client, keys);
  client.connect(address);
  (void)client.send(zmq::str_buffer("hello"), zmq::send_flags::dontwait);
  zmq::pollitem_t item{static_cast<void*>(server), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, wait) <= 0) return false;
  zmq::message_t identity, body;
  REQUIRE(server.recv(identity));
  REQUIRE(server.recv(body));
  return body.to_string() == "hello";
}

}  // namespace

TEST_CASE("Zap.Server.AdmitsTheClustersKeyAndNoOtherAndFailsClosedWithoutItsHandler" * doctest::timeout(60)) {
  zmq::context_t ctx(1);
  const security::Keys cluster = herd::testing::make_keys();
  security::Keys stranger = herd::testing::make_keys();
  stranger.server_public = cluster.server_public;  // it knows whom it talks to, not the client key
  security::Auth auth;
  auth.keys = cluster;
  auth.zap = std::make_unique<security::ZapHandler>(ctx, cluster.client_public);
  zmq::socket_t server(ctx, zmq::socket_type::router);
  server.set(zmq::sockopt::linger, 0);
  auth.server(server);
  server.bind("tcp://127.0.0.1:*");
  const std::string address = server.get(zmq::sockopt::last_endpoint);

  CHECK(gets_through(ctx, server, address, cluster, 3000ms));
  CHECK_FALSE(gets_through(ctx, server, address, stranger, 1000ms));

  auth.zap.reset();  // the handler's thread is gone
  CHECK_FALSE(gets_through(ctx, server, address, stranger, 1000ms));  // without enforcement: admitted
  CHECK_FALSE(gets_through(ctx, server, address, cluster, 1000ms));   // nobody, until it is back
}
