// Jobs of shell commands from a client: the requests `herd submit` and `herd job ...` send
// (protocol::JobRequest), and the conversion to the public ShellJob. The jobs themselves are
// the scheduler's (src/scheduler/state_jobs.cpp).
#pragma once

#include <chrono>

#include "herd/client.hpp"
#include "herd/status.hpp"
#include "protocol/messages.hpp"

namespace herd::detail {

struct ClientAccess {
  /// Sends `req` and waits (up to `timeout`) for its reply; throws when none came.
  static protocol::JobReply ask_job(const Client& client, protocol::JobRequest req,
                                    std::chrono::seconds timeout = std::chrono::seconds(30));
};

ShellJob to_shell_job(const protocol::JobInfo& info, const std::vector<protocol::JobTaskInfo>& tasks = {});

}  // namespace herd::detail
