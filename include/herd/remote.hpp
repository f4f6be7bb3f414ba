#pragma once
/// @file remote.hpp
/// @brief HERD_TASK: register a C++ function by name so workers can run it.
///
/// C++ cannot ship closures, so a task names a function that every process holds: the client,
/// and the workers, which run the same executable (or load the same task library with
/// `herd worker --load libtasks.so`). Arguments and results travel as msgpack.
///
/// @code
/// int add(int a, int b) { return a + b; }
/// HERD_TASK(add);                       // at namespace scope, once per function
/// @endcode

#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <msgpack.hpp>

namespace herd {

/// @brief What a running task may know about itself (valid inside a task only).
struct TaskInfo {
  std::string key;     ///< the task's key, e.g. "add-1a"
  std::string worker;  ///< name of the worker running it
  std::size_t results_held = 0;        ///< results the worker held when the task started
  std::uint64_t result_bytes_held = 0; ///< their size in bytes
  std::vector<int> gpus;   ///< CUDA ordinals of the devices the task holds (TaskOptions::gpus)
  void* cuda_stream = nullptr;  ///< a cudaStream_t of its own on gpus[0] (nullptr: no GPU/CUDA)
  /// CPU ids the task is pinned to (TaskOptions::cpus): its thread, its isolated child and its
  /// shell command's processes run on these cores only, which no other running task of the
  /// worker holds. Empty: it asked for no cpus, or its worker offers more cpus than its mask has.
  std::vector<int> cores;
  /// Bytes of memory the task asked for (TaskOptions::memory; 0 = none): an isolated child or a
  /// shell command is held to it, other C++ tasks only counted.
  std::uint64_t memory = 0;
  int gang_rank = -1;      ///< rank in its gang (-1: not a gang member)
  int gang_size = 0;       ///< members of its gang (0: not a gang member)
  /// @brief A multi-node task (TaskOptions::nodes): the hosts it holds, this one first, as
  /// short names ("cn690" for "cn690.cluster.org", as Slurm names nodes); empty: not such a task.
  std::vector<std::string> nodes;
  /// @brief A multi-node task: a file on this host listing `nodes` one a line (an MPI
  /// hostfile; "" otherwise). herd::shell commands get it as HERD_NODE_FILE.
  std::string node_file;
  /// @brief True once the worker running the task drains: Slurm's warning signal, preemption
  /// (`scancel --signal`), the walltime's retirement margin, or a pool that shrinks. A long
  /// task then saves a checkpoint (on the shared filesystem) and throws, so that its retry
  /// on another worker resumes from it (give it TaskOptions::retries). Live: poll it.
  bool draining() const;
  /// @brief The cores it holds (TaskOptions::cpus), as CPU ids: `cores`.
  const std::vector<int>& cpus() const { return cores; }
  /// @brief Seconds until the worker's batch job ends (-1 = no end known).
  long seconds_left() const;
  /// @brief Where this task keeps its checkpoint: `dir` (default: $HERD_CHECKPOINT_DIR, a
  /// directory on the shared filesystem, e.g. set in the pool's env) + "/" + the task's key +
  /// ".ckpt". The same for every run of the task, so a retry on another worker finds what the
  /// last run saved (see TaskOptions::checkpointable). The directory is created if missing.
  /// @throws std::runtime_error when no directory is given or it cannot be created.
  std::string checkpoint_path(const std::string& dir = "") const;
};

/// @brief The task running on this thread; empty fields outside a task.
const TaskInfo& this_task();

/// @brief Inside a task that waits on other tasks (submitted through herd::get_client()):
/// give this task's thread slot back to the worker, as Dask's `secede`. The worker starts
/// another task beside it and the scheduler counts one slot more for it, so a task that waits
/// for the tasks it fanned out cannot deadlock a cluster whose slots are all such waiters.
/// Resources the task holds (TaskOptions::resources, gpus) stay held. Calling it twice is
/// harmless.
/// @throws std::logic_error outside a task on a worker.
void secede();
/// @brief Take a thread slot again after secede(), as Dask's `rejoin`: waits until one is free
/// (before any new task starts on it). Not seceded: returns at once.
/// @throws std::logic_error outside a task on a worker.
void rejoin();

namespace detail {

/// Calls the function with arguments unpacked from a msgpack array; packs the result.
using InvokeFn = void (*)(const msgpack::object& args, msgpack::sbuffer& out);

struct FunctionEntry {
  std::string name;
  InvokeFn invoke = nullptr;
  std::size_t arity = 0;
};

/// Registers `name`; `address` identifies the function for Client::submit(fn, ...).
bool register_function(const char* name, const void* address, InvokeFn invoke, std::size_t arity);
/// nullptr when unknown.
const FunctionEntry* find_function(const std::string& name);
/// Name of a registered function; throws FunctionNotFound naming it (via its symbol) if not.
const std::string& function_name(const void* address, const char* signature);
std::vector<std::string> registered_functions();

template <typename F>
struct fn_traits;
template <typename R, typename... A>
struct fn_traits<R (*)(A...)> {
  using result = R;
  using args = std::tuple<std::decay_t<A>...>;
  static constexpr std::size_t arity = sizeof...(A);
};
template <typename R, typename... A>
struct fn_traits<R (*)(A...) noexcept> : fn_traits<R (*)(A...)> {};

template <typename F>
concept function_pointer = std::is_pointer_v<std::decay_t<F>> &&
                           std::is_function_v<std::remove_pointer_t<std::decay_t<F>>>;

[[noreturn]] void throw_arity_mismatch(std::size_t expected, std::size_t got);

template <auto F>
void invoke(const msgpack::object& args, msgpack::sbuffer& out) {
  using T = fn_traits<decltype(F)>;
  if (args.type != msgpack::type::ARRAY || args.via.array.size != T::arity) {
    throw_arity_mismatch(T::arity, args.type == msgpack::type::ARRAY ? args.via.array.size : 0);
  }
  typename T::args values;
  args.convert(values);
  if constexpr (std::is_void_v<typename T::result>) {
    std::apply(F, std::move(values));
    msgpack::pack(out, msgpack::type::nil_t());
  } else {
    msgpack::pack(out, std::apply(F, std::move(values)));
  }
}

template <auto F>
bool register_task(const char* name) {
  static_assert(function_pointer<decltype(F)>, "HERD_TASK needs a plain function");
  return register_function(name, reinterpret_cast<const void*>(F), &invoke<F>,
                           fn_traits<decltype(F)>::arity);
}

}  // namespace detail
}  // namespace herd

#define HERD_DETAIL_CAT2(a, b) a##b
#define HERD_DETAIL_CAT(a, b) HERD_DETAIL_CAT2(a, b)

/// Registers `fn` under its own spelling (e.g. "add" or "physics::step").
#define HERD_TASK(fn)                                                       \
  [[maybe_unused]] static const bool HERD_DETAIL_CAT(herd_task_, __COUNTER__) = \
      ::herd::detail::register_task<&fn>(#fn)

/// Registers `fn` under an explicit name (for overloads or stable names across builds).
#define HERD_TASK_NAMED(fn, name)                                           \
  [[maybe_unused]] static const bool HERD_DETAIL_CAT(herd_task_, __COUNTER__) = \
      ::herd::detail::register_task<static_cast<decltype(&fn)>(&fn)>(name)
