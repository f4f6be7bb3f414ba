// Headless Chromium for the dashboard and report tests: a shell command's output, and the
// browser's command line (root in a container: no sandbox; no network but the page's own).
#pragma once
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace herd::test {

inline std::string run(const std::string& command, int* rc) {
  std::string out;
  FILE* p = ::popen(command.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[65536];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = ::pclose(p);
  *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

inline std::string chromium_command(const std::string& profile, const std::string& window) {
  return "timeout 90 chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage "
         "--disable-background-networking --disable-component-update --disable-sync --no-first-run "
         "--disable-default-apps --mute-audio --user-data-dir=" + profile +
         " --virtual-time-budget=3000 --window-size=" + window + " ";
}

}  // namespace herd::test
