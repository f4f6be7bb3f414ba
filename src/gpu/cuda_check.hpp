// HERD_CUDA_CHECK / HERD_NCCL_CHECK (nccl-tests style): throw std::runtime_error naming the
// call, file:line and the library's own error text. Include only where HERD_HAVE_CUDA (and,
// for HERD_NCCL_CHECK, HERD_HAVE_NCCL) is defined.
#pragma once

#include <stdexcept>
#include <string>

#include <cuda_runtime_api.h>

namespace herd::gpu::detail {
[[noreturn]] inline void throw_cuda(cudaError_t e, const char* expr, const char* file, int line) {
  throw std::runtime_error(std::string(expr) + " failed at " + file + ":" + std::to_string(line) + ": " +
                           cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}
}  // namespace herd::gpu::detail

#define HERD_CUDA_CHECK(expr)                                                              \
  do {                                                                                     \
    const cudaError_t herd_cuda_err_ = (expr);                                             \
    if (herd_cuda_err_ != cudaSuccess)                                                     \
      ::herd::gpu::detail::throw_cuda(herd_cuda_err_, #expr, __FILE__, __LINE__);          \
  } while (0)
