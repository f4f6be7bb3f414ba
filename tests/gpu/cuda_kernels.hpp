// Kernels for the GPU tests, behind a plain C++ interface (cuda_kernels.cu).
#pragma once

#include <vector>

namespace gpu_test {

/// out = a * x + y on `device`, on `stream` (cudaStream_t); waits for the result.
std::vector<float> saxpy(float a, const std::vector<float>& x, const std::vector<float>& y, int device, void* stream);

/// Fills `count` int32 at `device_ptr` with value(i) = base + i, on `stream` (no wait).
void iota_int32(int* device_ptr, long count, int base, void* stream);

}  // namespace gpu_test
