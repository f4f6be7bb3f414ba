#include "scheduler/journal.hpp"

#include <fcntl.h>
#include <limits.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <boost/crc.hpp>
#include <msgpack.hpp>

#include "common/logging.hpp"
#include "net/bytes.hpp"

namespace herd::scheduler {
namespace {

using Clock = std::chrono::steady_clock;



std::uint64_t get_be(const char* p, int n) {
  std::uint64_t v = 0;
  for (int i = 0; i < n; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

std::string bytes_text(std::uint64_t n) {
  char buf[32];
  if (n < 10 * 1024) std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
  else if (n < 10 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.0f KiB", static_cast<double>(n) / 1024);
  else std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(n) / (1024 * 1024));
  return buf;
}

std::string errno_text(const std::string& what, int e) { return what + ": " + std::strerror(e); }

// The body of a record: msgpack [key (str), result (bin)], exactly `len` bytes. Fills where
// the key and the result are (offsets into the body) when `b` (the first `avail` bytes of the
// body) holds a well-formed one.
struct Layout {
  std::uint64_t key_off = 0, key_len = 0, result_off = 0, result_len = 0;
};
bool parse_layout(const char* b, std::uint64_t avail, std::uint64_t len, Layout& out) {
  if (avail < 2 || static_cast<unsigned char>(b[0]) != 0x92) return false;
  std::uint64_t p = 1;
  const auto c = static_cast<unsigned char>(b[p]);
  int hdr = 0;
  if (c >= 0xa0 && c <= 0xbf) {
    out.key_len = c & 0x1f;
  } else if (c == 0xd9 || c == 0xda || c == 0xdb) {
    hdr = c == 0xd9 ? 1 : c == 0xda ? 2 : 4;
    if (avail < p + 1 + static_cast<std::uint64_t>(hdr)) return false;
    out.key_len = get_be(b + p + 1, hdr);
  } else {
    return false;
  }
  out.key_off = p + 1 + static_cast<std::uint64_t>(hdr);
  p = out.key_off + out.key_len;
  if (p + 1 > avail) return false;
  const auto r = static_cast<unsigned char>(b[p]);
  if (r != 0xc4 && r != 0xc5 && r != 0xc6) return false;
  const int rh = r == 0xc4 ? 1 : r == 0xc5 ? 2 : 4;
  if (avail < p + 1 + static_cast<std::uint64_t>(rh)) return false;
  out.result_len = get_be(b + p + 1, rh);
  out.result_off = p + 1 + static_cast<std::uint64_t>(rh);
  return out.result_off + out.result_len == len;
}

// Reads a file through one window, for loading: records and the scan for the next valid one
// after damage cost a few large preads, not two syscalls per record.
class Window {
 public:
  Window(int fd, std::uint64_t size) : fd_(fd), size_(size) {}
  /// [off, off + n) of the file, or nullptr when it is past the end or cannot be read.
  const char* get(std::uint64_t off, std::uint64_t n) {
    if (off + n > size_) return nullptr;
    if (off >= start_ && off + n <= start_ + len_) return buf_.data() + (off - start_);
    const std::uint64_t want = std::min<std::uint64_t>(std::max<std::uint64_t>(n, kChunk), size_ - off);
    buf_.resize(want);
    std::uint64_t got = 0;
    while (got < want) {
      const ssize_t r = ::pread(fd_, buf_.data() + got, want - got, static_cast<off_t>(off + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += static_cast<std::uint64_t>(r);
    }
    start_ = off;
    len_ = got;
    return got >= n ? buf_.data() : nullptr;
  }

 private:
  static constexpr std::uint64_t kChunk = 1 << 20;
  int fd_;
  std::uint64_t size_;
  std::vector<char> buf_;
  std::uint64_t start_ = 0, len_ = 0;
};

constexpr std::uint64_t kWholeBody = 16 << 20;  // bodies up to this are read in one go at load

struct Parsed {
  Layout layout;
  std::uint64_t len = 0;
  std::string key;
  std::shared_ptr<const std::vector<char>> bytes;  // when small enough to keep
};

// The record at `pos`, when it is whole and valid.
bool parse_at(Window& w, std::uint64_t pos, std::uint64_t size, std::size_t keep_bytes, Parsed& out) {
  const char* h = w.get(pos, 8);
  if (h == nullptr) return false;
  const std::uint64_t len = net::read_u32(h);
  const std::uint32_t crc = net::read_u32(h + 4);
  if (len < 3 || pos + 8 + len > size) return false;
  Layout l;
  if (len <= kWholeBody) {
    const char* b = w.get(pos + 8, len);
    if (b == nullptr || !parse_layout(b, len, len, l)) return false;
    if (Journal::crc32(b, len) != crc) return false;
    out.key.assign(b + l.key_off, l.key_len);
    // Campaign records (recipes, errors) are always kept: the scheduler restores from them.
    const bool campaign = !out.key.empty() && (out.key[0] == '\x1e' || out.key[0] == '\x1d');
    if (l.result_len <= keep_bytes || campaign) {
      out.bytes = std::make_shared<const std::vector<char>>(b + l.result_off, b + l.result_off + l.result_len);
    }
  } else {
    // A large result: check the layout from its head, the CRC chunk by chunk.
    const std::uint64_t head = std::min<std::uint64_t>(len, 1 << 16);
    const char* b = w.get(pos + 8, head);
    if (b == nullptr || !parse_layout(b, head, len, l)) return false;
    out.key.assign(b + l.key_off, l.key_len);
    boost::crc_32_type c;
    for (std::uint64_t off = 0; off < len;) {
      const std::uint64_t n = std::min<std::uint64_t>(len - off, 1 << 20);
      const char* chunk = w.get(pos + 8 + off, n);
      if (chunk == nullptr) return false;
      c.process_bytes(chunk, n);
      off += n;
    }
    if (c.checksum() != crc) return false;
  }
  out.layout = l;
  out.len = len;
  return true;
}

}  // namespace

std::uint32_t Journal::crc32(const char* data, std::size_t size) {
  boost::crc_32_type c;
  c.process_bytes(data, size);
  return c.checksum();
}

Journal::Journal(std::string path, Options options) : path_(std::move(path)), options_(std::move(options)) {
  lock();
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd_ < 0) {
    const int e = errno;
    ::close(lock_fd_);
    throw std::runtime_error(errno_text("cannot open the journal " + path_, e));
  }
  try {
    load();
  } catch (...) {
    ::close(fd_);
    ::close(lock_fd_);
    throw;
  }
  durable_offset_.store(next_offset_);
  staged_.offset = staged_.end = next_offset_;
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) {
    const int e = errno;
    ::close(fd_);
    ::close(lock_fd_);
    throw std::runtime_error(errno_text("journal " + path_ + ": eventfd", e));
  }
  writer_ = std::thread([this] { writer_loop(); });
  reader_ = std::thread([this] { reader_loop(); });
}

void Journal::lock() {
  const std::string lock_path = path_ + ".lock";
  lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd_ < 0) throw std::runtime_error(errno_text("cannot open the journal's lock file " + lock_path, errno));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    char buf[512] = {};
    const ssize_t n = ::pread(lock_fd_, buf, sizeof buf - 1, 0);
    ::close(lock_fd_);
    lock_fd_ = -1;
    if (e != EWOULDBLOCK) throw std::runtime_error(errno_text("cannot lock the journal " + path_ + " (" + lock_path + ")", e));
    // "pid 123 host login1"
    std::string holder = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    std::string pid = "?", host = "?";
    if (const auto p = holder.find("pid "); p != std::string::npos) pid = holder.substr(p + 4, holder.find(' ', p + 4) - p - 4);
    if (const auto h = holder.find("host "); h != std::string::npos) host = holder.substr(h + 5);
    throw std::runtime_error("journal " + path_ + " is in use by scheduler pid " + pid + " on host " + host +
                             " (lock file " + lock_path + "); one scheduler per journal");
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string me = "pid " + std::to_string(::getpid()) + " host " + host + "\n";
  if (::ftruncate(lock_fd_, 0) != 0 || ::pwrite(lock_fd_, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    // Only the message a second scheduler would get suffers; the lock itself holds.
    HERD_LOG(warning) << "journal " << path_ << ": cannot record our pid in " << lock_path << ": " << std::strerror(errno);
  }
}

void Journal::load() {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) throw std::runtime_error(errno_text("cannot read the journal " + path_, errno));
  const auto size = static_cast<std::uint64_t>(st.st_size);
  Window w(fd_, size);
  std::uint64_t pos = 0, good_end = 0;
  auto take = [&](Parsed& p, std::uint64_t at) {
    if (p.key.empty()) {  // forget_all(): a restart of the cluster forgot what came before
      entries_.clear();
      campaign_members_.clear();
      errors_.clear();
      memory_bytes_ = 0;
      return;
    }
    if (p.key == job_record_key()) {
      if (p.bytes) {
        job_records_.push_back(*p.bytes);
      } else {  // larger than memory_bytes: read now, the restore needs it
        std::vector<char> bytes(p.layout.result_len);
        const char* from = w.get(at + 8 + p.layout.result_off, bytes.size());
        if (from != nullptr) {
          std::copy(from, from + bytes.size(), bytes.begin());
          job_records_.push_back(std::move(bytes));
        }
      }
      return;
    }
    if (take_campaign_record(p.key, p.bytes.get(), true)) return;
    errors_.erase(p.key);  // a result after an error: the task was submitted again and ran
    Entry e;
    e.offset = at + 8 + p.layout.result_off;
    e.size = p.layout.result_len;
    if (p.bytes) memory_bytes_ += p.bytes->size();
    e.bytes = std::move(p.bytes);
    if (auto it = entries_.find(p.key); it != entries_.end() && it->second.bytes) memory_bytes_ -= it->second.bytes->size();
    entries_[std::move(p.key)] = std::move(e);
  };
  while (pos + 8 <= size) {
    Parsed p;
    if (parse_at(w, pos, size, options_.memory_bytes, p)) {
      take(p, pos);
      pos += 8 + p.len;
      good_end = pos;
      continue;
    }
    // Damaged here: look for the next valid record. Its body starts with 0x92 (an array of
    // two), which makes most positions cheap to rule out before the CRC is checked.
    std::uint64_t next = pos + 1;
    bool found = false;
    for (; next + 9 <= size; ++next) {
      const char* h = w.get(next, 9);
      if (h == nullptr) break;
      const std::uint64_t len = net::read_u32(h);
      if (static_cast<unsigned char>(h[8]) != 0x92 || len < 3 || next + 8 + len > size) continue;
      Parsed q;
      if (parse_at(w, next, size, options_.memory_bytes, q)) {
        found = true;
        break;
      }
    }
    if (!found) break;  // nothing valid after it: a torn tail
    skipped_.push_back({pos, next - pos});
    HERD_LOG(warning) << "journal " << path_ << ": skipped " << (next - pos) << " damaged bytes at offset " << pos
                      << " (a record lost; the records after it are kept)";
    pos = next;
  }
  dropped_bytes_ = size - good_end;
  next_offset_ = good_end;
  // Cut a torn tail, so that new records follow the last whole one.
  if (dropped_bytes_ > 0 && ::ftruncate(fd_, static_cast<off_t>(good_end)) != 0) {
    throw std::runtime_error(errno_text("cannot repair the journal " + path_ + " (cut its torn tail at offset " +
                                            std::to_string(good_end) + ")",
                                        errno));
  }
}

Journal::~Journal() {
  flush();
  if (!wait_durable(std::chrono::seconds(5))) {
    HERD_LOG(warning) << "journal " << path_ << ": " << behind_records() << " records (" << bytes_text(behind_bytes())
                      << ") could not be written before the scheduler stopped (" << status()
                      << "); their tasks will run again after a restart";
  }
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  reader_cv_.notify_all();
  if (writer_.joinable()) writer_.join();
  if (reader_.joinable()) reader_.join();
  if (fd_ >= 0) ::close(fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the lock
}

const std::vector<char>* Journal::find(const std::string& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() || !it->second.bytes ? nullptr : it->second.bytes.get();
}

std::uint64_t Journal::append(const std::string& key, std::vector<char> result) {
  if (behind_bytes() + result.size() > options_.max_behind_bytes && failing()) {
    ++lost_;
    return appended_;
  }
  // The msgpack prefix of [key, result]; the result's bytes follow it unchanged.
  msgpack::sbuffer prefix;
  msgpack::packer<msgpack::sbuffer> pk(prefix);
  pk.pack_array(2);
  pk.pack(key);
  pk.pack_bin(static_cast<std::uint32_t>(result.size()));
  Record rec;
  const std::uint64_t body = prefix.size() + result.size();
  if (body > UINT32_MAX) {
    HERD_LOG(warning) << "journal " << path_ << ": the result of " << key << " (" << bytes_text(result.size())
                      << ") is too large for a record; it is not journaled";
    ++lost_;
    return appended_;
  }
  rec.head.reserve(8 + prefix.size());
  rec.head.resize(8);
  net::write_u32(rec.head.data(), static_cast<std::uint32_t>(body));
  rec.head.insert(rec.head.end(), prefix.data(), prefix.data() + prefix.size());
  auto bytes = std::make_shared<const std::vector<char>>(std::move(result));
  rec.bytes = bytes;

  if (key == job_record_key() || take_campaign_record(key, bytes.get(), false)) {  // written, not a result: no entry
    ++appended_;
    next_offset_ += rec.head.size() + rec.bytes->size();
    staged_.records.push_back(std::move(rec));
    staged_.last_seq = appended_;
    staged_.end = next_offset_;
    return appended_;
  }
  Entry e;
  e.offset = next_offset_ + rec.head.size();
  e.size = bytes->size();
  e.seq = ++appended_;
  if (auto it = entries_.find(key); it != entries_.end() && it->second.bytes) memory_bytes_ -= it->second.bytes->size();
  memory_bytes_ += bytes->size();
  e.bytes = std::move(bytes);
  if (e.size > options_.memory_bytes) to_release_.emplace_back(e.seq, key);
  if (!errors_.empty()) errors_.erase(key);
  entries_[key] = std::move(e);
  next_offset_ += rec.head.size() + rec.bytes->size();
  staged_.records.push_back(std::move(rec));
  staged_.last_seq = appended_;
  staged_.end = next_offset_;
  return appended_;
}

bool Journal::take_campaign_record(const std::string& key, const std::vector<char>* bytes, bool loading) {
  if (key.empty()) return false;
  if (key[0] == '\x1d') {  // a campaign task's error
    if (bytes != nullptr) errors_[key.substr(1)] = *bytes;
    return true;
  }
  if (key[0] != '\x1e') return false;
  const std::size_t sep = key.find('\x1f');
  if (sep == std::string::npos) return true;  // malformed: ignored
  std::string campaign = key.substr(1, sep - 1);
  std::string member = key.substr(sep + 1);
  if (!member.empty()) {
    // Recipes are kept only as loaded, for the restore; a running scheduler has the tasks.
    campaign_members_.push_back({std::move(campaign), std::move(member),
                                 loading && bytes != nullptr ? *bytes : std::vector<char>{}});
    return true;
  }
  // Released: its members, their results and errors go.
  std::erase_if(campaign_members_, [&](const CampaignMember& m) {
    if (m.campaign != campaign) return false;
    erase_entry(m.key);
    errors_.erase(m.key);
    return true;
  });
  return true;
}

void Journal::drop_recipes() {
  for (CampaignMember& m : campaign_members_) std::vector<char>().swap(m.recipe);
  std::vector<std::vector<char>>().swap(job_records_);
}

const std::vector<char>* Journal::error_of(const std::string& key) const {
  auto it = errors_.find(key);
  return it == errors_.end() ? nullptr : &it->second;
}

void Journal::erase_entry(const std::string& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  if (it->second.bytes) memory_bytes_ -= it->second.bytes->size();
  entries_.erase(it);
}

void Journal::forget_all() {
  (void)append("", {});  // the mark, written and synced like any record
  entries_.clear();
  campaign_members_.clear();
  errors_.clear();
  to_release_.clear();
  memory_bytes_ = 0;
}

void Journal::flush() {
  release_durable(durable());
  if (staged_.records.empty()) return;
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(staged_));
  }
  cv_.notify_one();
  staged_ = Batch{};
  staged_.offset = staged_.end = next_offset_;
}

// Large results that reached the disk leave memory: only their place in the file stays.
void Journal::release_durable(std::uint64_t seq) {
  while (!to_release_.empty() && to_release_.front().first <= seq) {
    auto it = entries_.find(to_release_.front().second);
    if (it != entries_.end() && it->second.seq == to_release_.front().first && it->second.bytes) {
      memory_bytes_ -= it->second.bytes->size();
      it->second.bytes.reset();
    }
    to_release_.pop_front();
  }
}

void Journal::read(const std::string& key, std::uint64_t tag) {
  auto it = entries_.find(key);
  ReadRequest r;
  r.tag = tag;
  r.key = key;
  if (it != entries_.end()) {
    r.offset = it->second.offset;
    r.size = it->second.size;
  }
  {
    std::lock_guard lock(mu_);
    if (it == entries_.end()) {
      reads_done_.push_back({tag, key, zmq::message_t(), "no record of " + key + " in the journal"});
    } else if (it->second.bytes) {
      // Still in memory (not on disk yet): no need to read.
      reads_done_.push_back({tag, key, zmq::message_t(it->second.bytes->data(), it->second.bytes->size()), ""});
    } else {
      reads_.push_back(std::move(r));
      reader_cv_.notify_one();
      return;
    }
  }
  wake();
}

std::vector<Journal::ReadDone> Journal::poll() {
  std::uint64_t n;
  while (!options_.on_wake && ::read(wake_fd_, &n, sizeof n) > 0) {  // with on_wake it is never signalled
  }
  release_durable(durable());
  std::lock_guard lock(mu_);
  return std::move(reads_done_);
}

bool Journal::wait_durable(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return durable_cv_.wait_for(lock, timeout, [&] { return durable_seq_.load() >= appended_ - staged_.records.size(); });
}

void Journal::wake() {
  if (options_.on_wake) {
    options_.on_wake();
    return;
  }
  const std::uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
}

std::string Journal::status() const {
  std::string s = path_ + ": " + std::to_string(entries_.size()) + " records";
  const std::uint64_t records = behind_records();
  std::string lost_text;
  if (lost_ > 0) lost_text = "; " + std::to_string(lost_) + " results not journaled (too far behind)";
  if (!failing()) return s + ", " + bytes_text(durable_offset_.load()) + " on disk" + (records > 0 ? ", " + std::to_string(records) + " being written" : "") + lost_text;
  std::string error;
  Clock::time_point since, next;
  {
    std::lock_guard lock(mu_);
    error = error_;
    since = failing_since_;
    next = next_try_;
  }
  const auto now = Clock::now();
  const auto secs = [](Clock::duration d) {
    return std::to_string(std::max<long long>(0, std::chrono::duration_cast<std::chrono::seconds>(d).count()));
  };
  return s + "; BEHIND: " + std::to_string(records) + " records (" + bytes_text(behind_bytes()) + ") not on disk for " +
         secs(now - since) + " s: " + error + "; next try in " + secs(next - now + std::chrono::milliseconds(999)) +
         " s; results are delivered meanwhile" + lost_text;
}

// Writes the batches contiguously from the first one's offset (one pwritev per IOV_MAX
// pieces), then fdatasync. The same bytes go to the same offsets on a retry, so a partial
// write is simply overwritten.
bool Journal::write_batches(std::vector<Batch*>& batches, std::string& error) {
  std::vector<iovec> iov;
  for (Batch* b : batches) {
    for (Record& r : b->records) {
      if (!r.crc_done) {
        boost::crc_32_type c;
        c.process_bytes(r.head.data() + 8, r.head.size() - 8);
        c.process_bytes(r.bytes->data(), r.bytes->size());
        net::write_u32(r.head.data() + 4, c.checksum());
        r.crc_done = true;
      }
      iov.push_back({r.head.data(), r.head.size()});
      if (!r.bytes->empty()) iov.push_back({const_cast<char*>(r.bytes->data()), r.bytes->size()});
    }
  }
  std::uint64_t offset = batches.front()->offset;
  std::size_t i = 0;
  while (i < iov.size()) {
    const int n = static_cast<int>(std::min<std::size_t>(iov.size() - i, IOV_MAX));
    const ssize_t w = ::pwritev(fd_, iov.data() + i, n, static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      error = errno_text("cannot write", errno);
      return false;
    }
    if (w == 0) {
      error = "cannot write: the file system wrote nothing";
      return false;
    }
    offset += static_cast<std::uint64_t>(w);
    auto left = static_cast<std::size_t>(w);
    while (i < iov.size() && left >= iov[i].iov_len) left -= iov[i++].iov_len;
    if (left > 0) {  // a partial piece: go on from inside it
      iov[i].iov_base = static_cast<char*>(iov[i].iov_base) + left;
      iov[i].iov_len -= left;
    }
  }
  if (options_.sync && ::fdatasync(fd_) != 0) {
    error = errno_text("fdatasync failed", errno);
    return false;
  }
  return true;
}

void Journal::writer_loop() {
  std::unique_lock lock(mu_);
  std::chrono::milliseconds backoff = options_.retry_min;
  bool last_try = false;
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) break;  // stopping, nothing left
    // Everything queued goes out in one write and one fdatasync (group commit). The batches
    // stay in the queue (the loop only appends behind them) until they are on disk.
    std::vector<Batch*> batches;
    for (Batch& b : queue_) batches.push_back(&b);
    const std::uint64_t last_seq = queue_.back().last_seq, end = queue_.back().end;
    const std::size_t taken = batches.size();
    last_try = stop_;
    lock.unlock();
    std::string error;
    const bool ok = write_batches(batches, error);
    lock.lock();
    if (ok) {
      queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(taken));
      const bool was_failing = failing_.load();
      durable_offset_.store(end);
      durable_seq_.store(last_seq);
      batches_written_.fetch_add(1);
      failing_.store(false);
      error_.clear();
      backoff = options_.retry_min;
      if (was_failing) {
        HERD_LOG(warning) << "journal " << path_ << ": writing again; caught up to " << bytes_text(end);
      }
      durable_cv_.notify_all();
      wake();
      continue;
    }
    const auto now = Clock::now();
    if (!failing_.load()) {
      failing_since_ = now;
      HERD_LOG(warning) << "journal " << path_ << ": " << error << " (at offset " << batches.front()->offset
                        << "); the scheduler goes on, results are delivered, and the records wait in memory "
                        << "while it retries";
    } else if (error != error_) {
      HERD_LOG(warning) << "journal " << path_ << ": " << error;
    }
    error_ = error;
    next_try_ = now + backoff;
    failing_.store(true);
    durable_cv_.notify_all();
    wake();
    if (last_try) break;  // stopping: this was the final attempt
    cv_.wait_for(lock, backoff, [&] { return stop_; });
    backoff = std::min(backoff * 2, options_.retry_max);
  }
}

void Journal::reader_loop() {
  std::unique_lock lock(mu_);
  while (true) {
    reader_cv_.wait(lock, [&] { return stop_ || !reads_.empty(); });
    if (stop_) break;
    ReadRequest r = std::move(reads_.front());
    reads_.pop_front();
    lock.unlock();
    ReadDone done;
    done.tag = r.tag;
    done.key = r.key;
    done.bytes = zmq::message_t(r.size);
    std::uint64_t got = 0;
    while (got < r.size) {
      const ssize_t n = ::pread(fd_, static_cast<char*>(done.bytes.data()) + got, r.size - got,
                                static_cast<off_t>(r.offset + got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        done.error = n < 0 ? errno_text("cannot read the result of " + r.key + " from the journal " + path_, errno)
                           : "the journal " + path_ + " ends before the result of " + r.key;
        done.bytes = zmq::message_t();
        break;
      }
      got += static_cast<std::uint64_t>(n);
    }
    lock.lock();
    reads_done_.push_back(std::move(done));
    wake();
  }
}

}  // namespace herd::scheduler
