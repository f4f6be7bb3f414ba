// The CUDA half of 08_data_parallel: one rank's shard on its GPU, and the forward + backward
// pass of logistic regression as a kernel. Plain C++ interface (no CUDA types), so the task
// code compiles with the host compiler; logreg_cuda.cu is built only when herd has CUDA.
#pragma once

#include <cstddef>
#include <vector>

namespace logreg_cuda {

/// GPUs the CUDA runtime sees in this process (0 without a driver or device).
int device_count();

/// One shard (x: samples x features, row-major; y: 0/1 labels) resident on `device`, with its
/// work on `stream` (a cudaStream_t; the task's own, from herd::this_task().cuda_stream).
class Shard {
 public:
  Shard(const std::vector<double>& x, const std::vector<double>& y, int features, int device, void* stream);
  ~Shard();
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;

  /// Forward and backward over the shard at weights `w` (features, then the bias): leaves
  /// sum(dloss/dw) (features), sum(dloss/db), sum(loss) in a device buffer of features + 2
  /// doubles and returns it (valid until the next call). Asynchronous on the stream.
  double* gradient(const std::vector<double>& w);
  /// Device -> host on the stream, then waits for the stream.
  void download(const double* device, std::vector<double>& host);
  /// Host -> device on the stream.
  void upload(const std::vector<double>& host, double* device);
  /// Name of the device, e.g. "NVIDIA H100 80GB HBM3".
  const char* device_name() const;

 private:
  int samples_ = 0, features_ = 0, device_ = 0;
  void* stream_ = nullptr;
  double* x_ = nullptr;
  double* y_ = nullptr;
  double* w_ = nullptr;
  double* grad_ = nullptr;
  char name_[256] = {};
};

}  // namespace logreg_cuda
