#include "common/aead.hpp"

#include <sodium.h>

#include <new>
#include <stdexcept>

namespace herd::aead {

void init() {
  if (sodium_init() < 0) throw std::runtime_error("herd: libsodium cannot be initialised");
}

bool aes_available() {
  init();
  return crypto_aead_aes256gcm_is_available() != 0;
}

std::string random_bytes(std::size_t n) {
  init();
  std::string out(n, '\0');
  randombytes_buf(out.data(), n);
  return out;
}

Key blake2b(const std::string& message, const Key* key) {
  Key out{};
  crypto_generichash(out.data(), out.size(), reinterpret_cast<const unsigned char*>(message.data()), message.size(),
                     key ? key->data() : nullptr, key ? key->size() : 0);
  return out;
}

Key random_key() {
  init();
  Key k{};
  randombytes_buf(k.data(), k.size());
  return k;
}

std::string to_bytes(const Key& key) { return std::string(reinterpret_cast<const char*>(key.data()), key.size()); }

bool from_bytes(const std::string& bytes, Key& key) {
  if (bytes.size() != key.size()) return false;
  for (std::size_t i = 0; i < key.size(); ++i) key[i] = static_cast<unsigned char>(bytes[i]);
  return true;
}

void put_length(unsigned char* out, std::uint32_t len) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<unsigned char>((len >> (8 * i)) & 0xffu);
}

std::uint32_t get_length(const unsigned char* header) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(header[i]) << (8 * i);
  return v;
}

RecordCipher::RecordCipher(std::uint32_t cipher, const Key& key) : cipher_(cipher), key_(key) {
  init();
  if (cipher_ == kCipherAes) {
    if (!crypto_aead_aes256gcm_is_available()) throw std::invalid_argument("herd: AES-256-GCM is not available here");
    aes_ = static_cast<crypto_aead_aes256gcm_state*>(sodium_malloc(sizeof(crypto_aead_aes256gcm_state)));
    if (aes_ == nullptr) throw std::bad_alloc();
    crypto_aead_aes256gcm_beforenm(aes_, key_.data());
  } else if (cipher_ != kCipherChacha) {
    throw std::invalid_argument("herd: unknown cipher " + std::to_string(cipher_));
  }
}

RecordCipher::~RecordCipher() {
  sodium_memzero(key_.data(), key_.size());
  if (aes_) sodium_free(aes_);  // zeroes it
}

std::array<unsigned char, 12> RecordCipher::next_nonce() {
  std::array<unsigned char, 12> n{};
  for (int i = 0; i < 8; ++i) n[static_cast<std::size_t>(i)] = static_cast<unsigned char>((counter_ >> (8 * i)) & 0xffu);
  ++counter_;
  return n;
}

void RecordCipher::seal(const char* m, std::size_t len, unsigned char* out) {
  put_length(out, static_cast<std::uint32_t>(len));
  const auto nonce = next_nonce();
  const auto* plain = reinterpret_cast<const unsigned char*>(m);
  if (cipher_ == kCipherAes) {
    crypto_aead_aes256gcm_encrypt_detached_afternm(out + kHeader, out + kHeader + len, nullptr, plain, len, out,
                                                   kHeader, nullptr, nonce.data(), aes_);
  } else {
    crypto_aead_chacha20poly1305_ietf_encrypt_detached(out + kHeader, out + kHeader + len, nullptr, plain, len, out,
                                                       kHeader, nullptr, nonce.data(), key_.data());
  }
}

bool RecordCipher::open(const unsigned char* record, std::size_t len, char* m) {
  const auto nonce = next_nonce();
  auto* plain = reinterpret_cast<unsigned char*>(m);
  if (cipher_ == kCipherAes) {
    return crypto_aead_aes256gcm_decrypt_detached_afternm(plain, nullptr, record + kHeader, len, record + kHeader + len,
                                                          record, kHeader, nonce.data(), aes_) == 0;
  }
  return crypto_aead_chacha20poly1305_ietf_decrypt_detached(plain, nullptr, record + kHeader, len,
                                                            record + kHeader + len, record, kHeader, nonce.data(),
                                                            key_.data()) == 0;
}

bool RecordCipher::open_in_place(const unsigned char* header, char* data, std::size_t len, const unsigned char* tag) {
  const auto nonce = next_nonce();
  auto* p = reinterpret_cast<unsigned char*>(data);
  if (cipher_ == kCipherAes) {
    return crypto_aead_aes256gcm_decrypt_detached_afternm(p, nullptr, p, len, tag, header, kHeader, nonce.data(), aes_) ==
           0;
  }
  return crypto_aead_chacha20poly1305_ietf_decrypt_detached(p, nullptr, p, len, tag, header, kHeader, nonce.data(),
                                                            key_.data()) == 0;
}

}  // namespace herd::aead
