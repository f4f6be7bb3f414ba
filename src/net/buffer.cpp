#include "net/buffer.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <mutex>

#include "common/logging.hpp"

namespace herd::net {

namespace {
// Buffers from this size up get pages of their own (Buffer::allocate).
constexpr std::size_t kMapBytes = 1 << 20;

std::uintptr_t page_size() {
  static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

// Mapped buffers let go, kept for the next allocate() of about their size (Buffer::keep_for_reuse).
class KeptBuffers {
 public:
  // A buffer kept this long unused is let go at the next take or give.
  static constexpr auto kKeptFor = std::chrono::seconds(30);

  void limit(std::size_t bytes) {
    std::lock_guard lock(mu_);
    limit_ = bytes;
    trim(std::chrono::steady_clock::now());
  }
  /// A kept mapping of at least `mapped` bytes and not much more, or nullptr; `keep`: whether
  /// a buffer of that size is kept when let go.
  char* take(std::size_t mapped, std::size_t& got, bool& keep) {
    std::lock_guard lock(mu_);
    keep = mapped <= limit_;
    if (!keep) return nullptr;
    trim(std::chrono::steady_clock::now());
    auto best = kept_.end();
    for (auto it = kept_.begin(); it != kept_.end(); ++it) {
      if (it->mapped >= mapped && it->mapped - mapped <= mapped / 4 &&
          (best == kept_.end() || it->mapped < best->mapped)) {
        best = it;
      }
    }
    if (best == kept_.end()) return nullptr;
    char* p = best->data;
    got = best->mapped;
    bytes_ -= got;
    kept_.erase(best);
    return p;
  }
  /// Keeps the mapping, or returns false (the caller unmaps it).
  bool give(char* data, std::size_t mapped) {
    std::lock_guard lock(mu_);
    if (mapped > limit_) return false;
    // The kernel may take the pages back if it needs them; until then they stay faulted in.
    (void)::madvise(data, mapped, MADV_FREE);
    kept_.push_back({data, mapped, std::chrono::steady_clock::now()});
    bytes_ += mapped;
    trim(std::chrono::steady_clock::now());
    return true;
  }

 private:
  struct Kept {
    char* data;
    std::size_t mapped;
    std::chrono::steady_clock::time_point since;
  };
  void trim(std::chrono::steady_clock::time_point now) {
    // Oldest first: over the limit, or unused for kKeptFor.
    while (!kept_.empty() && (bytes_ > limit_ || now - kept_.front().since > kKeptFor)) {
      ::munmap(kept_.front().data, kept_.front().mapped);
      bytes_ -= kept_.front().mapped;
      kept_.pop_front();
    }
  }
  std::mutex mu_;
  std::deque<Kept> kept_;
  std::size_t bytes_ = 0;
  std::size_t limit_ = 0;
};

KeptBuffers& kept_buffers() {
  static auto* kept = new KeptBuffers();  // never destroyed: buffers may be let go at exit
  return *kept;
}
}  // namespace

void Buffer::keep_for_reuse(std::size_t bytes) { kept_buffers().limit(bytes); }

std::unique_ptr<Buffer> Buffer::allocate(std::size_t size) {
  if (size >= kMapBytes) {
    const std::size_t mapped = (size + page_size() - 1) / page_size() * page_size();
    std::size_t got = 0;
    bool kept = false;
    if (char* p = kept_buffers().take(mapped, got, kept)) return std::unique_ptr<Buffer>(new Buffer(p, size, got, true));
    void* p = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    return std::unique_ptr<Buffer>(new Buffer(static_cast<char*>(p), size, mapped, kept));
  }
  char* p = static_cast<char*>(std::malloc(std::max<std::size_t>(size, 1)));
  if (p == nullptr) throw std::bad_alloc();
  return std::make_unique<Buffer>(p, size);
}

Buffer::~Buffer() {
  if (mapped_ > 0) {
    if (!kept_ || !kept_buffers().give(data_, mapped_)) ::munmap(data_, mapped_);
  } else {
    std::free(data_);
  }
}

void Buffer::recycle(std::size_t from, std::size_t upto, char* dest, std::size_t n) const {
  if (kept_) return;
  if (mapped_ > 0 && upto > from) {
    // Only pages mapped for this buffer alone move: the holes they leave are mapped afresh at
    // once (untouched, so free), and the destination's untouched pages are replaced.
    const std::uintptr_t page = page_size();
    const auto base = reinterpret_cast<std::uintptr_t>(data_);
    const std::uintptr_t sb = (base + from + page - 1) / page * page;
    const std::uintptr_t se = (base + std::min(upto, size_)) / page * page;
    const auto d = reinterpret_cast<std::uintptr_t>(dest);
    const std::uintptr_t db = (d + page - 1) / page * page;
    const std::uintptr_t de = (d + n) / page * page;
    if (se > sb && de > db) {
      const std::size_t len = std::min(se - sb, de - db);
      void* src = reinterpret_cast<void*>(sb);
      if (::mremap(src, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, reinterpret_cast<void*>(db)) != MAP_FAILED) {
        if (::mmap(src, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED) {
          // Cannot happen short of the system running out of mappings; the hole would fault on
          // a read, and nothing reads copied bytes again, but say so.
          HERD_LOG(warning) << "herd: cannot map the pages lent by a buffer back: " << std::strerror(errno);
        }
      }
    }
  }
  release_prefix(upto);
}

void Buffer::release_prefix(std::size_t upto) const {
  if (kept_) return;
  const std::uintptr_t page = page_size();
  const auto start = reinterpret_cast<std::uintptr_t>(data_);
  const std::uintptr_t begin = (start + page - 1) / page * page;  // whole pages of ours only
  const std::uintptr_t end = (start + std::min(upto, size_)) / page * page;
  if (end > begin) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

PayloadPtr copy_payload(const void* data, std::size_t n) {
  auto b = Buffer::allocate(n);
  if (n > 0) std::memcpy(b->mutable_data(), data, n);
  return PayloadPtr(std::move(b));
}

}  // namespace herd::net
