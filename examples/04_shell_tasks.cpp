// 04_shell_tasks: existing programs as tasks. Each command runs on a worker through
// Boost.Process; the result carries the exit code, the tail of stdout/stderr and the wall time.
#include <herd/herd.hpp>

#include <iostream>
#include <vector>

int main(int argc, char** argv) {
  herd::init(argc, argv);
  herd::Client client{herd::LocalCluster{2}};

  std::vector<herd::ShellCommand> commands = {
      herd::ShellCommand{"echo hello from $(hostname)"},
      herd::ShellCommand{std::vector<std::string>{"uname", "-s"}},
      herd::ShellCommand{"echo 'something went wrong' >&2; exit 3"},
  };
  bool as_expected = true;
  const auto results = client.gather(client.map(herd::shell, commands));
  for (std::size_t i = 0; i < results.size(); ++i) {
    const herd::ShellResult& r = results[i];
    std::cout << "command " << i << ": exit " << r.exit_code << ", " << r.wall_time_s * 1000 << " ms\n"
              << "  stdout: " << r.stdout_tail << "  stderr: " << r.stderr_tail << (r.stderr_tail.empty() ? "\n" : "");
  }
  as_expected = results[0].ok() && results[1].stdout_tail == "Linux\n" && results[2].exit_code == 3 &&
                results[2].stderr_tail == "something went wrong\n";
  return as_expected ? 0 : 1;
}
