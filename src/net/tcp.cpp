#include "net/tcp.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace herd::net {

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

bool set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  return flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) >= 0;
}

void set_buffers(int fd, int bytes) {
  (void)::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  (void)::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
}

void set_nodelay(int fd) {
  const int one = 1;
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void set_liveness(int fd) {
  const int one = 1, idle = 30, interval = 10, count = 6;
  const unsigned user_timeout_ms = 90000;
  (void)::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
}

int connect_start(const std::string& host, const std::string& port, int buffer_bytes, int& connect_errno,
                  std::string& error, unsigned attempt) {
  connect_errno = 0;
  AddrInfo ai;
  if (const int rc = resolve(host, port, 0, ai); rc != 0 || ai.list == nullptr) {
    error = "cannot resolve '" + host + "': " + ::gai_strerror(rc);
    return -1;
  }
  unsigned count = 0;
  for (addrinfo* a = ai.list; a; a = a->ai_next) ++count;
  addrinfo* target = ai.list;
  for (unsigned i = attempt % count; i > 0; --i) target = target->ai_next;
  const int fd = ::socket(target->ai_family, target->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, target->ai_protocol);
  if (fd < 0) {
    error = std::string("no socket: ") + std::strerror(errno);
    return -1;
  }
  if (buffer_bytes > 0) set_buffers(fd, buffer_bytes);
  if (::connect(fd, target->ai_addr, target->ai_addrlen) != 0 && errno != EINPROGRESS) connect_errno = errno;
  return fd;
}

AddrInfo::~AddrInfo() {
  if (list) ::freeaddrinfo(list);
}

int resolve(const std::string& host, const std::string& port, int flags, AddrInfo& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags;
  return ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &out.list);
}

std::pair<std::string, std::string> split_address(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) {
    throw std::invalid_argument("address without a port: '" + address + "'");
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return {host, address.substr(colon + 1)};
}

int listen_on(const std::string& host, int buffer_bytes, const std::string& who) {
  const bool any = host.empty() || host == "*";
  AddrInfo ai;
  if (const int rc = resolve(any ? "0.0.0.0" : host, "0", AI_PASSIVE, ai); rc != 0) {
    throw std::runtime_error(who + ": cannot resolve '" + host + "': " + ::gai_strerror(rc));
  }
  int last_err = 0;
  for (addrinfo* a = ai.list; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last_err = errno;
      continue;
    }
    const int one = 1;
    (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (buffer_bytes > 0) set_buffers(fd, buffer_bytes);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 4096) == 0) return fd;
    last_err = errno;
    ::close(fd);
  }
  throw std::runtime_error(who + ": cannot listen on '" + host + "': " + std::strerror(last_err));
}

unsigned short local_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return 0;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return 0;
}

}  // namespace herd::net
