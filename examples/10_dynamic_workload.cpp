// 10_dynamic_workload: work whose size is found while it runs, two ways at once.
//
// The client counts primes range by range and decides after each result whether to submit
// another range: as_completed grows as it goes (Dask's `ac.add(...)`), until the count passes
// a target. Each range task fans out its own chunk tasks through herd::get_client(), waits for
// them with herd::secede() (so the chunks can use its slot: with two one-slot workers and two
// range tasks, nothing else could run them), sums them as they complete, and rejoin()s.
#include <herd/herd.hpp>

#include <cstdint>
#include <iostream>
#include <vector>

namespace {
bool is_prime(std::int64_t n) {
  if (n < 2) return false;
  for (std::int64_t d = 2; d * d <= n; ++d) {
    if (n % d == 0) return false;
  }
  return true;
}
}  // namespace

/// Primes in [lo, hi): a leaf.
std::int64_t primes_in_chunk(std::int64_t lo, std::int64_t hi) {
  std::int64_t n = 0;
  for (std::int64_t i = lo; i < hi; ++i) n += is_prime(i);
  return n;
}
HERD_TASK(primes_in_chunk);

/// Primes in [lo, hi): fans out chunks of 10,000 from inside the task.
std::int64_t primes_in_range(std::int64_t lo, std::int64_t hi) {
  herd::Client& client = herd::get_client();
  std::vector<herd::Future<std::int64_t>> chunks;
  for (std::int64_t a = lo; a < hi; a += 10000) chunks.push_back(client.submit(primes_in_chunk, a, std::min(hi, a + 10000)));
  herd::secede();  // waiting: the chunks may have this slot
  std::int64_t total = 0;
  for (auto& [f, n] : client.as_completed(chunks).with_results()) total += n;
  herd::rejoin();
  return total;
}
HERD_TASK(primes_in_range);

int main(int argc, char** argv) {
  herd::init(argc, argv);
  herd::Client client{herd::LocalCluster{2}};  // two workers of one slot each

  constexpr std::int64_t kRange = 100000, kTarget = 30000;
  std::int64_t next = 0, total = 0, ranges = 0;
  auto submit_next = [&] {
    ++ranges;
    next += kRange;
    return client.submit(primes_in_range, next - kRange, next);
  };
  auto ac = client.as_completed(std::vector<herd::Future<std::int64_t>>{submit_next(), submit_next()});
  for (const herd::Future<std::int64_t>& f : ac) {
    total += f.result();
    if (total < kTarget) ac.add(submit_next());  // not there yet: one more range
  }
  std::cout << total << " primes below " << next << " (" << ranges << " ranges, each fanned out into "
            << kRange / 10000 << " chunks by its task)\n";
  // Three results never reach the target and four always do: five ranges, pi(500000) = 41538.
  return total == 41538 && ranges == 5 ? 0 : 1;
}
