// Sealed records over a byte stream (AEAD), for the links herd opens itself beside
// ZeroMQ: the gang ring (collective/ring.cpp) and the bulk lanes of data ports
// (net/lane.hpp).
//
// A record, byte-exact: u32 length L, little-endian | L bytes of ciphertext | 16-byte tag. The
// length header is the additional data; the nonce is the record's number under its key (u64
// little-endian in a 12-byte nonce, from 0), so a key seals at most one stream in one direction
// and no nonce is ever used twice. A long-lived stream (a control link, a ring) changes key
// before the AEAD's safe use of one key runs out: after kRekeyRecords records or kRekeyBytes
// bytes under a key, both ends move to BLAKE2b-256(key, "herd records: next key") and count
// from 0 again, in step, with nothing on the wire. AES-256-GCM where both ends have it in hardware (OpenSSL's,
// the fastest here), else ChaCha20-Poly1305 (IETF, libsodium's).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

struct evp_cipher_ctx_st;

namespace herd::net {

using Key = std::array<unsigned char, 32>;

inline constexpr std::uint32_t kCipherNone = 0, kCipherChacha = 1, kCipherAes = 2;
inline constexpr std::size_t kRecordHeader = 4;  // the length
inline constexpr std::size_t kRecordTag = 16;

/// libsodium initialised (once, thread-safe); throws std::runtime_error when it cannot be.
void crypto_init();
/// AES-256-GCM in hardware here (libsodium's implementation needs AES-NI and CLMUL).
bool aes_available();
/// `n` bytes from the system's random source.
std::string random_bytes(std::size_t n);
/// A uniform random number in [0, n) (n > 0).
std::uint32_t random_below(std::uint32_t n);
/// Compares two secrets (MACs, tokens) in constant time.
bool same_secret(const void* a, const void* b, std::size_t n);
/// Overwrites a secret's bytes with zeros where the compiler cannot optimise it away.
void wipe(void* p, std::size_t n);
/// BLAKE2b-256 of `message`, keyed with `key` (nullptr: unkeyed).
Key blake2b(const std::string& message, const Key* key);
/// A fresh random key.
Key random_key();
/// The bytes of a key, and back (false: not 32 bytes).
std::string key_bytes(const Key& key);
bool key_from_bytes(const std::string& bytes, Key& key);

/// Records under one key at most (TLS 1.3's 2^24.5 for AES-GCM, rounded down), and bytes.
inline constexpr std::uint64_t kRekeyRecords = std::uint64_t{1} << 24;
inline constexpr std::uint64_t kRekeyBytes = std::uint64_t{1} << 36;

/// One direction of one stream: the sender seals records, the receiver opens them, each with
/// the record counter as nonce.
class RecordCipher {
 public:
  /// `cipher`: kCipherChacha or kCipherAes (std::invalid_argument otherwise, or for AES where
  /// this machine has none). `rekey_records` / `rekey_bytes`: when the key changes (tests make
  /// them small; both ends must use the same).
  RecordCipher(std::uint32_t cipher, const Key& key, std::uint64_t rekey_records = kRekeyRecords,
               std::uint64_t rekey_bytes = kRekeyBytes);
  ~RecordCipher();
  RecordCipher(const RecordCipher&) = delete;
  RecordCipher& operator=(const RecordCipher&) = delete;

  /// Writes length header | ciphertext of [m, m+len) | tag to `out` (kRecordHeader + len + kRecordTag bytes).
  void seal(const char* m, std::size_t len, unsigned char* out);
  /// `record` = what seal() made for `len` bytes; the plaintext goes to `m`. False: not authentic.
  bool open(const unsigned char* record, std::size_t len, char* m);
  /// The same, with the record's three parts apart; `data` holds the ciphertext and receives
  /// the plaintext in place. False: not authentic.
  bool open_in_place(const unsigned char* header, char* data, std::size_t len, const unsigned char* tag);
  /// Keys used so far beyond the first (tests).
  std::uint64_t rekeys() const { return rekeys_; }

 private:
  /// The nonce of the next record of `len` bytes (after a change of key when one is due).
  std::array<unsigned char, 12> next_nonce(std::size_t len);
  void rekey();
  std::uint32_t cipher_;
  Key key_;
  evp_cipher_ctx_st* seal_ = nullptr;  // AES-256-GCM (OpenSSL), one context each way
  evp_cipher_ctx_st* open_ = nullptr;
  std::uint64_t counter_ = 0, bytes_ = 0;  // under the current key
  std::uint64_t rekey_records_, rekey_bytes_, rekeys_ = 0;
};

}  // namespace herd::net
