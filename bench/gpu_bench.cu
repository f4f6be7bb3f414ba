// herd_gpu_bench: what herd costs a GPU program, one JSON line per figure (bench/README.md).
//
//   herd_gpu_bench [--small] [--rounds N] [--mib M] [--reps R] [--max-mib M]
//
//   gpu_launch     an empty kernel, launch + stream sync: bare (in the worker, in a loop) vs the
//                  same kernel as a herd task (submit().result() round trip), and a CPU no-op
//                  task beside it; overhead_us = task - bare
//   gpu_bandwidth  a triad (a = b + s*c over three arrays of M MiB) run as a task: GB/s of the
//                  kernel, of cudaMemcpy device-to-device, and the theoretical peak of the
//                  device (memory clock x bus width), and the task's round trip
//   gpu_allreduce  NCCL all-reduce through a gang, one rank per GPU (needs > 1 GPU): algbw and
//                  busbw = algbw * 2(n-1)/n as nccl-tests reports it, per size
//
// Without a GPU it prints {"system":"herd","bench":"gpu","skipped":"..."} and exits 0.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <herd/herd.hpp>

#define BENCH_CUDA_CHECK(expr)                                                                   \
  do {                                                                                           \
    const cudaError_t e_ = (expr);                                                               \
    if (e_ != cudaSuccess)                                                                       \
      throw std::runtime_error(std::string(#expr) + " at " + __FILE__ + ":" + std::to_string(__LINE__) + \
                               ": " + cudaGetErrorString(e_));                                   \
  } while (0)

using Clock = std::chrono::steady_clock;

namespace {

__global__ void empty_kernel() {}

__global__ void triad_kernel(float* __restrict__ a, const float* __restrict__ b, const float* __restrict__ c,
                             float s, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    a[i] = b[i] + s * c[i];
}

__global__ void fill_kernel(float* p, float v, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    p[i] = v;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

cudaStream_t task_stream() {
  const herd::TaskInfo& t = herd::this_task();
  if (t.gpus.empty() || t.cuda_stream == nullptr) throw std::runtime_error("a GPU task without its GPU");
  BENCH_CUDA_CHECK(cudaSetDevice(t.gpus[0]));
  return static_cast<cudaStream_t>(t.cuda_stream);
}

struct Line {
  std::ostringstream out;
  explicit Line(const char* bench) { out << "{\"system\":\"herd\",\"bench\":\"" << bench << "\""; }
  Line& num(const char* k, double v) {
    out << ",\"" << k << "\":" << v;
    return *this;
  }
  Line& str(const char* k, const std::string& v) {
    out << ",\"" << k << "\":\"";
    for (char ch : v) {
      if (ch == '"' || ch == '\\') out << '\\';
      out << ch;
    }
    out << "\"";
    return *this;
  }
  ~Line() {
    out << "}";
    std::printf("%s\n", out.str().c_str());
    std::fflush(stdout);
  }
};

}  // namespace

// ---- tasks ----

/// The bare cost, measured where the task runs: `rounds` launches of an empty kernel, each
/// waited for. Mean microseconds per launch + sync.
double bare_launch_us(int rounds) {
  cudaStream_t s = task_stream();
  for (int i = 0; i < 100; ++i) empty_kernel<<<1, 1, 0, s>>>();
  BENCH_CUDA_CHECK(cudaStreamSynchronize(s));
  const auto t0 = Clock::now();
  for (int i = 0; i < rounds; ++i) {
    empty_kernel<<<1, 1, 0, s>>>();
    BENCH_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  return seconds_since(t0) * 1e6 / rounds;
}
HERD_TASK(bare_launch_us);

/// One launch + sync: the unit of work of a CUDA task.
int launch_once(int x) {
  cudaStream_t s = task_stream();
  empty_kernel<<<1, 1, 0, s>>>();
  BENCH_CUDA_CHECK(cudaGetLastError());
  BENCH_CUDA_CHECK(cudaStreamSynchronize(s));
  return x;
}
HERD_TASK(launch_once);

int cpu_noop(int x) { return x; }
HERD_TASK(cpu_noop);

struct Bandwidth {
  std::string device;
  double bytes_per_rep = 0;   // bytes the triad reads and writes
  double kernel_s = 0;        // per triad, cudaEvent-timed, best of reps
  double kernel_mean_s = 0;   // per triad, mean
  double d2d_s = 0;           // per cudaMemcpy D2D of one array (reads + writes 2 x array)
  double peak_gbps = 0;       // 2 x memory clock x bus width (DDR), from the device attributes
  double task_s = 0;          // the whole task body: allocate, fill, time, free
  MSGPACK_DEFINE_MAP(device, bytes_per_rep, kernel_s, kernel_mean_s, d2d_s, peak_gbps, task_s);
};

Bandwidth triad_bandwidth(int mib, int reps) {
  const auto t0 = Clock::now();
  cudaStream_t s = task_stream();
  const int device = herd::this_task().gpus[0];
  Bandwidth r;
  cudaDeviceProp prop{};
  BENCH_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  r.device = prop.name;
  int clock_khz = 0, bus_bits = 0;
  BENCH_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device));
  BENCH_CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device));
  r.peak_gbps = 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;

  const size_t n = static_cast<size_t>(mib) * (1 << 20) / sizeof(float);
  float *a = nullptr, *b = nullptr, *c = nullptr;
  BENCH_CUDA_CHECK(cudaMalloc(&a, n * sizeof(float)));
  BENCH_CUDA_CHECK(cudaMalloc(&b, n * sizeof(float)));
  BENCH_CUDA_CHECK(cudaMalloc(&c, n * sizeof(float)));
  const int blocks = prop.multiProcessorCount * 8;
  fill_kernel<<<blocks, 256, 0, s>>>(b, 1.0f, n);
  fill_kernel<<<blocks, 256, 0, s>>>(c, 2.0f, n);
  cudaEvent_t start, stop;
  BENCH_CUDA_CHECK(cudaEventCreate(&start));
  BENCH_CUDA_CHECK(cudaEventCreate(&stop));
  triad_kernel<<<blocks, 256, 0, s>>>(a, b, c, 3.0f, n);  // warm-up
  double best = 1e30, total = 0;
  for (int i = 0; i < reps; ++i) {
    BENCH_CUDA_CHECK(cudaEventRecord(start, s));
    triad_kernel<<<blocks, 256, 0, s>>>(a, b, c, 3.0f, n);
    BENCH_CUDA_CHECK(cudaEventRecord(stop, s));
    BENCH_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    BENCH_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    best = std::min(best, ms / 1e3);
    total += ms / 1e3;
  }
  float check = 0;
  BENCH_CUDA_CHECK(cudaMemcpy(&check, a + n / 2, sizeof(float), cudaMemcpyDeviceToHost));
  if (check != 7.0f) throw std::runtime_error("triad computed " + std::to_string(check) + ", not 7");
  r.bytes_per_rep = 3.0 * static_cast<double>(n) * sizeof(float);
  r.kernel_s = best;
  r.kernel_mean_s = total / reps;

  double best_copy = 1e30;
  for (int i = 0; i < std::max(3, reps / 2); ++i) {
    BENCH_CUDA_CHECK(cudaEventRecord(start, s));
    BENCH_CUDA_CHECK(cudaMemcpyAsync(a, b, n * sizeof(float), cudaMemcpyDeviceToDevice, s));
    BENCH_CUDA_CHECK(cudaEventRecord(stop, s));
    BENCH_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    BENCH_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    best_copy = std::min(best_copy, ms / 1e3);
  }
  r.d2d_s = best_copy;
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
  for (float* p : {a, b, c}) (void)cudaFree(p);
  r.task_s = seconds_since(t0);
  return r;
}
HERD_TASK(triad_bandwidth);

struct AllreduceTimes {
  int ranks = 0;
  std::vector<double> bytes;
  std::vector<double> seconds;  // per all-reduce (each one waited for), mean over iterations
  MSGPACK_DEFINE_MAP(ranks, bytes, seconds);
};

AllreduceTimes nccl_allreduce_times(long max_bytes, int iters) {
  herd::Communicator& comm = herd::gang(herd::CollectiveBackend::nccl);
  cudaStream_t s = task_stream();
  (void)s;
  AllreduceTimes r;
  r.ranks = comm.size();
  float* buf = nullptr;
  BENCH_CUDA_CHECK(cudaMalloc(&buf, static_cast<size_t>(max_bytes)));
  BENCH_CUDA_CHECK(cudaMemset(buf, 0, static_cast<size_t>(max_bytes)));
  for (long bytes = 1 << 20; bytes <= max_bytes; bytes *= 4) {
    const size_t count = static_cast<size_t>(bytes) / sizeof(float);
    for (int i = 0; i < 5; ++i) comm.allreduce(buf, count, herd::ReduceOp::sum);
    comm.barrier();
    const auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) comm.allreduce(buf, count, herd::ReduceOp::sum);
    r.bytes.push_back(static_cast<double>(bytes));
    r.seconds.push_back(seconds_since(t0) / iters);
  }
  (void)cudaFree(buf);
  return r;
}
HERD_TASK(nccl_allreduce_times);

// ---- driver ----

namespace {

template <typename F>
double mean_round_trip_us(int rounds, F&& submit_and_wait) {
  for (int i = 0; i < std::min(rounds, 50); ++i) submit_and_wait(i);  // warm-up
  const auto t0 = Clock::now();
  for (int i = 0; i < rounds; ++i) submit_and_wait(i);
  return seconds_since(t0) * 1e6 / rounds;
}

int arg_int(int argc, char** argv, const char* flag, int fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], flag) == 0) return std::atoi(argv[i + 1]);
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  herd::init(argc, argv);
  bool small = false;
  for (int i = 1; i < argc; ++i) small = small || std::strcmp(argv[i], "--small") == 0;
  const int rounds = arg_int(argc, argv, "--rounds", small ? 200 : 2000);
  const int mib = arg_int(argc, argv, "--mib", small ? 64 : 1024);
  const int reps = arg_int(argc, argv, "--reps", small ? 5 : 20);
  const long max_mib = arg_int(argc, argv, "--max-mib", small ? 16 : 1024);

  int gpus = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&gpus); e != cudaSuccess || gpus == 0) {
    Line("gpu").str("skipped", std::string("no GPU (") + (e == cudaSuccess ? "0 devices" : cudaGetErrorString(e)) + ")");
    return 0;
  }
  try {
    {  // (a) and (b): one worker with one GPU
      herd::Client client{herd::LocalCluster{1}.gpus_per_worker(1)};
      const herd::TaskOptions on_gpu = herd::TaskOptions{}.gpus(1);
      const double bare = client.submit(on_gpu, bare_launch_us, rounds).result();
      const double task = mean_round_trip_us(rounds, [&](int i) { (void)client.submit(on_gpu, launch_once, i).result(); });
      const double cpu_task = mean_round_trip_us(rounds, [&](int i) { (void)client.submit(cpu_noop, i).result(); });
      Line("gpu_launch")
          .num("rounds", rounds)
          .num("bare_us", bare)
          .num("task_us", task)
          .num("cpu_task_us", cpu_task)
          .num("overhead_us", task - bare)
          .num("gpu_over_cpu_task_us", task - cpu_task);

      const auto t0 = Clock::now();
      const Bandwidth b = client.submit(on_gpu, triad_bandwidth, mib, reps).result();
      const double round_trip = seconds_since(t0);
      const double kernel_gbps = b.bytes_per_rep / b.kernel_s / 1e9;
      const double d2d_gbps = 2.0 * (b.bytes_per_rep / 3.0) / b.d2d_s / 1e9;
      Line("gpu_bandwidth")
          .str("device", b.device)
          .num("mib_per_array", mib)
          .num("reps", reps)
          .num("kernel_gbps", kernel_gbps)
          .num("kernel_mean_gbps", b.bytes_per_rep / b.kernel_mean_s / 1e9)
          .num("d2d_memcpy_gbps", d2d_gbps)
          .num("peak_gbps", b.peak_gbps)
          .num("fraction_of_peak", b.peak_gbps > 0 ? kernel_gbps / b.peak_gbps : 0)
          .num("fraction_of_d2d", kernel_gbps / d2d_gbps)
          .num("task_body_s", b.task_s)
          .num("task_round_trip_s", round_trip)
          .num("kernel_share_of_round_trip", b.kernel_mean_s * (reps + 1) / round_trip);
    }
    // (c) NCCL across GPUs, one rank per GPU.
    if (gpus < 2) {
      Line("gpu_allreduce").str("skipped", "needs more than one GPU").num("gpus", gpus);
    } else {
      herd::Client client{herd::LocalCluster{gpus}.gpus_per_worker(1)};
      auto futures = client.submit_gang(gpus, herd::TaskOptions{}.gpus(1), nccl_allreduce_times, max_mib << 20,
                                        small ? 5 : 20);
      const auto all = client.gather(futures);
      const AllreduceTimes& r = all.front();
      for (std::size_t i = 0; i < r.bytes.size(); ++i) {
        const double algbw = r.bytes[i] / r.seconds[i] / 1e9;
        Line("gpu_allreduce")
            .num("ranks", r.ranks)
            .num("bytes", r.bytes[i])
            .num("time_us", r.seconds[i] * 1e6)
            .num("algbw_gbps", algbw)
            .num("busbw_gbps", algbw * 2.0 * (r.ranks - 1) / r.ranks);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "herd_gpu_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
