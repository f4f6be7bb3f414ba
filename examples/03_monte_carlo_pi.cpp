// 03_monte_carlo_pi: estimate pi with map. Each task throws darts with its own seed and
// returns how many landed inside the unit circle; the client adds them up.
#include <herd/herd.hpp>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <numeric>
#include <random>
#include <vector>

std::uint64_t darts_inside(std::uint64_t seed, std::uint64_t n) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::uint64_t inside = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    const double x = u(gen), y = u(gen);
    inside += (x * x + y * y <= 1.0);
  }
  return inside;
}
HERD_TASK(darts_inside);

int main(int argc, char** argv) {
  herd::init(argc, argv);
  herd::Client client{herd::LocalCluster{2}};

  constexpr std::uint64_t kTasks = 64, kPerTask = 200000;
  std::vector<std::uint64_t> seeds(kTasks), counts(kTasks, kPerTask);
  std::iota(seeds.begin(), seeds.end(), 1);
  const auto inside = client.gather(client.map(darts_inside, seeds, counts));
  const double pi = 4.0 * static_cast<double>(std::accumulate(inside.begin(), inside.end(), std::uint64_t{0})) /
                    static_cast<double>(kTasks * kPerTask);
  std::cout << "pi ~= " << pi << " from " << kTasks * kPerTask << " darts in " << kTasks << " tasks\n";
  return std::abs(pi - M_PI) < 0.01 ? 0 : 1;
}
