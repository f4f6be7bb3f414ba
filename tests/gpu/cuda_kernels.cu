#include "cuda_kernels.hpp"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#define TEST_CUDA_CHECK(expr)                                                                   \
  do {                                                                                          \
    const cudaError_t e_ = (expr);                                                              \
    if (e_ != cudaSuccess)                                                                      \
      throw std::runtime_error(std::string(#expr) + ": " + cudaGetErrorString(e_));             \
  } while (0)

namespace gpu_test {
namespace {

__global__ void saxpy_kernel(float a, const float* x, const float* y, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * x[i] + y[i];
}

__global__ void iota_kernel(int* p, long n, int base) {
  for (long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x; i < n; i += static_cast<long>(gridDim.x) * blockDim.x)
    p[i] = base + static_cast<int>(i);
}

}  // namespace

std::vector<float> saxpy(float a, const std::vector<float>& x, const std::vector<float>& y, int device, void* stream) {
  if (x.size() != y.size()) throw std::invalid_argument("saxpy: sizes differ");
  const int n = static_cast<int>(x.size());
  const size_t bytes = x.size() * sizeof(float);
  auto s = static_cast<cudaStream_t>(stream);
  TEST_CUDA_CHECK(cudaSetDevice(device));
  float *dx = nullptr, *dy = nullptr, *dout = nullptr;
  TEST_CUDA_CHECK(cudaMallocAsync(&dx, bytes, s));
  TEST_CUDA_CHECK(cudaMallocAsync(&dy, bytes, s));
  TEST_CUDA_CHECK(cudaMallocAsync(&dout, bytes, s));
  TEST_CUDA_CHECK(cudaMemcpyAsync(dx, x.data(), bytes, cudaMemcpyHostToDevice, s));
  TEST_CUDA_CHECK(cudaMemcpyAsync(dy, y.data(), bytes, cudaMemcpyHostToDevice, s));
  saxpy_kernel<<<(n + 255) / 256, 256, 0, s>>>(a, dx, dy, dout, n);
  TEST_CUDA_CHECK(cudaGetLastError());
  std::vector<float> out(x.size());
  TEST_CUDA_CHECK(cudaMemcpyAsync(out.data(), dout, bytes, cudaMemcpyDeviceToHost, s));
  TEST_CUDA_CHECK(cudaFreeAsync(dx, s));
  TEST_CUDA_CHECK(cudaFreeAsync(dy, s));
  TEST_CUDA_CHECK(cudaFreeAsync(dout, s));
  TEST_CUDA_CHECK(cudaStreamSynchronize(s));
  return out;
}

void iota_int32(int* device_ptr, long count, int base, void* stream) {
  iota_kernel<<<256, 256, 0, static_cast<cudaStream_t>(stream)>>>(device_ptr, count, base);
  TEST_CUDA_CHECK(cudaGetLastError());
}

}  // namespace gpu_test
