// GPU discovery from the environment (gpu::discover with a fake getenv): what Slurm and CUDA
// say a process may use, never every GPU on the node. Pure logic: no GPU, no CUDA needed.
#include <doctest/doctest.h>

#include <cstdlib>
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

TEST_CASE("Gpu.Discovery.WorkerSliceOfTheNode" * doctest::timeout(10)) {
  // Several workers per node (a pool's processes with gpus): worker i takes entries i*k..i*k+k-1
  // of what the job was given, wherever the list came from.
  const Env four{{"SLURM_JOB_ID", "42"}, {"CUDA_VISIBLE_DEVICES", "0,1,2,3"}, {"HERD_GPUS_PER_WORKER", "2"}};
  auto with = [](Env env, const std::string& name, const std::string& value) {
    env[name] = value;
    return env;
  };
  CHECK(ids_of(with(four, "HERD_WORKER_INDEX", "0")) == Ids{"0", "1"});
  CHECK(ids_of(with(four, "HERD_WORKER_INDEX", "1")) == Ids{"2", "3"});
  // srun's index on the node when the job script did not number the worker.
  CHECK(ids_of(with(four, "SLURM_LOCALID", "1")) == Ids{"2", "3"});
  CHECK(ids_of(with(with(four, "SLURM_LOCALID", "0"), "HERD_WORKER_INDEX", "1")) == Ids{"2", "3"});
  CHECK(ids_of(with(with(four, "SLURM_LOCALID", "1"), "HERD_WORKER_INDEX", "")) == Ids{"2", "3"});
  // Slurm's own lists (node-global indices, ranges) and UUIDs are sliced the same way.
  CHECK(ids_of({{"SLURM_JOB_ID", "42"}, {"SLURM_JOB_GPUS", "4-7"}, {"HERD_GPUS_PER_WORKER", "1"},
                {"SLURM_LOCALID", "2"}}) == Ids{"6"});
  CHECK(ids_of({{"SLURM_JOB_ID", "42"}, {"SLURM_STEP_GPUS", "1,3"}, {"SLURM_JOB_GPUS", "0-3"},
                {"HERD_GPUS_PER_WORKER", "1"}, {"HERD_WORKER_INDEX", "1"}}) == Ids{"3"});
  CHECK(ids_of({{"CUDA_VISIBLE_DEVICES", "GPU-a,GPU-b,GPU-c"}, {"HERD_GPUS_PER_WORKER", "1"},
                {"HERD_WORKER_INDEX", "2"}}) == Ids{"GPU-c"});
}

TEST_CASE("Gpu.Discovery.WorkerSliceErrorsNameTheNumbers" * doctest::timeout(10)) {
  auto error_of = [](const Env& env) -> std::string {
    try {
      ids_of(env);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "no error";
  };
  const Env two{{"SLURM_JOB_ID", "42"}, {"CUDA_VISIBLE_DEVICES", "0,1"}, {"HERD_GPUS_PER_WORKER", "2"}};
  Env second = two;
  second["HERD_WORKER_INDEX"] = "1";
  CHECK(error_of(second) == "GPUs: worker 1 of its node takes GPUs 2..3 (2 per worker, HERD_WORKER_INDEX=1) of the "
                            "node's list, but CUDA_VISIBLE_DEVICES names 2 (0,1)");
  Env none{{"SLURM_JOB_ID", "42"}, {"HERD_GPUS_PER_WORKER", "1"}, {"SLURM_LOCALID", "0"}};
  CHECK(error_of(none) == "GPUs: worker 0 of its node takes GPUs 0..0 (1 per worker, SLURM_LOCALID=0) of the node's "
                          "list, but the environment names 0");
  CHECK(error_of(two).find("neither HERD_WORKER_INDEX nor SLURM_LOCALID") != std::string::npos);
  for (const char* bad : {"0", "-1", "two", "99999"}) {
    Env e = two;
    e["HERD_WORKER_INDEX"] = "0";
    e["HERD_GPUS_PER_WORKER"] = bad;
    CHECK(error_of(e) == "HERD_GPUS_PER_WORKER '" + std::string(bad) + "' is not a positive number of GPUs");
  }
}

TEST_CASE("Gpu.Discovery.WorkerSliceSetsCudaVisibleDevicesOnce" * doctest::timeout(10)) {
  // The real environment: the slice becomes CUDA_VISIBLE_DEVICES (before CUDA starts) and the
  // request is taken away, so that a process the worker starts keeps the slice as it is.
  auto keep = [](const char* name) {
    const char* v = std::getenv(name);
    return std::pair<std::string, bool>(v ? v : "", v != nullptr);
  };
  const auto old_visible = keep("CUDA_VISIBLE_DEVICES"), old_index = keep("HERD_WORKER_INDEX");
  ::setenv("CUDA_VISIBLE_DEVICES", "5,6,7,8,9,10", 1);
  ::setenv("HERD_GPUS_PER_WORKER", "3", 1);
  ::setenv("HERD_WORKER_INDEX", "1", 1);
  const auto first = herd::gpu::discover();
  const std::string visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const bool request_left = std::getenv("HERD_GPUS_PER_WORKER") != nullptr;
  const auto again = herd::gpu::discover();  // no second slice
  const std::string visible_again = std::getenv("CUDA_VISIBLE_DEVICES");
  for (const auto& [name, value] : {std::pair{"CUDA_VISIBLE_DEVICES", old_visible}, {"HERD_WORKER_INDEX", old_index}}) {
    if (value.second) ::setenv(name, value.first.c_str(), 1);
    else ::unsetenv(name);
  }
  ::unsetenv("HERD_GPUS_PER_WORKER");
  CHECK(visible == "8,9,10");
  CHECK_FALSE(request_left);
  CHECK(visible_again == "8,9,10");
  if (!herd::gpu::cuda_built()) {  // with CUDA, the runtime may see fewer devices than named
    REQUIRE(first.size() == 3);
    CHECK(first[0].id == "8");
    CHECK(first[2].id == "10");
    CHECK(again.size() == 3);
  }
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
