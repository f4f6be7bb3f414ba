// Safe on a shared login node, as the owner sees it: the dashboard's token, cookie, Host check
// and methods; HERD_AUTH=off only with an explicit listen address, and shown; key files and
// their directories checked with the fix named; a wrong key told as such. (What another user
// can reach is in test_other_user.cpp.)
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <herd/herd.hpp>

#include "common/security.hpp"
#include "scheduler/http_server.hpp"
#include "support/http_get.hpp"
#include "support/process_util.hpp"

using namespace std::chrono_literals;
using herd::test::http_request;

namespace {

int twice(int x) { return 2 * x; }
HERD_TASK(twice);

/// A dashboard server on a free loopback port, answered from a fixed snapshot (what the
/// scheduler's event loop does when a request wants one).
struct Dashboard {
  herd::scheduler::HttpServer server;
  std::atomic<bool> stop{false};
  std::thread publisher;
  explicit Dashboard(bool metrics_open = false) : server(options(metrics_open)) {
    publisher = std::thread([this] {
      herd::protocol::StatusReply s;
      s.scheduler_id = "test-scheduler";
      s.address = "tcp://127.0.0.1:1";
      while (!stop.load()) {
        if (server.wanted()) server.publish(s);
        std::this_thread::sleep_for(5ms);
      }
    });
  }
  ~Dashboard() {
    stop.store(true);
    publisher.join();
  }
  static herd::scheduler::HttpOptions options(bool metrics_open) {
    herd::scheduler::HttpOptions o;
    o.address = "127.0.0.1:0";
    o.metrics_open = metrics_open;
    return o;
  }
  herd::test::DashboardUrl url() const { return herd::test::DashboardUrl(server.url()); }
};

struct Run {
  int rc = -1;
  std::string out;
};

/// Runs the herd CLI with `args` and extra environment; its stdout and stderr.
Run herd_cli(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
             const std::string& log) {
  herd::process::SpawnOptions spawn;
  spawn.argv = {HERD_CLI_PATH};
  spawn.argv.insert(spawn.argv.end(), args.begin(), args.end());
  spawn.env = env;
  spawn.stdout_path = log;
  const pid_t pid = herd::process::spawn(spawn);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, herd::testing::read_file(log)};
}

struct TempDir {
  std::string path;
  explicit TempDir(const char* name) {
    std::string tmpl = std::string("/tmp/herd-") + name + "-XXXXXX";
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

/// A key file with this cluster's server keys and `client` keys of its own, or entirely new.
void write_keys(const std::string& path, bool same_server) {
  const auto ours = *herd::security::cluster_keys();
  char pub[41], sec[41], spub[41], ssec[41];
  zmq_curve_keypair(pub, sec);
  zmq_curve_keypair(spub, ssec);
  std::ofstream out(path);
  out << "server_public=" << (same_server ? ours.server_public : std::string(spub)) << "\n"
      << "server_secret=" << (same_server ? ours.server_secret : std::string(ssec)) << "\n"
      << "client_public=" << pub << "\nclient_secret=" << sec << "\n";
  out.close();
  ::chmod(path.c_str(), 0600);
}

}  // namespace

TEST_CASE("Security.Dashboard.TokenOnceThenCookie" * doctest::timeout(60)) {
  Dashboard d;
  const auto u = d.url();
  REQUIRE(u.token.size() == 32);  // 128 random bits
  CHECK(http_request(u.host, u.port, "GET", "/").status == 403);
  CHECK(http_request(u.host, u.port, "GET", "/api/status").status == 403);
  CHECK(http_request(u.host, u.port, "GET", "/metrics").status == 403);
  CHECK(http_request(u.host, u.port, "GET", "/api/status?token=" + herd::security::random_hex(16)).status == 403);
  // The token in the query: the page, and a cookie for the next requests.
  const auto first = http_request(u.host, u.port, "GET", u.with_token("/"));
  CHECK(first.status == 200);
  CHECK(first.body.find("<title>herd dashboard</title>") != std::string::npos);
  const std::string cookie = "herd-dashboard-" + std::to_string(u.port) + "=" + u.token;
  CHECK(first.headers.find("Set-Cookie: " + cookie + "; Path=/; HttpOnly; SameSite=Strict") != std::string::npos);
  const auto json = http_request(u.host, u.port, "GET", "/api/status", "Cookie: theme=dark; " + cookie + "\r\n");
  CHECK(json.status == 200);
  CHECK(json.body.find("\"test-scheduler\"") != std::string::npos);
  CHECK(http_request(u.host, u.port, "GET", "/metrics", "Cookie: " + cookie + "\r\n").status == 200);
  // A wrong value, or the cookie of another port's dashboard, is no token.
  const std::string wrong = cookie.substr(0, cookie.size() - 1) + (cookie.back() == '0' ? "1" : "0");
  CHECK(http_request(u.host, u.port, "GET", "/api/status", "Cookie: " + wrong + "\r\n").status == 403);
  CHECK(http_request(u.host, u.port, "GET", "/api/status", "Cookie: herd-dashboard-1=" + u.token + "\r\n").status == 403);
}

TEST_CASE("Security.Dashboard.HostHeaderMustNameThisMachine" * doctest::timeout(60)) {
  // DNS rebinding: a page of evil.example whose name resolves to 127.0.0.1 sends its own name.
  Dashboard d;
  const auto u = d.url();
  const std::string port = std::to_string(u.port);
  const std::string path = u.with_token("/api/status");
  CHECK(http_request(u.host, u.port, "GET", path, "", "evil.example:" + port).status == 403);
  CHECK(http_request(u.host, u.port, "GET", path, "", "evil.example").status == 403);
  CHECK(http_request(u.host, u.port, "GET", path, "", "127.0.0.1.evil.example:" + port).status == 403);
  CHECK(http_request(u.host, u.port, "GET", path, "", "").status == 200);  // 127.0.0.1:port
  CHECK(http_request(u.host, u.port, "GET", path, "", "localhost:" + port).status == 200);
  CHECK(http_request(u.host, u.port, "GET", path, "", "localhost:9999").status == 200);  // ssh -L 9999:...
  CHECK(http_request(u.host, u.port, "GET", path, "", "[::1]:" + port).status == 200);
}

TEST_CASE("Security.Dashboard.OnlyGet" * doctest::timeout(60)) {
  Dashboard d;
  const auto u = d.url();
  for (const char* method : {"POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"}) {
    CAPTURE(method);
    const auto r = http_request(u.host, u.port, method, u.with_token("/api/status"));
    CHECK(r.status == 405);
    CHECK(r.headers.find("Allow: GET") != std::string::npos);
  }
  CHECK(http_request(u.host, u.port, "GET", u.with_token("/api/status")).status == 200);
}

TEST_CASE("Security.Dashboard.MetricsOpenOnlyWithTheOption" * doctest::timeout(60)) {
  Dashboard open(true);
  const auto u = open.url();
  const auto m = http_request(u.host, u.port, "GET", "/metrics");
  CHECK(m.status == 200);
  CHECK(m.body.find("herd_workers 0\n") != std::string::npos);
  CHECK(http_request(u.host, u.port, "GET", "/api/status").status == 403);  // the rest keeps its token
  CHECK(http_request(u.host, u.port, "GET", "/").status == 403);
  CHECK(http_request(u.host, u.port, "GET", "/metrics", "", "evil.example").status == 403);
  Dashboard closed(false);
  CHECK(http_request(closed.url().host, closed.url().port, "GET", "/metrics").status == 403);
}

TEST_CASE("Security.AuthOff.NeedsAnExplicitListenAddressAndIsShown" * doctest::timeout(90)) {
  TempDir dir("authoff");
  // Without a listen address: refused, with the reason.
  CHECK_THROWS_WITH_AS(herd::LocalCluster{1}.env("HERD_AUTH", "off").start(),
                       doctest::Contains("HERD_AUTH=off needs an explicit listen address"), herd::ClusterError);
  // With one: it runs, says so loudly, and status shows it.
  herd::LocalCluster cluster{1};
  cluster.env("HERD_AUTH", "off").env("HERD_LISTEN", "tcp://127.0.0.1:*").log_directory(dir.path);
  const std::string address = cluster.start();
  // This process keeps its key: it is told why it cannot connect, not "no scheduler answered".
  herd::ClientOptions options;
  options.connect_timeout = 5000ms;
  std::string why;
  try {
    herd::Client refused(address, options);
  } catch (const herd::ConnectionError& e) {
    why = e.what();
  }
  INFO(why);
  CHECK(why.rfind("authentication failed: ", 0) == 0);
  CHECK(why.find("HERD_AUTH=off") != std::string::npos);
  ::setenv("HERD_AUTH", "off", 1);
  {
    herd::Client client{address};
    client.wait_for_workers(1, 30s);
    CHECK(client.submit(twice, 21).result() == 42);
    const herd::ClusterStatus s = client.status();
    CHECK(s.auth_off);
    CHECK(s.to_text().find("authentication OFF (HERD_AUTH=off)") != std::string::npos);
    CHECK(s.to_json().find("\"auth_off\":true") != std::string::npos);
    CHECK(herd::test::http_get(s.dashboard, "/api/status").find("\"auth_off\":true") != std::string::npos);
  }
  ::unsetenv("HERD_AUTH");
  cluster.close();
  const std::string log = herd::testing::read_file(dir.path + "/scheduler.log");
  INFO(log);
  CHECK(log.find("HERD_AUTH=off: herd scheduler listens on tcp://127.0.0.1:* WITHOUT AUTHENTICATION OR ENCRYPTION") !=
        std::string::npos);
  CHECK(herd::testing::read_file(dir.path + "/local-0.log").find("HERD_AUTH=off: herd worker listens on 127.0.0.1") !=
        std::string::npos);
  // With authentication on (the default), status says nothing of the kind.
  herd::Client normal{herd::LocalCluster{0}};
  CHECK_FALSE(normal.status().auth_off);
  CHECK(normal.status().to_text().find("authentication OFF") == std::string::npos);
}

TEST_CASE("Security.AuthOff.WorkerNeedsAListenHost" * doctest::timeout(60)) {
  TempDir dir("authoff-worker");
  const std::map<std::string, std::string> env = {{"HERD_AUTH", "off"}, {"HERD_CONNECT_TIMEOUT_MS", "300"}};
  const Run refused = herd_cli({"worker", "--scheduler", "tcp://127.0.0.1:9"}, env, dir.path + "/a.log");
  INFO(refused.out);
  CHECK(refused.rc == 1);
  CHECK(refused.out.find("HERD_AUTH=off needs an explicit listen address (herd worker --listen-host ADDRESS") !=
        std::string::npos);
  const Run told = herd_cli({"worker", "--scheduler", "tcp://127.0.0.1:9", "--listen-host", "127.0.0.1"}, env,
                            dir.path + "/b.log");
  INFO(told.out);
  CHECK(told.out.find("WITHOUT AUTHENTICATION OR ENCRYPTION") != std::string::npos);
  CHECK(told.out.find("no scheduler answered") != std::string::npos);  // past the check, on its way
}

TEST_CASE("Security.Keys.LooseModesAreRefusedNamingTheFix" * doctest::timeout(60)) {
  TempDir dir("keys");
  const std::string keydir = dir.path + "/keys", file = keydir + "/cluster.keys";
  REQUIRE(::mkdir(keydir.c_str(), 0700) == 0);
  std::filesystem::copy_file(herd::security::key_file_path(), file);
  const std::map<std::string, std::string> env = {{"HERD_KEY_FILE", file}, {"HERD_CONNECT_TIMEOUT_MS", "300"}};
  const std::vector<std::string> worker = {"worker", "--scheduler", "tcp://127.0.0.1:9"};

  ::chmod(file.c_str(), 0644);
  const Run file_open = herd_cli(worker, env, dir.path + "/1.log");
  INFO(file_open.out);
  CHECK(file_open.rc == 1);
  CHECK(file_open.out.find(file + " (the cluster keys) is readable by others (mode 0644); run: chmod 600 " + file) !=
        std::string::npos);

  ::chmod(file.c_str(), 0600);
  ::chmod(keydir.c_str(), 0777);
  const Run dir_open = herd_cli(worker, env, dir.path + "/2.log");
  INFO(dir_open.out);
  CHECK(dir_open.rc == 1);
  CHECK(dir_open.out.find(keydir + " (the directory of the cluster keys) is writable by others (mode 0777)") !=
        std::string::npos);
  CHECK(dir_open.out.find("run: chmod 700 " + keydir) != std::string::npos);

  // Fixed as told: the keys are accepted (the worker then finds no scheduler there).
  ::chmod(keydir.c_str(), 0700);
  const Run fixed = herd_cli(worker, env, dir.path + "/3.log");
  INFO(fixed.out);
  CHECK(fixed.out.find("cluster keys") == std::string::npos);
  CHECK(fixed.out.find("no scheduler answered") != std::string::npos);

  // A new key file is made private in a private directory.
  const std::string fresh = dir.path + "/new/cluster.keys";
  const Run created = herd_cli(worker, {{"HERD_KEY_FILE", fresh}, {"HERD_CONNECT_TIMEOUT_MS", "300"}}, dir.path + "/4.log");
  struct stat st {};
  REQUIRE(::stat(fresh.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  REQUIRE(::stat((dir.path + "/new").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
}

TEST_CASE("Security.Keys.WrongKeyIsToldAsSuch" * doctest::timeout(90)) {
  TempDir dir("wrongkey");
  herd::Client owner{herd::LocalCluster{1}};
  owner.wait_for_workers(1, 30s);
  const std::string address = owner.status().address;
  const std::string other = dir.path + "/other.keys", client_only = dir.path + "/client.keys";
  write_keys(other, false);       // another cluster's keys altogether
  write_keys(client_only, true);  // this cluster's server key, a client key of its own

  // `herd status` (a client) with either: "authentication failed", not a timeout.
  const Run a = herd_cli({"status", "--scheduler", address}, {{"HERD_KEY_FILE", other}}, dir.path + "/a.log");
  INFO(a.out);
  CHECK(a.rc == 1);
  CHECK(a.out.find("authentication failed: not this cluster's key") != std::string::npos);
  const Run b = herd_cli({"status", "--scheduler", address}, {{"HERD_KEY_FILE", client_only}}, dir.path + "/b.log");
  INFO(b.out);
  CHECK(b.rc == 1);
  CHECK(b.out.find("authentication failed: not this cluster's key (the scheduler at " + address +
                   " refused this process's key from " + client_only) != std::string::npos);
  // A worker with another cluster's keys says so and leaves.
  const Run w = herd_cli({"worker", "--scheduler", address}, {{"HERD_KEY_FILE", other}}, dir.path + "/w.log");
  INFO(w.out);
  CHECK(w.rc == 1);
  CHECK(w.out.find("cannot join: authentication failed: not this cluster's key") != std::string::npos);
  // The owner's key still works, and the worker that joined is still the only one.
  const Run mine = herd_cli({"status", "--scheduler", address}, {}, dir.path + "/mine.log");
  INFO(mine.out);
  CHECK(mine.rc == 0);
  CHECK(mine.out.find("workers: 1,") != std::string::npos);
  CHECK(owner.submit(twice, 4).result() == 8);
}

TEST_CASE("Security.Logs.AMissingLogDirectoryIsMadePrivateAndTheDashboardTokenStaysOutOfIt" * doctest::timeout(60)) {
  // `herd scheduler --log-dir DIR` with DIR and its parent missing, its stdout a file (a job's
  // output, nohup.out): the directories are made, this user's alone; every log file in them
  // too; the workers start (their logs are there); stdout names a file holding the dashboard's
  // address, and the token is nowhere in stdout.
  const std::string base = "/tmp/herd-logdir-" + std::to_string(::getpid());
  std::filesystem::remove_all(base);
  const std::string dir = base + "/a/b";
  const std::string out = "/tmp/herd-logdir-out-" + std::to_string(::getpid()) + ".txt";
  const auto [sched, address] = herd::testing::start_scheduler(
      {HERD_CLI_PATH, "scheduler", "--local-workers", "2", "--log-dir", dir, "--dashboard-address", "127.0.0.1:0"}, out);
  REQUIRE(herd::testing::eventually(
      [&] { return herd::testing::read_file(out).find("herd dashboard") != std::string::npos; }, 20s));
  {
    herd::Client client{address};
    client.wait_for_workers(2, 30s);
    const std::string token = client.status().dashboard.substr(client.status().dashboard.find("token=") + 6);
    REQUIRE(token.size() >= 16);
    const std::string text = herd::testing::read_file(out);
    CHECK(text.find(token) == std::string::npos);
    const auto at = text.find(" is in ");
    REQUIRE(at != std::string::npos);
    const std::string url_file = text.substr(at + 7, text.find(' ', at + 7) - at - 7);
    struct stat st{};
    REQUIRE(::stat(url_file.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
    CHECK(herd::testing::read_file(url_file).find("token=" + token) != std::string::npos);
  }
  for (const std::string& d : {base + "/a", dir}) {
    struct stat st{};
    REQUIRE(::stat(d.c_str(), &st) == 0);
    CHECK(S_ISDIR(st.st_mode));
    CHECK((st.st_mode & 0777) == 0700);
  }
  std::size_t logs = 0, records = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    struct stat st{};
    REQUIRE(::stat(e.path().c_str(), &st) == 0);
    CHECK((st.st_mode & 0077) == 0);
    logs += e.path().extension() == ".log";
    records += e.path().extension() == ".record";
  }
  CHECK(logs == 2);     // local-0.log, local-1.log
  CHECK(records == 1);  // the run record (no journal: it goes to the log directory)
  struct stat out_st{};
  REQUIRE(::stat(out.c_str(), &out_st) == 0);
  CHECK((out_st.st_mode & 0077) == 0);  // what herd's spawn writes a process's output to
  ::kill(sched, SIGTERM);
  int status = 0;
  ::waitpid(sched, &status, 0);
  std::filesystem::remove_all(base);
  std::filesystem::remove(out);
}
