#include "common/security.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <zmq_addon.hpp>

#include "common/logging.hpp"
#include "common/env.hpp"

namespace herd::security {
namespace {

std::string home() {
  if (const char* h = env::get("HOME"); h != nullptr && *h) return h;
  if (const passwd* pw = ::getpwuid(::getuid())) return pw->pw_dir;
  throw std::runtime_error("cannot find the home directory for the cluster keys");
}

std::string octal(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

std::string user_name(uid_t uid) {
  if (const passwd* pw = ::getpwuid(uid)) return std::string(pw->pw_name) + " (uid " + std::to_string(uid) + ")";
  return "uid " + std::to_string(uid);
}

std::string me() { return user_name(::getuid()); }

std::pair<std::string, std::string> keypair() {
  std::array<char, 41> pub{}, sec{};
  if (zmq_curve_keypair(pub.data(), sec.data()) != 0) {
    throw std::runtime_error(std::string("cannot create CURVE keys: ") + zmq_strerror(zmq_errno()));
  }
  return {std::string(pub.data(), 40), std::string(sec.data(), 40)};
}

std::optional<Keys> parse(const std::string& text) {
  Keys k;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (eq == std::string::npos || line[0] == '#') continue;
    const std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    if (value.size() != 40) continue;
    if (key == "server_public") k.server_public = value;
    if (key == "server_secret") k.server_secret = value;
    if (key == "client_public") k.client_public = value;
    if (key == "client_secret") k.client_secret = value;
  }
  if (k.server_public.empty() || k.server_secret.empty() || k.client_public.empty() || k.client_secret.empty()) {
    return std::nullopt;
  }
  return k;
}

/// The key file's directory: created 0700 if missing; else it must be this user's (or root's)
/// and writable by nobody else, since whoever can write it can put their own keys there.
void check_key_directory(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    throw std::runtime_error("cannot create " + dir + " (the directory of the cluster keys): " + std::strerror(errno));
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) throw std::runtime_error("cannot read " + dir + ": " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) throw std::runtime_error(dir + " (the directory of the cluster keys) is not a directory");
  if (st.st_uid != ::getuid() && st.st_uid != 0) {
    throw std::runtime_error(dir + " (the directory of the cluster keys) belongs to " + user_name(st.st_uid) +
                             ", not to you (" + me() + "): its owner could replace the keys; keep them in a "
                             "directory of your own (HERD_KEY_FILE=$HOME/.herd/cluster.keys)");
  }
  if ((st.st_mode & 022) != 0) {
    throw std::runtime_error(dir + " (the directory of the cluster keys) is writable by others (mode " +
                             octal(st.st_mode) + "), who could replace the keys; run: chmod 700 " + dir);
  }
}

/// The open key file: this user's, and readable or writable by nobody else.
void check_key_file(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw std::runtime_error("cannot read " + path + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw std::runtime_error(path + " (the cluster keys) is not a regular file");
  if (st.st_uid != ::getuid()) {
    throw std::runtime_error(path + " (the cluster keys) belongs to " + user_name(st.st_uid) + ", not to you (" +
                             me() + "): it may be someone else's key; remove it, or set HERD_KEY_FILE to a file "
                             "of your own");
  }
  if ((st.st_mode & 077) != 0) {
    throw std::runtime_error(path + " (the cluster keys) is readable by others (mode " + octal(st.st_mode) +
                             "); run: chmod 600 " + path + " (and make new keys if others may have read it: "
                             "delete the file, then restart every herd process)");
  }
}

Keys load_or_create() {
  const std::string path = key_file_path();
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  check_key_directory(dir);
  std::string text;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) {
    // Created exclusively: if two processes race on first use, one wins, the other reads it.
    const auto [sp, ss] = keypair();
    const auto [cp, cs] = keypair();
    const std::string content = "# herd cluster keys: keep private (mode 0600)\nserver_public=" + sp +
                                "\nserver_secret=" + ss + "\nclient_public=" + cp + "\nclient_secret=" + cs + "\n";
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    int w = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (w < 0) throw std::runtime_error("cannot create " + tmp + ": " + std::strerror(errno));
    const bool ok = ::write(w, content.data(), content.size()) == static_cast<ssize_t>(content.size()) && ::fsync(w) == 0;
    ::close(w);
    if (!ok || ::link(tmp.c_str(), path.c_str()) != 0) {
      const int e = errno;
      ::unlink(tmp.c_str());
      if (e != EEXIST) throw std::runtime_error("cannot create " + path + ": " + std::strerror(e));
    } else {
      ::unlink(tmp.c_str());
      HERD_LOG(info) << "created the cluster keys in " << path;
    }
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  }
  if (fd < 0) throw std::runtime_error("cannot read " + path + ": " + std::strerror(errno));
  try {
    check_key_file(fd, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  char buf[1024];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) text.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  auto keys = parse(text);
  if (!keys) throw std::runtime_error(path + " is not a herd key file (delete it to create new keys)");
  return *keys;
}

}  // namespace

std::string key_file_path() {
  if (const char* f = env::get(env::Var::key_file); f != nullptr && *f) return f;
  return home() + "/.herd/cluster.keys";
}

bool auth_off() {
  const char* auth = env::get(env::Var::auth);
  return auth != nullptr && (std::strcmp(auth, "off") == 0 || std::strcmp(auth, "0") == 0);
}

bool ring_encryption() {
  const char* ring = env::get(env::Var::ring_encryption);
  return !auth_off() && !(ring != nullptr && (std::strcmp(ring, "off") == 0 || std::strcmp(ring, "0") == 0));
}

void check_auth_off(const std::string& who, const std::string& explicit_listen, const std::string& how) {
  if (!auth_off()) return;
  if (explicit_listen.empty()) {
    throw std::runtime_error(
        "HERD_AUTH=off needs an explicit listen address (" + how + "): without authentication anyone who can "
        "reach the port can run commands as you (herd::shell) and read every result, so herd will not choose "
        "where to listen for you");
  }
  HERD_LOG(warning) << "HERD_AUTH=off: " << who << " listens on " << explicit_listen
                    << " WITHOUT AUTHENTICATION OR ENCRYPTION: anyone who can reach it can run commands as "
                    << me() << " and read every result; use it only on a network nobody else can reach";
}

std::string random_hex(std::size_t bytes) {
  std::vector<unsigned char> raw(bytes);
  for (std::size_t got = 0; got < bytes;) {
    const ssize_t n = ::getrandom(raw.data() + got, bytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
    }
    got += static_cast<std::size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes);
  for (const unsigned char c : raw) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

void private_directory(const std::string& path) {
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    throw std::runtime_error("cannot create the private directory " + path + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) throw std::runtime_error("cannot read " + path + ": " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) {
    throw std::runtime_error(path + " should be a private directory of " + me() + " but is " +
                             (S_ISLNK(st.st_mode) ? "a symbolic link" : "not a directory") + " (owner " +
                             user_name(st.st_uid) + "); someone may have put it there to intercept herd's files: "
                             "remove it (as its owner or root), then start again");
  }
  if (st.st_uid != ::getuid()) {
    throw std::runtime_error(path + " belongs to " + user_name(st.st_uid) + ", not to you (" + me() +
                             "): another user created it first, and herd will not put its files there; "
                             "remove it (as its owner or root), then start again");
  }
  if ((st.st_mode & 077) != 0) {
    throw std::runtime_error(path + " is open to others (mode " + octal(st.st_mode) +
                             "), who may have put files there; run: rm -rf " + path + " (or chmod 700 " + path +
                             " if nobody else could write it), then start again");
  }
}

std::optional<Keys> cluster_keys() {
  if (auth_off()) return std::nullopt;
  static std::mutex mu;
  static std::optional<Keys> cached;
  std::lock_guard lock(mu);
  if (!cached) cached = load_or_create();
  return cached;
}

void make_server(zmq::socket_t& s, const Keys& k) {
  s.set(zmq::sockopt::zap_domain, "herd");
  // Without it, a CURVE server whose ZAP handler is gone (its thread died, or was never bound)
  // admits any client key that completes the handshake; with it, libzmq refuses every peer of
  // the domain then: a dead handler fails closed. A draft option of libzmq 4.3 (its header hides
  // it unless ZMQ_BUILD_DRAFT_API), honoured by the library Debian 12 ships.
  constexpr int kZapEnforceDomain = 93;  // ZMQ_ZAP_ENFORCE_DOMAIN
  const int on = 1;
  if (zmq_setsockopt(s.handle(), kZapEnforceDomain, &on, sizeof on) != 0) {
    throw std::runtime_error(std::string("herd: this libzmq cannot enforce ZAP domains (ZMQ_ZAP_ENFORCE_DOMAIN): ") +
                             zmq_strerror(zmq_errno()) + "; a server socket without it would admit any key if its "
                             "authentication thread died");
  }
  s.set(zmq::sockopt::curve_server, true);
  s.set(zmq::sockopt::curve_secretkey, k.server_secret);
}

void make_client(zmq::socket_t& s, const Keys& k) {
  s.set(zmq::sockopt::curve_serverkey, k.server_public);
  s.set(zmq::sockopt::curve_publickey, k.client_public);
  s.set(zmq::sockopt::curve_secretkey, k.client_secret);
}

ZapHandler::ZapHandler(zmq::context_t& context, std::string allowed_z85)
    : context_(context), control_(context, zmq::socket_type::pair) {
  allowed_.resize(32);
  zmq_z85_decode(reinterpret_cast<std::uint8_t*>(allowed_.data()), allowed_z85.c_str());
  const std::string endpoint = "inproc://herd-zap-control-" + std::to_string(reinterpret_cast<std::uintptr_t>(this));
  control_.bind(endpoint);
  // The handler socket binds before this constructor returns, so no server socket of this
  // context can accept a peer without it (ZeroMQ would then skip authentication).
  zmq::socket_t zap(context_, zmq::socket_type::rep);
  zap.bind("inproc://zeromq.zap.01");
  thread_ = std::thread([this, endpoint, z = std::move(zap)]() mutable {
    zmq::socket_t control(context_, zmq::socket_type::pair);
    control.connect(endpoint);
    std::vector<zmq::pollitem_t> items = {{static_cast<void*>(z), 0, ZMQ_POLLIN, 0},
                                          {static_cast<void*>(control), 0, ZMQ_POLLIN, 0}};
    while (true) {
      // A signal (the process's own SIGTERM handler) interrupts the poll: not an error.
      try {
        zmq::poll(items.data(), items.size(), std::chrono::milliseconds(-1));
      } catch (const zmq::error_t& e) {
        if (e.num() == EINTR) continue;
        break;  // ETERM: the context is going away
      }
      if (items[1].revents & ZMQ_POLLIN) break;
      std::vector<zmq::message_t> request;
      try {
        if (!zmq::recv_multipart(z, std::back_inserter(request))) continue;
      } catch (const zmq::error_t& e) {
        if (e.num() == EINTR) continue;
        break;
      }
      // ZAP 1.0 (RFC 27): version, request id, domain, address, identity, mechanism, credentials.
      bool ok = request.size() >= 7 && request[2].to_string() == "herd" && request[5].to_string() == "CURVE" &&
                request[6].size() == 32 && std::memcmp(request[6].data(), allowed_.data(), 32) == 0;
      if (!ok) {
        HERD_LOG(warning) << "refused a connection from " << (request.size() > 3 ? request[3].to_string() : "?")
                          << ": " << (request.size() > 5 && request[5].to_string() != "CURVE"
                                          ? "no encryption (" + request[5].to_string() + ")"
                                          : std::string("unknown key"));
      }
      std::array<zmq::message_t, 6> reply;
      reply[0] = zmq::message_t(std::string("1.0"));
      reply[1] = request.size() > 1 ? zmq::message_t(request[1].data(), request[1].size()) : zmq::message_t();
      reply[2] = zmq::message_t(std::string(ok ? "200" : "400"));
      reply[3] = zmq::message_t(std::string(ok ? "OK" : "not a key of this cluster"));
      reply[4] = zmq::message_t(std::string(ok ? "herd" : ""));
      reply[5] = zmq::message_t();
      zmq::send_multipart(z, reply);
    }
  });
}

ZapHandler::~ZapHandler() {
  control_.send(zmq::str_buffer("stop"), zmq::send_flags::none);
  thread_.join();
}

Auth Auth::for_server(zmq::context_t& context) {
  Auth a;
  a.keys = cluster_keys();
  if (a.keys) a.zap = std::make_unique<ZapHandler>(context, a.keys->client_public);
  return a;
}

Auth Auth::for_client() {
  Auth a;
  a.keys = cluster_keys();
  return a;
}

HandshakeWatch::HandshakeWatch(zmq::context_t& context, zmq::socket_t& socket, std::string peer)
    : socket_(socket), monitor_(context, zmq::socket_type::pair), peer_(std::move(peer)) {
  const std::string endpoint = "inproc://herd-handshake-" + std::to_string(reinterpret_cast<std::uintptr_t>(this)) +
                               "-" + random_hex(4);
  const int events = ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
                     ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL;
  if (zmq_socket_monitor(static_cast<void*>(socket_), endpoint.c_str(), events) != 0) {
    throw std::runtime_error(std::string("zmq_socket_monitor: ") + zmq_strerror(zmq_errno()));
  }
  monitor_.set(zmq::sockopt::linger, 0);
  monitor_.connect(endpoint);
}

HandshakeWatch::~HandshakeWatch() { (void)zmq_socket_monitor(static_cast<void*>(socket_), nullptr, 0); }

std::string HandshakeWatch::failure() {
  const std::string key = auth_off() ? std::string("none (HERD_AUTH=off)") : key_file_path();
  while (failure_.empty()) {
    // An event is two frames: 2 bytes event, 4 bytes value (native order), then the endpoint.
    zmq::message_t head, where;
    try {
      if (!monitor_.recv(head, zmq::recv_flags::dontwait)) break;
      if (!monitor_.recv(where, zmq::recv_flags::dontwait)) break;
    } catch (const zmq::error_t&) {
      break;
    }
    if (head.size() < 6) continue;
    std::uint16_t event = 0;
    std::uint32_t value = 0;
    std::memcpy(&event, head.data(), 2);
    std::memcpy(&value, static_cast<const char*>(head.data()) + 2, 4);
    switch (event) {
      case ZMQ_EVENT_CONNECTED: connected_ = true; break;
      case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
        connected_ = false;
        closed_in_handshake_ = 0;
        break;
      case ZMQ_EVENT_DISCONNECTED:
        // Closed before the handshake completed, twice in a row: a CURVE server that cannot
        // open our hello, i.e. we do not hold its cluster's server key. (Once could be a
        // server going down; its restart would then answer.)
        if (connected_ && ++closed_in_handshake_ >= 2) {
          failure_ = auth_off()
                         ? "authentication failed: " + peer_ + " closed every connection during the handshake: it "
                           "requires this cluster's key and this process has HERD_AUTH=off (every herd process of a "
                           "cluster must have the same HERD_AUTH)"
                         : "authentication failed: not this cluster's key (" + peer_ +
                               " closed every connection during the CURVE handshake: its server key is not the one "
                               "in " + key + ", or it has HERD_AUTH=off; every herd process of a cluster must read "
                               "the same key file, through a shared home directory or HERD_KEY_FILE, and have the "
                               "same HERD_AUTH)";
        }
        connected_ = false;
        break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
        failure_ = "authentication failed: not this cluster's key (" + peer_ + " refused this process's key from " +
                   key + ", status " + std::to_string(value) + "; every herd process of a cluster must read the "
                   "same key file, through a shared home directory or HERD_KEY_FILE)";
        break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
        if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
          failure_ = std::string("authentication failed: ") + peer_ + " and this process disagree on encryption (" +
                     (auth_off() ? "this process has HERD_AUTH=off and the other side has not"
                                 : "the other side has HERD_AUTH=off and this process has not") +
                     "); set the same HERD_AUTH for every process of the cluster";
        } else if (value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC) {
          failure_ = "authentication failed: not this cluster's key (the CURVE handshake with " + peer_ +
                     " failed: its server key is not the one in " + key + ")";
        }
        connected_ = false;
        break;
      default: break;
    }
  }
  return failure_;
}

}  // namespace herd::security
