// NCCL through gangs (label gpu; skipped with exit code 77 where no GPU is present): one rank
// per GPU this process may use, each on a worker of its own (LocalCluster::gpus_per_worker).
// With one GPU the gang has one rank, which still runs the whole NCCL path (unique id through
// the scheduler, init, all-reduce on the device, teardown).
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

#include <herd/herd.hpp>

#include "cuda_kernels.hpp"
#include "gpu_test.hpp"
#include "gpu/gpu.hpp"

namespace {

#define CHECK_CUDA_OR_THROW(expr)                                                                  \
  do {                                                                                             \
    const cudaError_t e_ = (expr);                                                                 \
    if (e_ != cudaSuccess) throw std::runtime_error(std::string(#expr) + ": " + cudaGetErrorString(e_)); \
  } while (0)

int gpu_count() { return static_cast<int>(herd::gpu::discover().size()); }

constexpr long kCount = 1 << 20;  // 4 MiB of int32: several NCCL chunks

}  // namespace

struct NcclResult {
  int rank = -1;
  int size = 0;
  std::string backend;
  std::vector<std::int32_t> sum;   // first and last kDump elements of the int32 sum
  long sum_wrong = 0;              // elements of the sum that differ from the expected value
  std::vector<float> avg;          // float avg of (rank) over the gang, 16 elements
  std::vector<std::int32_t> bcast; // broadcast from the last rank
  std::vector<double> host_sum;    // all-reduce of a host buffer (staged by the backend)
  MSGPACK_DEFINE_MAP(rank, size, backend, sum, sum_wrong, avg, bcast, host_sum);
};

NcclResult nccl_collectives(long count) {
  herd::Communicator& comm = herd::gang(herd::CollectiveBackend::nccl);
  const herd::TaskInfo& t = herd::this_task();
  if (t.gpus.size() != 1 || t.cuda_stream == nullptr) throw std::runtime_error("a gang rank without its GPU");
  CHECK_CUDA_OR_THROW(cudaSetDevice(t.gpus[0]));
  auto stream = static_cast<cudaStream_t>(t.cuda_stream);
  NcclResult r;
  r.rank = comm.rank();
  r.size = comm.size();
  r.backend = herd::to_string(comm.backend());

  // int32 sum on the device: rank r contributes (r + 1) * 1000 + i at index i.
  std::int32_t* dev = nullptr;
  CHECK_CUDA_OR_THROW(cudaMalloc(&dev, static_cast<std::size_t>(count) * sizeof(std::int32_t)));
  gpu_test::iota_int32(dev, count, (r.rank + 1) * 1000, stream);
  comm.allreduce(dev, static_cast<std::size_t>(count), herd::ReduceOp::sum);
  std::vector<std::int32_t> host(static_cast<std::size_t>(count));
  CHECK_CUDA_OR_THROW(cudaMemcpyAsync(host.data(), dev, host.size() * sizeof(std::int32_t), cudaMemcpyDeviceToHost, stream));
  CHECK_CUDA_OR_THROW(cudaStreamSynchronize(stream));
  const long n = r.size;
  for (long i = 0; i < count; ++i) {
    const long expected = 1000 * n * (n + 1) / 2 + n * i;
    r.sum_wrong += host[static_cast<std::size_t>(i)] != static_cast<std::int32_t>(expected);
  }
  r.sum.assign(host.begin(), host.begin() + 4);
  r.sum.insert(r.sum.end(), host.end() - 4, host.end());

  // Broadcast from the last rank: every rank ends with its values.
  gpu_test::iota_int32(dev, 64, r.rank == r.size - 1 ? 7 : -100000, stream);
  comm.broadcast(dev, 64 * sizeof(std::int32_t), r.size - 1);
  r.bcast.resize(64);
  CHECK_CUDA_OR_THROW(cudaMemcpyAsync(r.bcast.data(), dev, 64 * sizeof(std::int32_t), cudaMemcpyDeviceToHost, stream));
  CHECK_CUDA_OR_THROW(cudaStreamSynchronize(stream));
  CHECK_CUDA_OR_THROW(cudaFree(dev));

  // float avg of a managed buffer, then a host buffer (staged), then a barrier.
  float* avg = nullptr;
  CHECK_CUDA_OR_THROW(cudaMallocManaged(&avg, 16 * sizeof(float)));
  for (int i = 0; i < 16; ++i) avg[i] = static_cast<float>(r.rank * 2);
  comm.allreduce(avg, 16, herd::ReduceOp::avg);
  r.avg.assign(avg, avg + 16);
  CHECK_CUDA_OR_THROW(cudaFree(avg));
  r.host_sum.assign(8, 0.5 * (r.rank + 1));
  comm.allreduce(r.host_sum, herd::ReduceOp::sum);
  comm.barrier();
  return r;
}
HERD_TASK(nccl_collectives);

// Rank 1 fails before the all-reduce (by an exception, or by its process dying); the others
// are inside it and must come out, not hang.
int nccl_rank_fails(int how) {
  herd::Communicator& comm = herd::gang(herd::CollectiveBackend::nccl);
  const herd::TaskInfo& t = herd::this_task();
  CHECK_CUDA_OR_THROW(cudaSetDevice(t.gpus[0]));
  float* dev = nullptr;
  CHECK_CUDA_OR_THROW(cudaMalloc(&dev, 1024 * sizeof(float)));
  comm.allreduce(dev, 1024, herd::ReduceOp::sum);  // everybody once: the communicator is up
  if (comm.rank() == 1) {
    if (how == 0) throw std::runtime_error("rank 1 gives up");
    ::_exit(3);  // the worker dies
  }
  comm.allreduce(dev, 1024, herd::ReduceOp::sum);  // rank 1 never joins this one
  (void)cudaFree(dev);
  return comm.rank();
}
HERD_TASK(nccl_rank_fails);

// One rank (any machine with a GPU): an all-reduce, then it raises if asked.
int nccl_one_rank(int fail) {
  herd::Communicator& comm = herd::gang(herd::CollectiveBackend::nccl);
  CHECK_CUDA_OR_THROW(cudaSetDevice(herd::this_task().gpus[0]));
  float* dev = nullptr;
  CHECK_CUDA_OR_THROW(cudaMalloc(&dev, 1024 * sizeof(float)));
  comm.allreduce(dev, 1024, herd::ReduceOp::sum);
  CHECK_CUDA_OR_THROW(cudaFree(dev));
  if (fail != 0) throw std::runtime_error("rank gives up after an all-reduce");
  return comm.size();
}
HERD_TASK(nccl_one_rank);

TEST_CASE("Gpu.Nccl.AllReduceOneRankPerGpu" * doctest::timeout(180)) {
  const int n = gpu_count();
  REQUIRE(n >= 1);
  herd::Client client{herd::LocalCluster{n}.gpus_per_worker(1)};
  const auto results = client.gather(client.submit_gang(n, herd::TaskOptions{}.gpus(1), nccl_collectives, kCount));
  REQUIRE(results.size() == static_cast<std::size_t>(n));
  const long size = n;
  for (int rank = 0; rank < n; ++rank) {
    const NcclResult& r = results[static_cast<std::size_t>(rank)];
    INFO("rank " << rank);
    CHECK(r.rank == rank);
    CHECK(r.size == n);
    CHECK(r.backend == "nccl");
    CHECK(r.sum_wrong == 0);
    REQUIRE(r.sum.size() == 8u);
    CHECK(r.sum[0] == 1000 * size * (size + 1) / 2);
    CHECK(r.sum[7] == static_cast<std::int32_t>(1000 * size * (size + 1) / 2 + size * (kCount - 1)));
    REQUIRE(r.bcast.size() == 64u);
    for (int i = 0; i < 64; ++i) CHECK(r.bcast[static_cast<std::size_t>(i)] == 7 + i);
    for (float v : r.avg) CHECK(v == doctest::Approx(static_cast<double>(n - 1)));
    for (double v : r.host_sum) CHECK(v == doctest::Approx(0.5 * size * (size + 1) / 2));
  }
}

TEST_CASE("Gpu.Nccl.FailedGangLeavesTheGpuUsable" * doctest::timeout(180)) {
  // A gang whose rank raises after NCCL is up fails with that error; its communicator is torn
  // down and its GPU freed, so the next NCCL gang on the same worker and device runs.
  herd::Client client{herd::LocalCluster{1}.gpus_per_worker(1)};
  auto bad = client.submit_gang(1, herd::TaskOptions{}.gpus(1), nccl_one_rank, 1);
  REQUIRE(bad.size() == 1u);
  try {
    (void)bad[0].result(std::chrono::seconds(120));
    FAIL("the failing gang succeeded");
  } catch (const herd::TimeoutError& e) {
    FAIL("the failing gang hangs: " << e.what());
  } catch (const herd::Error& e) {
    CHECK(std::string(e.what()).find("rank gives up after an all-reduce") != std::string::npos);
  }
  auto good = client.submit_gang(1, herd::TaskOptions{}.gpus(1), nccl_one_rank, 0);
  CHECK(good[0].result(std::chrono::seconds(120)) == 1);
}

TEST_CASE("Gpu.Nccl.FailingRankAbortsTheGang" * doctest::timeout(180)) {
  const int n = gpu_count();
  if (n < 2) {
    herd_test::skip_test("needs 2 GPUs (one rank per GPU), this machine has " + std::to_string(n));
    return;
  }
  for (int how : {0, 1}) {
    const char* what = how == 0 ? "rank 1 raises" : "rank 1's worker dies";
    INFO(what);
    herd::Client client{herd::LocalCluster{2}.gpus_per_worker(1)};
    auto futures = client.submit_gang(2, herd::TaskOptions{}.gpus(1), nccl_rank_fails, how);
    for (auto& f : futures) {
      try {
        (void)f.result(std::chrono::seconds(120));
        FAIL("a rank of the failed gang succeeded");
      } catch (const herd::TimeoutError& e) {
        FAIL("a rank is left hanging: " << e.what());
      } catch (const herd::Error& e) {
        MESSAGE(e.what());
      }
    }
  }
}
