#pragma once
// A msgpack zone lent for one unpack and given back. A fresh msgpack::zone mallocs its first
// 8 KiB chunk and frees it again with the object_handle: on a round trip that is six of each
// (every message decoded, the task's arguments, the future's result). Users never name this.

#include <memory>
#include <utility>
#include <vector>

#include <msgpack.hpp>

namespace herd::detail {

/// One zone of this thread's small pool, for as long as it lives: objects unpacked into it are
/// valid until it is destroyed, when the zone is cleared (its extra chunks freed, its first
/// kept) and goes back. Lends nest: a second ScratchZone on the same thread gets another zone.
class ScratchZone {
 public:
  ScratchZone() {
    auto& free = pool();
    if (free.empty()) {
      zone_ = std::make_unique<msgpack::zone>();
    } else {
      zone_ = std::move(free.back());
      free.pop_back();
    }
  }
  ~ScratchZone() {
    try {
      zone_->clear();
      auto& free = pool();
      if (free.size() < kKept) free.push_back(std::move(zone_));
    } catch (...) {  // push_back out of memory: the zone is freed instead (a full pool frees it too)
    }
  }
  ScratchZone(const ScratchZone&) = delete;
  ScratchZone& operator=(const ScratchZone&) = delete;

  msgpack::zone& get() { return *zone_; }

 private:
  static constexpr std::size_t kKept = 4;  // more than the deepest nesting on any path
  static std::vector<std::unique_ptr<msgpack::zone>>& pool() {
    thread_local std::vector<std::unique_ptr<msgpack::zone>> zones;
    return zones;
  }
  std::unique_ptr<msgpack::zone> zone_;
};

}  // namespace herd::detail
