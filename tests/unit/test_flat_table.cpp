// The scheduler core's open-addressing tables (scheduler/flat_table.hpp), checked against
// std::unordered_map/set over random inserts and erases, including key 0, growth and shrinking.
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "scheduler/flat_table.hpp"
#include "scheduler/task_table.hpp"

using herd::scheduler::FlatMap;
using herd::scheduler::FlatSet;

TEST_CASE("FlatTable.Map.MatchesUnorderedMap" * doctest::timeout(60)) {
  std::mt19937_64 rng(7);
  FlatMap<std::uint64_t, std::uint16_t> flat;
  std::unordered_map<std::uint64_t, std::uint16_t> ref;
  for (int round = 0; round < 200000; ++round) {
    // Keys from a small range (many collisions and re-inserts), task-id-like ones, and 0.
    const std::uint64_t r = rng();
    const std::uint64_t k = (r % 3 == 0) ? (r >> 8) % 64 : (std::uint64_t{1} << 40) | ((r >> 8) % 5000);
    const int op = static_cast<int>((r >> 4) % 4);
    if (op <= 1) {
      const auto v = static_cast<std::uint16_t>(r >> 32);
      const bool added = flat.emplace(k, v).second;
      CHECK(added == ref.emplace(k, v).second);
    } else if (op == 2) {
      CHECK(flat.erase(k) == ref.erase(k));
    } else {
      auto f = flat.find(k);
      auto e = ref.find(k);
      REQUIRE((f == flat.end()) == (e == ref.end()));
      if (e != ref.end()) {
        CHECK(f->second == e->second);
        flat.erase(f);
        ref.erase(e);
      }
    }
    REQUIRE(flat.size() == ref.size());
    if (round % 20000 == 0) {
      std::size_t seen = 0;
      for (const auto& [key, value] : flat) {
        REQUIRE(ref.count(key) == 1);
        CHECK(ref.at(key) == value);
        ++seen;
      }
      CHECK(seen == ref.size());
    }
  }
  // Drain it: shrinking keeps every member findable.
  std::vector<std::uint64_t> keys;
  for (const auto& [key, value] : ref) keys.push_back(key);
  for (std::uint64_t k : keys) {
    CHECK(flat.erase(k) == 1);
    ref.erase(k);
    for (const auto& [key, value] : ref) {
      if (key % 97 == 0) CHECK(flat.count(key) == 1);
    }
  }
  CHECK(flat.empty());
  CHECK(flat.begin() == flat.end());
}

TEST_CASE("FlatTable.Set.GrowsShrinksAndCopies" * doctest::timeout(60)) {
  FlatSet<std::uint64_t> s;
  for (std::uint64_t k = 0; k < 100000; ++k) CHECK(s.insert(k * 3).second);
  CHECK(s.size() == 100000);
  CHECK_FALSE(s.insert(0).second);
  FlatSet<std::uint64_t> copy = s;
  for (std::uint64_t k = 0; k < 100000; k += 2) CHECK(s.erase(k * 3) == 1);
  CHECK(s.size() == 50000);
  CHECK(copy.size() == 100000);
  std::unordered_set<std::uint64_t> left(s.begin(), s.end());
  CHECK(left.size() == 50000);
  for (std::uint64_t k = 1; k < 100000; k += 2) CHECK(left.count(k * 3) == 1);
  for (std::uint64_t k = 1; k < 100000; k += 2) s.erase(k * 3);
  CHECK(s.empty());
  CHECK(s.bytes() <= 64 * sizeof(std::uint64_t));  // gave its memory back
  FlatSet<std::uint64_t> moved = std::move(copy);
  CHECK(moved.size() == 100000);
  CHECK(moved.count(299997) == 1);
}

TEST_CASE("FlatTable.SlotTable.StableAddressesAndChunksGivenBack" * doctest::timeout(60)) {
  struct Rec {
    std::uint64_t id = 0;
    std::vector<int> payload;  // non-trivial: constructed and destroyed in place
  };
  herd::scheduler::SlotTable<Rec, std::uint64_t> table;
  std::vector<Rec*> where;
  for (std::uint64_t id = 1; id <= 5000; ++id) {
    auto [r, added] = table.emplace(id);
    REQUIRE(added);
    r->id = id;
    r->payload.assign(3, static_cast<int>(id));
    where.push_back(r);
  }
  CHECK(table.emplace(17).first == where[16]);  // there already: the same record
  CHECK_FALSE(table.emplace(17).second);
  const std::size_t full = table.bytes();
  // Forget all but every 1000th: addresses of the survivors do not move.
  for (std::uint64_t id = 1; id <= 5000; ++id) {
    if (id % 1000 != 0) table.erase(id);
  }
  CHECK(table.size() == 5);
  for (std::uint64_t id = 1000; id <= 5000; id += 1000) {
    REQUIRE(table.find(id) == where[id - 1]);
    CHECK(table.find(id)->payload == std::vector<int>(3, static_cast<int>(id)));
  }
  std::size_t n = 0;
  for (const auto& [id, rec] : table) {
    CHECK(id % 1000 == 0);
    CHECK(rec.id == id);
    ++n;
  }
  CHECK(n == 5);
  // New records fill the lowest chunks first; emptied chunks above are given back.
  for (std::uint64_t id = 1000; id <= 5000; id += 1000) table.erase(id);
  CHECK(table.empty());
  CHECK(table.bytes() < full / 2);
  for (std::uint64_t id = 6000; id < 6100; ++id) table.emplace(id).first->id = id;
  CHECK(table.size() == 100);
  CHECK(table.find(6050)->id == 6050);
  CHECK(table.find(5000) == nullptr);
}
