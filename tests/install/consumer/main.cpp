#include <herd/herd.hpp>

#include <iostream>

int twice(int x) { return 2 * x; }
HERD_TASK(twice);

int main(int argc, char** argv) {
  herd::init(argc, argv);
  herd::Client client{herd::LocalCluster{1}};
  const int v = client.submit(twice, 21).result();
  std::cout << "consumer: " << v << '\n';
  return v == 42 ? 0 : 1;
}
