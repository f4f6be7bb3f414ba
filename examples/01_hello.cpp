// 01_hello: submit, map and gather on a local cluster of two worker processes.
//
//   submit(add, 1, 2) ──▶ x
//   submit(add, x, 10) ─▶ y          (x is an input of y: a graph edge)
//   map(square, 0..9) ──▶ gather ──▶ [0, 1, 4, ..., 81]
#include <herd/herd.hpp>

#include <iostream>
#include <numeric>
#include <vector>

int add(int a, int b) { return a + b; }
HERD_TASK(add);

long square(long v) { return v * v; }
HERD_TASK(square);

int main(int argc, char** argv) {
  herd::init(argc, argv);  // worker processes run this same program and stop here

  herd::Client client{herd::LocalCluster{2}};  // a scheduler and 2 workers on this machine

  herd::Future<int> x = client.submit(add, 1, 2);
  herd::Future<int> y = client.submit(add, x, 10);
  std::cout << "add(add(1, 2), 10) = " << y.result() << '\n';

  std::vector<long> values(10);
  std::iota(values.begin(), values.end(), 0);
  std::vector<long> squares = client.gather(client.map(square, values));
  std::cout << "squares:";
  for (long s : squares) std::cout << ' ' << s;
  std::cout << '\n';
  return (y.result() == 13 && squares[9] == 81) ? 0 : 1;
}
