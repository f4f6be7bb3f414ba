// The scheduler's journal file: records survive a reopen, and a torn tail is cut cleanly.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>

#include "scheduler/journal.hpp"

using herd::scheduler::Journal;

TEST_CASE("Journal.RoundTrip.AndTornTail") {
  const std::string path = "/tmp/herd-journal-unit-" + std::to_string(::getpid());
  std::filesystem::remove(path);
  {
    Journal j(path);
    CHECK(j.size() == 0);
    j.append("a", {'1'});
    j.append("b", std::vector<char>(5000, 'x'));  // larger than an inline result
    j.append("c", {'3'});
    j.flush();
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
    j.append("d", {'4'});  // appends after the last whole record
    j.flush();
  }
  {
    Journal j(path);
    CHECK(j.size() == 3);
    CHECK(j.find("d") != nullptr);
    CHECK(j.dropped_bytes() == 0);
  }
  // Corruption in the middle: loading stops there (CRC), nothing after it is trusted.
  {
    std::FILE* f = std::fopen(path.c_str(), "r+b");
    std::fseek(f, 12, SEEK_SET);
    std::fputc('Z', f);
    std::fclose(f);
    Journal j(path);
    CHECK(j.size() == 0);
  }
  std::filesystem::remove(path);
}
