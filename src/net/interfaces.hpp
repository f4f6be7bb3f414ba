// Which address a listener binds and tells others, on a cluster of many hosts.
//
// A host's own name is no good guide: on a Debian install it resolves to 127.0.1.1 on the
// host itself, and a login node's name often belongs to its outside interface. Like Dask's
// get_ip, herd asks the kernel which local address routes to the peer that must reach it (the
// scheduler, for a worker), binds that address and advertises it; an interface name (`ib0`,
// `eth0`, as dask-jobqueue's `interface`) or an explicit host overrides the guess.
#pragma once

#include <string>

namespace herd::net {

/// The IPv4 address of interface `name` (e.g. "ib0"). Throws std::runtime_error naming the
/// interface and the ones that exist when it has none.
std::string interface_address(const std::string& name);
/// The local address the kernel would use to reach `host` (a UDP "connection": nothing is
/// sent); "" when `host` does not resolve or no route leads there.
std::string route_address(const std::string& host);
/// The host part of an endpoint: "tcp://login:1234" -> "login", "tcp://[::1]:5" -> "::1".
std::string endpoint_host(const std::string& endpoint);
/// 127.0.0.0/8, ::1 and "localhost".
bool is_loopback(const std::string& address);
/// For a server bound on every interface, what to advertise: the host name when it resolves
/// to an address other hosts can use, else the first non-loopback IPv4 interface address,
/// else the host name.
std::string reachable_host();
/// What a listener binds when nothing says otherwise: the local address that routes to the peer
/// at `endpoint` (e.g. the scheduler's "tcp://login:5555"), "127.0.0.1" when that is loopback,
/// "0.0.0.0" when nothing routes there.
std::string listen_host_toward(const std::string& endpoint);
/// The host, resolved to the interface to bind: an interface name ("ib0") gives its address,
/// anything else is returned as it is.
std::string bind_host(const std::string& host_or_interface);

}  // namespace herd::net
