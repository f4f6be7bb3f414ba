// 02_task_graph: a tree reduction. Leaves are computed in parallel; each inner node adds two
// futures, so the graph is built up front and results move between workers as needed.
//
//   leaf0 leaf1 leaf2 leaf3 ... leaf15        (map)
//      \  /      \  /
//      add       add      ...                 (8, then 4, 2, 1)
//         \     /
//           ...
//           root = sum of squares 0..15 = 1240
#include <herd/herd.hpp>

#include <iostream>
#include <numeric>
#include <vector>

long square(long v) { return v * v; }
HERD_TASK(square);

long add(long a, long b) { return a + b; }
HERD_TASK(add);

int main(int argc, char** argv) {
  herd::init(argc, argv);
  herd::Client client{herd::LocalCluster{3}};

  std::vector<long> xs(16);
  std::iota(xs.begin(), xs.end(), 0);
  std::vector<herd::Future<long>> level = client.map(square, xs);
  while (level.size() > 1) {
    std::vector<herd::Future<long>> next;
    for (std::size_t i = 0; i + 1 < level.size(); i += 2) next.push_back(client.submit(add, level[i], level[i + 1]));
    if (level.size() % 2 == 1) next.push_back(level.back());
    level = std::move(next);
  }
  const long total = level.front().result();
  std::cout << "sum of squares 0..15 = " << total << '\n';
  return total == 1240 ? 0 : 1;
}
