// Kernels of 08_data_parallel: logistic regression's forward and backward pass over a shard.
//
// One thread per sample computes z = w.x + b, p = sigmoid(z), the loss and (p - y) * x; each
// block sums its threads' contributions in shared memory and adds them to the output with one
// atomicAdd per value (double atomics: sm_60 and later).
#include "logreg_cuda.hpp"

#include <cuda_runtime.h>

#include <cstdio>
#include <stdexcept>
#include <string>

#define EXAMPLE_CUDA_CHECK(expr)                                                                       \
  do {                                                                                                 \
    const cudaError_t e_ = (expr);                                                                     \
    if (e_ != cudaSuccess)                                                                             \
      throw std::runtime_error(std::string(#expr) + " failed at " + __FILE__ + ":" +                   \
                               std::to_string(__LINE__) + ": " + cudaGetErrorString(e_));              \
  } while (0)

namespace logreg_cuda {
namespace {

constexpr int kThreads = 256;

__device__ double block_sum(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  const double total = shared[0];
  __syncthreads();  // shared is reused by the next call
  return total;
}

// out[0..d-1] += sum (p - y) x,  out[d] += sum (p - y),  out[d+1] += sum loss
__global__ void forward_backward(const double* x, const double* y, const double* w, int n, int d, double* out) {
  __shared__ double shared[kThreads];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  double z = 0, residual = 0, loss = 0;
  if (i < n) {
    z = w[d];
    for (int j = 0; j < d; ++j) z += w[j] * x[static_cast<size_t>(i) * d + j];
    const double p = 1.0 / (1.0 + exp(-z));
    residual = p - y[i];
    loss = fmax(z, 0.0) + log1p(exp(-fabs(z))) - y[i] * z;  // -log-likelihood, overflow-free
  }
  for (int j = 0; j < d; ++j) {
    const double s = block_sum(i < n ? residual * x[static_cast<size_t>(i) * d + j] : 0.0, shared);
    if (threadIdx.x == 0) atomicAdd(&out[j], s);
  }
  const double sr = block_sum(residual, shared);
  const double sl = block_sum(loss, shared);
  if (threadIdx.x == 0) {
    atomicAdd(&out[d], sr);
    atomicAdd(&out[d + 1], sl);
  }
}

}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

Shard::Shard(const std::vector<double>& x, const std::vector<double>& y, int features, int device, void* stream)
    : samples_(static_cast<int>(y.size())), features_(features), device_(device), stream_(stream) {
  EXAMPLE_CUDA_CHECK(cudaSetDevice(device_));
  cudaDeviceProp prop{};
  EXAMPLE_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
  std::snprintf(name_, sizeof name_, "%s", prop.name);
  auto s = static_cast<cudaStream_t>(stream_);
  EXAMPLE_CUDA_CHECK(cudaMalloc(&x_, x.size() * sizeof(double)));
  EXAMPLE_CUDA_CHECK(cudaMalloc(&y_, y.size() * sizeof(double)));
  EXAMPLE_CUDA_CHECK(cudaMalloc(&w_, (features_ + 1) * sizeof(double)));
  EXAMPLE_CUDA_CHECK(cudaMalloc(&grad_, (features_ + 2) * sizeof(double)));
  EXAMPLE_CUDA_CHECK(cudaMemcpyAsync(x_, x.data(), x.size() * sizeof(double), cudaMemcpyHostToDevice, s));
  EXAMPLE_CUDA_CHECK(cudaMemcpyAsync(y_, y.data(), y.size() * sizeof(double), cudaMemcpyHostToDevice, s));
  EXAMPLE_CUDA_CHECK(cudaStreamSynchronize(s));  // the host vectors may go after this
}

Shard::~Shard() {
  (void)cudaSetDevice(device_);
  (void)cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  for (double* p : {x_, y_, w_, grad_}) (void)cudaFree(p);
}

double* Shard::gradient(const std::vector<double>& w) {
  auto s = static_cast<cudaStream_t>(stream_);
  EXAMPLE_CUDA_CHECK(cudaSetDevice(device_));
  // From pageable memory, cudaMemcpyAsync returns once `w` is staged: the caller may change it.
  EXAMPLE_CUDA_CHECK(cudaMemcpyAsync(w_, w.data(), (features_ + 1) * sizeof(double), cudaMemcpyHostToDevice, s));
  EXAMPLE_CUDA_CHECK(cudaMemsetAsync(grad_, 0, (features_ + 2) * sizeof(double), s));
  const int blocks = (samples_ + kThreads - 1) / kThreads;
  if (blocks > 0) forward_backward<<<blocks, kThreads, 0, s>>>(x_, y_, w_, samples_, features_, grad_);
  EXAMPLE_CUDA_CHECK(cudaGetLastError());
  return grad_;
}

void Shard::download(const double* device, std::vector<double>& host) {
  auto s = static_cast<cudaStream_t>(stream_);
  EXAMPLE_CUDA_CHECK(cudaMemcpyAsync(host.data(), device, host.size() * sizeof(double), cudaMemcpyDeviceToHost, s));
  EXAMPLE_CUDA_CHECK(cudaStreamSynchronize(s));
}

void Shard::upload(const std::vector<double>& host, double* device) {
  EXAMPLE_CUDA_CHECK(cudaMemcpyAsync(device, host.data(), host.size() * sizeof(double), cudaMemcpyHostToDevice,
                                     static_cast<cudaStream_t>(stream_)));
}

const char* Shard::device_name() const { return name_; }

}  // namespace logreg_cuda
