// Plain TCP sockets for the links herd opens itself beside ZeroMQ (the gang ring, data ports'
// bulk lanes): the socket options they share, name resolution, "host:port" parsing.
#pragma once

#include <netdb.h>

#include <string>
#include <utility>

namespace herd::net {

/// Closes `fd` when open and sets it to -1.
void close_fd(int& fd);
/// False (errno set) when the flag cannot be set.
bool set_nonblocking(int fd);
/// SO_SNDBUF / SO_RCVBUF; before listen()/connect(), so the window scale is negotiated for
/// them. Best effort.
void set_buffers(int fd, int bytes);
void set_nodelay(int fd);
/// A peer whose machine dies says nothing (no FIN, no RST): keepalive probes (receiving side)
/// and a limit on unacknowledged data (sending side) turn that into an error after ~1.5
/// minutes. A live peer that is merely slow still acknowledges, so this never fires on slowness.
void set_liveness(int fd);

/// getaddrinfo's list, freed with it.
struct AddrInfo {
  addrinfo* list = nullptr;
  AddrInfo() = default;
  AddrInfo(const AddrInfo&) = delete;
  AddrInfo& operator=(const AddrInfo&) = delete;
  ~AddrInfo();
};
/// getaddrinfo for a TCP stream socket (any family); its return code.
int resolve(const std::string& host, const std::string& port, int flags, AddrInfo& out);
/// "host:port" or "[v6]:port" -> (host, port); std::invalid_argument without a port.
std::pair<std::string, std::string> split_address(const std::string& address);
/// A listening socket (blocking, close-on-exec) on `host` (an address or a name; "" or "*":
/// every interface) at a port the kernel picks, with SO_REUSEADDR, `buffer_bytes` socket
/// buffers (accepted sockets inherit them; 0: the system's) and a large backlog, so a flood of
/// strays does not fill it before a real peer's connection. Throws std::runtime_error, its
/// message starting with `who`, naming the host and the reason.
int listen_on(const std::string& host, int buffer_bytes, const std::string& who);
/// A non-blocking, close-on-exec socket to `host`:`port` with its connect() started (and
/// `buffer_bytes` socket buffers first, when not 0, so the window scale is negotiated for them).
/// Returns the socket with `connect_errno` 0 (connected, or connecting: poll for POLLOUT, then
/// SO_ERROR) or connect()'s errno when it failed at once (refused); -1 with `error` saying why
/// when the host does not resolve or no socket can be made. `attempt` picks among the addresses
/// the host resolves to (modulo their number), for a caller that retries.
int connect_start(const std::string& host, const std::string& port, int buffer_bytes, int& connect_errno,
                  std::string& error, unsigned attempt = 0);
/// The port a bound socket got (0 on error).
unsigned short local_port(int fd);

}  // namespace herd::net
