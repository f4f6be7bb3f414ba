// A vector of trivially copyable values that keeps up to N of them inside itself: a task's
// inputs, dependents and holders are one or two ids almost always, so a task that reaches
// memory needs no allocation for its holder, and the Task record is smaller than with
// std::vector (16 bytes for N * sizeof(T) <= 8, against 24).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <new>
#include <type_traits>
#include <vector>

namespace herd::scheduler {

template <typename T, unsigned N>
class SmallVec {
  static_assert(std::is_trivially_copyable_v<T>, "SmallVec holds plain values");
  static_assert(N >= 1, "at least one value inside");

 public:
  using value_type = T;
  using iterator = T*;
  using const_iterator = const T*;

  SmallVec() = default;
  SmallVec(const SmallVec& o) { assign(o.begin(), o.end()); }
  SmallVec(SmallVec&& o) noexcept { steal(o); }
  SmallVec& operator=(const SmallVec& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  SmallVec& operator=(SmallVec&& o) noexcept {
    if (this != &o) {
      release();
      steal(o);
    }
    return *this;
  }
  ~SmallVec() { release(); }

  T* data() { return cap_ > N ? heap_ : std::launder(reinterpret_cast<T*>(inline_)); }
  const T* data() const { return cap_ > N ? heap_ : std::launder(reinterpret_cast<const T*>(inline_)); }
  T* begin() { return data(); }
  T* end() { return data() + size_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](std::size_t i) { return data()[i]; }
  const T& operator[](std::size_t i) const { return data()[i]; }
  T& front() { return data()[0]; }
  const T& front() const { return data()[0]; }
  T& back() { return data()[size_ - 1]; }
  const T& back() const { return data()[size_ - 1]; }

  void push_back(T v) {
    if (size_ == cap_) grow(cap_ * 2);
    data()[size_++] = v;
  }
  void clear() { size_ = 0; }
  /// Drops [first, end()) (the erase-remove idiom's tail).
  void erase(T* first, T* last) {
    T* e = end();
    std::memmove(first, last, static_cast<std::size_t>(e - last) * sizeof(T));
    size_ -= static_cast<std::uint32_t>(last - first);
  }
  void assign(std::size_t n, T v) {
    size_ = 0;
    if (n > cap_) grow(static_cast<std::uint32_t>(n));
    std::fill(data(), data() + n, v);
    size_ = static_cast<std::uint32_t>(n);
  }
  template <typename It>
  void assign(It first, It last) {
    size_ = 0;
    const auto n = static_cast<std::size_t>(std::distance(first, last));
    if (n > cap_) grow(static_cast<std::uint32_t>(n));
    std::copy(first, last, data());
    size_ = static_cast<std::uint32_t>(n);
  }
  /// Heap bytes it owns (for memory accounting).
  std::size_t heap_bytes() const { return cap_ > N ? cap_ * sizeof(T) : 0; }

  friend bool operator==(const SmallVec& a, const SmallVec& b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }
  friend bool operator==(const SmallVec& a, const std::vector<T>& b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }

 private:
  void grow(std::uint32_t cap) {
    T* p = static_cast<T*>(std::malloc(cap * sizeof(T)));
    if (p == nullptr) throw std::bad_alloc();
    std::memcpy(p, data(), size_ * sizeof(T));
    release();
    heap_ = p;
    cap_ = cap;
  }
  void release() {
    if (cap_ > N) std::free(heap_);
    cap_ = N;
  }
  void steal(SmallVec& o) {
    size_ = o.size_;
    cap_ = o.cap_;
    if (o.cap_ > N) heap_ = o.heap_;
    else std::memcpy(inline_, o.inline_, sizeof inline_);
    o.size_ = 0;
    o.cap_ = N;
  }

  std::uint32_t size_ = 0;
  std::uint32_t cap_ = N;  // > N: on the heap
  union {
    alignas(T) unsigned char inline_[N * sizeof(T)];  // values kept inside (plain bytes: T is trivially copyable)
    T* heap_;
  };
};

}  // namespace herd::scheduler
