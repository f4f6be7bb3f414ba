#include "net/interfaces.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <set>
#include <stdexcept>

#include "common/util.hpp"

namespace herd::net {

namespace {
std::string ipv4(const sockaddr* sa) {
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof buf);
  return buf;
}

using util::hostname;
}  // namespace

std::string interface_address(const std::string& name) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) throw std::runtime_error("cannot list the network interfaces");
  std::string found;
  std::set<std::string> names;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_name == nullptr) continue;
    names.insert(a->ifa_name);
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET || name != a->ifa_name) continue;
    if ((a->ifa_flags & IFF_UP) == 0) continue;
    found = ipv4(a->ifa_addr);
    break;
  }
  ::freeifaddrs(list);
  if (found.empty()) {
    std::string known;
    for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
    throw std::runtime_error("network interface '" + name + "' has no IPv4 address that is up (interfaces here: " +
                             known + ")");
  }
  return found;
}

std::string route_address(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (host.empty() || ::getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || res == nullptr) return {};
  std::string out;
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    // connect() on a UDP socket only picks the route and the local address; nothing is sent.
    if (::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
      sockaddr_in local{};
      socklen_t len = sizeof local;
      if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) out = ipv4(reinterpret_cast<sockaddr*>(&local));
    }
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return out == "0.0.0.0" ? std::string() : out;
}

std::string endpoint_host(const std::string& endpoint) {
  std::string s = endpoint;
  if (const auto scheme = s.find("://"); scheme != std::string::npos) s = s.substr(scheme + 3);
  if (!s.empty() && s.front() == '[') {
    const auto close = s.find(']');
    return close == std::string::npos ? s.substr(1) : s.substr(1, close - 1);
  }
  const auto colon = s.rfind(':');
  return colon == std::string::npos ? s : s.substr(0, colon);
}

bool is_loopback(const std::string& address) {
  return address == "localhost" || address == "::1" || address.rfind("127.", 0) == 0;
}

std::string listen_host_toward(const std::string& endpoint) {
  const std::string routed = route_address(endpoint_host(endpoint));
  return routed.empty() ? "0.0.0.0" : is_loopback(routed) ? "127.0.0.1" : routed;
}

std::string reachable_host() {
  const std::string name = hostname();
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  bool usable = false;
  if (::getaddrinfo(name.c_str(), nullptr, &hints, &res) == 0) {
    for (addrinfo* a = res; a != nullptr; a = a->ai_next) usable = usable || !is_loopback(ipv4(a->ai_addr));
    ::freeaddrinfo(res);
  }
  if (usable) return name;
  ifaddrs* list = nullptr;
  std::string first;
  if (::getifaddrs(&list) == 0) {
    for (ifaddrs* a = list; a != nullptr && first.empty(); a = a->ifa_next) {
      if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET || (a->ifa_flags & IFF_UP) == 0) continue;
      if ((a->ifa_flags & IFF_LOOPBACK) != 0) continue;
      first = ipv4(a->ifa_addr);
    }
    ::freeifaddrs(list);
  }
  return first.empty() ? name : first;
}

std::string bind_host(const std::string& host_or_interface) {
  if (host_or_interface.empty()) return host_or_interface;
  // An interface name is one that getifaddrs knows; a host name or address is not.
  ifaddrs* list = nullptr;
  bool is_interface = false;
  if (::getifaddrs(&list) == 0) {
    for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
      is_interface = is_interface || (a->ifa_name != nullptr && host_or_interface == a->ifa_name);
    }
    ::freeifaddrs(list);
  }
  return is_interface ? interface_address(host_or_interface) : host_or_interface;
}

}  // namespace herd::net
