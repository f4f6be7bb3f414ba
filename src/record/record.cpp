#include "record/record.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <unordered_set>

#include <boost/crc.hpp>

#include "common/logging.hpp"

namespace herd::record {

const char* status_name(RunStatus s) {
  switch (s) {
    case RunStatus::ok: return "ok";
    case RunStatus::failed: return "failed";
    case RunStatus::lost: return "lost";
    case RunStatus::cancelled: return "cancelled";
  }
  return "?";
}

const char* what_name(PoolEvent::What w) {
  switch (w) {
    case PoolEvent::What::submitted: return "submitted";
    case PoolEvent::What::started: return "started";
    case PoolEvent::What::ended: return "ended";
    case PoolEvent::What::failed: return "failed";
    case PoolEvent::What::cancelled: return "cancelled";
    case PoolEvent::What::scaled: return "scaled";
  }
  return "?";
}

const char* what_name(WorkerEvent::What w) {
  switch (w) {
    case WorkerEvent::What::joined: return "joined";
    case WorkerEvent::What::left: return "left";
    case WorkerEvent::What::lost: return "lost";
  }
  return "?";
}

namespace {

std::uint32_t crc32(const char* p, std::size_t n) {
  boost::crc_32_type c;
  c.process_bytes(p, n);
  return c.checksum();
}

void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xffu));
}
std::uint32_t get_u32(const char* p) {
  const auto* b = reinterpret_cast<const unsigned char*>(p);
  return static_cast<std::uint32_t>(b[0]) | (static_cast<std::uint32_t>(b[1]) << 8) |
         (static_cast<std::uint32_t>(b[2]) << 16) | (static_cast<std::uint32_t>(b[3]) << 24);
}

void put_var(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_svar(std::string& out, std::int64_t v) {
  put_var(out, (static_cast<std::uint64_t>(v) << 1) ^ static_cast<std::uint64_t>(v >> 63));
}
void put_str(std::string& out, std::string_view s) {
  put_var(out, s.size());
  out.append(s);
}
/// Times within a record as non-negative steps from the one before (small varints).
std::uint64_t step(std::int64_t from, std::int64_t to) { return to > from ? static_cast<std::uint64_t>(to - from) : 0; }

/// Reads one record's body; any overrun marks it bad.
struct In {
  const char* p;
  const char* end;
  bool ok = true;
  std::uint64_t var() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p >= end) {
        ok = false;
        return 0;
      }
      const auto b = static_cast<unsigned char>(*p++);
      v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
    ok = false;
    return 0;
  }
  std::int64_t svar() {
    const std::uint64_t u = var();
    return static_cast<std::int64_t>(u >> 1) ^ -static_cast<std::int64_t>(u & 1);
  }
  std::string str() {
    const std::uint64_t n = var();
    if (!ok || n > static_cast<std::uint64_t>(end - p)) {
      ok = false;
      return {};
    }
    std::string s(p, p + n);
    p += n;
    return s;
  }
};

}  // namespace

// ---- Encoder -----------------------------------------------------------------------------

void Encoder::begin(Kind k) {
  at_ = out_.size();
  out_.append(4, '\0');  // the length, once known
  out_.push_back(static_cast<char>(k));
}

void Encoder::end() {
  const std::size_t n = out_.size() - at_ - 4;  // kind and body
  const std::uint32_t crc = crc32(out_.data() + at_ + 4, n);
  for (int i = 0; i < 4; ++i) out_[at_ + i] = static_cast<char>((n >> (8 * i)) & 0xffu);
  put_u32(out_, crc);
}

std::uint64_t Encoder::name(std::string_view text) {
  if (text.empty()) return 0;
  auto it = names_.find(std::string(text));
  if (it != names_.end()) return it->second;
  const std::uint64_t id = names_.size() + 1;
  names_.emplace(std::string(text), id);
  begin(Kind::name);
  put_var(out_, id);
  put_str(out_, text);
  end();
  return id;
}

void Encoder::task_run(const TaskRun& r) {
  const std::uint64_t fn = name(r.function), wk = name(r.worker), cp = name(r.campaign);
  begin(Kind::task_run);
  put_var(out_, r.task);
  put_str(out_, r.key);
  put_var(out_, fn);
  put_var(out_, wk);
  put_var(out_, cp);
  put_var(out_, r.thread);
  put_svar(out_, r.submitted_us);
  put_var(out_, step(r.submitted_us, r.ready_us));
  put_var(out_, step(r.ready_us, r.placed_us));
  put_var(out_, step(r.placed_us, r.start_us));
  put_var(out_, step(r.start_us, r.end_us));
  put_var(out_, step(r.end_us, r.received_us));
  put_var(out_, r.fetch_us);
  put_var(out_, r.fetch_bytes);
  put_var(out_, r.fetch_peers);
  put_var(out_, r.result_bytes);
  out_.push_back(static_cast<char>(r.status));
  put_var(out_, r.attempt);
  put_var(out_, r.preemptions);
  if (r.status != RunStatus::ok) {
    put_str(out_, r.error_type);
    put_str(out_, std::string_view(r.error).substr(0, kMaxErrorBytes));
  }
  end();
}

void Encoder::pool_event(const PoolEvent& e) {
  const std::uint64_t pool = name(e.pool);
  begin(Kind::pool_event);
  put_svar(out_, e.time_us);
  put_var(out_, pool);
  out_.push_back(static_cast<char>(e.what));
  put_str(out_, e.job);
  put_str(out_, std::string_view(e.reason).substr(0, kMaxErrorBytes));
  put_var(out_, e.target);
  put_var(out_, e.workers);
  put_var(out_, e.running);
  put_var(out_, e.pending);
  end();
}

void Encoder::worker_sample(const WorkerSample& s) {
  const std::uint64_t wk = name(s.worker);
  begin(Kind::worker_sample);
  put_svar(out_, s.time_us);
  put_var(out_, wk);
  put_var(out_, static_cast<std::uint64_t>(std::max(0.0, s.cpu) * 10 + 0.5));  // tenths of a percent
  put_var(out_, s.memory);
  put_var(out_, s.memory_limit);
  put_var(out_, s.spilled);
  put_var(out_, s.executing);
  put_var(out_, s.nthreads);
  end();
}

void Encoder::worker_event(const WorkerEvent& e) {
  const std::uint64_t wk = name(e.worker), pool = name(e.pool);
  begin(Kind::worker_event);
  put_svar(out_, e.time_us);
  put_var(out_, wk);
  out_.push_back(static_cast<char>(e.what));
  put_str(out_, e.host);
  put_var(out_, pool);
  put_str(out_, e.job);
  put_var(out_, e.nthreads);
  put_str(out_, std::string_view(e.why).substr(0, kMaxErrorBytes));
  end();
}

// ---- reading -----------------------------------------------------------------------------

std::size_t parse(std::string_view bytes, const std::string& what, Contents& out) {
  if (bytes.size() < kHeaderBytes || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    throw std::runtime_error(what + " is not a herd record file (no HERDREC header)");
  }
  if (static_cast<std::uint8_t>(bytes[7]) > kRecordVersion) {
    throw std::runtime_error(what + " is a record of version " + std::to_string(static_cast<unsigned>(bytes[7])) +
                             "; this herd reads up to version " + std::to_string(kRecordVersion));
  }
  std::vector<std::string> names(1);  // id 0 = ""
  auto name_of = [&](std::uint64_t id) -> std::string {
    return id < names.size() ? names[id] : std::string();
  };
  std::size_t at = kHeaderBytes, count = 0;
  while (at < bytes.size()) {
    const std::size_t left = bytes.size() - at;
    std::uint32_t n = 0;
    const char* why = nullptr;
    if (left < 4) {
      why = "its last record is cut short (the file was truncated, or the scheduler died while writing)";
    } else {
      n = get_u32(bytes.data() + at);
      if (n == 0 || n > (1u << 24)) why = "a record's length is impossible (the file is damaged)";
      else if (left < 4 + static_cast<std::size_t>(n) + 4)
        why = "its last record is cut short (the file was truncated, or the scheduler died while writing)";
      else if (crc32(bytes.data() + at + 4, n) != get_u32(bytes.data() + at + 4 + n))
        why = "a record's checksum does not match (the file is damaged)";
    }
    if (why != nullptr) {
      out.warnings.push_back(what + ": " + why + " at byte " + std::to_string(at) + "; read the " +
                             std::to_string(count) + " whole records before it");
      break;
    }
    const char* body = bytes.data() + at + 5;
    In in{body, body + n - 1};
    const auto kind = static_cast<Kind>(static_cast<unsigned char>(bytes[at + 4]));
    switch (kind) {
      case Kind::name: {
        const std::uint64_t id = in.var();
        std::string text = in.str();
        if (in.ok && id < (1u << 24)) {
          if (names.size() <= id) names.resize(id + 1);
          names[id] = std::move(text);
        }
        break;
      }
      case Kind::task_run: {
        TaskRun r;
        r.task = in.var();
        r.key = in.str();
        r.function = name_of(in.var());
        r.worker = name_of(in.var());
        r.campaign = name_of(in.var());
        r.thread = static_cast<std::uint32_t>(in.var());
        r.submitted_us = in.svar();
        r.ready_us = r.submitted_us + static_cast<std::int64_t>(in.var());
        r.placed_us = r.ready_us + static_cast<std::int64_t>(in.var());
        r.start_us = r.placed_us + static_cast<std::int64_t>(in.var());
        r.end_us = r.start_us + static_cast<std::int64_t>(in.var());
        r.received_us = r.end_us + static_cast<std::int64_t>(in.var());
        r.fetch_us = in.var();
        r.fetch_bytes = in.var();
        r.fetch_peers = static_cast<std::uint32_t>(in.var());
        r.result_bytes = in.var();
        if (in.p < in.end) r.status = static_cast<RunStatus>(*in.p++);
        else in.ok = false;
        r.attempt = static_cast<std::uint32_t>(in.var());
        r.preemptions = static_cast<std::uint32_t>(in.var());
        if (r.status != RunStatus::ok) {
          r.error_type = in.str();
          r.error = in.str();
        }
        if (in.ok) out.runs.push_back(std::move(r));
        break;
      }
      case Kind::pool_event: {
        PoolEvent e;
        e.time_us = in.svar();
        e.pool = name_of(in.var());
        if (in.p < in.end) e.what = static_cast<PoolEvent::What>(*in.p++);
        else in.ok = false;
        e.job = in.str();
        e.reason = in.str();
        e.target = static_cast<std::uint32_t>(in.var());
        e.workers = static_cast<std::uint32_t>(in.var());
        e.running = static_cast<std::uint32_t>(in.var());
        e.pending = static_cast<std::uint32_t>(in.var());
        if (in.ok) out.pool_events.push_back(std::move(e));
        break;
      }
      case Kind::worker_sample: {
        WorkerSample s;
        s.time_us = in.svar();
        s.worker = name_of(in.var());
        s.cpu = static_cast<double>(in.var()) / 10.0;
        s.memory = in.var();
        s.memory_limit = in.var();
        s.spilled = in.var();
        s.executing = static_cast<std::uint32_t>(in.var());
        s.nthreads = static_cast<std::uint32_t>(in.var());
        if (in.ok) out.samples.push_back(std::move(s));
        break;
      }
      case Kind::worker_event: {
        WorkerEvent e;
        e.time_us = in.svar();
        e.worker = name_of(in.var());
        if (in.p < in.end) e.what = static_cast<WorkerEvent::What>(*in.p++);
        else in.ok = false;
        e.host = in.str();
        e.pool = name_of(in.var());
        e.job = in.str();
        e.nthreads = static_cast<std::uint32_t>(in.var());
        e.why = in.str();
        if (in.ok) out.worker_events.push_back(std::move(e));
        break;
      }
      default:
        break;  // a kind a later herd writes: skipped
    }
    at += 4 + static_cast<std::size_t>(n) + 4;
    ++count;
  }
  return count;
}

namespace {
bool read_whole(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return true;
}
}  // namespace

void apply(const Filter& f, Contents& c) {
  auto in_time = [&](std::int64_t t) { return t >= f.since_us && (f.until_us == 0 || t <= f.until_us); };
  if (f.since_us != 0 || f.until_us != 0) {
    std::erase_if(c.runs, [&](const TaskRun& r) { return !in_time(r.received_us); });
    std::erase_if(c.pool_events, [&](const PoolEvent& e) { return !in_time(e.time_us); });
    std::erase_if(c.samples, [&](const WorkerSample& s) { return !in_time(s.time_us); });
    std::erase_if(c.worker_events, [&](const WorkerEvent& e) { return !in_time(e.time_us); });
  }
  if (!f.campaign.empty()) {
    std::erase_if(c.runs, [&](const TaskRun& r) { return r.campaign != f.campaign; });
  }
  if (!f.job.empty()) {
    std::unordered_set<std::string> workers;
    for (const auto& e : c.worker_events) {
      if (e.job.rfind(f.job, 0) == 0) workers.insert(e.worker);
    }
    std::erase_if(c.runs, [&](const TaskRun& r) { return !workers.count(r.worker); });
    std::erase_if(c.samples, [&](const WorkerSample& s) { return !workers.count(s.worker); });
    std::erase_if(c.worker_events, [&](const WorkerEvent& e) { return !workers.count(e.worker); });
    std::erase_if(c.pool_events, [&](const PoolEvent& e) { return !e.job.empty() && e.job.rfind(f.job, 0) != 0; });
  }
}

Contents read_files(const std::string& path, const Filter& filter) {
  Contents c;
  std::string bytes;
  if (read_whole(path + ".1", bytes)) {
    try {
      parse(bytes, path + ".1", c);
    } catch (const std::exception& e) {
      c.warnings.push_back(std::string(e.what()) + "; skipped");
    }
  }
  if (!read_whole(path, bytes)) {
    throw std::runtime_error("cannot read the record file " + path + ": " + std::strerror(errno));
  }
  parse(bytes, path, c);
  apply(filter, c);
  return c;
}

// ---- Recorder ----------------------------------------------------------------------------

namespace {
std::string header() {
  std::string h(kMagic, sizeof kMagic);
  h.push_back(static_cast<char>(kRecordVersion));
  return h;
}

bool write_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

/// Opens `path` for appending; a new or empty file gets the header. Returns the fd and its size.
int open_record(const std::string& path, std::uint64_t* size) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) throw std::runtime_error("cannot open the record file " + path + ": " + std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  if (st.st_size > 0) {
    char h[kHeaderBytes] = {};
    const int rfd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    const bool ours = rfd >= 0 && ::pread(rfd, h, sizeof h, 0) == static_cast<ssize_t>(sizeof h) &&
                      std::memcmp(h, kMagic, sizeof kMagic) == 0 && static_cast<std::uint8_t>(h[7]) == kRecordVersion;
    if (rfd >= 0) ::close(rfd);
    if (!ours) {  // not ours (or another version): kept aside, not appended to
      ::close(fd);
      HERD_LOG(warning) << "record: " << path << " is not a record file of this version; moved to " << path << ".1";
      ::rename(path.c_str(), (path + ".1").c_str());
      return open_record(path, size);
    }
    *size = static_cast<std::uint64_t>(st.st_size);
    return fd;
  }
  const std::string h = header();
  if (!write_all(fd, h.data(), h.size())) {
    ::close(fd);
    throw std::runtime_error("cannot write the record file " + path + ": " + std::strerror(errno));
  }
  *size = h.size();
  return fd;
}
}  // namespace

Recorder::Recorder(Options options) : options_(std::move(options)) {
  fd_ = open_record(options_.path, &file_bytes_);
  writer_ = std::thread([this] { writer_loop(); });
}

Recorder::~Recorder() {
  end_turn();
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();
  if (fd_ >= 0) ::close(fd_);
}

void Recorder::end_turn() {
  std::string& b = enc_.bytes();
  if (b.empty()) return;
  recorded_ += b.size();
  file_bytes_ += b.size();
  const bool rotate = file_bytes_ >= options_.max_bytes;
  if (rotate) {
    enc_.reset_names();  // the next file defines its names again
    file_bytes_ = kHeaderBytes;
  }
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    // A turn's records join the last chunk unless it ends a file: one growing buffer per second
    // (or per MiB) rather than one per turn, each as big as the biggest turn's (thousands of
    // turns a second held ~20 MB that way).
    if (queue_.empty() || queue_.back().rotate_after) queue_.emplace_back();
    queue_.back().bytes.append(b);
    queue_.back().rotate_after = rotate;
    queued_bytes_ += b.size();
    wake = queued_bytes_ >= (1u << 20) || rotate;
    urgent_ = urgent_ || wake;
    ++queued_seq_;
  }
  b.clear();  // its storage serves the next turn
  if (wake) cv_.notify_one();
}

void Recorder::flush() {
  std::unique_lock lock(mu_);
  const std::uint64_t want = queued_seq_;
  urgent_ = true;
  cv_.notify_one();
  done_cv_.wait(lock, [&] { return written_seq_ >= want || stop_; });
}

void Recorder::writer_loop() {
  bool failing = false;
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait_for(lock, std::chrono::seconds(1), [&] { return stop_ || urgent_; });
    urgent_ = false;
    if (queue_.empty()) {
      if (stop_) return;
      continue;
    }
    std::vector<Chunk> batch;
    batch.swap(queue_);
    queued_bytes_ = 0;
    const std::uint64_t upto = queued_seq_;
    lock.unlock();
    for (auto& c : batch) {
      if (fd_ >= 0 && !write_all(fd_, c.bytes.data(), c.bytes.size())) {
        if (!failing) HERD_LOG(warning) << "record: cannot write " << options_.path << ": " << std::strerror(errno)
                                        << "; records are lost until it can";
        failing = true;
      } else {
        failing = false;
      }
      if (c.rotate_after) {
        ::close(fd_);
        ::rename(options_.path.c_str(), (options_.path + ".1").c_str());
        std::uint64_t size = 0;
        try {
          fd_ = open_record(options_.path, &size);
        } catch (const std::exception& e) {
          HERD_LOG(warning) << "record: " << e.what();
          fd_ = -1;
        }
      }
    }
    lock.lock();
    written_seq_ = upto;
    done_cv_.notify_all();
  }
}

}  // namespace herd::record
