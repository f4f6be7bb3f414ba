// CUDA tasks on a LocalCluster (label gpu; skipped with exit code 77 where no GPU is present):
// a task that asks for gpus(1) gets a device and a stream of its own and computes the right
// result, and a worker uses exactly the GPUs CUDA_VISIBLE_DEVICES gives it.
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <herd/herd.hpp>

#include "cuda_kernels.hpp"
#include "gpu/gpu.hpp"

namespace {

std::string pci_bus_id(int ordinal) {
  char id[32] = {};
  if (cudaDeviceGetPCIBusId(id, sizeof id, ordinal) != cudaSuccess) return "?";
  return id;
}

int visible_devices() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

}  // namespace

// ---- tasks ----
std::vector<float> saxpy_task(float a, int n) {
  const herd::TaskInfo& t = herd::this_task();
  if (t.gpus.size() != 1) throw std::runtime_error("expected one GPU, got " + std::to_string(t.gpus.size()));
  if (t.cuda_stream == nullptr) throw std::runtime_error("a GPU task without a CUDA stream");
  std::vector<float> x(static_cast<std::size_t>(n)), y(static_cast<std::size_t>(n), 1.0f);
  for (int i = 0; i < n; ++i) x[static_cast<std::size_t>(i)] = static_cast<float>(i);
  return gpu_test::saxpy(a, x, y, t.gpus[0], t.cuda_stream);
}
HERD_TASK(saxpy_task);

struct SeenDevices {
  std::vector<int> gpus;        // this_task().gpus
  int visible = 0;              // devices CUDA sees in the worker process
  std::string pci_bus_id;       // of the task's device
  std::string cuda_visible_devices;
  MSGPACK_DEFINE_MAP(gpus, visible, pci_bus_id, cuda_visible_devices);
};
SeenDevices seen_devices() {
  SeenDevices s;
  s.gpus = herd::this_task().gpus;
  s.visible = visible_devices();
  if (!s.gpus.empty()) s.pci_bus_id = pci_bus_id(s.gpus[0]);
  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  s.cuda_visible_devices = cvd ? cvd : "(unset)";
  return s;
}
HERD_TASK(seen_devices);

double gpu_resource(const herd::ClusterStatus& status, std::size_t i) {
  const auto& r = status.workers.at(i).resources;
  const auto it = r.find("gpu");
  return it == r.end() ? 0.0 : it->second;
}

// ---- tests ----

TEST_CASE("Gpu.CudaTask.SaxpyIsCorrect" * doctest::timeout(120)) {
  herd::Client client{herd::LocalCluster{1}.gpus_per_worker(1)};
  constexpr int n = 1 << 20;
  const std::vector<float> out = client.submit(herd::TaskOptions{}.gpus(1), saxpy_task, 2.0f, n).result();
  REQUIRE(out.size() == static_cast<std::size_t>(n));
  int wrong = 0;
  for (int i = 0; i < n; ++i) wrong += out[static_cast<std::size_t>(i)] != 2.0f * static_cast<float>(i) + 1.0f;
  CHECK(wrong == 0);
}

TEST_CASE("Gpu.CudaTask.TasksShareTheWorkersGpuInTurn" * doctest::timeout(120)) {
  // Two slots, one GPU: gpus(1) tasks queue for it, and each still gets a stream of its own.
  herd::Client client{herd::LocalCluster{1, 2}.gpus_per_worker(1)};
  std::vector<herd::Future<std::vector<float>>> futures;
  for (int k = 0; k < 6; ++k) futures.push_back(client.submit(herd::TaskOptions{}.gpus(1), saxpy_task, float(k), 4096));
  for (int k = 0; k < 6; ++k) {
    const auto out = futures[static_cast<std::size_t>(k)].result();
    REQUIRE(out.size() == 4096u);
    CHECK(out[4095] == float(k) * 4095.0f + 1.0f);
  }
}

TEST_CASE("Gpu.Discovery.WorkerHonoursCudaVisibleDevices" * doctest::timeout(120)) {
  // The last GPU this process may use, named as the environment names it.
  const auto devices = herd::gpu::discover();
  REQUIRE(!devices.empty());
  const herd::gpu::Device& last = devices.back();
  const std::string expected_bus = pci_bus_id(last.ordinal);

  herd::Client client{herd::LocalCluster{1}.env("CUDA_VISIBLE_DEVICES", last.id)};
  const herd::ClusterStatus status = client.status();
  REQUIRE(status.workers.size() == 1);
  CHECK(gpu_resource(status, 0) == 1.0);  // exactly one advertised, whatever the node has

  const SeenDevices seen = client.submit(herd::TaskOptions{}.gpus(1), seen_devices).result();
  CHECK(seen.cuda_visible_devices == last.id);
  CHECK(seen.visible == 1);
  CHECK(seen.gpus == std::vector<int>{0});
  CHECK(seen.pci_bus_id == expected_bus);  // and it is that device, not device 0 of the node
}

TEST_CASE("Gpu.Discovery.EmptyCudaVisibleDevicesMeansNoGpu" * doctest::timeout(120)) {
  herd::Client client{herd::LocalCluster{1}.env("CUDA_VISIBLE_DEVICES", "")};
  const herd::ClusterStatus status = client.status();
  REQUIRE(status.workers.size() == 1);
  CHECK(gpu_resource(status, 0) == 0.0);
  // A CPU task still runs there and sees no device.
  const SeenDevices seen = client.submit(seen_devices).result();
  CHECK(seen.gpus.empty());
  CHECK(seen.visible == 0);
}

TEST_CASE("Gpu.LocalCluster.WorkersNeverShareAGpu" * doctest::timeout(120)) {
  const int n = static_cast<int>(herd::gpu::discover().size());
  REQUIRE(n >= 1);
  const int workers = std::min(n, 4) + 1;  // one more worker than GPUs handed out
  herd::Client client{herd::LocalCluster{workers}.gpus_per_worker(1)};
  const herd::ClusterStatus status = client.status();
  REQUIRE(status.workers.size() == static_cast<std::size_t>(workers));
  double total = 0;
  for (std::size_t i = 0; i < status.workers.size(); ++i) {
    CHECK(gpu_resource(status, i) <= 1.0);
    total += gpu_resource(status, i);
  }
  CHECK(total == doctest::Approx(std::min(n, workers)));

  // Every gpus(1) task, wherever it runs, is on a worker that sees exactly one device; the
  // devices of different workers differ.
  std::vector<herd::Future<SeenDevices>> futures;
  for (int k = 0; k < 4 * workers; ++k) futures.push_back(client.submit(herd::TaskOptions{}.gpus(1), seen_devices));
  std::map<std::string, std::string> bus_of_slice;  // CUDA_VISIBLE_DEVICES -> PCI bus id
  for (auto& f : futures) {
    const SeenDevices s = f.result();
    CHECK(s.visible == 1);
    CHECK(s.gpus == std::vector<int>{0});
    bus_of_slice[s.cuda_visible_devices] = s.pci_bus_id;
  }
  std::set<std::string> buses;
  for (const auto& [slice, bus] : bus_of_slice) buses.insert(bus);
  CHECK(buses.size() == bus_of_slice.size());
}
