// The wire snapshot (protocol::StatusReply) as the public herd::ClusterStatus: one conversion
// shared by Client::status() and the scheduler's dashboard, so both show the same numbers.
#pragma once

#include "herd/status.hpp"
#include "protocol/messages.hpp"

namespace herd::detail {

PoolInfo to_pool_info(const protocol::PoolStatus& p);
ClusterStatus to_cluster_status(const protocol::StatusReply& r);

/// "1.5 GiB", "512 MiB", "12 KiB", "100 B".
std::string format_bytes(std::uint64_t bytes);
/// "1:02:03", "4:05", "7 s".
std::string format_seconds(double seconds);

}  // namespace herd::detail
