// GPU discovery from the environment (gpu::discover with a fake getenv): what Slurm and CUDA
// say a process may use, never every GPU on the node. Pure logic: no GPU, no CUDA needed.
#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "gpu/gpu.hpp"

namespace {

using Env = std::map<std::string, std::string>;

std::vector<std::string> ids_of(const Env& env) {
  const auto devices = herd::gpu::discover([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
  std::vector<std::string> ids;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    CHECK(devices[i].ordinal == static_cast<int>(i));  // ordinals are 0..n-1 inside the process
    ids.push_back(devices[i].id);
  }
  return ids;
}

using Ids = std::vector<std::string>;

}  // namespace

TEST_CASE("Gpu.Discovery.CudaVisibleDevicesIndices" * doctest::timeout(10)) {
  CHECK(ids_of({{"CUDA_VISIBLE_DEVICES", "1,3"}}) == Ids{"1", "3"});
  CHECK(ids_of({{"CUDA_VISIBLE_DEVICES", "2"}}) == Ids{"2"});
  CHECK(ids_of({{"CUDA_VISIBLE_DEVICES", " 0 , 1 "}}) == Ids{"0", "1"});
}

TEST_CASE("Gpu.Discovery.CudaVisibleDevicesUuids" * doctest::timeout(10)) {
  CHECK(ids_of({{"CUDA_VISIBLE_DEVICES", "GPU-8f1c2d3e-aaaa-bbbb-cccc-0123456789ab,GPU-77"}}) ==
        Ids{"GPU-8f1c2d3e-aaaa-bbbb-cccc-0123456789ab", "GPU-77"});
  CHECK(ids_of({{"CUDA_VISIBLE_DEVICES", "MIG-1234abcd"}}) == Ids{"MIG-1234abcd"});
}

TEST_CASE("Gpu.Discovery.CudaVisibleDevicesNone" * doctest::timeout(10)) {
  CHECK(ids_of({{"CUDA_VISIBLE_DEVICES", ""}}).empty());
  CHECK(ids_of({{"CUDA_VISIBLE_DEVICES", "-1"}}).empty());
  CHECK(ids_of({{"CUDA_VISIBLE_DEVICES", "NoDevFiles"}}).empty());
  // As CUDA does: the entries before the first invalid one, nothing after it.
  CHECK(ids_of({{"CUDA_VISIBLE_DEVICES", "0,-1,2"}}) == Ids{"0"});
}

TEST_CASE("Gpu.Discovery.CudaVisibleDevicesWinsOverSlurm" * doctest::timeout(10)) {
  // Slurm with device cgroups sets CUDA_VISIBLE_DEVICES itself (0..n-1 inside the job).
  CHECK(ids_of({{"SLURM_JOB_ID", "42"}, {"CUDA_VISIBLE_DEVICES", "0"}, {"SLURM_JOB_GPUS", "2,3"}}) == Ids{"0"});
  CHECK(ids_of({{"SLURM_JOB_ID", "42"}, {"CUDA_VISIBLE_DEVICES", ""}, {"SLURM_JOB_GPUS", "2,3"}}).empty());
}

TEST_CASE("Gpu.Discovery.SlurmVariablesInOrder" * doctest::timeout(10)) {
  CHECK(ids_of({{"SLURM_JOB_ID", "42"}, {"SLURM_STEP_GPUS", "1"}, {"SLURM_JOB_GPUS", "1,2"},
                {"GPU_DEVICE_ORDINAL", "0,1,2,3"}}) == Ids{"1"});
  CHECK(ids_of({{"SLURM_JOB_ID", "42"}, {"SLURM_JOB_GPUS", "1,2"}, {"GPU_DEVICE_ORDINAL", "0,1,2,3"}}) ==
        Ids{"1", "2"});
  CHECK(ids_of({{"SLURM_JOB_ID", "42"}, {"GPU_DEVICE_ORDINAL", "3"}}) == Ids{"3"});
  CHECK(ids_of({{"SLURM_JOBID", "42"}, {"SLURM_JOB_GPUS", "0"}}) == Ids{"0"});  // old spelling
  CHECK(ids_of({{"SLURM_JOB_ID", "42"}, {"SLURM_STEP_GPUS", ""}, {"SLURM_JOB_GPUS", "5"}}) == Ids{"5"});
  CHECK(ids_of({{"SLURM_JOB_ID", "42"}, {"SLURM_JOB_GPUS", "0-2"}}) == Ids{"0", "1", "2"});
}

TEST_CASE("Gpu.Discovery.SlurmWithoutGpusHasNone" * doctest::timeout(10)) {
  // A job that was given no GPUs must not take the node's: another job may own them.
  CHECK(ids_of({{"SLURM_JOB_ID", "42"}}).empty());
  CHECK(ids_of({{"SLURM_JOB_ID", "42"}, {"SLURM_CPUS_ON_NODE", "4"}}).empty());
  CHECK(ids_of({{"SLURM_JOB_ID", "42"}, {"GPU_DEVICE_ORDINAL", "NoDevFiles"}}).empty());
}

TEST_CASE("Gpu.Discovery.WorkstationAsksCuda" * doctest::timeout(10)) {
  // Outside Slurm with no CUDA_VISIBLE_DEVICES: every device the CUDA runtime sees, which is
  // none without CUDA (and none on a machine without a driver or GPU).
  const auto ids = ids_of({});
  if (!herd::gpu::cuda_built()) CHECK(ids.empty());
  for (std::size_t i = 0; i < ids.size(); ++i) CHECK(ids[i] == std::to_string(i));
}

TEST_CASE("Gpu.Streams.WithoutCudaAreNull" * doctest::timeout(10)) {
  if (herd::gpu::cuda_built()) return;  // with CUDA, create_stream needs a device
  CHECK(herd::gpu::create_stream(0) == nullptr);
  herd::gpu::destroy_stream(nullptr);
  herd::gpu::set_device(0);
}
