// A minimal HTTP/1.0 client over a loopback socket, for tests of the scheduler's dashboard (no
// HTTP client dependency in the tests).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <stdexcept>
#include <string>

namespace herd::test {

struct HttpResponse {
  int status = 0;
  std::string headers;  // the header lines, as received
  std::string body;
};

/// One request to `host`:`port`. `head` holds extra header lines ("Cookie: a=b\r\n"); the
/// Host header is `host_header` ("" = host:port).
inline HttpResponse http_request(const std::string& host, int port, const std::string& method, const std::string& path,
                                 const std::string& head = "", const std::string& host_header = "") {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    throw std::runtime_error("cannot connect to " + host + ":" + std::to_string(port));
  }
  const std::string req = method + " " + path + " HTTP/1.0\r\nHost: " +
                          (host_header.empty() ? host + ":" + std::to_string(port) : host_header) + "\r\n" + head +
                          (method == "POST" ? "Content-Length: 0\r\n" : "") + "\r\n";
  (void)!::write(fd, req.data(), req.size());
  std::string resp;
  char buf[65536];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) resp.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  HttpResponse r;
  if (resp.size() > 12) r.status = std::stoi(resp.substr(9, 3));
  const auto end = resp.find("\r\n\r\n");
  r.headers = resp.substr(0, end);
  r.body = end == std::string::npos ? std::string() : resp.substr(end + 4);
  return r;
}

/// "http://HOST:PORT/?token=T" -> HOST, PORT and T ("" when the URL has none).
struct DashboardUrl {
  std::string host, token;
  int port = 0;
  explicit DashboardUrl(const std::string& url) {
    const std::string rest = url.substr(url.find("//") + 2);
    host = rest.substr(0, rest.find(':'));
    port = std::stoi(rest.substr(rest.find(':') + 1));
    if (const auto t = url.find("token="); t != std::string::npos) token = url.substr(t + 6);
  }
  /// `path` with the token added to its query.
  std::string with_token(const std::string& path) const {
    if (token.empty()) return path;
    return path + (path.find('?') == std::string::npos ? "?" : "&") + "token=" + token;
  }
};

/// GET `path` from the dashboard at `url` (as `herd scheduler` prints it, with its token);
/// returns the body; throws on a connection failure or a status other than 200.
inline std::string http_get(const std::string& url, const std::string& path) {
  const DashboardUrl u(url);
  const HttpResponse r = http_request(u.host, u.port, "GET", u.with_token(path));
  if (r.status != 200) throw std::runtime_error("GET " + path + ": status " + std::to_string(r.status));
  return r.body;
}

}  // namespace herd::test
