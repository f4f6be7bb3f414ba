// The multi-node test bed itself (label multinode: scripts/local-slurm.sh start --nodes N, N >= 2;
// each case runs on the bed's login host). Jobs land on the compute hosts with their own names
// and addresses; a job on one host reaches a listener in a job on another by name; the
// script's faults do what they say: link-down hangs a TCP connection without a reset and
// link-up lets the same connection go on, a partition cuts one pair of hosts and no other, and
// a crash makes Slurm set the node DOWN and its job NODE_FAIL. The network checks use
// bed_probe (plain sockets), so that they test the bed and not herd.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "support/multinode_util.hpp"

using namespace std::chrono_literals;
using namespace herd::testing;

namespace {

const std::string probe = HERD_BED_PROBE;

/// Job output lives here: /tmp is shared by every host, as a cluster's filesystem is.
struct Scratch {
  std::string dir = "/tmp/herd-bed-test-" + std::to_string(::getpid());
  Scratch() { std::filesystem::create_directories(dir); }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::string file(const std::string& name) const { return dir + "/" + name; }
};

/// IPv4 address of `name` as this host (login) resolves it.
std::string resolve(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  if (::getaddrinfo(name.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) return "unresolved";
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr, buf, sizeof buf);
  ::freeaddrinfo(res);
  return buf;
}

/// "k=v k=v" → map.
std::map<std::string, std::string> fields(const std::string& line) {
  std::map<std::string, std::string> out;
  std::istringstream in(line);
  for (std::string kv; in >> kv;) {
    const auto eq = kv.find('=');
    if (eq != std::string::npos) out[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return out;
}

int listening_port(const std::string& output) {
  int port = 0;
  REQUIRE_MESSAGE(eventually([&] { return !bed::lines_with(output, "listening ").empty(); }, 30s),
                  "no echo server in " << output << ": " << read_file(output));
  port = std::stoi(bed::lines_with(output, "listening ").front().substr(10));
  REQUIRE(port > 0);
  return port;
}

/// An echo server in a job on a compute host.
struct JobServer {
  std::string output;
  bed::Job job;
  int port;
  JobServer(const std::string& node, const Scratch& s)
      : output(s.file("serve-" + node)), job(node, unique("bed-serve"), output, probe + " serve"),
        port(listening_port(output)) {}
};

/// An echo server on the login host: a child of this test.
struct LoginServer {
  std::string output;
  pid_t pid;
  int port;
  explicit LoginServer(const Scratch& s)
      : output(s.file("serve-login")), pid(herd::process::spawn([&] {
          herd::process::SpawnOptions o;
          o.argv = {probe, "serve"};
          o.stdout_path = output;
          o.death_signal = SIGKILL;
          return o;
        }())),
        port(listening_port(output)) {}
  ~LoginServer() { herd::process::terminate(pid, 500); }
};

/// A job on `node` that talks to `host:port`, one echo after the other (see bed_probe ping).
struct Pinger {
  std::string output;
  bed::Job job;
  Pinger(const std::string& node, const std::string& host, int port, const Scratch& s)
      : output(s.file("ping-" + node + "-" + host)),
        job(node, unique("bed-ping"), output, probe + " ping " + host + " " + std::to_string(port)) {
    REQUIRE_MESSAGE(eventually([&] { return echoes() >= 3; }, 30s), node << " -> " << host << ": " << read_file(output));
  }
  std::size_t echoes() const { return bed::lines_with(output, "echo ").size(); }
  std::vector<std::string> closed() const { return bed::lines_with(output, "closed"); }
  std::string connected_to() const {
    auto c = bed::lines_with(output, "connected ");
    return c.size() == 1 ? c.front().substr(10) : "connected " + std::to_string(c.size()) + " times";
  }
};

// Proving that nothing happens needs a window: 2.5 s is 25 round trips of a healthy pinger.
constexpr auto quiet_window = 2500ms;
// A round trip under way when the fault came may still complete.
constexpr auto settle = 300ms;

}  // namespace

TEST_CASE("MultinodeBed.Hosts.OwnNamesAndAddresses" * doctest::timeout(60)) {
  bed::require_whole_bed(1);
  const auto nodes = bed::nodes();
  // The login host, as a Debian install: its own name is 127.0.1.1, the others' are addresses.
  const auto me = fields(run({probe, "whoami"}).stdout_tail);
  CHECK(me.at("host") == "login");
  CHECK(me.at("self") == "127.0.1.1");
  std::set<std::string> addrs{me.at("addr")};
  for (const auto& n : nodes) addrs.insert(resolve(n));
  CHECK(addrs.size() == nodes.size() + 1);
  CHECK(addrs.count("unresolved") == 0);

  // One task on every node, each reporting where it runs.
  auto r = run({"srun", "--nodes=" + std::to_string(nodes.size()), "--ntasks-per-node=1", "--mem=50M", "--time=2", probe,
                "whoami"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.stderr_tail);
  std::map<std::string, std::map<std::string, std::string>> seen;
  std::istringstream lines(r.stdout_tail);
  for (std::string line; std::getline(lines, line);) {
    auto f = fields(line);
    seen[f["host"]] = f;
  }
  REQUIRE(seen.size() == nodes.size());
  for (const auto& n : nodes) {
    CAPTURE(n);
    REQUIRE(seen.count(n) == 1);
    CHECK(seen[n]["addr"] == resolve(n));  // its own address is the one the others know it by
    CHECK(seen[n]["self"] == "127.0.1.1");
    CHECK(seen[n]["login"] == me.at("addr"));
  }
}

TEST_CASE("MultinodeBed.Link.DownHangsWithoutResetUpResumes" * doctest::timeout(120)) {
  bed::require_whole_bed(2);
  const auto nodes = bed::nodes();
  Scratch s;
  JobServer server(nodes[1], s);
  Pinger pinger(nodes[0], nodes[1], server.port, s);  // a job on node1 reaches node2 by its name
  CHECK(pinger.connected_to() == resolve(nodes[1]));
  {
    auto down = bed::link_down(nodes[1]);
    std::this_thread::sleep_for(settle);
    const auto before = pinger.echoes();
    std::this_thread::sleep_for(quiet_window);
    CHECK(pinger.echoes() == before);  // the connection hangs...
    CHECK(pinger.closed().empty());    // ...with no reset and no error
  }
  const auto after = pinger.echoes();
  CHECK(eventually([&] { return pinger.echoes() >= after + 3; }, 15s));  // TCP retransmits get through
  CHECK(pinger.closed().empty());
  CHECK(pinger.connected_to() == resolve(nodes[1]));  // the same connection, not a new one
}

TEST_CASE("MultinodeBed.Partition.CutsOnlyThePair" * doctest::timeout(120)) {
  bed::require_whole_bed(2);
  const auto nodes = bed::nodes();
  Scratch s;
  JobServer server(nodes[1], s);
  LoginServer login(s);
  Pinger to_node(nodes[0], nodes[1], server.port, s);
  Pinger to_login(nodes[0], "login", login.port, s);
  {
    auto cut = bed::partition(nodes[0], nodes[1]);
    std::this_thread::sleep_for(settle);
    const auto before_node = to_node.echoes();
    const auto before_login = to_login.echoes();
    std::this_thread::sleep_for(quiet_window);
    CHECK(to_node.echoes() == before_node);        // node1 <-> node2: silence
    CHECK(to_login.echoes() >= before_login + 5);  // node1 <-> login: as before
    CHECK(to_node.closed().empty());
  }
  const auto after = to_node.echoes();
  CHECK(eventually([&] { return to_node.echoes() >= after + 3; }, 15s));
  CHECK(to_node.closed().empty());
  CHECK(to_login.closed().empty());
}

TEST_CASE("MultinodeBed.Crash.SlurmSetsTheNodeDown" * doctest::timeout(150)) {
  bed::require_whole_bed(1);
  const std::string victim = bed::nodes().back();
  Scratch s;
  bed::Job job(victim, unique("bed-crash"), s.file("crash.out"), "sleep 300", {"--no-requeue"});
  REQUIRE(eventually([&] { return bed::job_state(job.id()) == "RUNNING"; }, 30s));
  {
    const auto t0 = std::chrono::steady_clock::now();
    auto crashed = bed::crash(victim);
    // SlurmdTimeout=10 s: about 18-19 s on an idle machine (see local-slurm.sh).
    const bool down = eventually([&] { return bed::node_state(victim).rfind("down", 0) == 0; }, 45s);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    MESSAGE("Slurm set " << victim << " " << bed::node_state(victim) << " " << secs << " s after the crash");
    CHECK(down);
    CHECK(eventually([&] { return bed::job_state(job.id()) == "NODE_FAIL"; }, 15s));
  }
  // The guard revived it: Slurm has the node back.
  const auto state = bed::node_state(victim);
  CHECK_MESSAGE((state == "idle" || state == "mixed"), state);
}
