// One task's run, on whichever thread runs it (an executor, or the I/O thread for an inline
// run): its arguments and inputs from the store, its GPUs and their stream, its gang's session,
// its child process when isolated, its result into the store or its exception as the error.
// The gang sessions' mailbox (gang_ready, gang_abort) is here too.
#include "worker/worker.hpp"

#include <cxxabi.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include <typeinfo>

#include "common/env.hpp"
#include "common/logging.hpp"
#include "common/util.hpp"
#include "herd/detail/scratch_zone.hpp"
#include "herd/error.hpp"
#include "herd/remote.hpp"
#include "task/this_task.hpp"
#include "worker/worker_internal.hpp"

namespace herd::worker {

using protocol::MessageType;
using protocol::TaskId;

namespace {
using util::demangle;

/// Substitutes input values into the argument array; false if the refs do not fit the args.
bool substitute(msgpack::object& args, const protocol::ArgRef& ref, const msgpack::object& value) {
  if (args.type != msgpack::type::ARRAY || ref.arg >= args.via.array.size) return false;
  msgpack::object& slot = args.via.array.ptr[ref.arg];
  if (ref.elem < 0) {
    slot = value;
    return true;
  }
  if (slot.type != msgpack::type::ARRAY || static_cast<std::uint32_t>(ref.elem) >= slot.via.array.size) {
    return false;
  }
  slot.via.array.ptr[ref.elem] = value;
  return true;
}
/// Pins the calling thread to `cores` for one task and gives it its mask back afterwards.
class Pinning {
 public:
  explicit Pinning(const std::vector<int>& cores) {
    if (cores.empty()) return;
    if (::pthread_getaffinity_np(::pthread_self(), sizeof before_, &before_) != 0) return;
    cpu_set_t mask;
    CPU_ZERO(&mask);
    for (int c : cores) CPU_SET(c, &mask);
    const int rc = ::pthread_setaffinity_np(::pthread_self(), sizeof mask, &mask);
    if (rc != 0) HERD_LOG(warning) << "cannot pin a task to its cores: " << std::strerror(rc);
    pinned_ = rc == 0;
  }
  ~Pinning() {
    if (pinned_) (void)::pthread_setaffinity_np(::pthread_self(), sizeof before_, &before_);
  }
  Pinning(const Pinning&) = delete;
  Pinning& operator=(const Pinning&) = delete;

 private:
  cpu_set_t before_{};
  bool pinned_ = false;
};

/// In an isolated child: the usual threading libraries use the task's cores, no more.
void set_thread_counts(std::size_t n) {
  if (n == 0) return;
  const std::string v = std::to_string(n);
  for (const char* name : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"}) ::setenv(name, v.c_str(), 1);
}

/// A multi-node task's node file: its hosts one a line (an MPI hostfile), in `dir` (the
/// worker's private directory; else the temporary directory). "" when it cannot be written.
std::string write_node_file(const std::string& dir, TaskId id, const std::vector<std::string>& hosts) {
  const char* tmp = env::get("TMPDIR");  // only where the worker has no directory of its own
  std::string path = (dir.empty() ? std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") : dir) +
                     "/herd-nodes-" + std::to_string(::getpid()) + "-" + std::to_string(id) + "-XXXXXX";
  const int fd = ::mkstemp(path.data());
  if (fd < 0) {
    HERD_LOG(warning) << "cannot write the node file " << path << ": " << std::strerror(errno);
    return {};
  }
  std::string text;
  for (const auto& h : hosts) text += h + "\n";
  const bool whole = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!whole) {
    HERD_LOG(warning) << "cannot write the node file " << path << ": " << std::strerror(errno);
    ::unlink(path.c_str());
    return {};
  }
  return path;
}
}  // namespace

Completion Worker::execute(const protocol::ExecuteTask& task, const std::vector<int>& devices, IsolatedChild* child,
                           const std::vector<int>& cores) {
  Completion c;
  c.id = task.id;
  // What the task may know about itself: its GPUs (with a stream of its own) and its gang.
  TaskInfo info;
  info.key = task.key;
  info.worker = options_.name;
  info.results_held = store_.size();
  info.result_bytes_held = store_.bytes();
  for (int d : devices) info.gpus.push_back(gpus_[static_cast<std::size_t>(d)].ordinal);
  info.cores = cores;
  std::uint64_t task_memory = 0;  // bytes it asked for (the resource "memory" counts MiB)
  if (auto m = task.resources.find("memory"); m != task.resources.end() && m->second > 0) {
    task_memory = static_cast<std::uint64_t>(std::ceil(m->second)) << 20;
  }
  info.memory = task_memory;
  // Its thread runs on its cores (an isolated child and a shell command inherit the mask).
  const Pinning pinning(cores);
  // A multi-node task: its hosts, and a node file that lists them (removed after the run).
  struct NodeFile {
    std::string path;
    ~NodeFile() {
      if (!path.empty()) ::unlink(path.c_str());
    }
  } node_file;
  if (!task.nodes.empty()) {
    // Short names (as HyperQueue's node file): Slurm names its nodes so, and mpirun's srun
    // matches the hostfile against them.
    for (const auto& h : task.nodes) {
      const bool address = h.find_first_not_of("0123456789.") == std::string::npos;
      info.nodes.push_back(address ? h : h.substr(0, h.find('.')));
    }
    node_file.path = write_node_file(store_.spill_directory(), task.id, info.nodes);
    info.node_file = node_file.path;
  }
  collective::GangTicket ticket;
  std::shared_ptr<collective::GangSession> session;
  if (task.gang != 0) {
    info.gang_rank = static_cast<int>(task.gang_rank);
    info.gang_size = static_cast<int>(task.gang_size);
    std::lock_guard lock(gang_mu_);
    if (auto it = gangs_.find({task.gang, task.gang_attempt}); it != gangs_.end()) session = it->second;
  }
  struct Cleanup {  // whatever happens below: the stream, the communicator, the mailbox go
    Worker* self;
    collective::GangTicket* ticket;
    protocol::TaskId gang;
    std::uint32_t attempt;
    void* stream = nullptr;
    ~Cleanup() {
      detail::current_task() = TaskInfo{};
      collective::current_gang() = nullptr;
      if (ticket->session) ticket->session->detach();
      ticket->communicator.reset();
      if (stream != nullptr) gpu::destroy_stream(stream);
      if (gang != 0) {
        std::lock_guard lock(self->gang_mu_);
        self->gangs_.erase({gang, attempt});
      }
    }
  } cleanup{this, &ticket, task.gang, task.gang_attempt};
  const auto start = Clock::now();
  const detail::FunctionEntry* entry = detail::find_function(task.function);
  if (entry == nullptr) {
    c.error = {"herd::FunctionNotFound",
               "function '" + task.function + "' is not registered in this worker's program (" +
                   std::string(program_invocation_name) +
                   "); build it into the worker executable or load its library with --load",
               task.key, options_.name};
    return c;
  }
  try {
    // The arguments and the inputs share one zone, lent for the run (a fresh one mallocs 8 KiB).
    detail::ScratchZone zone;
    msgpack::object args = zone.unpack(task.args.data(), task.args.size(), false);
    std::vector<net::PayloadPtr> keep;
    for (const auto& ref : task.refs) {
      net::PayloadPtr bytes = store_.get(ref.id);
      if (!bytes) {
        c.missing_input = true;
        c.error = {"herd::MissingInput", "input was freed before the task ran", task.key, options_.name};
        return c;
      }
      // Referencing the stored bytes (kept alive below), not copying strings and binaries.
      const msgpack::object input = zone.unpack(bytes->data(), bytes->size(), true);
      keep.push_back(std::move(bytes));
      if (!substitute(args, ref, input)) {
        throw std::invalid_argument("argument reference does not match the arguments");
      }
    }
    // A stream only on a device CUDA can use (a fake or unreachable one has no model name).
    if (!devices.empty() && !gpus_[static_cast<std::size_t>(devices.front())].name.empty()) {
      gpu::set_device(info.gpus.front());
      cleanup.stream = info.cuda_stream = gpu::create_stream(info.gpus.front());
    }
    if (session) {
      ticket.session = session;
      ticket.listen_host = ring_host_;
      ticket.device = info.cuda_stream != nullptr ? info.gpus.front() : -1;  // NCCL needs a real one
      ticket.stream = info.cuda_stream;
      ticket.send = [this](const protocol::GangJoinRequest& join) {
        {
          std::lock_guard lock(done_mu_);
          gang_joins_.push_back(join);
        }
        wake_io();
      };
      collective::current_gang() = &ticket;
    } else if (task.gang != 0) {
      throw GangAborted("gang attempt " + std::to_string(task.gang_attempt) + " is unknown to this worker");
    }
    detail::current_task() = std::move(info);
    if (child != nullptr) {
      // In a child process (it sees this_task() as set above, and its copy of `args`).
      // Its memory, when it asked for some, is the child's cap (RLIMIT_AS beyond what it
      // inherits), as isolated_memory's.
      const std::uint64_t cap = task.isolated_memory > 0 ? task.isolated_memory : task_memory;
      IsolatedOutcome o = run_isolated(
          [&](msgpack::sbuffer& out) {
            set_thread_counts(cores.size());
            entry->invoke(args, out);
          },
          cap, *child);
      detail::current_task() = TaskInfo{};
      isolated_completion(task, o, c);
    } else {
      // Stored until the client drops its future: msgpack's default 8 KiB first block would be
      // held (and page-faulted in) for every small result. It grows by doubling (realloc).
      msgpack::sbuffer out(64);
      entry->invoke(args, out);
      detail::current_task() = TaskInfo{};
      const std::size_t size = out.size();
      c.bytes = std::make_shared<const net::Buffer>(out.release(), size);
      c.ok = true;
    }
  } catch (...) {
    detail::current_task() = TaskInfo{};
    const std::type_info* type = abi::__cxa_current_exception_type();
    c.error.type = type != nullptr ? demangle(type->name()) : "unknown";
    try {
      throw;
    } catch (const std::exception& e) {
      c.error.message = e.what();
    } catch (...) {
      c.error.message = "(an exception that is not a std::exception)";
    }
    c.error.task = task.key;
    c.error.worker = options_.name;
  }
  const auto ended = Clock::now();
  c.duration_us = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(ended - start).count());
  c.ended_us = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(ended.time_since_epoch()).count());
  c.thread = executor_index();
  // A run that failed while its worker drains (SIGTERM, walltime, retiring) was preempted: a
  // checkpointable task counts it apart from its retries.
  if (!c.ok && TaskInfo{}.draining()) c.preempted = true;
  // Before the scheduler can hear of it; not when the worker stopped waiting for it (reported
  // failed: nobody will free it).
  if (c.ok && !(detail::current_abandoned() && detail::current_abandoned()->load())) {
    store_.put(c.id, c.bytes);
    spill_to_target();
    // Paused before the state hears this task finished, so that it starts no next one when
    // the result left memory short (the monitor samples every 20 ms: a task may be quicker).
    if (options_.memory_limit > 0 && options_.config.memory_pause_percent > 0 && c.bytes->size() >= (1u << 20)) {
      update_pause();
    }
  }
  return c;
}

void Worker::isolated_completion(const protocol::ExecuteTask& task, IsolatedOutcome& o, Completion& c) {
  using Kind = IsolatedOutcome::Kind;
  c.error.task = task.key;
  c.error.worker = options_.name;
  switch (o.kind) {
    case Kind::result:
      c.bytes = std::shared_ptr<const net::Buffer>(o.result.release());
      c.ok = true;
      return;
    case Kind::exception:
      c.error.type = std::move(o.type);
      c.error.message = std::move(o.message);
      if (c.error.type == "std::bad_alloc" && task.isolated_memory > 0) {
        c.error.message += " (an isolated task may map " + util::format_bytes(task.isolated_memory) +
                           " beyond the worker's memory: TaskOptions::isolated_memory)";
      } else if (c.error.type == "std::bad_alloc" && task.resources.count("memory") != 0) {
        // Its limit (RLIMIT_AS, TaskOptions::memory) refused an allocation.
        const auto limit = static_cast<std::uint64_t>(std::ceil(task.resources.at("memory"))) << 20;
        c.error.type = "herd::MemoryLimitExceeded";
        c.error.message = "isolated task " + task.key + " reached its memory limit of " + util::format_bytes(limit) +
                          " (TaskOptions::memory, enforced as RLIMIT_AS on its child process): " + c.error.message;
      }
      return;
    case Kind::died:
      if (!o.kill_reason.empty()) {  // the worker's memory limit (memory_monitor)
        c.error.type = "herd::MemoryLimitExceeded";
        c.error.message = "the child process (pid " + std::to_string(o.pid) + ") of isolated task " + task.key +
                          " was killed by worker " + options_.name + ": " + o.kill_reason + "; the worker goes on";
        return;
      }
      c.error.type = "herd::TaskCrashed";
      c.error.message = "the child process (pid " + std::to_string(o.pid) + ") of isolated task " + task.key + " " +
                        o.death() + " on worker " + options_.name + "; the worker goes on";
      if (!o.killed) HERD_LOG(warning) << c.error.message;
      return;
    case Kind::not_run:
      c.error.type = "std::system_error";
      c.error.message = std::move(o.message);
      return;
  }
}

void Worker::on_gang_message(MessageType type, protocol::Received& msg) {
  std::string error;
  std::shared_ptr<collective::GangSession> session;
  if (type == MessageType::gang_ready) {
    protocol::GangReadyEvent ev;
    if (!protocol::decode<MessageType::gang_ready>(msg, ev, error)) {
      HERD_LOG(error) << "bad gang_ready from the scheduler: " << error;
      return;
    }
    {
      std::lock_guard lock(gang_mu_);
      if (auto it = gangs_.find({ev.gang, ev.attempt}); it != gangs_.end()) session = it->second;
    }
    if (session) session->deliver(std::move(ev));
    return;
  }
  protocol::GangAbortEvent ev;
  if (!protocol::decode<MessageType::gang_abort>(msg, ev, error)) {
    HERD_LOG(error) << "bad gang_abort from the scheduler: " << error;
    return;
  }
  {
    std::lock_guard lock(gang_mu_);
    if (auto it = gangs_.find({ev.gang, ev.attempt}); it != gangs_.end()) session = it->second;
  }
  HERD_LOG(debug) << "gang " << ev.gang << " attempt " << ev.attempt << " aborted"
                  << (session ? "" : " (no member here)") << ": " << ev.reason;
  if (session) session->abort(ev.reason);
}

}  // namespace herd::worker
