// A small MPI program for the multi-node MPI tests (tests/multinode/test_multinode_mpi.cpp),
// built when CMake finds MPI (Debian: libopenmpi-dev): every rank contributes rank + 1 and a
// vector of `len` doubles, MPI_Allreduce sums them, and rank 0 prints one line per rank:
//
//   rank R of N on HOST sum S check C
//
// where S must be N(N+1)/2 and C is 1 when every element of the reduced vector is right.
// Arguments: [--len N] [--sleep-ms MS] (each rank sleeps before the reduction, so that a test
// can kill a node meanwhile) [--sleep-file PATH] (sleep only while PATH does not exist: the
// first run sleeps and creates it, a retry does not).
// The C API only: OpenMPI's C++ bindings do not compile warning-free.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  long len = 1024, sleep_ms = 0;
  std::string sleep_file;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--len") == 0) len = std::atol(argv[i + 1]);
    else if (std::strcmp(argv[i], "--sleep-ms") == 0) sleep_ms = std::atol(argv[i + 1]);
    else if (std::strcmp(argv[i], "--sleep-file") == 0) sleep_file = argv[i + 1];
  }
  if (!sleep_file.empty() && ::access(sleep_file.c_str(), F_OK) == 0) sleep_ms = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0 && !sleep_file.empty() && sleep_ms > 0) {
    if (FILE* f = std::fopen(sleep_file.c_str(), "w")) std::fclose(f);
  }
  if (sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  long mine = rank + 1, sum = 0;
  MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  std::vector<double> v(static_cast<std::size_t>(len)), out(static_cast<std::size_t>(len));
  for (long i = 0; i < len; ++i) v[static_cast<std::size_t>(i)] = static_cast<double>(rank + 1) * static_cast<double>(i % 97);
  MPI_Allreduce(v.data(), out.data(), static_cast<int>(len), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  int check = 1;
  const double ranks = static_cast<double>(size) * (size + 1) / 2.0;
  for (long i = 0; i < len; ++i) check &= out[static_cast<std::size_t>(i)] == ranks * static_cast<double>(i % 97);
  // Rank 0 prints every rank's line, in rank order.
  char line[512];
  std::snprintf(line, sizeof line, "rank %d of %d on %s sum %ld check %d", rank, size, host, sum, check);
  std::vector<char> all(static_cast<std::size_t>(size) * sizeof line);
  MPI_Gather(line, sizeof line, MPI_CHAR, all.data(), sizeof line, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    for (int r = 0; r < size; ++r) std::printf("%s\n", all.data() + static_cast<std::size_t>(r) * sizeof line);
    std::fflush(stdout);
  }
  MPI_Finalize();
  return check ? 0 : 1;
}
