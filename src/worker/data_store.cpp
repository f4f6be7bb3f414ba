#include "worker/data_store.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/logging.hpp"
#include "common/util.hpp"

namespace herd::worker {

namespace {

/// A spilled result read back: its file, mapped read-only (the page cache holds the bytes).
class MappedFile : public detail::Payload {
 public:
  MappedFile(void* p, std::size_t size) : p_(p), size_(size) {}
  ~MappedFile() override { ::munmap(p_, size_); }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const char* data() const override { return static_cast<const char*>(p_); }
  std::size_t size() const override { return size_; }

 private:
  void* p_;
  std::size_t size_;
};

net::PayloadPtr map_file(const std::string& path, std::uint64_t size) {
  if (size == 0) return std::make_shared<const net::Buffer>(nullptr, 0);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;  // erased meanwhile
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    HERD_LOG(error) << "cannot map spilled result " << path << ": " << std::strerror(errno);
    return nullptr;
  }
  ::madvise(p, size, MADV_SEQUENTIAL);
  return std::make_shared<const MappedFile>(p, size);
}

/// Writes all of `bytes` to a new file at `path`; "" or why not.
std::string write_file(const std::string& path, const detail::Payload& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return std::strerror(errno);
  const char* p = bytes.data();
  std::size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n < 0 ? std::strerror(errno) : "short write";
      ::close(fd);
      return why;
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) return std::strerror(errno);
  return "";
}

}  // namespace

DataStore::~DataStore() { remove_spill_directory(); }

void DataStore::put(protocol::TaskId id, net::PayloadPtr bytes) {
  std::string old_file;
  {
    std::lock_guard lock(mu_);
    auto [it, fresh] = data_.try_emplace(id);
    Entry& e = it->second;
    if (!fresh) {
      total_ -= e.size;
      if (e.bytes) {
        memory_ -= e.size;
        lru_.erase(e.lru);
      } else {
        --spilled_;
        old_file = std::move(e.path);
        e.path.clear();
      }
    }
    e.size = bytes->size();
    e.bytes = std::move(bytes);
    e.lru = lru_.insert(lru_.end(), id);
    total_ += e.size;
    memory_ += e.size;
  }
  if (!old_file.empty()) ::unlink(old_file.c_str());
}

net::PayloadPtr DataStore::get(protocol::TaskId id) const {
  std::string path;
  std::uint64_t size = 0;
  {
    std::lock_guard lock(mu_);
    auto it = data_.find(id);
    if (it == data_.end()) return nullptr;
    const Entry& e = it->second;
    if (e.bytes) {
      lru_.splice(lru_.end(), lru_, e.lru);  // most recently used
      return e.bytes;
    }
    path = e.path;
    size = e.size;
  }
  return map_file(path, size);
}

bool DataStore::contains(protocol::TaskId id) const {
  std::lock_guard lock(mu_);
  return data_.count(id) != 0;
}

void DataStore::erase(protocol::TaskId id) {
  std::string file;
  {
    std::lock_guard lock(mu_);
    auto it = data_.find(id);
    if (it == data_.end()) return;
    Entry& e = it->second;
    total_ -= e.size;
    if (e.bytes) {
      memory_ -= e.size;
      lru_.erase(e.lru);
    } else {
      --spilled_;
      file = std::move(e.path);
    }
    data_.erase(it);
  }
  if (!file.empty()) ::unlink(file.c_str());
}

std::size_t DataStore::size() const {
  std::lock_guard lock(mu_);
  return data_.size();
}

std::uint64_t DataStore::bytes() const {
  std::lock_guard lock(mu_);
  return total_;
}

std::uint64_t DataStore::memory_bytes() const {
  std::lock_guard lock(mu_);
  return memory_;
}

std::uint64_t DataStore::spilled_bytes() const {
  std::lock_guard lock(mu_);
  return total_ - memory_;
}

std::size_t DataStore::spilled() const {
  std::lock_guard lock(mu_);
  return spilled_;
}

std::string DataStore::spill_error() const {
  std::lock_guard lock(mu_);
  return spill_error_;
}

void DataStore::set_spill_directory(std::string directory) {
  std::lock_guard lock(mu_);
  dir_ = std::move(directory);
}

std::string DataStore::file_for(protocol::TaskId id) const { return dir_ + "/" + std::to_string(id) + ".bin"; }

std::uint64_t DataStore::spill_until(std::uint64_t keep) {
  std::lock_guard spilling(spill_mu_);
  std::uint64_t spilled = 0;
  if (std::chrono::steady_clock::now() < retry_after_) return 0;
  while (true) {
    protocol::TaskId id = 0;
    net::PayloadPtr victim;
    std::string path;
    {
      std::lock_guard lock(mu_);
      if (dir_.empty() || memory_ <= keep || lru_.empty()) break;
      id = lru_.front();
      victim = data_.at(id).bytes;
      path = file_for(id);
    }
    if (std::string why = write_file(path, *victim); !why.empty()) {
      ::unlink(path.c_str());
      const std::string error = "cannot spill a result of " + util::format_bytes(victim->size()) + " to " + path +
                                ": " + why + "; it stays in memory";
      bool first;
      {
        std::lock_guard lock(mu_);
        first = spill_error_ != error;
        spill_error_ = error;
      }
      if (first) HERD_LOG(error) << error;
      retry_after_ = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      break;
    }
    bool kept = false;
    {
      std::lock_guard lock(mu_);
      spill_error_.clear();
      auto it = data_.find(id);
      if (it != data_.end() && it->second.bytes == victim) {  // not erased or replaced meanwhile
        Entry& e = it->second;
        lru_.erase(e.lru);
        e.bytes.reset();
        e.path = path;
        memory_ -= e.size;
        ++spilled_;
        spilled += e.size;
        kept = true;
      }
    }
    if (!kept) ::unlink(path.c_str());
  }
  return spilled;
}

void DataStore::remove_spill_directory() {
  std::string dir;
  {
    std::lock_guard lock(mu_);
    dir.swap(dir_);
  }
  if (dir.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (ec) HERD_LOG(warning) << "could not remove the spill directory " << dir << ": " << ec.message();
}

}  // namespace herd::worker
