// Reads msgpack straight into the structs of messages.hpp, for the messages of a round trip
// (submit, execute, results, updates): no object tree, no zone, no allocation beyond the
// struct's own strings and vectors. msgpack-c's path (unpack into a zone, then convert) costs
// ~6,000 instructions for a one-task message of ~90 bytes; this one a tenth of that.
//
// It is a fast path, not a second decoder with its own rules: it accepts only input that
// msgpack-c's unpack and convert accept, and gives the same values (in place, as convert does:
// fields the sender did not have keep their values, vectors are resized, maps replaced). On
// anything else (a type convert would refuse, a size near a limit, truncation, a field this
// version does not know, a map-encoded struct) it gives up, and codec.hpp's decode() takes
// msgpack-c's path from the start, so that errors read exactly as before.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

namespace herd::protocol {

class DirectReader {
 public:
  /// `max_*`: the unpack limits (UnpackLimits); `depth` counts nested containers.
  DirectReader(const void* data, std::size_t size, std::size_t max_array, std::size_t max_map,
               std::size_t max_str, std::size_t max_bin, std::size_t max_depth)
      : p_(static_cast<const unsigned char*>(data)),
        end_(p_ + size),
        max_array_(max_array),
        max_map_(max_map),
        max_str_(max_str),
        max_bin_(max_bin),
        max_depth_(max_depth < 8 ? 0 : max_depth - 4) {}  // well inside: msgpack-c decides near it

  /// False once it gave up; what it wrote into the value is then partial.
  bool ok() const { return ok_; }
  bool at_end() const { return p_ == end_; }

  template <typename T>
  void read(T& v) {
    if (!ok_) return;
    if constexpr (std::is_same_v<T, bool>) {
      if (p_ == end_ || (*p_ != 0xc2 && *p_ != 0xc3)) return fail();
      v = *p_++ == 0xc3;
    } else if constexpr (std::is_integral_v<T>) {
      read_integer(v);
    } else if constexpr (std::is_same_v<T, double>) {
      read_double(v);
    } else if constexpr (std::is_same_v<T, std::string>) {
      const unsigned char* s;
      std::size_t n;
      if (read_raw(s, n)) v.assign(reinterpret_cast<const char*>(s), n);
    } else if constexpr (std::is_same_v<T, std::vector<char>>) {
      const unsigned char* s;
      std::size_t n;
      if (!read_raw(s, n)) return;
      v.resize(n);
      if (n != 0) std::memcpy(v.data(), s, n);
    } else if constexpr (is_vector<T>::value) {
      std::size_t n;
      if (!container(n, 0x90, 0xdc, max_array_, 1)) return;
      v.resize(n);
      for (auto& e : v) read(e);
      --depth_;
    } else if constexpr (is_map<T>::value) {
      std::size_t n;
      if (!container(n, 0x80, 0xde, max_map_, 2)) return;
      T tmp;
      for (std::size_t i = 0; i < n && ok_; ++i) {
        typename T::key_type key;
        read(key);
        read(tmp[std::move(key)]);
      }
      if (ok_) v = std::move(tmp);
      --depth_;
    } else {
      read_struct(v);
    }
  }

  /// An array's header (decode_each reads its elements one by one); end_container() after them.
  bool array_header(std::size_t& n) { return ok_ && container(n, 0x90, 0xdc, max_array_, 1); }
  void end_container() { --depth_; }

  // The packer side of MSGPACK_DEFINE (a struct lists its fields by "packing" them into this
  // reader, which reads each from the input instead). A map-encoded struct is left to msgpack-c.
  void pack_array(std::size_t) {}
  void pack_map(std::size_t) { fail(); }
  template <typename M>
  DirectReader& pack(const M& field) {
    // The object is not const (read_struct has it by reference): the const is the packer's.
    if (ok_ && used_ < wire_) {
      ++used_;
      read(const_cast<M&>(field));
    }
    return *this;
  }

 private:
  template <typename T>
  struct is_vector : std::false_type {};
  template <typename E, typename A>
  struct is_vector<std::vector<E, A>> : std::true_type {};
  template <typename T>
  struct is_map : std::false_type {};
  template <typename K, typename V, typename C, typename A>
  struct is_map<std::map<K, V, C, A>> : std::true_type {};

  void fail() { ok_ = false; }

  bool take(std::size_t n, std::uint64_t& out) {
    if (static_cast<std::size_t>(end_ - p_) < n) {
      fail();
      return false;
    }
    out = 0;
    for (std::size_t i = 0; i < n; ++i) out = (out << 8) | p_[i];
    p_ += n;
    return true;
  }

  /// An array or map header: fix form [fix, fix+15], then 16 and 32 bits at `wide`, wide+1.
  bool container(std::size_t& n, unsigned char fix, unsigned char wide, std::size_t limit, std::size_t min_bytes) {
    if (p_ == end_) return fail(), false;
    const unsigned char c = *p_++;
    std::uint64_t count;
    if (c >= fix && c <= fix + 15) {
      count = c - fix;
    } else if (c == wide) {
      if (!take(2, count)) return false;
    } else if (c == wide + 1) {
      if (!take(4, count)) return false;
    } else {
      return fail(), false;
    }
    // Within the limit, and bytes behind it for every entry (else msgpack-c says which).
    if (count > limit || count > static_cast<std::uint64_t>(end_ - p_) / min_bytes || ++depth_ > max_depth_) {
      return fail(), false;
    }
    n = static_cast<std::size_t>(count);
    return true;
  }

  /// A str or a bin (convert takes either for a string or a vector<char>).
  bool read_raw(const unsigned char*& s, std::size_t& n) {
    if (p_ == end_) return fail(), false;
    const unsigned char c = *p_++;
    std::uint64_t len;
    bool bin = false;
    if (c >= 0xa0 && c <= 0xbf) {
      len = c - 0xa0;
    } else if (c == 0xd9 || c == 0xc4) {
      if (!take(1, len)) return false;
      bin = c == 0xc4;
    } else if (c == 0xda || c == 0xc5) {
      if (!take(2, len)) return false;
      bin = c == 0xc5;
    } else if (c == 0xdb || c == 0xc6) {
      if (!take(4, len)) return false;
      bin = c == 0xc6;
    } else {
      return fail(), false;
    }
    if (len > (bin ? max_bin_ : max_str_) || len > static_cast<std::uint64_t>(end_ - p_)) return fail(), false;
    s = p_;
    n = static_cast<std::size_t>(len);
    p_ += n;
    return true;
  }

  /// Any integer format: its value as msgpack-c's unpacker types it (non-negative values are
  /// positive integers whatever their format).
  bool read_int(std::uint64_t& u, std::int64_t& s, bool& negative) {
    if (p_ == end_) return fail(), false;
    const unsigned char c = *p_++;
    std::uint64_t raw;
    negative = false;
    if (c <= 0x7f) {
      u = c;
      return true;
    }
    if (c >= 0xe0) {
      s = static_cast<std::int8_t>(c);
      negative = true;
      return true;
    }
    if (c >= 0xcc && c <= 0xcf) {
      if (!take(std::size_t{1} << (c - 0xcc), u)) return false;
      return true;
    }
    if (c >= 0xd0 && c <= 0xd3) {
      const std::size_t n = std::size_t{1} << (c - 0xd0);
      if (!take(n, raw)) return false;
      switch (n) {
        case 1: s = static_cast<std::int8_t>(raw); break;
        case 2: s = static_cast<std::int16_t>(raw); break;
        case 4: s = static_cast<std::int32_t>(raw); break;
        default: s = static_cast<std::int64_t>(raw); break;
      }
      if (s >= 0) {
        u = static_cast<std::uint64_t>(s);
      } else {
        negative = true;
      }
      return true;
    }
    return fail(), false;
  }

  template <typename T>
  void read_integer(T& v) {
    std::uint64_t u = 0;
    std::int64_t s = 0;
    bool negative;
    if (!read_int(u, s, negative)) return;
    if (!negative) {
      if (u > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) return fail();
      v = static_cast<T>(u);
    } else {
      if constexpr (std::is_unsigned_v<T>) {
        return fail();
      } else {
        if (s < static_cast<std::int64_t>(std::numeric_limits<T>::min())) return fail();
        v = static_cast<T>(s);
      }
    }
  }

  void read_double(double& v) {
    if (p_ == end_) return fail();
    const unsigned char c = *p_;
    std::uint64_t raw;
    if (c == 0xca) {
      ++p_;
      if (!take(4, raw)) return;
      float f;
      const auto bits = static_cast<std::uint32_t>(raw);
      std::memcpy(&f, &bits, sizeof f);
      v = f;
    } else if (c == 0xcb) {
      ++p_;
      if (!take(8, raw)) return;
      std::memcpy(&v, &raw, sizeof v);
    } else {
      std::uint64_t u = 0;
      std::int64_t s = 0;
      bool negative;
      if (!read_int(u, s, negative)) return;
      v = negative ? static_cast<double>(s) : static_cast<double>(u);
    }
  }

  template <typename T>
  void read_struct(T& v) {
    std::size_t n;
    if (!container(n, 0x90, 0xdc, max_array_, 1)) return;
    const std::size_t wire = wire_, used = used_;
    wire_ = n;
    used_ = 0;
    v.msgpack_pack(*this);  // pack_array, then pack(field) for each field in order
    if (used_ < wire_) fail();  // fields this version does not know: msgpack-c skips them
    wire_ = wire;
    used_ = used;
    --depth_;
  }

  const unsigned char* p_;
  const unsigned char* end_;
  std::size_t max_array_, max_map_, max_str_, max_bin_, max_depth_;
  std::size_t depth_ = 0;
  std::size_t wire_ = 0, used_ = 0;  // the struct being read: its fields on the wire, read
  bool ok_ = true;
};

}  // namespace herd::protocol
