// The client's half of `herd logs`: one request to the scheduler, answered once (see
// protocol::LogsRequest). Implemented in src/client/client.cpp (it needs ClientCore) and
// src/client/logs.cpp (the public conversions).
#pragma once

#include "herd/logs.hpp"
#include "protocol/messages.hpp"

namespace herd::detail {

class ClientCore;

/// Sends `req` and waits (bounded) for the reply. Throws ConnectionError / TimeoutError.
protocol::LogsReply logs_request(ClientCore& core, protocol::LogsRequest req);

Logs to_logs(const protocol::LogSource& source);

}  // namespace herd::detail
