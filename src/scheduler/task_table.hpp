// The task graph's records: chunks of Task slots with an open-addressing index by id. A task's
// address never changes while it lives (the graph and the state hold Task& across calls that
// add and forget other tasks), adding or forgetting one costs no malloc/free of its own, and
// tasks submitted together sit together in memory. New tasks go to the lowest chunk with a
// free slot, so after a burst the live ones gather in the low chunks and the high ones empty
// and are given back (beyond spare room about the size of what is live).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <set>
#include <utility>
#include <vector>

#include "scheduler/flat_table.hpp"

namespace herd::scheduler {

template <typename T, typename Id>
class SlotTable {
  static constexpr std::uint32_t kChunk = 1024;  // slots per chunk (~200 KiB of tasks)

  struct Chunk {
    alignas(T) unsigned char storage[kChunk * sizeof(T)];
    bool used[kChunk] = {};
    std::uint32_t live = 0;
    std::vector<std::uint32_t> free;  // unused slots, any order (refilled when empty)
    std::uint32_t fresh = 0;          // slots [fresh, kChunk) were never used
    T* at(std::uint32_t i) { return std::launder(reinterpret_cast<T*>(storage + i * sizeof(T))); }
    const T* at(std::uint32_t i) const { return std::launder(reinterpret_cast<const T*>(storage + i * sizeof(T))); }
  };

 public:
  SlotTable() = default;
  SlotTable(const SlotTable&) = delete;
  SlotTable& operator=(const SlotTable&) = delete;
  ~SlotTable() {
    for (std::size_t c = 0; c < chunks_.size(); ++c) {
      if (!chunks_[c]) continue;
      for (std::uint32_t i = 0; i < kChunk; ++i) {
        if (chunks_[c]->used[i]) chunks_[c]->at(i)->~T();
      }
    }
  }

  T* find(Id id) {
    auto it = index_.find(id);
    return it == index_.end() ? nullptr : chunks_[it->second / kChunk]->at(it->second % kChunk);
  }
  const T* find(Id id) const {
    auto it = index_.find(id);
    return it == index_.end() ? nullptr : chunks_[it->second / kChunk]->at(it->second % kChunk);
  }
  std::size_t count(Id id) const { return index_.count(id); }
  std::size_t size() const { return index_.size(); }
  bool empty() const { return index_.empty(); }

  /// A default-constructed T for `id`, or the one there is; second: whether it was added.
  std::pair<T*, bool> emplace(Id id) {
    if (T* there = find(id)) return {there, false};
    if (nonfull_.empty()) {
      std::size_t c = 0;
      while (c < chunks_.size() && chunks_[c]) ++c;  // a chunk given back earlier
      if (c == chunks_.size()) chunks_.emplace_back();
      chunks_[c].reset(new Chunk);  // default-initialised: the slots' bytes are not zeroed
      nonfull_.insert(static_cast<std::uint32_t>(c));
      ++empty_;
    }
    const std::uint32_t c = *nonfull_.begin();
    Chunk& chunk = *chunks_[c];
    std::uint32_t slot;
    if (!chunk.free.empty()) {
      slot = chunk.free.back();
      chunk.free.pop_back();
    } else {
      slot = chunk.fresh++;
    }
    chunk.used[slot] = true;
    if (chunk.live == 0) --empty_;
    if (++chunk.live == kChunk) nonfull_.erase(c);
    T* t = new (chunk.at(slot)) T();
    index_.emplace(id, c * kChunk + slot);
    return {t, true};
  }

  void erase(Id id) {
    auto it = index_.find(id);
    if (it == index_.end()) return;
    const std::uint32_t where = it->second;
    index_.erase(it);
    const std::uint32_t c = where / kChunk, slot = where % kChunk;
    Chunk& chunk = *chunks_[c];
    chunk.at(slot)->~T();
    chunk.used[slot] = false;
    if (chunk.live-- == kChunk) nonfull_.insert(c);
    chunk.free.push_back(slot);
    if (chunk.live == 0) {
      ++empty_;
      // Spare room is kept up to what is live (and two chunks), so that a graph that empties
      // and fills again does not allocate its chunks anew each time; the rest is given back.
      if (empty_ > 2 && (empty_ - 1) * kChunk > size()) release_empty();
    }
  }

  /// Bytes of its chunks and index (for memory accounting).
  std::size_t bytes() const {
    std::size_t n = index_.bytes();
    for (const auto& c : chunks_) n += c ? sizeof(Chunk) + c->free.capacity() * sizeof(std::uint32_t) : 0;
    return n;
  }

  /// Every live record, as (id, record), in slot order.
  template <bool Const>
  class Iter {
    using Table = std::conditional_t<Const, const SlotTable, SlotTable>;
    using Ref = std::conditional_t<Const, const T&, T&>;

   public:
    using value_type = std::pair<Id, Ref>;
    Iter(Table* t, std::size_t pos) : t_(t), pos_(pos) { skip(); }
    value_type operator*() const {
      Ref r = *t_->chunks_[pos_ / kChunk]->at(static_cast<std::uint32_t>(pos_ % kChunk));
      return {r.id, r};
    }
    Iter& operator++() {
      ++pos_;
      skip();
      return *this;
    }
    bool operator!=(const Iter& o) const { return pos_ != o.pos_; }
    bool operator==(const Iter& o) const { return pos_ == o.pos_; }

   private:
    void skip() {
      const std::size_t end = t_->chunks_.size() * kChunk;
      while (pos_ < end) {
        const auto& chunk = t_->chunks_[pos_ / kChunk];
        if (!chunk) {
          pos_ = (pos_ / kChunk + 1) * kChunk;
          continue;
        }
        if (chunk->used[pos_ % kChunk]) return;
        ++pos_;
      }
      pos_ = end;
    }
    Table* t_;
    std::size_t pos_;
  };
  Iter<true> begin() const { return Iter<true>(this, 0); }
  Iter<true> end() const { return Iter<true>(this, chunks_.size() * kChunk); }
  Iter<false> begin() { return Iter<false>(this, 0); }
  Iter<false> end() { return Iter<false>(this, chunks_.size() * kChunk); }

 private:
  /// Gives back the highest empty chunks until the spare room is about what is live.
  void release_empty() {
    for (std::size_t c = chunks_.size(); c-- > 0 && empty_ > 2 && (empty_ - 1) * kChunk > size();) {
      if (!chunks_[c] || chunks_[c]->live != 0) continue;
      nonfull_.erase(static_cast<std::uint32_t>(c));
      chunks_[c].reset();
      --empty_;
    }
    while (!chunks_.empty() && !chunks_.back()) chunks_.pop_back();
  }

  std::vector<std::unique_ptr<Chunk>> chunks_;  // nullptr: given back
  std::size_t empty_ = 0;                       // chunks allocated with nothing live
  std::set<std::uint32_t> nonfull_;             // chunks with a free slot, lowest first
  FlatMap<Id, std::uint32_t> index_;            // id -> chunk * kChunk + slot
};

}  // namespace herd::scheduler
