// bed_probe: what the multi-node test bed's smoke test runs inside Slurm jobs on the emulated
// hosts. Plain POSIX sockets, no herd, so that it checks the bed and nothing else. Every line
// is written with one write(2), so a job's output file shows it at once.
//   bed_probe whoami          host=<hostname> addr=<first non-loopback IPv4> self=<own name
//                             resolved> login=<"login" resolved>
//   bed_probe serve           listens on 0.0.0.0:<any free port>, prints "listening <port>",
//                             echoes every line back to whoever sent it, until killed
//   bed_probe ping HOST PORT  connects, prints "connected <ip>", then, one at a time, sends
//                             "<n>\n", waits for the echo, prints "echo <n>", 100 ms apart;
//                             never reconnects: on an error or EOF prints "closed <why>" and
//                             exits 1
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

void say(const std::string& line) {
  const std::string out = line + "\n";
  (void)!::write(STDOUT_FILENO, out.data(), out.size());
}

int fail(const std::string& what) {
  say("closed " + what + ": " + std::strerror(errno));
  return 1;
}

std::string resolve(const char* name) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(name, nullptr, &hints, &res) != 0 || res == nullptr) return "unresolved";
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr, buf, sizeof buf);
  ::freeaddrinfo(res);
  return buf;
}

int whoami() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::string addr = "none";
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) == 0) {
    for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET || (i->ifa_flags & IFF_LOOPBACK)) continue;
      char buf[INET_ADDRSTRLEN] = {};
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf);
      addr = buf;
      break;
    }
    ::freeifaddrs(ifs);
  }
  say(std::string("host=") + host + " addr=" + addr + " self=" + resolve(host) + " login=" + resolve("login"));
  return 0;
}

int serve() {
  const int ls = ::socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  ::setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  if (::bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(ls, 16) != 0) return fail("listen");
  socklen_t len = sizeof a;
  ::getsockname(ls, reinterpret_cast<sockaddr*>(&a), &len);
  say("listening " + std::to_string(ntohs(a.sin_port)));
  std::vector<pollfd> fds{{ls, POLLIN, 0}};
  for (;;) {
    if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return fail("poll");
    for (std::size_t i = fds.size(); i-- > 0;) {
      if (fds[i].revents == 0) continue;
      if (fds[i].fd == ls) {
        const int c = ::accept(ls, nullptr, nullptr);
        if (c >= 0) fds.push_back({c, POLLIN, 0});
        continue;
      }
      char buf[4096];
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n <= 0 || ::write(fds[i].fd, buf, static_cast<std::size_t>(n)) != n) {
        ::close(fds[i].fd);
        fds.erase(fds.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
  }
}

int ping(const char* host, const char* port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host, port, &hints, &res) != 0 || res == nullptr) {
    say(std::string("closed cannot resolve ") + host);
    return 1;
  }
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  if (::connect(s, res->ai_addr, res->ai_addrlen) != 0) return fail("connect");
  char ip[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr, ip, sizeof ip);
  ::freeaddrinfo(res);
  say(std::string("connected ") + ip);
  for (long n = 1;; ++n) {
    const std::string msg = std::to_string(n) + "\n";
    if (::write(s, msg.data(), msg.size()) != static_cast<ssize_t>(msg.size())) return fail("write");
    std::string got;
    while (got.empty() || got.back() != '\n') {
      char c;
      const ssize_t r = ::read(s, &c, 1);
      if (r == 0) {
        say("closed EOF");
        return 1;
      }
      if (r < 0) {
        if (errno == EINTR) continue;
        return fail("read");
      }
      got.push_back(c);
    }
    if (got != msg) {
      say("closed wrong echo");
      return 1;
    }
    say("echo " + std::to_string(n));
    ::usleep(100 * 1000);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "";
  if (what == "whoami" && argc == 2) return whoami();
  if (what == "serve" && argc == 2) return serve();
  if (what == "ping" && argc == 4) return ping(argv[2], argv[3]);
  std::fprintf(stderr, "usage: %s whoami | serve | ping HOST PORT\n", argv[0]);
  return 2;
}
