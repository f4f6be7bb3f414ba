#include "scheduler/journal.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <msgpack.hpp>

namespace herd::scheduler {
namespace {

void put_u32(std::vector<char>& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::uint32_t get_u32(const char* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

}  // namespace

std::uint32_t Journal::crc32(const char* data, std::size_t size) {
  static const auto table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  std::uint32_t c = 0xffffffffu;
  for (std::size_t i = 0; i < size; ++i) c = table[(c ^ static_cast<unsigned char>(data[i])) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

Journal::Journal(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd_ < 0) throw std::runtime_error("cannot open the journal " + path_ + ": " + std::strerror(errno));
  std::vector<char> data;
  char buf[1 << 16];
  ssize_t n;
  while ((n = ::read(fd_, buf, sizeof buf)) > 0) data.insert(data.end(), buf, buf + n);
  std::size_t pos = 0;
  while (pos + 8 <= data.size()) {
    const std::uint32_t len = get_u32(&data[pos]);
    const std::uint32_t crc = get_u32(&data[pos + 4]);
    if (pos + 8 + len > data.size() || crc32(&data[pos + 8], len) != crc) break;
    try {
      msgpack::object_handle h = msgpack::unpack(&data[pos + 8], len);
      auto [key, result] = h.get().as<std::pair<std::string, std::vector<char>>>();
      entries_[std::move(key)] = std::move(result);
    } catch (const std::exception&) {
      break;
    }
    pos += 8 + len;
  }
  dropped_bytes_ = data.size() - pos;
  // Cut a torn tail, so that new records follow the last whole one.
  if (dropped_bytes_ > 0 && ::ftruncate(fd_, static_cast<off_t>(pos)) != 0) {
    throw std::runtime_error("cannot repair the journal " + path_ + ": " + std::strerror(errno));
  }
  ::lseek(fd_, static_cast<off_t>(pos), SEEK_SET);
}

Journal::~Journal() {
  flush();
  if (fd_ >= 0) ::close(fd_);
}

const std::vector<char>* Journal::find(const std::string& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second;
}

void Journal::append(const std::string& key, const std::vector<char>& result) {
  msgpack::sbuffer body;
  msgpack::pack(body, std::make_pair(key, result));
  put_u32(pending_, static_cast<std::uint32_t>(body.size()));
  put_u32(pending_, crc32(body.data(), body.size()));
  pending_.insert(pending_.end(), body.data(), body.data() + body.size());
  entries_[key] = result;
}

void Journal::flush() {
  std::size_t done = 0;
  while (done < pending_.size()) {
    const ssize_t n = ::write(fd_, pending_.data() + done, pending_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error("cannot write the journal " + path_ + ": " + std::strerror(errno));
    done += static_cast<std::size_t>(n);
  }
  pending_.clear();
}

}  // namespace herd::scheduler
