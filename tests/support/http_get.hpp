// A minimal HTTP/1.0 GET over a loopback socket, for tests of the scheduler's dashboard (no
// HTTP client dependency in the tests). Returns the body; throws on a connection failure or a
// status other than 200.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>
#include <string>

namespace herd::test {

/// `url` is "http://HOST:PORT/"; `path` is e.g. "/metrics".
inline std::string http_get(const std::string& url, const std::string& path) {
  const std::string rest = url.substr(url.find("//") + 2);
  const std::string host = rest.substr(0, rest.find(':'));
  const int port = std::stoi(rest.substr(rest.find(':') + 1));
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    throw std::runtime_error("cannot connect to " + url);
  }
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: " + host + "\r\n\r\n";
  (void)!::write(fd, req.data(), req.size());
  std::string resp;
  char buf[65536];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) resp.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  if (resp.compare(0, 12, "HTTP/1.1 200") != 0 && resp.compare(0, 12, "HTTP/1.0 200") != 0) {
    throw std::runtime_error("GET " + path + ": " + resp.substr(0, resp.find('\r')));
  }
  const auto body = resp.find("\r\n\r\n");
  return body == std::string::npos ? std::string() : resp.substr(body + 4);
}

}  // namespace herd::test
