// herd_test_probe: what another user of the machine can try against a herd cluster. The tests
// run it as a second Unix user (tests/support/other_user.hpp); it links nothing of herd (only
// libzmq), so it runs from a directory that user can read. Each command prints what it got,
// one "key value" per line, and exits 0 unless it could not even try.
//
//   http HOST PORT PATH [HOST_HEADER [METHOD]]   one request: "status N", then the body
//   zmq ENDPOINT FRAME_HEX... [--curve SERVER_PUBLIC_Z85]
//                                                  sends the frames as a plain (or CURVE, with a
//                                                  key of its own) DEALER: "reply N frames" or
//                                                  "reply none", and "handshake auth-failed" when
//                                                  the server said so
//   tcp HOST PORT SEND_HEX                         connects, sends, reads until EOF or 5 s:
//                                                  "connect ok|refused", "received N", "closed yes|no"
//   listen HOST PORT SECONDS                       holds a listening socket there, answering
//                                                  every request with a page of its own
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <zmq.hpp>

namespace {

std::string unhex(const std::string& h) {
  std::string out;
  for (std::size_t i = 0; i + 1 < h.size(); i += 2) out.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return out;
}

int connect_tcp(const std::string& host, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

int http(int argc, char** argv) {
  if (argc < 5) return 2;
  const std::string host = argv[2], path = argv[4];
  const int port = std::atoi(argv[3]);
  const std::string host_header = argc > 5 ? argv[5] : host + ":" + argv[3];
  const std::string method = argc > 6 ? argv[6] : "GET";
  const int fd = connect_tcp(host, port);
  if (fd < 0) {
    std::printf("status refused\n");
    return 0;
  }
  const std::string req = method + " " + path + " HTTP/1.0\r\nHost: " + host_header + "\r\n\r\n";
  (void)!::write(fd, req.data(), req.size());
  std::string resp;
  char buf[65536];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) resp.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  const auto sp = resp.find(' ');
  const auto body = resp.find("\r\n\r\n");
  std::printf("status %s\n%s", sp == std::string::npos ? "none" : resp.substr(sp + 1, 3).c_str(),
              body == std::string::npos ? "" : resp.substr(body + 4).c_str());
  return 0;
}

int zmq_probe(int argc, char** argv) {
  if (argc < 4) return 2;
  std::vector<std::string> frames;
  std::string server_key;
  for (int i = 3; i < argc; ++i) {
    if (std::string(argv[i]) == "--curve" && i + 1 < argc) {
      server_key = argv[++i];
    } else {
      frames.push_back(unhex(argv[i]));
    }
  }
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  if (!server_key.empty()) {  // encrypted, with a key pair of our own (the cluster's we cannot read)
    std::array<char, 41> pub{}, sec{};
    zmq_curve_keypair(pub.data(), sec.data());
    s.set(zmq::sockopt::curve_serverkey, server_key);
    s.set(zmq::sockopt::curve_publickey, std::string(pub.data(), 40));
    s.set(zmq::sockopt::curve_secretkey, std::string(sec.data(), 40));
  }
  zmq_socket_monitor(static_cast<void*>(s), "inproc://probe-monitor", ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);
  zmq::socket_t monitor(ctx, zmq::socket_type::pair);
  monitor.connect("inproc://probe-monitor");
  s.connect(argv[2]);
  for (std::size_t i = 0; i < frames.size(); ++i) {
    zmq::message_t m(frames[i].data(), frames[i].size());
    s.send(m, i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
  bool auth_failed = false;
  int got = -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (std::chrono::steady_clock::now() < deadline && got < 0) {
    zmq::pollitem_t items[] = {{static_cast<void*>(s), 0, ZMQ_POLLIN, 0}, {static_cast<void*>(monitor), 0, ZMQ_POLLIN, 0}};
    zmq::poll(items, 2, std::chrono::milliseconds(100));
    if (items[1].revents & ZMQ_POLLIN) {
      zmq::message_t event, where;
      (void)monitor.recv(event);
      (void)monitor.recv(where);
      auth_failed = true;
    }
    if (items[0].revents & ZMQ_POLLIN) {
      got = 0;
      zmq::message_t m;
      do {
        (void)s.recv(m);
        ++got;
      } while (m.more());
    }
  }
  if (got < 0) std::printf("reply none\n");
  else std::printf("reply %d frames\n", got);
  std::printf("handshake %s\n", auth_failed ? "auth-failed" : "no-auth-event");
  zmq_socket_monitor(static_cast<void*>(s), nullptr, 0);
  return 0;
}

int tcp(int argc, char** argv) {
  if (argc < 5) return 2;
  const int fd = connect_tcp(argv[2], std::atoi(argv[3]));
  if (fd < 0) {
    std::printf("connect refused\n");
    return 0;
  }
  std::printf("connect ok\n");
  const std::string out = unhex(argv[4]);
  (void)!::send(fd, out.data(), out.size(), MSG_NOSIGNAL);
  std::size_t received = 0;
  bool closed = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      closed = true;
      break;
    }
    received += static_cast<std::size_t>(n);
  }
  ::close(fd);
  std::printf("received %zu\nclosed %s\n", received, closed ? "yes" : "no");
  return 0;
}

int listen_probe(int argc, char** argv) {
  if (argc < 5) return 2;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(std::atoi(argv[3])));
  ::inet_pton(AF_INET, argv[2], &addr.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 16) != 0) {
    std::printf("listen failed %s\n", std::strerror(errno));
    return 1;
  }
  std::printf("listening\n");
  std::fflush(stdout);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(std::atoi(argv[4]));
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const int c = ::accept(fd, nullptr, nullptr);
    if (c < 0) continue;
    const std::string page = "HTTP/1.0 200 OK\r\nContent-Type: text/html\r\n\r\n<title>herd dashboard</title>not yours\n";
    (void)!::send(c, page.data(), page.size(), MSG_NOSIGNAL);
    ::close(c);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const std::string what = argv[1];
  try {
    if (what == "http") return http(argc, argv);
    if (what == "zmq") return zmq_probe(argc, argv);
    if (what == "tcp") return tcp(argc, argv);
    if (what == "listen") return listen_probe(argc, argv);
  } catch (const std::exception& e) {
    std::printf("error %s\n", e.what());
    return 1;
  }
  return 2;
}
