// The scheduler's journal file: records survive a reopen, a torn tail is cut, a damaged record
// in the middle costs only itself, one scheduler at a time, the writer thread and its fdatasync
// per batch, a full disk (a real 256 KiB tmpfs) that never aborts and is caught up with, and
// large results that stay on disk.
#include <doctest/doctest.h>

#include <poll.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <msgpack.hpp>

#include "protocol/messages.hpp"
#include "scheduler/journal.hpp"

using herd::scheduler::DurableGate;
using herd::scheduler::Journal;
using namespace std::chrono_literals;

namespace {
std::string temp_path(const std::string& what) {
  const std::string p = "/tmp/herd-journal-unit-" + what + "-" + std::to_string(::getpid());
  std::filesystem::remove(p);
  std::filesystem::remove(p + ".lock");
  return p;
}

struct Removed {
  std::string path;
  ~Removed() {
    std::filesystem::remove(path);
    std::filesystem::remove(path + ".lock");
  }
};

/// The CRC-32 the first journal wrote, bit by bit: files written by it must still load.
std::uint32_t reference_crc(const char* data, std::size_t size) {
  std::uint32_t c = 0xffffffffu;
  for (std::size_t i = 0; i < size; ++i) {
    c ^= static_cast<unsigned char>(data[i]);
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
  }
  return c ^ 0xffffffffu;
}

/// A record exactly as the first journal wrote it: [len][crc][msgpack [key, bin]].
std::string old_record(const std::string& key, const std::vector<char>& value) {
  msgpack::sbuffer body;
  msgpack::pack(body, std::make_pair(key, value));
  std::string out(8, '\0');
  const auto len = static_cast<std::uint32_t>(body.size());
  const std::uint32_t crc = reference_crc(body.data(), body.size());
  for (int i = 0; i < 4; ++i) {
    out[static_cast<std::size_t>(i)] = static_cast<char>((len >> (8 * i)) & 0xff);
    out[static_cast<std::size_t>(4 + i)] = static_cast<char>((crc >> (8 * i)) & 0xff);
  }
  return out + std::string(body.data(), body.size());
}

void flip_byte(const std::string& path, std::uint64_t offset) {
  std::FILE* f = std::fopen(path.c_str(), "r+b");
  REQUIRE(f != nullptr);
  std::fseek(f, static_cast<long>(offset), SEEK_SET);
  const int c = std::fgetc(f);
  std::fseek(f, static_cast<long>(offset), SEEK_SET);
  std::fputc(c ^ 0x40, f);
  std::fclose(f);
}

std::vector<char> value_of(int i, std::size_t size) {
  std::vector<char> v(size);
  for (std::size_t k = 0; k < size; ++k) v[k] = static_cast<char>('a' + (i + static_cast<int>(k)) % 26);
  return v;
}

/// Waits for the journal's wake fd, then polls it, until `done` or 10 s.
template <typename F>
bool pump(Journal& j, F done, std::vector<Journal::ReadDone>* reads = nullptr) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{j.wake_fd(), POLLIN, 0};
    (void)::poll(&p, 1, 50);
    for (auto& r : j.poll()) {
      if (reads) reads->push_back(std::move(r));
    }
    if (done()) return true;
  }
  return false;
}
}  // namespace

TEST_CASE("Journal.Crc.TheStandardOneAndOldFilesLoad") {
  CHECK(Journal::crc32("123456789", 9) == 0xCBF43926u);  // CRC-32/ISO-HDLC check value
  const std::string path = temp_path("old");
  Removed guard{path};
  std::ofstream(path, std::ios::binary) << old_record("a", {'1'}) << old_record("b", std::vector<char>(300, 'x'))
                                        << old_record(std::string(40, 'k'), std::vector<char>(70000, 'y'));
  Journal j(path);
  CHECK(j.size() == 3);
  CHECK(j.dropped_bytes() == 0);
  CHECK(j.skipped().empty());
  REQUIRE(j.find("b") != nullptr);
  CHECK(*j.find("b") == std::vector<char>(300, 'x'));
  REQUIRE(j.find(std::string(40, 'k')) != nullptr);
  CHECK(j.find(std::string(40, 'k'))->size() == 70000);
}

TEST_CASE("Journal.RoundTrip.AndTornTail") {
  const std::string path = temp_path("roundtrip");
  Removed guard{path};
  {
    Journal j(path);
    CHECK(j.size() == 0);
    j.append("a", {'1'});
    j.append("b", std::vector<char>(5000, 'x'));  // larger than an inline result
    j.append("c", {'3'});
    j.flush();
    CHECK(j.wait_durable(10s));
    CHECK(j.durable() == 3);
  }
  const auto whole = std::filesystem::file_size(path);
  {
    Journal j(path);
    CHECK(j.size() == 3);
    REQUIRE(j.find("b") != nullptr);
    CHECK(j.find("b")->size() == 5000);
    CHECK(j.dropped_bytes() == 0);
  }
  // A scheduler killed mid-write: the last record is cut short.
  std::filesystem::resize_file(path, whole - 1);
  {
    Journal j(path);
    CHECK(j.size() == 2);  // a and b, up to the last whole record
    CHECK(j.find("c") == nullptr);
    CHECK(j.dropped_bytes() > 0);
    CHECK(j.skipped().empty());  // a torn tail is cut, not skipped
    j.append("d", {'4'});        // appends after the last whole record
  }
  {
    Journal j(path);
    CHECK(j.size() == 3);
    CHECK(j.find("d") != nullptr);
    CHECK(j.dropped_bytes() == 0);
  }
  // Damage in the first record: it is lost, the ones after it are not.
  flip_byte(path, 12);
  {
    Journal j(path);
    CHECK(j.size() == 2);
    CHECK(j.find("a") == nullptr);
    CHECK(j.find("b") != nullptr);
    CHECK(j.find("d") != nullptr);
    REQUIRE(j.skipped().size() == 1);
    CHECK(j.skipped()[0].offset == 0);
  }
}

TEST_CASE("Journal.Damage.AFlippedByteInRecord10Of50KeepsRecords11To50") {
  const std::string path = temp_path("flip");
  Removed guard{path};
  {
    Journal j(path);
    for (int i = 1; i <= 50; ++i) {
      j.append("key-" + std::to_string(i), value_of(i, static_cast<std::size_t>(100 + 37 * i)));
      j.flush();  // one batch per "turn"
    }
    CHECK(j.wait_durable(10s));
  }
  // Record offsets from the file itself: [len][crc][body], one after the other.
  std::vector<std::uint64_t> offsets;
  {
    std::ifstream in(path, std::ios::binary);
    std::vector<char> all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (std::uint64_t pos = 0; pos + 8 <= all.size();) {
      offsets.push_back(pos);
      std::uint32_t len = 0;
      for (int i = 0; i < 4; ++i) len |= static_cast<std::uint32_t>(static_cast<unsigned char>(all[pos + static_cast<std::uint64_t>(i)])) << (8 * i);
      pos += 8 + len;
    }
    REQUIRE(offsets.size() == 50);
  }
  SUBCASE("in its body") { flip_byte(path, offsets[9] + 8 + 60); }
  SUBCASE("in its length") { flip_byte(path, offsets[9] + 1); }
  SUBCASE("in its CRC") { flip_byte(path, offsets[9] + 5); }
  const auto size_before = std::filesystem::file_size(path);
  {
    Journal j(path);
    CHECK(j.size() == 49);
    CHECK_FALSE(j.contains("key-10"));
    for (int i = 1; i <= 50; ++i) {
      if (i == 10) continue;
      const std::vector<char>* v = j.find("key-" + std::to_string(i));
      REQUIRE_MESSAGE(v != nullptr, "record " << i << " lost");
      CHECK(*v == value_of(i, static_cast<std::size_t>(100 + 37 * i)));
    }
    REQUIRE(j.skipped().size() == 1);
    CHECK(j.skipped()[0].offset == offsets[9]);
    CHECK(j.skipped()[0].length == offsets[10] - offsets[9]);
    CHECK(j.dropped_bytes() == 0);  // nothing after the damage is cut
    CHECK(std::filesystem::file_size(path) == size_before);
    j.append("key-51", value_of(51, 10));
  }
  Journal j(path);
  CHECK(j.size() == 50);  // 49 + the new one, after the damaged stretch
  CHECK(j.contains("key-51"));
}

TEST_CASE("Journal.Lock.ASecondSchedulerIsRefusedWithTheFirstOnesPidAndHost") {
  const std::string path = temp_path("lock");
  Removed guard{path};
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  {
    Journal first(path);
    first.append("a", {'1'});
    try {
      Journal second(path);
      FAIL("a second journal on the same file was not refused");
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      CHECK(what.find("journal " + path + " is in use by scheduler pid " + std::to_string(::getpid()) + " on host " + host) !=
            std::string::npos);
    }
    CHECK(first.size() == 1);  // the first one is untouched
  }
  Journal again(path);  // released with the first
  CHECK(again.size() == 1);
}

TEST_CASE("Journal.Writer.DurableComesLaterAndWakesTheLoopOneSyncPerBatch") {
  const std::string path = temp_path("writer");
  Removed guard{path};
  Journal j(path);
  const auto s1 = j.append("x", {'1'});
  CHECK(s1 == 1);
  CHECK(j.durable() == 0);  // appended, not written: nothing happened on this thread
  j.flush();
  CHECK(pump(j, [&] { return j.durable() == s1; }));
  // 20 turns of 50 records: at most one write and one fdatasync per turn (fewer when turns
  // come faster than the disk: they go out together).
  const auto before = j.batches_written();
  for (int turn = 0; turn < 20; ++turn) {
    for (int k = 0; k < 50; ++k) j.append("t" + std::to_string(turn) + "-" + std::to_string(k), value_of(k, 64));
    j.flush();
  }
  CHECK(pump(j, [&] { return j.durable() == j.appended(); }));
  CHECK(j.appended() == 1001);
  CHECK(j.batches_written() - before >= 1);
  CHECK(j.batches_written() - before <= 20);
  CHECK_FALSE(j.failing());
  CHECK(j.status().find("1001 records") != std::string::npos);
}

TEST_CASE("Journal.Large.ResultsStayOnDiskAndAreReadBack") {
  const std::string path = temp_path("large");
  Removed guard{path};
  Journal::Options o;
  o.memory_bytes = 4096;
  const std::vector<char> big = value_of(7, 300000);
  {
    Journal j(path, o);
    j.append("small", {'s'});
    j.append("big", big);
    CHECK(j.memory_bytes() == big.size() + 1);  // until it is on disk
    j.flush();
    CHECK(pump(j, [&] { return j.memory_bytes() == 1; }));  // then only its place is kept
    CHECK(j.find("big") == nullptr);
    CHECK(j.contains("big"));
    std::vector<Journal::ReadDone> reads;
    j.read("big", 42);
    REQUIRE(pump(j, [&] { return !reads.empty(); }, &reads));
    CHECK(reads[0].tag == 42);
    CHECK(reads[0].error.empty());
    REQUIRE(reads[0].bytes.size() == big.size());
    CHECK(std::equal(big.begin(), big.end(), static_cast<const char*>(reads[0].bytes.data())));
  }
  Journal j(path, o);  // a restarted scheduler: the index only
  CHECK(j.size() == 2);
  CHECK(j.memory_bytes() == 1);
  CHECK(j.find("big") == nullptr);
  std::vector<Journal::ReadDone> reads;
  j.read("big", 1);
  j.read("nope", 2);
  REQUIRE(pump(j, [&] { return reads.size() == 2; }, &reads));
  for (const auto& r : reads) {
    if (r.tag == 1) {
      CHECK(r.error.empty());
      CHECK(r.bytes.size() == big.size());
    } else {
      CHECK(r.error.find("no record of nope") != std::string::npos);
    }
  }
}

TEST_CASE("Journal.DiskFull.NeverAbortsKeepsTheRecordsSaysSoAndCatchesUp" * doctest::timeout(60)) {
  if (::geteuid() != 0) {
    MESSAGE("skipped: mounting a tmpfs needs root");
    return;
  }
  const std::string dir = "/tmp/herd-journal-tmpfs-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  REQUIRE_MESSAGE(::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=256k") == 0, "mount: " << std::strerror(errno));
  struct Unmount {
    std::string dir;
    ~Unmount() {
      ::umount2(dir.c_str(), MNT_DETACH);
      std::filesystem::remove_all(dir);
    }
  } unmount{dir};
  const std::string path = dir + "/j.journal";
  Journal::Options o;
  o.retry_min = 50ms;
  o.retry_max = 200ms;
  {
    Journal j(path, o);
    // 100 results of 8 KiB: 800 KiB into 256 KiB.
    for (int i = 0; i < 100; ++i) {
      j.append("k" + std::to_string(i), value_of(i, 8192));
      if (i % 10 == 9) j.flush();
    }
    REQUIRE(pump(j, [&] { return j.failing(); }));
    CHECK(j.durable() < j.appended());
    CHECK(j.behind_records() > 0);
    CHECK(j.behind_bytes() > 0);
    const std::string st = j.status();
    CHECK(st.find("BEHIND") != std::string::npos);
    CHECK(st.find("No space left on device") != std::string::npos);
    CHECK(st.find("results are delivered meanwhile") != std::string::npos);
    // Everything is still there for this scheduler, and more can be appended.
    for (int i = 0; i < 100; ++i) CHECK(j.find("k" + std::to_string(i)) != nullptr);
    j.append("after", {'!'});
    j.flush();
    // The disk gets room: the writer catches up on its own.
    REQUIRE(::mount("tmpfs", dir.c_str(), "tmpfs", MS_REMOUNT, "size=4m") == 0);
    CHECK(pump(j, [&] { return !j.failing() && j.durable() == j.appended(); }));
    CHECK(j.behind_records() == 0);
    CHECK(j.status().find("BEHIND") == std::string::npos);
  }
  Journal j(path, o);
  CHECK(j.size() == 101);
  CHECK(j.skipped().empty());
  CHECK(j.dropped_bytes() == 0);
  REQUIRE(j.find("k99") != nullptr);
  CHECK(*j.find("k99") == value_of(99, 8192));
}

TEST_CASE("Journal.Gate.HeldInOrderUntilDurable") {
  DurableGate<std::string> gate;
  gate.hold(3, 1, "turn-a");
  gate.hold(5, 2, "turn-b");
  gate.hold(5, 1, "turn-b1");
  gate.hold(9, 1, "turn-c");
  std::vector<std::string> sent;
  auto send = [&](std::uint32_t client, std::string m) { sent.push_back(std::to_string(client) + ":" + m); };
  gate.release(2, false, send);
  CHECK(sent.empty());
  gate.release(5, false, send);
  CHECK(sent == std::vector<std::string>{"1:turn-a", "2:turn-b", "1:turn-b1"});
  gate.release(5, true, send);  // the journal fails: nothing is held hostage
  CHECK(sent.size() == 4);
  CHECK(gate.empty());
}

TEST_CASE("Journal.ForgetAll.ARestartOfTheClusterIsNotUndoneByLoading") {
  // Client::restart(): the results recorded so far are forgotten now and when the file is
  // loaded again; results recorded after it stay.
  const std::string path = temp_path("forget");
  Removed guard{path};
  Journal::Options small;
  small.memory_bytes = 1000;  // "big" is kept on disk only
  {
    Journal j(path, small);
    j.append("a", {'1'});
    j.append("big", std::vector<char>(5000, 'x'));
    j.flush();
    CHECK(j.wait_durable(10s));
    j.forget_all();
    CHECK(j.size() == 0);
    CHECK(!j.contains("a"));
    CHECK(!j.contains("big"));
    j.append("after", {'2'});
    j.flush();
    CHECK(j.wait_durable(10s));
    CHECK(j.size() == 1);
  }
  Journal j(path, small);
  CHECK(j.size() == 1);
  CHECK(!j.contains("a"));
  CHECK(!j.contains("big"));
  CHECK(!j.contains(""));
  REQUIRE(j.find("after") != nullptr);
  CHECK(*j.find("after") == std::vector<char>{'2'});
}

TEST_CASE("Journal.Campaigns.MembershipSurvivesAReloadAndAReleaseForgetsIt") {
  // A campaign's membership records come back in order with the results; a released
  // campaign's members and results are forgotten now and when the file is loaded again.
  using herd::scheduler::campaign_record_key;
  const std::string path = temp_path("campaigns");
  Removed guard{path};
  {
    Journal j(path);
    j.append(campaign_record_key("nightly", "nightly/0"), {'r', '0'});
    j.append(campaign_record_key("nightly", "nightly/1"), {});
    j.append(campaign_record_key("old", "old/0"), {});
    j.append(herd::scheduler::campaign_error_key("nightly/0"), {'e'});
    j.append("nightly/0", {'7'});  // ran again after its error: the result wins
    j.append(herd::scheduler::campaign_error_key("nightly/1"), {'e'});
    j.append("old/0", {'1'});
    j.append(herd::scheduler::campaign_error_key("old/0"), {'e'});
    j.append(campaign_record_key("old", ""), {});  // released
    j.flush();
    CHECK(j.wait_durable(10s));
    CHECK(j.size() == 1);  // nightly/0's result; campaign records are no results
    CHECK(!j.contains("old/0"));
    CHECK(j.error_of("old/0") == nullptr);
    REQUIRE(j.campaign_members().size() == 2);
  }
  Journal j(path);
  CHECK(j.size() == 1);
  CHECK(!j.contains("old/0"));
  CHECK(j.error_of("old/0") == nullptr);
  REQUIRE(j.find("nightly/0") != nullptr);
  CHECK(*j.find("nightly/0") == std::vector<char>{'7'});
  const auto& members = j.campaign_members();
  REQUIRE(members.size() == 2);
  CHECK(members[0].campaign == "nightly");
  CHECK(members[0].key == "nightly/0");
  CHECK(members[0].recipe == std::vector<char>{'r', '0'});  // recipes come back as loaded
  CHECK(members[1].campaign == "nightly");
  CHECK(members[1].key == "nightly/1");
  CHECK(members[1].recipe.empty());
  // An error is kept until a result of the same key comes after it.
  REQUIRE(j.error_of("nightly/1") != nullptr);
  CHECK(*j.error_of("nightly/1") == std::vector<char>{'e'});
  CHECK(j.error_of("nightly/0") == nullptr);
  j.drop_recipes();
  CHECK(j.campaign_members()[0].recipe.empty());
  j.forget_all();
  CHECK(j.campaign_members().empty());
}
