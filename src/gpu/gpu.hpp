// GPUs as worker resources: which devices this process may use, and the CUDA calls the worker
// needs (compiled against the CUDA runtime when HERD_HAVE_CUDA is defined; without it, every
// function works and reports what the environment says, with no model or memory).
//
// Discovery follows what the batch system gave the job, never every GPU on the node:
//   1. CUDA_VISIBLE_DEVICES if set ("" or "-1" or "NoDevFiles" = none; ids or GPU-UUIDs);
//   2. else inside Slurm: SLURM_STEP_GPUS, SLURM_JOB_GPUS, GPU_DEVICE_ORDINAL (in that order);
//      CUDA_VISIBLE_DEVICES is then set to that list before CUDA starts, so ordinals agree;
//      a Slurm job with none of them has no GPUs;
//   3. else (a workstation, outside Slurm): every device the CUDA runtime sees (none without CUDA).
// A worker of a job with several workers per node (a pool's processes > 1 with gpus) takes only
// its slice of that list: the job script exports HERD_GPUS_PER_WORKER=k, and the worker with
// index i on its node (HERD_WORKER_INDEX, else srun's SLURM_LOCALID) takes entries i*k..i*k+k-1
// and sets CUDA_VISIBLE_DEVICES to them (then unsets HERD_GPUS_PER_WORKER, so that what it
// starts does not slice again). A slice that is not there is an error naming the numbers.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace herd::gpu {

struct Device {
  int ordinal = 0;        // CUDA ordinal inside this process (0..n-1)
  std::string id;         // what the environment called it ("3", "GPU-8f1c...") or the ordinal
  std::string name;       // model, e.g. "NVIDIA H100 80GB HBM3" ("" when CUDA cannot tell)
  std::uint64_t memory = 0;  // bytes of device memory (0 when CUDA cannot tell)
};

using Getenv = std::function<const char*(const char*)>;

/// The GPUs this process may use (see above). May set CUDA_VISIBLE_DEVICES (only through the
/// real environment, i.e. when `getenv` is the default). Throws std::invalid_argument or
/// std::runtime_error when HERD_GPUS_PER_WORKER asks for a slice that cannot be taken.
std::vector<Device> discover(const Getenv& getenv = nullptr);

/// True when herd was built with the CUDA runtime.
bool cuda_built();
/// A new CUDA stream on device `ordinal` (as void*); nullptr without CUDA. Throws
/// std::runtime_error naming the CUDA error.
void* create_stream(int ordinal);
void destroy_stream(void* stream);
/// cudaSetDevice for the calling thread (no-op without CUDA).
void set_device(int ordinal);

}  // namespace herd::gpu
