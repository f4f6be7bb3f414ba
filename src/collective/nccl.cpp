// The NCCL backend of herd::Communicator (see nccl.hpp).
//
// Why non-blocking: a blocking NCCL communicator can hang forever in init or in a collective
// when a peer dies, and nothing short of killing the process frees it. With `blocking = 0`
// every NCCL call returns at once (ncclInProgress), so this rank waits in its own loop, which
// watches three things: the communicator's async error, the CUDA stream, and abort(). Any of
// them ends the wait, and a failure calls ncclCommAbort, which also stops the NCCL kernels
// still spinning on the device. No rank is left hanging.
//
// Init is lazy: make_nccl() starts ncclCommInitRankConfig and returns; the first operation
// (or the destructor) waits for it, in the same abortable loop. So a gang whose other rank
// never arrives is freed by abort() instead of blocking the task thread inside make_nccl().
//
// Buffers are device memory (or managed memory). A host pointer is accepted too, staged
// through a device buffer, so code written for the CPU ring runs unchanged, only slower.
#include "collective/nccl.hpp"

#include <stdexcept>
#include <string>

#include "herd/error.hpp"

#ifdef HERD_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/logging.hpp"
#include "gpu/cuda_check.hpp"
#endif

namespace herd::collective {

#ifndef HERD_HAVE_NCCL

bool nccl_built() { return false; }

std::vector<char> nccl_unique_id() {
  throw std::runtime_error("herd was built without NCCL (HERD_WITH_NCCL, needs CUDA and NCCL at build time)");
}

std::unique_ptr<herd::detail::CommunicatorImpl> make_nccl(int, int, const std::vector<char>&, int, void*) {
  throw std::runtime_error("herd was built without NCCL (HERD_WITH_NCCL, needs CUDA and NCCL at build time)");
}

#else

namespace {

std::string nccl_error(ncclResult_t r, ncclComm_t comm) {
  std::string s = ncclGetErrorString(r);
  if (comm) {
    const char* last = ncclGetLastError(comm);
    if (last && *last) s += std::string(" (") + last + ")";
  }
  return s;
}

ncclDataType_t to_nccl(DataType t) {
  switch (t) {
    case DataType::int32: return ncclInt32;
    case DataType::int64: return ncclInt64;
    case DataType::float16: return ncclFloat16;
    case DataType::float32: return ncclFloat32;
    case DataType::float64: return ncclFloat64;
  }
  throw std::invalid_argument("NCCL: unknown DataType " + std::to_string(static_cast<int>(t)));
}

ncclRedOp_t to_nccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
    case ReduceOp::avg: return ncclAvg;  // integers: sum then integer division, as the ring does
  }
  throw std::invalid_argument("NCCL: unknown ReduceOp " + std::to_string(static_cast<int>(op)));
}

// Polls cheaply at first (a small all-reduce completes in microseconds), then backs off so a
// long wait for a slow peer costs no CPU.
class Backoff {
 public:
  void pause() {
    if (++spins_ < 2000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(spins_ < 20000 ? 20 : 200));
    }
  }

 private:
  int spins_ = 0;
};

class NcclCommunicator final : public herd::detail::CommunicatorImpl {
 public:
  NcclCommunicator(int rank, int size, const std::vector<char>& unique_id, int device, void* stream)
      : rank_(rank), size_(size), device_(device), stream_(static_cast<cudaStream_t>(stream)) {
    if (unique_id.size() != sizeof(ncclUniqueId))
      throw std::invalid_argument("NCCL: a unique id has " + std::to_string(sizeof(ncclUniqueId)) +
                                  " bytes, got " + std::to_string(unique_id.size()));
    if (size < 1 || rank < 0 || rank >= size)
      throw std::invalid_argument("NCCL: rank " + std::to_string(rank) + " of " + std::to_string(size));
    ncclUniqueId id;
    std::memcpy(&id, unique_id.data(), sizeof(id));
    HERD_CUDA_CHECK(cudaSetDevice(device_));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t r = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      const std::string what = nccl_error(r, comm_);
      if (comm_) (void)ncclCommAbort(comm_);
      comm_ = nullptr;
      throw std::runtime_error("NCCL: rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                               " cannot join the communicator on device " + std::to_string(device_) + ": " + what);
    }
  }

  ~NcclCommunicator() override {
    if (!comm_) {
      free_scratch();
      return;
    }
    (void)cudaSetDevice(device_);
    bool clean = !aborted_.load() && !failed_;
    if (clean) {
      // Finalize waits for the other ranks to be quiescent too; a peer that is gone would make
      // it wait forever, so it gets a deadline (and abort() still ends it).
      try {
        wait_state("initialise", std::chrono::seconds(30));
        if (ncclResult_t r = ncclCommFinalize(comm_); r != ncclSuccess && r != ncclInProgress) clean = false;
        if (clean) wait_state("finalize", std::chrono::seconds(30));
      } catch (const std::exception& e) {
        HERD_LOG(info) << "NCCL rank " << rank_ << ": aborting the communicator at exit: " << e.what();
        clean = false;
      }
    }
    free_scratch();
    if (comm_) {
      if (clean) {
        (void)ncclCommDestroy(comm_);
      } else {
        (void)ncclCommAbort(comm_);
      }
    }
  }

  void allreduce(void* buffer, std::size_t count, DataType type, ReduceOp op) override {
    if (count == 0) return;
    const std::size_t bytes = count * size_of(type);
    run("all-reduce", buffer, bytes, [&](void* dev) {
      return ncclAllReduce(dev, dev, count, to_nccl(type), to_nccl(op), comm_, stream_);
    });
  }

  void broadcast(void* buffer, std::size_t bytes, int root) override {
    if (root < 0 || root >= size_)
      throw std::invalid_argument("broadcast: root " + std::to_string(root) + " is not a rank of " + std::to_string(size_));
    if (bytes == 0) return;
    run("broadcast", buffer, bytes, [&](void* dev) {
      return ncclBroadcast(dev, dev, bytes, ncclInt8, root, comm_, stream_);
    });
  }

  void barrier() override {
    // A one-element all-reduce, synchronised: every rank has reached this call when it returns.
    std::int32_t one = 1;
    allreduce(&one, 1, DataType::int32, ReduceOp::sum);
  }

  void abort(const std::string& reason) override {
    {
      std::lock_guard<std::mutex> lock(reason_mutex_);
      if (reason_.empty()) reason_ = reason.empty() ? "the gang was aborted" : reason;
    }
    // Only a flag: the thread inside an operation (or the destructor) calls ncclCommAbort, so
    // the communicator is never freed under a caller still polling it.
    aborted_.store(true);
  }

  CollectiveBackend backend() const override { return CollectiveBackend::nccl; }

 private:
  template <typename Enqueue>
  void run(const char* what, void* buffer, std::size_t bytes, Enqueue enqueue) {
    throw_if_aborted(what);
    if (failed_) throw GangAborted(failure_);
    HERD_CUDA_CHECK(cudaSetDevice(device_));
    wait_state("initialise", std::chrono::milliseconds::max());

    // Host memory is staged through a device buffer; device and managed memory go straight in.
    cudaPointerAttributes attributes{};
    const bool on_host = cudaPointerGetAttributes(&attributes, buffer) != cudaSuccess ||
                         attributes.type == cudaMemoryTypeUnregistered || attributes.type == cudaMemoryTypeHost;
    (void)cudaGetLastError();
    void* dev = buffer;
    if (on_host) {
      dev = scratch(bytes);
      HERD_CUDA_CHECK(cudaMemcpyAsync(dev, buffer, bytes, cudaMemcpyHostToDevice, stream_));
    }
    ncclResult_t r = enqueue(dev);
    if (r != ncclSuccess && r != ncclInProgress) fail(what, r);
    wait_state(what, std::chrono::milliseconds::max());  // enqueued
    if (on_host) HERD_CUDA_CHECK(cudaMemcpyAsync(buffer, dev, bytes, cudaMemcpyDeviceToHost, stream_));
    wait_stream(what);
  }

  // Until the communicator is no longer ncclInProgress: error or abort() -> throw.
  template <typename Duration>
  void wait_state(const char* what, Duration limit) {
    const auto start = std::chrono::steady_clock::now();
    Backoff backoff;
    for (;;) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
      if (r != ncclSuccess) fail(what, r);
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) fail(what, state);
      throw_if_aborted(what);
      if (limit != Duration::max() && std::chrono::steady_clock::now() - start > limit)
        throw std::runtime_error(std::string("NCCL ") + what + " timed out");
      backoff.pause();
    }
  }

  // Until the stream has run everything enqueued; a peer's death shows as an async error.
  void wait_stream(const char* what) {
    Backoff backoff;
    for (;;) {
      const cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) {
        abort_comm();
        failed_ = true;
        failure_ = std::string("NCCL ") + what + " on rank " + std::to_string(rank_) + ": CUDA error " +
                   cudaGetErrorName(q) + ": " + cudaGetErrorString(q);
        throw std::runtime_error(failure_);
      }
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess || (state != ncclSuccess && state != ncclInProgress))
        fail(what, state);
      throw_if_aborted(what);
      backoff.pause();
    }
  }

  void throw_if_aborted(const char* what) {
    if (!aborted_.load()) return;
    abort_comm();
    std::string reason;
    {
      std::lock_guard<std::mutex> lock(reason_mutex_);
      reason = reason_;
    }
    throw GangAborted(std::string("NCCL ") + what + " on rank " + std::to_string(rank_) + " aborted: " + reason);
  }

  [[noreturn]] void fail(const char* what, ncclResult_t r) {
    const std::string text = nccl_error(r, comm_);
    abort_comm();
    failed_ = true;
    failure_ = std::string("NCCL ") + what + " failed on rank " + std::to_string(rank_) + " of " +
               std::to_string(size_) + ": " + text;
    // A remote error (a peer vanished, a connection closed) is the gang's failure, not this rank's.
    if (r == ncclRemoteError || r == ncclSystemError) throw GangAborted(failure_);
    throw std::runtime_error(failure_);
  }

  // ncclCommAbort once, from the thread that owns the communicator; the NCCL kernels stop.
  void abort_comm() {
    if (!comm_) return;
    (void)cudaSetDevice(device_);
    free_scratch();
    (void)ncclCommAbort(comm_);
    comm_ = nullptr;
    failed_ = true;
    if (failure_.empty()) failure_ = "the NCCL communicator was aborted";
  }

  void* scratch(std::size_t bytes) {
    if (bytes > scratch_bytes_) {
      free_scratch();
      HERD_CUDA_CHECK(cudaMalloc(&scratch_, bytes));
      scratch_bytes_ = bytes;
    }
    return scratch_;
  }
  void free_scratch() {
    if (scratch_) (void)cudaFree(scratch_);
    scratch_ = nullptr;
    scratch_bytes_ = 0;
  }

  int rank_, size_, device_;
  cudaStream_t stream_;
  ncclComm_t comm_ = nullptr;
  void* scratch_ = nullptr;
  std::size_t scratch_bytes_ = 0;
  bool failed_ = false;
  std::string failure_;
  std::atomic<bool> aborted_{false};
  std::mutex reason_mutex_;
  std::string reason_;
};

}  // namespace

bool nccl_built() { return true; }

std::vector<char> nccl_unique_id() {
  ncclUniqueId id;
  if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
    throw std::runtime_error(std::string("ncclGetUniqueId: ") + ncclGetErrorString(r));
  std::vector<char> bytes(sizeof(id));
  std::memcpy(bytes.data(), &id, sizeof(id));
  return bytes;
}

std::unique_ptr<herd::detail::CommunicatorImpl> make_nccl(int rank, int size, const std::vector<char>& unique_id,
                                                          int device, void* stream) {
  return std::make_unique<NcclCommunicator>(rank, size, unique_id, device, stream);
}

#endif  // HERD_HAVE_NCCL

}  // namespace herd::collective
