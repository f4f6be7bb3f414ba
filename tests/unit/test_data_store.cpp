// The worker's result store and its spilling to disk: least recently used first, read back
// with the same bytes, files removed on release and on leaving, a full disk keeps the result
// in memory. Real files in a real (temporary) directory; the full disk is a 1 MiB tmpfs
// (root only: mount(8)).
#include <doctest/doctest.h>

#include <sys/mount.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "net/data_port.hpp"
#include "worker/data_store.hpp"

using herd::protocol::TaskId;
using herd::worker::DataStore;
namespace fs = std::filesystem;

namespace {

herd::net::PayloadPtr bytes_of(std::size_t n, int seed) {
  auto b = herd::net::Buffer::allocate(n);
  for (std::size_t i = 0; i < n; ++i) b->mutable_data()[i] = static_cast<char>((seed * 31 + i * 7) & 0xff);
  return herd::net::PayloadPtr(std::move(b));
}

bool same(const herd::net::PayloadPtr& p, std::size_t n, int seed) {
  if (!p || p->size() != n) return false;
  for (std::size_t i = 0; i < n; ++i) {
    if (p->data()[i] != static_cast<char>((seed * 31 + i * 7) & 0xff)) return false;
  }
  return true;
}

std::size_t files_in(const std::string& dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

struct TempDir {
  std::string path;
  TempDir() {
    std::string p = fs::temp_directory_path().string() + "/herd-store-test-XXXXXX";
    REQUIRE(::mkdtemp(p.data()) != nullptr);
    path = p;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

}  // namespace

TEST_CASE("DataStore.Spill.LeastRecentlyUsedFirstAndReadBackTheSame" * doctest::timeout(30)) {
  TempDir tmp;
  const std::string dir = tmp.path + "/spill";
  fs::create_directory(dir);
  DataStore store;
  store.set_spill_directory(dir);
  constexpr std::size_t kSize = 100000;
  for (int i = 1; i <= 5; ++i) store.put(static_cast<TaskId>(i), bytes_of(kSize, i));
  CHECK(store.memory_bytes() == 5 * kSize);
  (void)store.get(1);  // 1 is now the most recently used: 2 and 3 go first
  CHECK(store.spill_until(3 * kSize) == 2 * kSize);
  CHECK(store.spilled() == 2);
  CHECK(store.memory_bytes() == 3 * kSize);
  CHECK(store.spilled_bytes() == 2 * kSize);
  CHECK(store.bytes() == 5 * kSize);
  CHECK(fs::exists(dir + "/2.bin"));
  CHECK(fs::exists(dir + "/3.bin"));
  CHECK(files_in(dir) == 2);
  // Every value reads back the same, spilled or not; a spilled one stays on disk.
  for (int i = 1; i <= 5; ++i) CHECK(same(store.get(static_cast<TaskId>(i)), kSize, i));
  CHECK(store.spilled() == 2);
  // Everything, then nothing left to spill.
  CHECK(store.spill_until(0) == 3 * kSize);
  CHECK(store.spill_until(0) == 0);
  CHECK(files_in(dir) == 5);
  CHECK(store.memory_bytes() == 0);
  for (int i = 1; i <= 5; ++i) CHECK(same(store.get(static_cast<TaskId>(i)), kSize, i));
  // A mapped value outlives its release (a frame still being sent holds it).
  auto held = store.get(4);
  store.erase(4);
  CHECK_FALSE(fs::exists(dir + "/4.bin"));
  CHECK(same(held, kSize, 4));
  CHECK(store.get(4) == nullptr);
  // Put again over a spilled one: in memory, the file goes.
  store.put(5, bytes_of(10, 55));
  CHECK_FALSE(fs::exists(dir + "/5.bin"));
  CHECK(same(store.get(5), 10, 55));
  CHECK(store.spilled() == 3);
  CHECK(store.bytes() == 3 * kSize + 10);
  store.remove_spill_directory();
  CHECK_FALSE(fs::exists(dir));
}

TEST_CASE("DataStore.Spill.NoDirectoryNoSpill" * doctest::timeout(10)) {
  DataStore store;
  store.put(1, bytes_of(1000, 1));
  CHECK(store.spill_until(0) == 0);
  CHECK(store.memory_bytes() == 1000);
  CHECK(same(store.get(1), 1000, 1));
}

TEST_CASE("DataStore.Spill.FullDiskKeepsTheResultInMemory" * doctest::timeout(30)) {
  if (::geteuid() != 0) {
    MESSAGE("skipped: mounting a 1 MiB tmpfs needs root");
    return;
  }
  TempDir tmp;
  const std::string mnt = tmp.path + "/small";
  fs::create_directory(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=1M") != 0) {
    MESSAGE("skipped: cannot mount a tmpfs: " << std::strerror(errno));
    return;
  }
  struct Unmount {
    std::string at;
    ~Unmount() { ::umount2(at.c_str(), MNT_DETACH); }
  } unmount{mnt};
  const std::string dir = mnt + "/spill";
  fs::create_directory(dir);
  DataStore store;
  store.set_spill_directory(dir);
  constexpr std::size_t kSmall = 300 << 10, kBig = 2 << 20;
  store.put(1, bytes_of(kSmall, 1));  // fits on the 1 MiB disk
  store.put(2, bytes_of(kBig, 2));    // does not
  store.put(3, bytes_of(kSmall, 3));
  CHECK(store.spill_until(0) == kSmall);  // 1 went; 2 failed, and the spill stopped there
  CHECK(store.spilled() == 1);
  const std::string error = store.spill_error();
  CHECK(error.find("No space left on device") != std::string::npos);
  CHECK(error.find(dir + "/2.bin") != std::string::npos);
  CHECK(error.find("stays in memory") != std::string::npos);
  CHECK(files_in(dir) == 1);  // the partial file is gone
  CHECK(store.memory_bytes() == kBig + kSmall);
  for (int i : {1, 3}) CHECK(same(store.get(static_cast<TaskId>(i)), kSmall, i));
  CHECK(same(store.get(2), kBig, 2));
  CHECK(store.spill_until(0) == 0);  // within a second of the failure: not tried again
  // Room made: the next attempt (a second later) spills, and the error clears.
  store.erase(1);
  store.erase(2);
  CHECK(files_in(dir) == 0);
  ::usleep(1100 * 1000);
  CHECK(store.spill_until(0) == kSmall);
  CHECK(store.spill_error().empty());
  CHECK(same(store.get(3), kSmall, 3));
  store.remove_spill_directory();
  CHECK_FALSE(fs::exists(dir));
}
