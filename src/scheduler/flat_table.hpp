// Open-addressing hash tables keyed by integers (task and worker ids), for the scheduler core's
// per-task hot paths: a worker's processing tasks and held results, the task index. Unlike
// std::unordered_map they allocate nothing per element (one array, linear probing, at most half
// full, backward-shift deletion: no tombstones), so inserting and erasing the millions of tasks
// a run sees costs no malloc/free each.
//
// Iteration order is unspecified; an insert or an erase invalidates iterators and pointers into
// the table. Key 0 is allowed (kept beside the array).
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <type_traits>
#include <utility>

namespace herd::scheduler {

namespace detail {

inline std::size_t flat_hash(std::uint64_t k, unsigned shift) {
  return static_cast<std::size_t>((k * 0x9E3779B97F4A7C15ull) >> shift);  // Fibonacci hashing
}

/// The table: slots of `Slot` (a key, or a key/value pair), key 0 marking an empty one.
template <typename Key, typename Slot, typename KeyOf>
class FlatTable {
  static_assert(std::is_integral_v<Key>, "keys are integers");

 public:
  FlatTable() = default;
  FlatTable(const FlatTable& o) { *this = o; }
  FlatTable(FlatTable&& o) noexcept { swap(o); }
  FlatTable& operator=(const FlatTable& o) {
    if (this == &o) return *this;
    FlatTable copy;
    copy.reserve(o.size());
    for (const Slot& s : o) copy.insert_slot(s);
    swap(copy);
    return *this;
  }
  FlatTable& operator=(FlatTable&& o) noexcept {
    FlatTable moved;
    moved.swap(o);
    swap(moved);
    return *this;
  }
  ~FlatTable() = default;

  void swap(FlatTable& o) noexcept {
    std::swap(slots_, o.slots_);
    std::swap(mask_, o.mask_);
    std::swap(shift_, o.shift_);
    std::swap(size_, o.size_);
    std::swap(zero_, o.zero_);
    std::swap(has_zero_, o.has_zero_);
  }

  template <bool Const>
  class Iter {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = Slot;
    using difference_type = std::ptrdiff_t;
    using pointer = std::conditional_t<Const, const Slot*, Slot*>;
    using reference = std::conditional_t<Const, const Slot&, Slot&>;
    Iter() = default;
    Iter(std::conditional_t<Const, const FlatTable*, FlatTable*> t, std::size_t i) : t_(t), i_(i) { skip(); }
    operator Iter<true>() const { return Iter<true>(t_, i_, 0); }
    Iter(std::conditional_t<Const, const FlatTable*, FlatTable*> t, std::size_t i, int) : t_(t), i_(i) {}
    reference operator*() const { return i_ == t_->capacity() ? t_->zero_ : t_->slots_[i_]; }
    pointer operator->() const { return &**this; }
    Iter& operator++() {
      ++i_;
      skip();
      return *this;
    }
    Iter operator++(int) {
      Iter old = *this;
      ++*this;
      return old;
    }
    bool operator==(const Iter& o) const { return i_ == o.i_; }
    bool operator!=(const Iter& o) const { return i_ != o.i_; }

   private:
    friend class FlatTable;
    // Slots 0..capacity-1, then the zero key's (index capacity), then end (capacity + 1).
    void skip() {
      const std::size_t cap = t_->capacity();
      while (i_ < cap && KeyOf::key(t_->slots_[i_]) == 0) ++i_;
      if (i_ == cap && !t_->has_zero_) ++i_;
    }
    std::conditional_t<Const, const FlatTable*, FlatTable*> t_ = nullptr;
    std::size_t i_ = 0;
  };
  using iterator = Iter<false>;
  using const_iterator = Iter<true>;

  iterator begin() { return iterator(this, 0); }
  iterator end() { return iterator(this, capacity() + 1, 0); }
  const_iterator begin() const { return const_iterator(this, 0); }
  const_iterator end() const { return const_iterator(this, capacity() + 1, 0); }

  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::size_t count(Key k) const { return find_index(k) != npos; }
  /// Bytes of its own array (for memory accounting).
  std::size_t bytes() const { return capacity() * sizeof(Slot); }

  iterator find(Key k) {
    const std::size_t i = find_index(k);
    return i == npos ? end() : iterator(this, i, 0);
  }
  const_iterator find(Key k) const {
    const std::size_t i = find_index(k);
    return i == npos ? end() : const_iterator(this, i, 0);
  }

  void clear() {
    slots_.reset();
    mask_ = 0;
    shift_ = 64;
    size_ = 0;
    has_zero_ = false;
    zero_ = Slot{};
  }

  void reserve(std::size_t n) {
    std::size_t cap = 8;
    while (cap < 2 * n) cap *= 2;
    if (cap > capacity()) rehash(cap);
  }

  /// Inserts `s` unless its key is there; returns (where it is, whether it was inserted).
  std::pair<iterator, bool> insert_slot(const Slot& s) {
    const Key k = KeyOf::key(s);
    if (k == 0) {
      if (has_zero_) return {iterator(this, capacity(), 0), false};
      zero_ = s;
      has_zero_ = true;
      ++size_;
      return {iterator(this, capacity(), 0), true};
    }
    if (2 * (size_ + 1) > capacity()) rehash(capacity() == 0 ? 8 : 2 * capacity());
    std::size_t i = flat_hash(static_cast<std::uint64_t>(k), shift_);
    while (true) {
      const Key here = KeyOf::key(slots_[i]);
      if (here == 0) break;
      if (here == k) return {iterator(this, i, 0), false};
      i = (i + 1) & mask_;
    }
    slots_[i] = s;
    ++size_;
    return {iterator(this, i, 0), true};
  }

  std::size_t erase(Key k) {
    const std::size_t i = find_index(k);
    if (i == npos) return 0;
    erase_index(i);
    return 1;
  }
  void erase(const_iterator it) { erase_index(it.i_); }
  void erase(iterator it) { erase_index(it.i_); }

 private:
  static constexpr std::size_t npos = ~std::size_t{0};
  std::size_t capacity() const { return slots_ ? mask_ + 1 : 0; }

  std::size_t find_index(Key k) const {
    if (k == 0) return has_zero_ ? capacity() : npos;
    if (!slots_) return npos;
    std::size_t i = flat_hash(static_cast<std::uint64_t>(k), shift_);
    while (true) {
      const Key here = KeyOf::key(slots_[i]);
      if (here == k) return i;
      if (here == 0) return npos;
      i = (i + 1) & mask_;
    }
  }

  void erase_index(std::size_t i) {
    if (i == capacity()) {
      has_zero_ = false;
      zero_ = Slot{};
      --size_;
      return;
    }
    // Backward shift: move later members of the probe run into the hole, so that no lookup
    // ever stops early at it.
    std::size_t hole = i;
    std::size_t j = i;
    while (true) {
      j = (j + 1) & mask_;
      const Key kj = KeyOf::key(slots_[j]);
      if (kj == 0) break;
      const std::size_t home = flat_hash(static_cast<std::uint64_t>(kj), shift_);
      // Move j into the hole unless its home lies cyclically in (hole, j].
      const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
      if (stays) continue;
      slots_[hole] = std::move(slots_[j]);
      hole = j;
    }
    slots_[hole] = Slot{};
    --size_;
    // Give memory back after a burst (a worker's queue drained, a graph emptied).
    if (capacity() > 64 && 8 * size_ < capacity()) rehash(capacity() / 4);
  }

  void rehash(std::size_t cap) {
    std::unique_ptr<Slot[]> old = std::move(slots_);
    const std::size_t old_cap = old ? mask_ + 1 : 0;
    slots_ = std::make_unique<Slot[]>(cap);  // value-initialised: every key 0
    mask_ = cap - 1;
    shift_ = 64;
    for (std::size_t c = cap; c > 1; c >>= 1) --shift_;
    for (std::size_t i = 0; i < old_cap; ++i) {
      const Key k = KeyOf::key(old[i]);
      if (k == 0) continue;
      std::size_t j = flat_hash(static_cast<std::uint64_t>(k), shift_);
      while (KeyOf::key(slots_[j]) != 0) j = (j + 1) & mask_;
      slots_[j] = std::move(old[i]);
    }
  }

  std::unique_ptr<Slot[]> slots_;
  std::size_t mask_ = 0;
  unsigned shift_ = 64;
  std::size_t size_ = 0;  // including the zero key
  Slot zero_{};
  bool has_zero_ = false;
};

template <typename K>
struct KeyIsSlot {
  static K key(const K& k) { return k; }
};
template <typename K, typename V>
struct KeyOfPair {
  static K key(const std::pair<K, V>& p) { return p.first; }
};

}  // namespace detail

/// A set of integers.
template <typename K>
class FlatSet : public detail::FlatTable<K, K, detail::KeyIsSlot<K>> {
  using Base = detail::FlatTable<K, K, detail::KeyIsSlot<K>>;

 public:
  std::pair<typename Base::iterator, bool> insert(K k) { return this->insert_slot(k); }
  using Base::erase;
};

/// A map from integers to small values (V default-constructible and movable).
template <typename K, typename V>
class FlatMap : public detail::FlatTable<K, std::pair<K, V>, detail::KeyOfPair<K, V>> {
  using Base = detail::FlatTable<K, std::pair<K, V>, detail::KeyOfPair<K, V>>;

 public:
  std::pair<typename Base::iterator, bool> emplace(K k, V v) { return this->insert_slot({k, std::move(v)}); }
  V& operator[](K k) { return this->insert_slot({k, V{}}).first->second; }
  using Base::erase;
};

}  // namespace herd::scheduler
