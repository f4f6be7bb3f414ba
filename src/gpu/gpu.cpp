// GPU discovery and the few CUDA runtime calls the worker needs. See gpu.hpp for the rules.
#include "gpu/gpu.hpp"

#include <cctype>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

#include "common/env.hpp"
#include "common/logging.hpp"
#include "common/util.hpp"

#ifdef HERD_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "gpu/cuda_check.hpp"
#endif

namespace herd::gpu {
namespace {

std::vector<std::string> split_commas(std::string_view s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    const std::size_t comma = s.find(',', start);
    const std::size_t end = comma == std::string_view::npos ? s.size() : comma;
    out.emplace_back(util::trim(s.substr(start, end - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// What CUDA itself accepts in CUDA_VISIBLE_DEVICES: a device index, or a (prefix of a) GPU or
// MIG UUID. CUDA uses the entries before the first one it cannot parse and ignores the rest,
// which is why "-1" (and "NoDevFiles", which Slurm sets for gres without device files) hide
// every device.
bool cuda_accepts(const std::string& entry) {
  return all_digits(entry) || entry.rfind("GPU-", 0) == 0 || entry.rfind("MIG-", 0) == 0;
}

std::vector<std::string> parse_visible_devices(std::string_view value) {
  std::vector<std::string> ids;
  if (util::trim(value).empty()) return ids;
  for (auto& entry : split_commas(value)) {
    if (!cuda_accepts(entry)) break;
    ids.push_back(std::move(entry));
  }
  return ids;
}

// Slurm's lists are node-global indices, "0,2" (written "0-1" by some versions and plugins).
std::vector<std::string> parse_slurm_gpus(std::string_view value) {
  std::vector<std::string> ids;
  if (util::trim(value).empty()) return ids;
  for (auto& entry : split_commas(value)) {
    const std::size_t dash = entry.find('-');
    if (dash != std::string::npos && dash > 0) {
      const std::string lo = entry.substr(0, dash), hi = entry.substr(dash + 1);
      if (all_digits(lo) && all_digits(hi) && lo.size() < 6 && hi.size() < 6) {
        for (int i = std::stoi(lo); i <= std::stoi(hi); ++i) ids.push_back(std::to_string(i));
        continue;
      }
    }
    if (!all_digits(entry)) break;  // "NoDevFiles", "(null)": nothing usable from here on
    ids.push_back(std::move(entry));
  }
  return ids;
}

#ifdef HERD_HAVE_CUDA
// Devices the CUDA runtime sees in this process; -1 (and the reason) when it cannot tell, e.g.
// no driver (a build machine) or no device.
int runtime_device_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess) return n;
  (void)cudaGetLastError();  // not sticky, but leave no error behind for the next caller
  if (why) *why = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
  return e == cudaErrorNoDevice ? 0 : -1;
}
#endif

// A worker's slice of its node's GPUs when several workers share the node (HERD_GPUS_PER_WORKER,
// set by the job script of a pool with processes > 1 and gpus): k GPUs each, worker i of the
// node taking ids[i*k, i*k+k). Throws, naming the numbers, when the slice is not there.
std::vector<std::string> worker_slice(const std::vector<std::string>& ids, const std::string& source,
                                      const Getenv& env) {
  const char* per = env("HERD_GPUS_PER_WORKER");
  const std::string per_s(util::trim(per));
  if (!all_digits(per_s) || per_s.size() > 4 || std::stoi(per_s) < 1) {
    throw std::invalid_argument("HERD_GPUS_PER_WORKER '" + std::string(per) + "' is not a positive number of GPUs");
  }
  const int k = std::stoi(per_s);
  // The job script numbers the workers of one node (HERD_WORKER_INDEX); srun numbers the tasks
  // of each node (SLURM_LOCALID).
  const char* index_name = "HERD_WORKER_INDEX";
  const char* index = env(index_name);
  if (index == nullptr || util::trim(index).empty()) index = env(index_name = "SLURM_LOCALID");
  const std::string index_s(index != nullptr ? util::trim(index) : std::string_view());
  if (!all_digits(index_s) || index_s.size() > 4) {
    throw std::invalid_argument("HERD_GPUS_PER_WORKER is set but neither HERD_WORKER_INDEX nor SLURM_LOCALID says "
                                "which worker of the node this is (" + std::string(index_name) + "='" +
                                std::string(index != nullptr ? index : "") + "')");
  }
  const std::size_t i = static_cast<std::size_t>(std::stoi(index_s));
  const std::size_t from = i * static_cast<std::size_t>(k), to = from + static_cast<std::size_t>(k);
  if (to > ids.size()) {
    throw std::runtime_error("GPUs: worker " + index_s + " of its node takes GPUs " + std::to_string(from) + ".." +
                             std::to_string(to - 1) + " (" + std::to_string(k) + " per worker, " + index_name + "=" +
                             index_s + ") of the node's list, but " + source + " names " +
                             std::to_string(ids.size()) + (ids.empty() ? "" : " (" + util::join(ids, ",") + ")"));
  }
  return {ids.begin() + static_cast<std::ptrdiff_t>(from), ids.begin() + static_cast<std::ptrdiff_t>(to)};
}

}  // namespace

std::vector<Device> discover(const Getenv& getenv_fn) {
  const bool real_env = !getenv_fn;
  auto env = [&](const char* name) -> const char* { return real_env ? env::get(name) : getenv_fn(name); };

  std::vector<std::string> ids;
  bool from_env = true;  // false: nothing in the environment, ask CUDA for every device
  bool set_visible = false;  // CUDA_VISIBLE_DEVICES must become `ids`
  std::string source = "the environment";  // where `ids` came from, for an error
  if (const char* visible = env("CUDA_VISIBLE_DEVICES")) {
    ids = parse_visible_devices(visible);
    source = "CUDA_VISIBLE_DEVICES";
  } else if (env("SLURM_JOB_ID") || env("SLURM_JOBID")) {
    // Inside a Slurm job that did not set CUDA_VISIBLE_DEVICES itself: what Slurm allocated,
    // never the whole node (another job may own the other GPUs).
    for (const char* name : {"SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "GPU_DEVICE_ORDINAL"}) {
      const char* value = env(name);
      if (value && !util::trim(value).empty()) {
        ids = parse_slurm_gpus(value);
        source = name;
        break;
      }
    }
    set_visible = !ids.empty();
  } else {
    from_env = false;
  }
  if (const char* per = env("HERD_GPUS_PER_WORKER"); per != nullptr && *per != '\0') {
    ids = worker_slice(ids, source, env);
    set_visible = true;
    // Taken: a process this worker starts (a task's own Client, a child program) sees its
    // slice in CUDA_VISIBLE_DEVICES and must not slice it again.
    if (real_env) ::unsetenv("HERD_GPUS_PER_WORKER");
  }
  // Before CUDA starts in this process, so its ordinals are exactly these devices (and the
  // tasks and their child processes see the same).
  if (real_env && set_visible) ::setenv("CUDA_VISIBLE_DEVICES", util::join(ids, ",").c_str(), 1);

  std::vector<Device> devices;
#ifdef HERD_HAVE_CUDA
  // Only the real environment is what CUDA sees; a test's fake one is taken at its word.
  if (real_env || !from_env) {
    std::string why;
    const int n = runtime_device_count(&why);
    if (!from_env) {
      for (int i = 0; i < n; ++i) ids.push_back(std::to_string(i));
    } else if (n >= 0 && static_cast<std::size_t>(n) < ids.size()) {
      HERD_LOG(warning) << "GPUs: the environment names " << ids.size() << " (" << util::join(ids, ",")
                        << ") but CUDA sees " << n << "; using " << n;
      ids.resize(static_cast<std::size_t>(n));
    } else if (n < 0 && !ids.empty()) {
      HERD_LOG(warning) << "GPUs: the environment names " << util::join(ids, ",") << " but CUDA cannot use them ("
                        << why << "); advertising them without model or memory";
    }
    for (std::size_t i = 0; i < ids.size(); ++i) {
      Device d{static_cast<int>(i), ids[i], "", 0};
      cudaDeviceProp prop{};
      if (n > 0 && static_cast<int>(i) < n && cudaGetDeviceProperties(&prop, static_cast<int>(i)) == cudaSuccess) {
        d.name = prop.name;
        d.memory = prop.totalGlobalMem;
      }
      devices.push_back(std::move(d));
    }
    return devices;
  }
#endif
  (void)from_env;  // without CUDA, the environment's word is all there is
  for (std::size_t i = 0; i < ids.size(); ++i) devices.push_back({static_cast<int>(i), ids[i], "", 0});
  return devices;
}

#ifdef HERD_HAVE_CUDA

bool cuda_built() { return true; }

void* create_stream(int ordinal) {
  int previous = 0;
  HERD_CUDA_CHECK(cudaGetDevice(&previous));
  HERD_CUDA_CHECK(cudaSetDevice(ordinal));
  cudaStream_t stream = nullptr;
  // Non-blocking: the task's work never waits on (or serialises with) the legacy default stream.
  const cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  (void)cudaSetDevice(previous);
  HERD_CUDA_CHECK(e);
  return stream;
}

void destroy_stream(void* stream) {
  if (stream) (void)cudaStreamDestroy(static_cast<cudaStream_t>(stream));
}

void set_device(int ordinal) { HERD_CUDA_CHECK(cudaSetDevice(ordinal)); }

#else  // no CUDA: GPUs are what the environment says, and nothing can run on them here

bool cuda_built() { return false; }
void* create_stream(int /*ordinal*/) { return nullptr; }
void destroy_stream(void* /*stream*/) {}
void set_device(int /*ordinal*/) {}

#endif

}  // namespace herd::gpu
