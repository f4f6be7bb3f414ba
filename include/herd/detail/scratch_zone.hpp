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

  /// msgpack::unpack(get(), data, size, f) (f: nullptr, or one that references every string
  /// and binary in `data` rather than copying it), with msgpack-c's parser and object builder
  /// kept on this thread between calls: made afresh, as unpack makes them, each allocates and
  /// frees a stack per call (two allocations on a task's arguments, two on its result). Throws
  /// as unpack does.
  msgpack::object unpack(const char* data, std::size_t size, bool reference);

 private:
  static constexpr std::size_t kKept = 4;  // more than the deepest nesting on any path
  static std::vector<std::unique_ptr<msgpack::zone>>& pool() {
    thread_local std::vector<std::unique_ptr<msgpack::zone>> zones;
    return zones;
  }
  std::unique_ptr<msgpack::zone> zone_;
};

namespace unpack_detail {
using Visitor = msgpack::v2::detail::create_object_visitor;
inline bool reference_all(msgpack::type::object_type, std::size_t, void*) { return true; }
struct Parser {
  explicit Parser(msgpack::unpack_reference_func f) : visitor(f, nullptr, msgpack::unpack_limit()), helper(visitor) {}
  Visitor visitor;
  msgpack::v2::detail::parse_helper<Visitor> helper;
  bool busy = false;  // an unpack inside an unpack (a converter that unpacks) makes its own
};
inline Parser& parser(bool reference) {
  thread_local Parser copying(nullptr), referencing(&reference_all);
  return reference ? referencing : copying;
}
}  // namespace unpack_detail

inline msgpack::object ScratchZone::unpack(const char* data, std::size_t size, bool reference) {
  unpack_detail::Parser& p = unpack_detail::parser(reference);
  if (p.busy) return msgpack::unpack(*zone_, data, size, reference ? &unpack_detail::reference_all : nullptr);
  // What msgpack::v2::detail::unpack_imp and parse_imp do, with the kept parser.
  if (size == 0) throw msgpack::insufficient_bytes("insufficient bytes");
  p.busy = true;
  struct Done {
    bool& busy;
    ~Done() { busy = false; }
  } done{p.busy};
  p.helper.init();  // and the visitor's
  p.visitor.set_zone(*zone_);
  p.visitor.set_referenced(false);
  std::size_t off = 0;
  const msgpack::parse_return ret = p.helper.execute(data, size, off);
  if (ret == msgpack::PARSE_CONTINUE) throw msgpack::insufficient_bytes("insufficient bytes");
  return p.visitor.data();  // success, extra bytes after it (ignored, as unpack does), or an error it threw
}

}  // namespace herd::detail
