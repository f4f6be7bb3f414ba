// Bytes that move between processes: a result's buffer (malloc'ed, or pages of its own that a
// stream is written into). ZeroMQ frames as payloads, and back: net/frames.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "herd/detail/payload.hpp"

namespace herd::net {

using detail::PayloadPtr;

/// Bytes in one buffer: a malloc'ed one (msgpack's sbuffer), or pages of its own (a buffer a
/// stream is written into).
class Buffer : public detail::Payload {
 public:
  Buffer(char* data, std::size_t size) : data_(data), size_(size) {}
  /// A buffer of `size` bytes, uninitialised: pages mapped for it alone from 1 MiB up (their
  /// pages can be lent to a value: recycle). Throws std::bad_alloc.
  static std::unique_ptr<Buffer> allocate(std::size_t size);
  /// From now on this process keeps up to `bytes` of mapped buffers of at most `bytes` each
  /// when they are let go, and allocate() reuses them: a result received into pages already
  /// faulted in costs no page faults (on a VM, 6-9 ms for 16 MiB), and repeated gathers of
  /// results that size are what a client does. Buffers kept are MADV_FREE'd (the kernel may
  /// take their pages back under pressure) and let go after kKeptFor unused. The client calls
  /// it; a worker does not (its memory limit counts what it holds).
  static void keep_for_reuse(std::size_t bytes);
  ~Buffer() override;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  const char* data() const override { return data_; }
  std::size_t size() const override { return size_; }
  /// The whole pages under [data, data + upto) go back to the system (madvise DONTNEED); not
  /// those of a buffer kept for reuse (keep_for_reuse), whose pages are the point.
  void release_prefix(std::size_t upto) const override;
  /// Pages of its own: moved under `dest` (mremap), a fresh untouched mapping left in their
  /// place; nothing for a buffer kept for reuse.
  void recycle(std::size_t from, std::size_t upto, char* dest, std::size_t n) const override;
  char* mutable_data() { return data_; }

 private:
  Buffer(char* data, std::size_t size, std::size_t mapped, bool kept)
      : data_(data), size_(size), mapped_(mapped), kept_(kept) {}
  char* data_;
  std::size_t size_;
  std::size_t mapped_ = 0;  // bytes mmap'ed for it (0: malloc'ed)
  bool kept_ = false;       // goes back to the pool of keep_for_reuse when let go
};

/// A copy of `n` bytes at `data`, as a payload (pages of its own from 1 MiB up).
PayloadPtr copy_payload(const void* data, std::size_t n);

}  // namespace herd::net
