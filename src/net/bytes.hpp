// Integers in byte strings, little-endian, for every format herd writes itself: the control
// links' and the ring's framing, the sealed records' length headers, the journal's records.
#pragma once

#include <cstdint>
#include <cstring>

namespace herd::net {

/// Writes `v` at `out` (4 bytes, little-endian).
inline void write_u32(void* out, std::uint32_t v) {
  auto* b = static_cast<unsigned char*>(out);
  for (int i = 0; i < 4; ++i) b[i] = static_cast<unsigned char>((v >> (8 * i)) & 0xffu);
}
/// Reads 4 bytes at `p`, little-endian.
inline std::uint32_t read_u32(const void* p) {
  const auto* b = static_cast<const unsigned char*>(p);
  return static_cast<std::uint32_t>(b[0]) | (static_cast<std::uint32_t>(b[1]) << 8) |
         (static_cast<std::uint32_t>(b[2]) << 16) | (static_cast<std::uint32_t>(b[3]) << 24);
}
/// Writes `v` at `out` (8 bytes, little-endian).
inline void write_u64(void* out, std::uint64_t v) {
  auto* b = static_cast<unsigned char*>(out);
  for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>((v >> (8 * i)) & 0xffu);
}
/// Reads 8 bytes at `p`, little-endian.
inline std::uint64_t read_u64(const void* p) {
  const auto* b = static_cast<const unsigned char*>(p);
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[i];
  return v;
}
/// Appends `v` (4 bytes, little-endian) to a std::string or std::vector<char>.
template <typename Bytes>
void append_u32(Bytes& out, std::uint32_t v) {
  char b[4];
  write_u32(b, v);
  out.insert(out.end(), b, b + 4);
}
/// Appends `v` (8 bytes, little-endian) to a std::string or std::vector<char>.
template <typename Bytes>
void append_u64(Bytes& out, std::uint64_t v) {
  char b[8];
  write_u64(b, v);
  out.insert(out.end(), b, b + 8);
}

}  // namespace herd::net
