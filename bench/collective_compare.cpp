// herd_collective_compare: herd's CPU ring (src/collective/ring.cpp, what a gang without NCCL
// uses) beside the libraries a user would reach for instead, in ONE MPI job: the same ranks on
// the same hosts, the same float32 buffers, one library after the other.
//
//   herd_ring        herd::collective::make_ring, records sealed (AES-256-GCM), herd's default
//   herd_ring_plain  the same ring with encryption off at both ends (HERD_RING_ENCRYPTION=off)
//   gloo             Gloo's AllreduceRingChunked over its TCP transport (libgloo-dev),
//                    rendezvous through a FileStore in --store (a directory every rank sees)
//   mpi              OpenMPI's MPI_Allreduce (its TCP BTL between hosts)
//
// Launch it with mpirun, one rank per host (inside an allocation, or as a herd multi-node task:
// bench/README.md), e.g.
//
//   mpirun --hostfile "$HERD_NODE_FILE" -np 3 build/bench/herd_collective_compare --mib 8,256
//
// Each figure: `iterations` sum all-reduces of `bytes`, each started after an MPI barrier and
// timed on every rank; the slowest rank's time of each iteration, then the median. Rank 0 prints
// one JSON line per (system, size): algbw = bytes / time, busbw = algbw * 2(n-1)/n (the
// nccl-tests definitions). Every result is checked (each rank contributes rank + 1).
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

// The C API only: OpenMPI's C++ bindings do not compile warning-free.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <gloo/allreduce_ring_chunked.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <herd/collective.hpp>

#include "collective/ring.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::vector<std::size_t> bytes{std::size_t{8} << 20, std::size_t{256} << 20};
  std::string iface;  // "" = the first interface that is up, not loopback, with an IPv4 address
  std::string store = ".herd-compare-store";
  std::vector<std::string> systems{"herd_ring", "herd_ring_plain", "gloo", "mpi"};
  int iterations = 0;  // 0 = by size
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    const std::size_t end = std::min(s.find(sep, start), s.size());
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "herd_collective_compare: %s\n"
               "usage: herd_collective_compare [--mib 8,256] [--small] [--iterations N] [--iface eth0]\n"
               "                               [--store DIR] [--systems herd_ring,herd_ring_plain,gloo,mpi]\n",
               why.c_str());
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--mib") {
      o.bytes.clear();
      for (const auto& m : split(value(), ',')) o.bytes.push_back(static_cast<std::size_t>(std::stod(m) * (1 << 20)));
    } else if (a == "--small") {
      o.bytes = {std::size_t{1} << 20};
      o.iterations = 3;
    } else if (a == "--iterations") {
      o.iterations = std::stoi(value());
    } else if (a == "--iface") {
      o.iface = value();
    } else if (a == "--store") {
      o.store = value();
    } else if (a == "--systems") {
      o.systems = split(value(), ',');
    } else {
      usage("unknown argument '" + a + "'");
    }
  }
  for (const auto& s : o.systems) {
    if (s != "herd_ring" && s != "herd_ring_plain" && s != "gloo" && s != "mpi") usage("unknown system '" + s + "'");
  }
  return o;
}

/// The IPv4 address of `iface` (or of the first interface that is up and not loopback, else
/// loopback's).
std::string local_address(const std::string& iface) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) throw std::runtime_error("getifaddrs failed");
  std::string found;
  for (ifaddrs* a = list; a != nullptr && found.empty(); a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET || (a->ifa_flags & IFF_UP) == 0) continue;
    if (iface.empty() ? (a->ifa_flags & IFF_LOOPBACK) != 0 : iface != a->ifa_name) continue;
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof text);
    found = text;
  }
  ::freeifaddrs(list);
  if (found.empty() && iface.empty()) return "127.0.0.1";  // a machine with loopback only: one host
  if (found.empty()) throw std::runtime_error("no IPv4 address on " + (iface.empty() ? std::string("any interface") : iface));
  return found;
}

/// Every rank's `mine`, by rank.
std::vector<std::string> allgather(const std::string& mine, int size) {
  constexpr int kLen = 256;
  char buf[kLen] = {};
  std::snprintf(buf, sizeof buf, "%s", mine.c_str());
  std::vector<char> all(static_cast<std::size_t>(size) * kLen);
  MPI_Allgather(buf, kLen, MPI_CHAR, all.data(), kLen, MPI_CHAR, MPI_COMM_WORLD);
  std::vector<std::string> out;
  for (int r = 0; r < size; ++r) out.emplace_back(all.data() + static_cast<std::size_t>(r) * kLen);
  return out;
}

int iterations_for(std::size_t bytes, const Options& o) {
  if (o.iterations > 0) return o.iterations;
  return static_cast<int>(std::clamp<std::size_t>((std::size_t{512} << 20) / bytes, 5, 50));
}

/// Times `op` (one all-reduce of `v`, refilled with rank + 1 before each) `iters` times: the
/// median over iterations of the slowest rank's time. Checks every result.
double time_allreduce(std::vector<float>& v, int rank, int size, int iters, const std::string& system,
                      const std::function<void()>& op) {
  const float want = static_cast<float>(size) * (size + 1) / 2.0f;
  auto check = [&] {
    for (std::size_t i : {std::size_t{0}, v.size() / 2, v.size() - 1}) {
      if (v[i] != want) {
        throw std::runtime_error(system + ": wrong sum at " + std::to_string(i) + ": " + std::to_string(v[i]) +
                                 " (want " + std::to_string(want) + ")");
      }
    }
  };
  std::fill(v.begin(), v.end(), static_cast<float>(rank + 1));
  op();  // warm-up: page faults, socket buffers, connections
  check();
  std::vector<double> slowest;
  for (int i = 0; i < iters; ++i) {
    std::fill(v.begin(), v.end(), static_cast<float>(rank + 1));
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = Clock::now();
    op();
    double mine = std::chrono::duration<double>(Clock::now() - t0).count(), max = 0;
    check();
    MPI_Allreduce(&mine, &max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    slowest.push_back(max);
  }
  std::sort(slowest.begin(), slowest.end());
  return slowest[slowest.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const Options o = parse(argc, argv);
  int status = 0;
  try {
    const std::string address = local_address(o.iface);
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    const std::vector<std::string> hosts = allgather(host, size);
    std::string host_list;
    for (const auto& h : hosts) host_list += (host_list.empty() ? "" : ",") + h;

    // Gloo: a full mesh of TCP pairs, rendezvous through files every rank sees.
    std::shared_ptr<gloo::rendezvous::Context> gloo_context;
    std::shared_ptr<gloo::transport::Device> gloo_device;
    if (std::find(o.systems.begin(), o.systems.end(), "gloo") != o.systems.end()) {
      std::filesystem::create_directories(o.store);
      unsigned prefix = 0;
      if (rank == 0) prefix = std::random_device{}();
      MPI_Bcast(&prefix, 1, MPI_UNSIGNED, 0, MPI_COMM_WORLD);
      gloo::transport::tcp::attr attr;
      attr.hostname = address;
      gloo_device = gloo::transport::tcp::CreateDevice(attr);
      gloo::rendezvous::FileStore file_store(o.store);
      gloo::rendezvous::PrefixStore store("herd-compare-" + std::to_string(prefix), file_store);
      gloo_context = std::make_shared<gloo::rendezvous::Context>(rank, size);
      gloo_context->connectFullMesh(store, gloo_device);
    }

    for (const std::string& system : o.systems) {
      // herd's ring: listeners on this host's address, addresses exchanged over MPI (a gang
      // does it through the scheduler), then the ring connects.
      std::unique_ptr<herd::Communicator> ring;
      if (system == "herd_ring" || system == "herd_ring_plain") {
        herd::collective::RingListener listener(address);
        herd::collective::RingSetup setup;
        setup.rank = rank;
        setup.size = size;
        setup.addresses = allgather(listener.address(), size);
        setup.token = "herd-collective-compare";
        setup.encrypt = system == "herd_ring";
        ring = std::make_unique<herd::Communicator>(rank, size, herd::collective::make_ring(setup, std::move(listener)));
      }
      for (std::size_t bytes : o.bytes) {
        std::vector<float> v(bytes / sizeof(float));
        const int iters = iterations_for(bytes, o);
        std::function<void()> op;
        std::unique_ptr<gloo::AllreduceRingChunked<float>> gloo_op;
        if (ring) {
          op = [&] { ring->allreduce(v); };
        } else if (system == "gloo") {
          gloo_op = std::make_unique<gloo::AllreduceRingChunked<float>>(gloo_context, std::vector<float*>{v.data()},
                                                                        static_cast<int>(v.size()));
          op = [&] { gloo_op->run(); };
        } else {
          op = [&] { MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); };
        }
        const double secs = time_allreduce(v, rank, size, iters, system, op);
        if (rank == 0) {
          const double algbw = static_cast<double>(bytes) / secs / 1e6;
          std::printf("{\"bench\":\"collective_compare\",\"system\":\"%s\",\"ranks\":%d,\"hosts\":\"%s\",\"bytes\":%zu,"
                      "\"iterations\":%d,\"time_ms\":%.3f,\"algbw_MBps\":%.1f,\"busbw_MBps\":%.1f}\n",
                      system.c_str(), size, host_list.c_str(), bytes, iters, secs * 1e3, algbw,
                      algbw * 2.0 * (size - 1) / size);
          std::fflush(stdout);
        }
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0 && gloo_context) {
      std::error_code ec;
      for (const auto& e : std::filesystem::directory_iterator(o.store, ec)) std::filesystem::remove(e.path(), ec);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "herd_collective_compare: rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    status = 1;
  }
  MPI_Finalize();
  return status;
}
