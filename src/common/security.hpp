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
// The key file and its directory are checked on every start: the file must be this user's and
// readable by nobody else, the directory this user's (or root's) and writable by nobody else
// (whoever can write it can swap the keys); a refusal names the path and the command that fixes
// it. A peer refused for its key is told so (HandshakeWatch), not left to time out.
//
// HERD_AUTH=off turns all of it off, for closed networks: only with an explicit listen address,
// with a warning at every start (check_auth_off). HERD_KEY_FILE names another file.
//
// Also here: random secrets (random_hex) and private runtime directories (private_directory).
#pragma once

#include <cstddef>
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
/// @throws std::runtime_error naming the file (or its directory) and the fix when it cannot be
/// read or created safely: someone else's, readable by others, in a directory others can write.
std::optional<Keys> cluster_keys();

/// The key file's path: $HERD_KEY_FILE, else ~/.herd/cluster.keys.
std::string key_file_path();

/// True when HERD_AUTH=off (or 0): no CURVE, no ZAP, plain ring data.
bool auth_off();

/// Whether a gang's CPU ring encrypts its data: yes unless HERD_AUTH=off or
/// HERD_RING_ENCRYPTION=off (a fabric nobody else can read, where the cost matters: the ring
/// then still admits only the gang's members, but its bytes travel as they are).
bool ring_encryption();

/// With HERD_AUTH=off: throws std::runtime_error unless `explicit_listen` is non-empty (the
/// listen address the user chose; `how` says how to give one), else logs the loud warning
/// every start gets. Does nothing with authentication on.
void check_auth_off(const std::string& who, const std::string& explicit_listen, const std::string& how);

/// `bytes` random bytes from the kernel (getrandom), as 2*bytes lowercase hex digits.
std::string random_hex(std::size_t bytes);

/// Creates `path` (mode 0700) or checks the one there: a directory, not a symlink, owned by
/// this user, with no access for group or others. @throws std::runtime_error naming the path,
/// who owns it and the fix (a directory another user made first is never used).
void private_directory(const std::string& path);

/// Watches the handshakes of a socket that connects to a herd server (ZeroMQ socket monitor),
/// so that a refusal reads "authentication failed: not this cluster's key ..." instead of a
/// timeout. Create it before connect(); poll failure() while waiting for the first reply.
class HandshakeWatch {
 public:
  HandshakeWatch(zmq::context_t& context, zmq::socket_t& socket, std::string peer);
  ~HandshakeWatch();
  HandshakeWatch(const HandshakeWatch&) = delete;
  HandshakeWatch& operator=(const HandshakeWatch&) = delete;
  /// Why the handshakes fail ("" while nothing says so): the server refused this process's key
  /// (ZAP), closed every connection during the CURVE handshake (another cluster's server key),
  /// or one side has HERD_AUTH=off and the other not.
  std::string failure();

 private:
  zmq::socket_t& socket_;
  zmq::socket_t monitor_;
  std::string peer_;
  std::string failure_;
  bool connected_ = false;  // a TCP connection is up and its handshake not yet done
  int closed_in_handshake_ = 0;
};

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
  /// A client that serves data too (its scattered values): the ZAP handler a server needs.
  void serve_too(zmq::context_t& context) {
    if (keys && !zap) zap = std::make_unique<ZapHandler>(context, keys->client_public);
  }
  void server(zmq::socket_t& s) const {
    if (keys) make_server(s, *keys);
  }
  void client(zmq::socket_t& s) const {
    if (keys) make_client(s, *keys);
  }
};

}  // namespace herd::security
