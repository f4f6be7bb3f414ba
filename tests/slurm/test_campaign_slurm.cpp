// Detached campaigns on the one-machine Slurm (issue 20): a SlurmCluster with keep_scheduler()
// whose client is SIGKILLed mid-campaign; its scheduler and jobs run on, a new client attaches
// by name and gathers every value (each task ran once), then the scheduler is stopped and its
// jobs leave the queue.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <herd/herd.hpp>

#include "support/process_util.hpp"
#include "support/slurm_util.hpp"

using namespace std::chrono_literals;
using namespace herd::testing;

namespace {
int cs_step(int i, std::string dir) {
  std::ofstream(dir + "/" + std::to_string(i), std::ios::app) << "ran\n";
  std::this_thread::sleep_for(300ms);
  return 10 * i;
}

constexpr int kSteps = 10;

const herd::CampaignInfo* find(const std::vector<herd::CampaignInfo>& all, const std::string& name) {
  for (const auto& c : all) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

/// The child: on the parent's word, a SlurmCluster that keeps its scheduler, two workers, the
/// campaign submitted; "<address> <scheduler pid>\n" back once the scheduler holds every task.
[[noreturn]] void child(int go_fd, int back_fd, const std::string& name, const std::string& dir) {
  try {
    char go = 0;
    if (::read(go_fd, &go, 1) != 1) ::_exit(0);  // Slurm is not there: nothing to do
    herd::SlurmCluster cluster{options(name)};
    cluster.keep_scheduler();
    const std::string address = cluster.start();
    const int pid = cluster.scheduler_pid();
    herd::Client client{address};
    client.scale(2);
    std::vector<int> steps;
    for (int i = 0; i < kSteps; ++i) steps.push_back(i);
    auto futures = client.map(herd::TaskOptions{}.campaign("overnight"), cs_step, steps,
                              std::vector<std::string>(kSteps, dir));
    for (;;) {
      const auto all = client.campaigns();
      const herd::CampaignInfo* c = find(all, "overnight");
      if (c != nullptr && c->total == kSteps) break;
      std::this_thread::sleep_for(50ms);
    }
    const std::string line = address + " " + std::to_string(pid) + "\n";
    (void)!::write(back_fd, line.data(), line.size());
    for (;;) ::pause();
  } catch (...) {
    ::_exit(3);
  }
}
}  // namespace
HERD_TASK(cs_step);

TEST_CASE("Slurm.Campaign.ClientKilledSchedulerKeptReattachedByName" * doctest::timeout(300)) {
  const std::string name = unique("campaign");
  const std::string dir = "/tmp/herd-slurm-campaign-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  int go[2], back[2];
  REQUIRE(::pipe(go) == 0);
  REQUIRE(::pipe(back) == 0);
  const pid_t kid = ::fork();  // before this process starts any thread
  REQUIRE(kid >= 0);
  if (kid == 0) {
    ::close(go[1]);
    ::close(back[0]);
    child(go[0], back[1], name, dir);
  }
  ::close(go[0]);
  ::close(back[1]);
  if (!slurm_up()) {
    ::close(go[1]);
    ::waitpid(kid, nullptr, 0);
    return;
  }
  REQUIRE(::write(go[1], "g", 1) == 1);
  ::close(go[1]);
  std::string line;
  for (char c = 0; c != '\n';) {
    REQUIRE_MESSAGE(::read(back[0], &c, 1) == 1, "the child client failed before submitting");
    line += c;
  }
  ::close(back[0]);
  std::istringstream in(line);
  std::string address;
  int scheduler = 0;
  in >> address >> scheduler;
  REQUIRE(scheduler > 0);

  {
    herd::Client watcher{address};
    REQUIRE(eventually([&] {
      const auto all = watcher.campaigns();
      const herd::CampaignInfo* c = find(all, "overnight");
      return c != nullptr && c->done >= 2;
    }, 180s));
    ::kill(kid, SIGKILL);
    REQUIRE(::waitpid(kid, nullptr, 0) == kid);
  }
  CHECK(alive(scheduler));  // kept: its client's death did not stop it
  herd::Client client{address};
  const auto futures = client.campaign_futures<int>("overnight");
  REQUIRE(futures.size() == kSteps);
  for (int i = 0; i < kSteps; ++i) CHECK(futures[static_cast<std::size_t>(i)].result(120s) == 10 * i);
  for (int i = 0; i < kSteps; ++i) {
    CHECK_MESSAGE(read_file(dir + "/" + std::to_string(i)) == "ran\n", "step " << i << " ran more than once");
  }
  client.release_campaign("overnight");
  CHECK(find(client.campaigns(), "overnight") == nullptr);
  client.close();
  // Stopped: it cancels its jobs, which leave the queue.
  ::kill(scheduler, SIGTERM);
  CHECK(eventually([&] { return !alive(scheduler); }, 90s));
  CHECK(eventually([&] { return queued(name).empty(); }, 90s));
  std::filesystem::remove_all(dir);
}
