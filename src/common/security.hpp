// Who may connect: ZeroMQ CURVE on every herd socket, with a ZAP handler that admits only
// this cluster's key.
//
// Keys live in ~/.herd/cluster.keys (directory 0700, file 0600), created on first use. On a
// cluster the home directory is shared between login and compute nodes, so a worker started by
// Slurm reads the same file: no key ever appears on a command line, in a job script or in
// squeue. The scheduler and every worker's data port are CURVE servers with the cluster's
// server key; clients and workers connect as CURVE clients with the cluster's client key, and
// the ZAP handler refuses any other client key, and any plain (unencrypted) peer, before a
// single message is delivered.
//
// HERD_AUTH=off turns all of it off, for closed networks. HERD_KEY_FILE names another file.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <zmq.hpp>

namespace herd::security {

struct Keys {
  std::string server_public, server_secret;  // Z85, 40 characters each
  std::string client_public, client_secret;
};

/// The cluster's keys, created on first use; nullopt when HERD_AUTH=off.
/// @throws std::runtime_error naming the file when it cannot be read or created safely.
std::optional<Keys> cluster_keys();

/// Makes `socket` a CURVE server (scheduler ROUTER, worker data port).
void make_server(zmq::socket_t& socket, const Keys& keys);
/// Makes `socket` a CURVE client of the cluster's servers.
void make_client(zmq::socket_t& socket, const Keys& keys);

/// The ZAP handler of one ZeroMQ context: must exist before a server socket of that context
/// binds, and live as long as it. Admits CURVE peers presenting the cluster's client key.
class ZapHandler {
 public:
  ZapHandler(zmq::context_t& context, std::string allowed_client_public_z85);
  ~ZapHandler();
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;

 private:
  void run();
  zmq::context_t& context_;
  zmq::socket_t control_;  // PAIR to stop the thread
  std::string allowed_;    // 32-byte binary client key
  std::thread thread_;
};

/// Everything a process needs: keys (if on) and, for servers, the ZAP handler.
struct Auth {
  std::optional<Keys> keys;
  std::unique_ptr<ZapHandler> zap;
  static Auth for_server(zmq::context_t& context);
  static Auth for_client();
  void server(zmq::socket_t& s) const {
    if (keys) make_server(s, *keys);
  }
  void client(zmq::socket_t& s) const {
    if (keys) make_client(s, *keys);
  }
};

}  // namespace herd::security
