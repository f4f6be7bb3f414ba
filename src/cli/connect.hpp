// What the commands that talk to a running scheduler (`herd status`, `herd logs`) share:
// finding its address (--scheduler or $HERD_SCHEDULER), the connect timeout, and the client.
#pragma once

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "common/env.hpp"
#include "common/util.hpp"
#include "herd/client.hpp"

namespace herd::detail {

struct SchedulerArgs {
  std::string address;
  double timeout_s = 10;

  SchedulerArgs(const SchedulerArgs&) = delete;  // the App holds pointers into it
  SchedulerArgs& operator=(const SchedulerArgs&) = delete;
  explicit SchedulerArgs(CLI::App& app) {
    if (const char* from_env = env::get(env::Var::scheduler)) address = from_env;
    app.add_option("--scheduler,-s", address,
                   "scheduler address, e.g. tcp://login1:8786 (default: $HERD_SCHEDULER)");
    app.add_option("--timeout", timeout_s, "seconds to wait for the scheduler")->capture_default_str();
  }

  /// Parses the command's arguments; returns the exit code to stop with, or -1 to go on.
  int parse(CLI::App& app, const std::vector<std::string>& args) const {
    std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them backwards
    try {
      app.parse(reversed);
    } catch (const CLI::ParseError& e) {
      return util::usage_exit(app.exit(e));
    }
    if (address.empty()) {
      std::cerr << app.get_name() << ": no scheduler address (--scheduler or $HERD_SCHEDULER)\n";
      return 2;
    }
    return -1;
  }

  Client connect(const std::string& client_name) const {
    ClientOptions options;
    options.connect_timeout = std::chrono::milliseconds(static_cast<long>(timeout_s * 1000));
    options.name = client_name;
    return Client(address, options);
  }
};

}  // namespace herd::detail
