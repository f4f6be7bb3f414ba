#include "common/security.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <zmq_addon.hpp>

#include "common/logging.hpp"

namespace herd::security {
namespace {

std::string home() {
  if (const char* h = std::getenv("HOME"); h != nullptr && *h) return h;
  if (const passwd* pw = ::getpwuid(::getuid())) return pw->pw_dir;
  throw std::runtime_error("cannot find the home directory for the cluster keys");
}

std::string key_file() {
  if (const char* f = std::getenv("HERD_KEY_FILE"); f != nullptr && *f) return f;
  return home() + "/.herd/cluster.keys";
}

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

Keys load_or_create() {
  const std::string path = key_file();
  const std::string dir = path.substr(0, path.rfind('/'));
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    throw std::runtime_error("cannot create " + dir + ": " + std::strerror(errno));
  }
  std::string text;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) {
    // Created exclusively: if two processes race on first use, one wins, the other reads it.
    const auto [sp, ss] = keypair();
    const auto [cp, cs] = keypair();
    const std::string content = "# herd cluster keys: keep private (mode 0600)\nserver_public=" + sp +
                                "\nserver_secret=" + ss + "\nclient_public=" + cp + "\nclient_secret=" + cs + "\n";
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    int w = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
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
  struct stat st {};
  ::fstat(fd, &st);
  if ((st.st_mode & 077) != 0) {
    ::close(fd);
    throw std::runtime_error(path + " is readable by others (mode " + std::to_string(st.st_mode & 0777) +
                             "); run: chmod 600 " + path);
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

std::optional<Keys> cluster_keys() {
  const char* auth = std::getenv("HERD_AUTH");
  if (auth != nullptr && (std::strcmp(auth, "off") == 0 || std::strcmp(auth, "0") == 0)) return std::nullopt;
  static std::mutex mu;
  static std::optional<Keys> cached;
  std::lock_guard lock(mu);
  if (!cached) cached = load_or_create();
  return cached;
}

void make_server(zmq::socket_t& s, const Keys& k) {
  s.set(zmq::sockopt::zap_domain, "herd");
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
      bool ok = request.size() >= 7 && request[5].to_string() == "CURVE" && request[6].size() == 32 &&
                std::memcmp(request[6].data(), allowed_.data(), 32) == 0;
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

}  // namespace herd::security
