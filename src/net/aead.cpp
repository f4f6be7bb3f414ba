#include "net/aead.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <sodium.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <new>
#include <stdexcept>

#include "net/bytes.hpp"

namespace herd::net {

namespace {
// AES-256-GCM through OpenSSL's EVP interface: the same records as libsodium's (a standard
// AEAD: 12-byte nonce, 16-byte tag, the header as additional data), faster than libsodium's on
// the same core where the CPU has VAES and wide CLMUL. OpenSSL is already in every herd
// process: Debian's cpp-httplib links it.
EVP_CIPHER_CTX* gcm_context(const Key& key, bool encrypt) {
  EVP_CIPHER_CTX* c = EVP_CIPHER_CTX_new();
  if (c == nullptr) throw std::bad_alloc();
  const int ok = encrypt ? EVP_EncryptInit_ex(c, EVP_aes_256_gcm(), nullptr, key.data(), nullptr)
                         : EVP_DecryptInit_ex(c, EVP_aes_256_gcm(), nullptr, key.data(), nullptr);
  if (ok != 1) {
    EVP_CIPHER_CTX_free(c);
    throw std::runtime_error("herd: OpenSSL cannot set up AES-256-GCM");
  }
  return c;
}

// EVP takes int lengths: longer data goes in pieces (records are 1 MiB at most in practice).
constexpr std::size_t kPiece = std::size_t{1} << 30;

// The header as additional data, then the bytes, through a context set up either way.
bool gcm_update(EVP_CIPHER_CTX* c, const unsigned char* header, const unsigned char* in, std::size_t len,
                unsigned char* out) {
  int n = 0;
  if (EVP_CipherUpdate(c, nullptr, &n, header, static_cast<int>(kRecordHeader)) != 1) return false;
  for (std::size_t at = 0; at < len; at += kPiece) {
    const int piece = static_cast<int>(std::min(kPiece, len - at));
    if (EVP_CipherUpdate(c, out + at, &n, in + at, piece) != 1) return false;
  }
  return true;
}

void gcm_seal(EVP_CIPHER_CTX* c, const unsigned char* nonce, const unsigned char* header, const unsigned char* in,
              std::size_t len, unsigned char* out, unsigned char* tag) {
  int n = 0;
  bool ok = EVP_EncryptInit_ex(c, nullptr, nullptr, nullptr, nonce) == 1 && gcm_update(c, header, in, len, out);
  ok = ok && EVP_EncryptFinal_ex(c, out + len, &n) == 1 &&
       EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, static_cast<int>(kRecordTag), tag) == 1;
  if (!ok) throw std::runtime_error("herd: AES-256-GCM sealing failed (OpenSSL)");
}

bool gcm_open(EVP_CIPHER_CTX* c, const unsigned char* nonce, const unsigned char* header, const unsigned char* in,
              std::size_t len, const unsigned char* tag, unsigned char* out) {
  int n = 0;
  bool ok = EVP_DecryptInit_ex(c, nullptr, nullptr, nullptr, nonce) == 1 && gcm_update(c, header, in, len, out);
  ok = ok && EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, static_cast<int>(kRecordTag), const_cast<unsigned char*>(tag)) == 1 &&
       EVP_DecryptFinal_ex(c, out + len, &n) == 1;
  if (!ok) OPENSSL_cleanse(out, len);  // nothing of a forged record is left to read, as libsodium does
  return ok;
}
}  // namespace

void crypto_init() {
  if (sodium_init() < 0) throw std::runtime_error("herd: libsodium cannot be initialised");
}

bool aes_available() {
  crypto_init();
  return crypto_aead_aes256gcm_is_available() != 0;
}

std::string random_bytes(std::size_t n) {
  crypto_init();
  std::string out(n, '\0');
  randombytes_buf(out.data(), n);
  return out;
}

std::uint32_t random_below(std::uint32_t n) {
  crypto_init();
  return randombytes_uniform(n);
}

bool same_secret(const void* a, const void* b, std::size_t n) { return sodium_memcmp(a, b, n) == 0; }

void wipe(void* p, std::size_t n) { sodium_memzero(p, n); }

Key blake2b(const std::string& message, const Key* key) {
  Key out{};
  crypto_generichash(out.data(), out.size(), reinterpret_cast<const unsigned char*>(message.data()), message.size(),
                     key ? key->data() : nullptr, key ? key->size() : 0);
  return out;
}

Key random_key() {
  crypto_init();
  Key k{};
  randombytes_buf(k.data(), k.size());
  return k;
}

std::string key_bytes(const Key& key) { return std::string(reinterpret_cast<const char*>(key.data()), key.size()); }

bool key_from_bytes(const std::string& bytes, Key& key) {
  if (bytes.size() != key.size()) return false;
  for (std::size_t i = 0; i < key.size(); ++i) key[i] = static_cast<unsigned char>(bytes[i]);
  return true;
}

RecordCipher::RecordCipher(std::uint32_t cipher, const Key& key, std::uint64_t rekey_records, std::uint64_t rekey_bytes)
    : cipher_(cipher), key_(key), rekey_records_(std::max<std::uint64_t>(1, rekey_records)),
      rekey_bytes_(std::max<std::uint64_t>(1, rekey_bytes)) {
  crypto_init();
  if (cipher_ == kCipherAes) {
    if (!crypto_aead_aes256gcm_is_available()) throw std::invalid_argument("herd: AES-256-GCM is not available here");
    seal_ = gcm_context(key_, true);
    try {
      open_ = gcm_context(key_, false);
    } catch (...) {
      EVP_CIPHER_CTX_free(seal_);
      throw;
    }
  } else if (cipher_ != kCipherChacha) {
    throw std::invalid_argument("herd: unknown cipher " + std::to_string(cipher_));
  }
}

RecordCipher::~RecordCipher() {
  sodium_memzero(key_.data(), key_.size());
  EVP_CIPHER_CTX_free(seal_);  // clears the key schedule
  EVP_CIPHER_CTX_free(open_);
}

void RecordCipher::rekey() {
  const Key next = blake2b("herd records: next key", &key_);
  sodium_memzero(key_.data(), key_.size());
  key_ = next;
  if (cipher_ == kCipherAes) {
    if (EVP_EncryptInit_ex(seal_, nullptr, nullptr, key_.data(), nullptr) != 1 ||
        EVP_DecryptInit_ex(open_, nullptr, nullptr, key_.data(), nullptr) != 1) {
      throw std::runtime_error("herd: OpenSSL cannot change the AES-256-GCM key");
    }
  }
  counter_ = 0;
  bytes_ = 0;
  ++rekeys_;
}

std::array<unsigned char, 12> RecordCipher::next_nonce(std::size_t len) {
  if (counter_ >= rekey_records_ || bytes_ + len > rekey_bytes_) {
    if (counter_ > 0) rekey();  // a first record bigger than the byte limit still goes
  }
  bytes_ += len;
  std::array<unsigned char, 12> n{};
  for (int i = 0; i < 8; ++i) n[static_cast<std::size_t>(i)] = static_cast<unsigned char>((counter_ >> (8 * i)) & 0xffu);
  ++counter_;
  return n;
}

void RecordCipher::seal(const char* m, std::size_t len, unsigned char* out) {
  write_u32(out, static_cast<std::uint32_t>(len));
  const auto nonce = next_nonce(len);
  const auto* plain = reinterpret_cast<const unsigned char*>(m);
  if (cipher_ == kCipherAes) {
    gcm_seal(seal_, nonce.data(), out, plain, len, out + kRecordHeader, out + kRecordHeader + len);
  } else {
    crypto_aead_chacha20poly1305_ietf_encrypt_detached(out + kRecordHeader, out + kRecordHeader + len, nullptr, plain, len, out,
                                                       kRecordHeader, nullptr, nonce.data(), key_.data());
  }
}

bool RecordCipher::open(const unsigned char* record, std::size_t len, char* m) {
  const auto nonce = next_nonce(len);
  auto* plain = reinterpret_cast<unsigned char*>(m);
  if (cipher_ == kCipherAes) {
    return gcm_open(open_, nonce.data(), record, record + kRecordHeader, len, record + kRecordHeader + len, plain);
  }
  return crypto_aead_chacha20poly1305_ietf_decrypt_detached(plain, nullptr, record + kRecordHeader, len,
                                                            record + kRecordHeader + len, record, kRecordHeader, nonce.data(),
                                                            key_.data()) == 0;
}

bool RecordCipher::open_in_place(const unsigned char* header, char* data, std::size_t len, const unsigned char* tag) {
  const auto nonce = next_nonce(len);
  auto* p = reinterpret_cast<unsigned char*>(data);
  if (cipher_ == kCipherAes) {
    return gcm_open(open_, nonce.data(), header, p, len, tag, p);
  }
  return crypto_aead_chacha20poly1305_ietf_decrypt_detached(p, nullptr, p, len, tag, header, kRecordHeader, nonce.data(),
                                                            key_.data()) == 0;
}

}  // namespace herd::net
