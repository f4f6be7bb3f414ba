#pragma once
// The bytes of one result or value, whoever holds them: a worker's store, a data port serving
// them, a client's future. Users never name anything here.

#include <cstddef>
#include <memory>

namespace herd::detail {

/// Bytes of one result, kept alive for as long as the caller holds the pointer.
struct Payload {
  virtual ~Payload() = default;
  virtual const char* data() const = 0;
  virtual std::size_t size() const = 0;
  /// The caller holds the only reference and will not read bytes before `upto` again: the
  /// memory under them may go back to the system now (a large result being copied into its
  /// value, so that the two are never both whole in memory). Default: nothing.
  virtual void release_prefix(std::size_t upto) const { (void)upto; }
  /// As release_prefix(upto), once bytes [from, upto) have been copied out: their whole pages
  /// may instead be moved to lie under the whole pages of [dest, dest + n), memory the caller
  /// owns and has not written yet, so that copying the next slice there finds its pages
  /// instead of faulting in fresh zeroed ones. Default: release_prefix(upto).
  virtual void recycle(std::size_t from, std::size_t upto, char* dest, std::size_t n) const {
    (void)from, (void)dest, (void)n;
    release_prefix(upto);
  }
};

using PayloadPtr = std::shared_ptr<const Payload>;

}  // namespace herd::detail
