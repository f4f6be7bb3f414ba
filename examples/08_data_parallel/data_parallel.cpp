// 08_data_parallel: data-parallel training of a logistic regression with a gang.
//
// A gang of N ranks (one per worker) trains one model together. Every rank holds a shard of
// the data set, computes the gradient of the loss on it, and all-reduces the gradients, so
// every rank applies the same update and the weights stay identical everywhere. The data set
// is synthetic and deterministic: each rank builds its own shard, nothing is shipped.
//
//   rank 0: shard 0 ─ forward/backward ─┐                  ┌─ w -= lr * g / N
//   rank 1: shard 1 ─ forward/backward ─┼─ all-reduce(sum) ┼─ w -= lr * g / N     (x epochs)
//   ...                                 ┘                  └─ ...
//
// By default the ranks run on the CPU and all-reduce over the CPU ring (any machine). With
// --gpu each rank holds a GPU: the forward and backward pass are CUDA kernels on the task's
// own stream (logreg_cuda.cu) and the gradients are all-reduced on the device with NCCL.
// At the end the program trains the same model in one process on the whole data set and
// checks that both give the same weights (to floating-point tolerance): it exits 1 if not.
//
//   08_data_parallel [--ranks N] [--epochs E] [--samples S] [--gpu]
#include <herd/herd.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <string>
#include <vector>

#ifdef HERD_EXAMPLE_CUDA
#include "logreg_cuda.hpp"
#endif

namespace {

struct Config {
  int samples = 8192;
  int features = 8;
  int epochs = 25;
  double learning_rate = 1.0;
  bool gpu = false;  // forward/backward on the rank's GPU (needs TaskOptions::gpus(1))
  MSGPACK_DEFINE_MAP(samples, features, epochs, learning_rate, gpu);
};

struct RankResult {
  int rank = 0;
  std::string backend;        // "cpu_ring" or "nccl"
  std::string device;         // "cpu" or the GPU's model
  std::vector<double> losses;  // mean loss per epoch, before that epoch's update
  std::vector<double> weights;  // features, then the bias
  MSGPACK_DEFINE_MAP(rank, backend, device, losses, weights);
};

// splitmix64 of (sample, column): the same data on every rank, whatever the sharding.
double uniform(std::uint64_t i, std::uint64_t j) {
  std::uint64_t z = i * 0x9E3779B97F4A7C15ULL + j * 0xBF58476D1CE4E5B9ULL + 0x94D049BB133111EBULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53 * 2.0 - 1.0;  // [-1, 1)
}

/// Samples [begin, end): x row-major (features per row), y in {0, 1} from a hidden linear rule
/// plus noise (so the classes overlap and the loss stays above zero).
void make_shard(const Config& c, int begin, int end, std::vector<double>& x, std::vector<double>& y) {
  x.assign(static_cast<std::size_t>(end - begin) * c.features, 0.0);
  y.assign(static_cast<std::size_t>(end - begin), 0.0);
  for (int i = begin; i < end; ++i) {
    double score = 0.3;
    for (int j = 0; j < c.features; ++j) {
      const double v = uniform(i, j);
      x[static_cast<std::size_t>(i - begin) * c.features + j] = v;
      score += v * (j % 2 ? -1.0 : 1.0) * (1.0 + 0.25 * j);
    }
    y[i - begin] = score + 0.8 * uniform(i, 1000) > 0 ? 1.0 : 0.0;
  }
}

/// Sums over the samples: d(loss)/dw (features), d(loss)/db, loss. The same arithmetic as the
/// kernel in logreg_cuda.cu.
std::vector<double> gradient_sums(const std::vector<double>& x, const std::vector<double>& y, int features,
                                  const std::vector<double>& w) {
  std::vector<double> g(static_cast<std::size_t>(features) + 2, 0.0);
  for (std::size_t i = 0; i < y.size(); ++i) {
    const double* xi = &x[i * features];
    double z = w[features];
    for (int j = 0; j < features; ++j) z += w[j] * xi[j];
    const double residual = 1.0 / (1.0 + std::exp(-z)) - y[i];
    for (int j = 0; j < features; ++j) g[j] += residual * xi[j];
    g[features] += residual;
    g[features + 1] += std::max(z, 0.0) + std::log1p(std::exp(-std::abs(z))) - y[i] * z;
  }
  return g;
}

/// w -= lr * mean gradient; returns the mean loss.
double apply(const Config& c, const std::vector<double>& sums, std::vector<double>& w) {
  for (int j = 0; j <= c.features; ++j) w[j] -= c.learning_rate * sums[j] / c.samples;
  return sums[c.features + 1] / c.samples;
}

/// One rank of the gang: its shard, then `epochs` steps of full-batch gradient descent with
/// the gradients all-reduced over the gang.
RankResult train_rank(Config c) {
  herd::Communicator& comm = herd::gang();  // NCCL when every rank holds a GPU, else the CPU ring
  const int rank = comm.rank(), size = comm.size();
  const int begin = static_cast<int>(static_cast<long>(c.samples) * rank / size);
  const int end = static_cast<int>(static_cast<long>(c.samples) * (rank + 1) / size);
  std::vector<double> x, y;
  make_shard(c, begin, end, x, y);

  RankResult r;
  r.rank = rank;
  r.backend = herd::to_string(comm.backend());
  r.device = "cpu";
  std::vector<double> w(static_cast<std::size_t>(c.features) + 1, 0.0);
  std::vector<double> sums(static_cast<std::size_t>(c.features) + 2, 0.0);

  const herd::TaskInfo& task = herd::this_task();
#ifdef HERD_EXAMPLE_CUDA
  if (c.gpu && !task.gpus.empty()) {
    logreg_cuda::Shard shard(x, y, c.features, task.gpus[0], task.cuda_stream);
    r.device = shard.device_name();
    for (int epoch = 0; epoch < c.epochs; ++epoch) {
      double* device_sums = shard.gradient(w);
      if (comm.backend() == herd::CollectiveBackend::nccl) {
        comm.allreduce(device_sums, sums.size(), herd::ReduceOp::sum);  // on the device, same stream
        shard.download(device_sums, sums);
      } else {
        shard.download(device_sums, sums);
        comm.allreduce(sums, herd::ReduceOp::sum);
      }
      r.losses.push_back(apply(c, sums, w));
    }
    r.weights = w;
    return r;
  }
#endif
  if (c.gpu) throw std::runtime_error("--gpu: this rank holds no GPU (or the example was built without CUDA)");
  (void)task;
  for (int epoch = 0; epoch < c.epochs; ++epoch) {
    sums = gradient_sums(x, y, c.features, w);
    comm.allreduce(sums, herd::ReduceOp::sum);
    r.losses.push_back(apply(c, sums, w));
  }
  r.weights = w;
  return r;
}
HERD_TASK(train_rank);

/// The reference: the same training in this process, on the whole data set at once.
std::vector<double> train_single_process(const Config& c, std::vector<double>& losses) {
  std::vector<double> x, y;
  make_shard(c, 0, c.samples, x, y);
  std::vector<double> w(static_cast<std::size_t>(c.features) + 1, 0.0);
  for (int epoch = 0; epoch < c.epochs; ++epoch) losses.push_back(apply(c, gradient_sums(x, y, c.features, w), w));
  return w;
}

int int_arg(const char* flag, const char* value) {
  if (!value) {
    std::cerr << flag << " needs a value\n";
    std::exit(2);
  }
  return std::atoi(value);
}

}  // namespace

int main(int argc, char** argv) {
  herd::init(argc, argv);
  Config c;
  int ranks = 2;
  [[maybe_unused]] bool ranks_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--ranks") {
      ranks = int_arg("--ranks", i + 1 < argc ? argv[++i] : nullptr);
      ranks_given = true;
    } else if (a == "--epochs") {
      c.epochs = int_arg("--epochs", i + 1 < argc ? argv[++i] : nullptr);
    } else if (a == "--samples") {
      c.samples = int_arg("--samples", i + 1 < argc ? argv[++i] : nullptr);
    } else if (a == "--gpu") {
      c.gpu = true;
    } else {
      std::cerr << "usage: " << argv[0] << " [--ranks N] [--epochs E] [--samples S] [--gpu]\n";
      return 2;
    }
  }
  if (c.gpu) {
#ifdef HERD_EXAMPLE_CUDA
    const int gpus = logreg_cuda::device_count();
    if (gpus == 0) {
      std::cerr << "--gpu: no GPU here\n";
      return 2;
    }
    if (!ranks_given) ranks = gpus;  // one rank per GPU
#else
    std::cerr << "--gpu: this example was built without CUDA\n";
    return 2;
#endif
  }
  if (ranks < 1 || c.epochs < 1 || c.samples < ranks) {
    std::cerr << "need --ranks >= 1, --epochs >= 1 and --samples >= ranks\n";
    return 2;
  }

  // One worker per rank; with --gpu each gets its own GPU (CUDA_VISIBLE_DEVICES slice).
  herd::LocalCluster cluster{ranks};
  if (c.gpu) cluster.gpus_per_worker(1);
  herd::Client client{std::move(cluster)};
  herd::TaskOptions options;
  if (c.gpu) options.gpus(1);
  const std::vector<RankResult> results = client.gather(client.submit_gang(ranks, options, train_rank, c));

  const RankResult& r0 = results.front();
  std::cout << ranks << " ranks, " << c.samples << " samples, all-reduce over " << r0.backend << ", on "
            << r0.device << "\n";
  std::cout << std::setprecision(6) << std::fixed;
  for (std::size_t e = 0; e < r0.losses.size(); ++e) std::cout << "epoch " << e + 1 << "  loss " << r0.losses[e] << "\n";

  // Every rank applied the same updates, and training in one process gives the same model.
  constexpr double kTolerance = 1e-9;
  double rank_spread = 0;
  for (const auto& r : results)
    for (std::size_t j = 0; j < r.weights.size(); ++j)
      rank_spread = std::max(rank_spread, std::abs(r.weights[j] - r0.weights[j]));
  std::vector<double> single_losses;
  const std::vector<double> single = train_single_process(c, single_losses);
  double max_dw = 0;
  for (std::size_t j = 0; j < single.size(); ++j) max_dw = std::max(max_dw, std::abs(single[j] - r0.weights[j]));
  std::cout << std::scientific << std::setprecision(3) << "single-process training: final loss " << single_losses.back()
            << ", max |dw| = " << max_dw << " (ranks differ by at most " << rank_spread << ")\n";
  const bool ok = max_dw <= kTolerance && rank_spread <= kTolerance && r0.losses.back() < r0.losses.front();
  std::cout << (ok ? "OK" : "MISMATCH") << ": data-parallel and single-process training agree within " << kTolerance
            << "\n";
  return ok ? 0 : 1;
}
