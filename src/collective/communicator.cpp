// The out-of-line pieces of herd/collective.hpp: herd::Communicator (argument checks, then the
// backend), IEEE half conversions, and the names of the enums. herd::gang() is in gang.cpp.
#include <bit>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "herd/collective.hpp"

namespace herd {

namespace {
bool valid(DataType t) { return static_cast<std::uint8_t>(t) <= static_cast<std::uint8_t>(DataType::float64); }
bool valid(ReduceOp op) { return static_cast<std::uint8_t>(op) <= static_cast<std::uint8_t>(ReduceOp::avg); }
}  // namespace

Communicator::Communicator(int rank, int size, std::unique_ptr<detail::CommunicatorImpl> impl)
    : rank_(rank), size_(size), impl_(std::move(impl)) {
  if (size < 1) throw std::invalid_argument("herd::Communicator: size must be at least 1, got " + std::to_string(size));
  if (rank < 0 || rank >= size) {
    throw std::invalid_argument("herd::Communicator: rank " + std::to_string(rank) + " is out of range [0, " +
                                std::to_string(size) + ")");
  }
  if (!impl_) throw std::invalid_argument("herd::Communicator: no backend (null impl)");
}

Communicator::~Communicator() = default;

CollectiveBackend Communicator::backend() const { return impl_->backend(); }

void Communicator::allreduce(void* buffer, std::size_t count, DataType type, ReduceOp op) {
  if (!valid(type)) {
    throw std::invalid_argument("herd::Communicator::allreduce: unknown DataType " +
                                std::to_string(static_cast<int>(type)));
  }
  if (!valid(op)) {
    throw std::invalid_argument("herd::Communicator::allreduce: unknown ReduceOp " +
                                std::to_string(static_cast<int>(op)));
  }
  if (buffer == nullptr && count > 0) {
    throw std::invalid_argument("herd::Communicator::allreduce: null buffer for " + std::to_string(count) +
                                " elements");
  }
  impl_->allreduce(buffer, count, type, op);
}

void Communicator::broadcast(void* buffer, std::size_t bytes, int root) {
  if (root < 0 || root >= size_) {
    throw std::invalid_argument("herd::Communicator::broadcast: root " + std::to_string(root) +
                                " is out of range [0, " + std::to_string(size_) + ")");
  }
  if (buffer == nullptr && bytes > 0) {
    throw std::invalid_argument("herd::Communicator::broadcast: null buffer for " + std::to_string(bytes) +
                                " bytes");
  }
  impl_->broadcast(buffer, bytes, root);
}

void Communicator::barrier() { impl_->barrier(); }

// Half: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits.
float to_float(half h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h.bits & 0x8000u) << 16;
  const std::uint32_t exp = (h.bits >> 10) & 0x1fu;
  const std::uint32_t mant = h.bits & 0x3ffu;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in float.
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));  // inf, nan (payload kept)
  return std::bit_cast<float>(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

half to_half(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t exp = (x >> 23) & 0xffu;
  std::uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff) {  // inf stays inf; nan stays a (quiet) nan with the top payload bits
    return half{static_cast<std::uint16_t>(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0u))};
  }
  const int e = static_cast<int>(exp) - 127 + 15;  // the half's biased exponent
  if (e >= 31) return half{static_cast<std::uint16_t>(sign | 0x7c00u)};  // overflow: infinity
  if (e <= 0) {
    // A half subnormal (or zero). Below 2^-25 everything rounds to zero; exactly 2^-25 is a tie
    // that goes to the even 0.
    if (e < -10) return half{sign};
    mant |= 0x800000u;  // the implicit leading 1
    const auto shift = static_cast<std::uint32_t>(14 - e);  // 14..24
    std::uint32_t m = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (m & 1u))) ++m;  // may carry into the smallest normal
    return half{static_cast<std::uint16_t>(sign | m)};
  }
  std::uint32_t h = (static_cast<std::uint32_t>(e) << 10) | (mant >> 13);
  const std::uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry may reach infinity: correct
  return half{static_cast<std::uint16_t>(sign | h)};
}

std::size_t size_of(DataType t) {
  switch (t) {
    case DataType::int32: return 4;
    case DataType::int64: return 8;
    case DataType::float16: return 2;
    case DataType::float32: return 4;
    case DataType::float64: return 8;
  }
  throw std::invalid_argument("herd::size_of: unknown DataType " + std::to_string(static_cast<int>(t)));
}

const char* to_string(DataType t) {
  switch (t) {
    case DataType::int32: return "int32";
    case DataType::int64: return "int64";
    case DataType::float16: return "float16";
    case DataType::float32: return "float32";
    case DataType::float64: return "float64";
  }
  return "unknown";
}

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
    case ReduceOp::avg: return "avg";
  }
  return "unknown";
}

const char* to_string(CollectiveBackend b) {
  switch (b) {
    case CollectiveBackend::automatic: return "automatic";
    case CollectiveBackend::cpu_ring: return "cpu_ring";
    case CollectiveBackend::nccl: return "nccl";
  }
  return "unknown";
}

}  // namespace herd
