// The worker process's frame and its scheduler connection: start-up, the hello, the control
// link, the I/O thread's loop and the messages it reads, leaving. What runs the tasks is in
// worker_tasks.cpp (hand-offs, executors, inline runs, completions, time limits) and
// worker_execute.cpp (one task's run); the memory limit and spilling in worker_memory.cpp; `herd
// logs` in worker_logs.cpp.
#include "worker/worker.hpp"

#include <dlfcn.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "task/this_task.hpp"
#include "net/lane.hpp"
#include "net/tcp.hpp"
#include "common/logging.hpp"
#include "net/interfaces.hpp"
#include "common/util.hpp"
#include "task/log_capture.hpp"
#include "worker/worker_internal.hpp"
#include "common/env.hpp"
#include "common/allocation.hpp"

namespace herd::worker {

using protocol::MessageType;
using protocol::TaskId;

std::atomic<bool> g_stop{false};

namespace {
std::atomic<int> g_drain_signals{0};
std::atomic<long long> g_first_drain_ms{0};  // CLOCK_MONOTONIC, when the first one came

long long monotonic_ms() {  // async-signal-safe
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

using util::hostname;
}  // namespace

void Worker::request_stop() { g_stop.store(true); }

void Worker::wake_io() {
  const std::uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
}

void Worker::request_drain() {
  // A second signal: leave now. One that follows the first within 300 ms is the same signal
  // come twice (a job script with several workers passes on what Slurm sent it, and scancel
  // may have sent it to the worker itself too); a person's second Ctrl-C comes later.
  const long long now = monotonic_ms();
  if (g_drain_signals.fetch_add(1) == 0) {
    g_first_drain_ms.store(now);
  } else if (now - g_first_drain_ms.load() >= 300) {
    g_stop.store(true);
  }
}

Worker::Worker(WorkerOptions options)
    : options_(std::move(options)), auth_(security::Auth::for_server(context_)),
      sched_(context_, zmq::socket_type::dealer),
      batch_(std::chrono::microseconds(options_.config.result_batch_us)) {
  auth_.client(sched_);
  channels_ = std::make_unique<net::WorkerChannels>(sched_, net::endpoint_host(options_.scheduler));
  if (options_.name.empty()) {
    const char* job = env::get(env::Var::job_id);
    options_.name = job != nullptr && *job ? std::string(job) : hostname() + ":" + std::to_string(::getpid());
    // Several workers of one job: "12345_0.1" (the job script numbers them on one node, srun's
    // SLURM_PROCID across nodes).
    const char* per_job = env::get(env::Var::workers_per_job);
    if (job != nullptr && *job && per_job != nullptr && std::atoi(per_job) > 1) {
      const char* index = env::get(env::Var::worker_index);
      if (index == nullptr) index = env::get("SLURM_PROCID");
      options_.name += "." + (index != nullptr ? std::string(index) : std::to_string(::getpid()));
    }
  }
  // The batch job's end: Slurm's own figure when it gives one, else start + walltime.
  const auto now_unix = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch()).count();
  if (const char* end = env::get("SLURM_JOB_END_TIME"); end != nullptr && std::atoll(end) > 0) {
    end_time_ = std::atoll(end);
  } else if (const char* wall = env::get(env::Var::walltime_s); wall != nullptr && std::atoll(wall) > 0) {
    end_time_ = now_unix + std::atoll(wall);
  }
  if (const char* before = env::get(env::Var::retire_before_s)) retire_before_s_ = std::atoll(before);
  detail::set_worker_end_time(end_time_);
  // Cores and memory it offers (resources "cpus" and "memory", in MiB), from its allocation
  // unless given (--cpus, --memory-limit, --resources); tasks asking for cpus get cores of its
  // mask of their own (pinning).
  {
    const char* p = env::get(env::Var::processes_per_node);
    const char* index = env::get(env::Var::worker_index);
    const std::uint32_t share = p != nullptr && std::atoi(p) > 1 ? static_cast<std::uint32_t>(std::atoi(p)) : 1;
    const allocation::Allocation a =
        allocation::discover_allocation(share, index != nullptr ? static_cast<std::uint32_t>(std::atoi(index)) : 0);
    const std::uint32_t cpus = options_.cpus > 0 ? options_.cpus : a.cpus;
    if (options_.resources.count(allocation::kCpus) == 0) options_.resources[allocation::kCpus] = cpus;
    const auto offered = static_cast<std::size_t>(std::max(0.0, options_.resources[allocation::kCpus]));
    if (offered <= a.cpuset.size()) {
      cores_.assign(a.cpuset.begin(), a.cpuset.begin() + static_cast<std::ptrdiff_t>(offered));
    } else {
      HERD_LOG(warning) << "worker offers " << offered << " cpus but may run on " << a.cpuset.size() << " ("
                        << allocation::format_cpu_list(a.cpuset) << "): tasks are not pinned";
    }
    if (options_.resources.count(allocation::kMemory) == 0) {
      const std::uint64_t bytes = options_.memory_limit > 0 ? options_.memory_limit : a.memory;
      if (bytes > 0) options_.resources[allocation::kMemory] = allocation::memory_resource(bytes);
    }
    const auto mem = options_.resources.find(allocation::kMemory);
    HERD_LOG(info) << "offers " << options_.resources[allocation::kCpus] << " cpus (" << a.cpus_from << "), pinning to "
                   << (cores_.empty() ? std::string("none") : allocation::format_cpu_list(cores_)) << "; memory "
                   << (mem == options_.resources.end() ? 0.0 : mem->second) << " MiB ("
                   << (options_.memory_limit > 0 ? std::string("--memory-limit") : a.memory_from) << ")";
  }
  // Under Slurm, stay below the job's memory (the cgroup would kill us without a word).
  if (options_.memory_limit == 0) {
    if (const char* mb = env::get("SLURM_MEM_PER_NODE"); mb != nullptr && std::atoll(mb) > 0) {
      options_.memory_limit = static_cast<std::uint64_t>(std::atoll(mb)) * 1024 * 1024 * 95 / 100;
      // The workers of one node share its memory.
      if (const char* p = env::get(env::Var::processes_per_node); p != nullptr && std::atoi(p) > 1) {
        options_.memory_limit /= static_cast<std::uint64_t>(std::atoi(p));
      }
    }
  }
  // GPUs: what the batch system gave this job. An explicit --resources gpu=N wins for the
  // count; devices beyond those discovered get plain ordinals.
  gpus_ = gpu::discover();
  if (!gpus_.empty() && options_.resources.count("gpu") == 0) {
    options_.resources["gpu"] = static_cast<double>(gpus_.size());
  }
  if (auto g = options_.resources.find("gpu"); g != options_.resources.end()) {
    const auto want = static_cast<std::size_t>(std::max(0.0, g->second));
    if (gpus_.size() > want) gpus_.resize(want);
    for (std::size_t i = gpus_.size(); i < want; ++i) {
      gpus_.push_back({static_cast<int>(i), std::to_string(i), "", 0});
    }
  }
  for (const auto& lib : options_.load) {
    if (::dlopen(lib.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
      throw std::runtime_error("cannot load task library " + lib + ": " + ::dlerror());
    }
  }
  // Every listener (the data port, gang members' ring and NCCL) binds the interface that
  // routes to the scheduler, and advertises its address: what other hosts can reach. The host
  // name is no guide (on Debian it resolves to 127.0.1.1 on the host itself). --interface or
  // --listen-host decide instead.
  std::string host;
  if (!options_.interface.empty()) {
    host = net::interface_address(options_.interface);
    // NCCL's own sockets: the same interface, unless the user chose one for NCCL.
    ::setenv("NCCL_SOCKET_IFNAME", options_.interface.c_str(), 0);
  } else if (!options_.listen_host.empty()) {
    host = net::bind_host(options_.listen_host);
  } else {
    host = net::listen_host_toward(options_.scheduler);
  }
  data_ = std::make_unique<net::DataServer>(context_, auth_, host, options_.config.chunk_bytes,
                                             std::chrono::milliseconds(options_.config.timeout_ms));
  data_address_ = data_->address();
  ring_host_ = host == "0.0.0.0" ? net::reachable_host() : host;
  // Executors (and the memory monitor) wake the I/O thread through an eventfd: one write(2),
  // cheaper than an inproc ZeroMQ message on the round trip's path.
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) throw std::runtime_error("eventfd failed");
  sched_.set(zmq::sockopt::linger, 1000);
  sched_.set(zmq::sockopt::sndhwm, 0);
  sched_.set(zmq::sockopt::rcvhwm, 0);
  WorkerStateOptions so;
  so.name = options_.name;
  so.data_address = data_address_;
  so.nthreads = options_.nthreads;
  so.resources = options_.resources;
  so.gpus = gpus_.size();
  so.cores = cores_;
  state_ = std::make_unique<WorkerState>(so);
  fetcher_ = std::make_unique<net::DataClient>(context_, auth_, std::chrono::milliseconds(options_.config.timeout_ms));
  fetcher_->take_lanes(options_.config.data_lanes != 0);
  // Fetched results go into the store first, then the state hears of them.
  fetch_events_.found = [this](const std::string& address, TaskId id, net::PayloadPtr bytes) {
    const std::uint64_t n = bytes->size();
    store_.put(id, std::move(bytes));
    spill_to_target();
    state_->set_clock(steady_us());
    state_->fetched(address, id, n);
  };
  fetch_events_.missing = [this](const std::string& address, TaskId id) { state_->not_there(address, id); };
  fetch_events_.failed = [this](const std::string& address, const std::vector<TaskId>& ids, const std::string& why) {
    HERD_LOG(warning) << "could not fetch " << ids.size() << " input(s) from " << address << ": " << why;
    state_->fetch_failed(address, ids, why);
  };
  make_spill_directory();  // last: nothing below can throw and leave it behind
}

Worker::~Worker() {
  detail::set_worker_hooks(nullptr);
  release_rejoin_waiters();  // a task waiting to rejoin goes on (and ends), so it can be joined
  {
    std::lock_guard lock(run_mu_);
    stopping_ = true;
  }
  run_cv_.notify_all();
  {
    std::lock_guard lock(run_mu_);
    for (auto& t : executors_) {
      // An abandoned task's thread may never end (an endless loop): it is not waited for.
      if (std::find(abandoned_threads_.begin(), abandoned_threads_.end(), t.get_id()) != abandoned_threads_.end()) {
        t.detach();
      }
    }
  }
  for (auto& t : executors_) {
    if (t.joinable()) t.join();
  }
}

bool Worker::connect() {
  security::HandshakeWatch handshake(context_, sched_, "the scheduler at " + options_.scheduler);
  sched_.connect(options_.scheduler);
  protocol::HelloRequest hello;
  hello.role = static_cast<std::uint8_t>(protocol::Role::worker);
  hello.name = options_.name;
  hello.host = hostname();
  hello.pid = ::getpid();
  hello.nthreads = options_.nthreads;
  hello.data_address = data_address_;
  hello.resources = options_.resources;
  for (const auto& d : gpus_) hello.gpus.push_back({d.id, d.name, d.memory});
  if (const char* job = env::get(env::Var::job_id)) {
    hello.job_id = job;
  } else if (const char* sjob = env::get("SLURM_JOB_ID")) {
    hello.job_id = sjob;
  }
  if (const char* pool = env::get(env::Var::pool)) hello.pool = pool;
  hello.end_time = end_time_;
  hello.memory_limit = options_.memory_limit;
  hello.links = options_.config.links != 0;
  protocol::send<MessageType::hello_request>(sched_, "", hello);
  zmq::pollitem_t item{static_cast<void*>(sched_), 0, ZMQ_POLLIN, 0};
  const auto deadline = Clock::now() + std::chrono::milliseconds(options_.config.connect_timeout_ms);
  while (Clock::now() < deadline && !g_stop.load()) {
    try {
      zmq::poll(&item, 1, std::chrono::milliseconds(100));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
    if (const std::string why = handshake.failure(); !why.empty()) {
      HERD_LOG(error) << "worker " << options_.name << " cannot join: " << why;
      return false;
    }
    auto msg = protocol::try_receive(sched_, false);
    if (!msg) continue;
    std::string error;
    auto type = protocol::parse_header(*msg, error);
    if (!type || *type != MessageType::hello_reply) continue;
    protocol::HelloReply reply;
    if (!protocol::decode<MessageType::hello_reply>(*msg, reply, error)) {
      HERD_LOG(error) << "bad hello reply from " << options_.scheduler << ": " << error;
      return false;
    }
    if (!reply.ok) {
      HERD_LOG(error) << "scheduler at " << options_.scheduler << " refused this worker: " << reply.error;
      return false;
    }
    options_.config.heartbeat_ms = reply.heartbeat_ms;
    options_.config.timeout_ms = reply.timeout_ms;
    // Half the scheduler's limit: a notice carries other results and fields beside this one.
    if (reply.max_message_bytes > 0) state_->set_max_full_result_bytes(reply.max_message_bytes / 2);
    if (reply.link_port != 0 && options_.config.links != 0) {
      // Past the scheduler's offer (it is withdrawn after its timeout) the link cannot be made.
      channels_->start_link(static_cast<std::uint16_t>(reply.link_port), {reply.link_offer, reply.link_secret},
                            auth_.keys.has_value(),
                            Clock::now() + std::chrono::milliseconds(reply.timeout_ms) + std::chrono::seconds(5));
    }
    return true;
  }
  if (g_stop.load() || g_drain_signals.load() > 0) {
    HERD_LOG(info) << "stopped before the scheduler at " << options_.scheduler << " answered";
  } else {
    HERD_LOG(error) << "no scheduler answered at " << options_.scheduler << " within "
                    << options_.config.connect_timeout_ms << " ms";
  }
  return false;
}

int Worker::run() {
  if (!connect()) return 1;
  HERD_LOG(info) << "worker " << options_.name << " serving data at " << data_address_;
  auto hooks = std::make_shared<detail::WorkerHooks>();
  hooks->scheduler = options_.scheduler;
  hooks->secede = [this](std::uint64_t id) { secede_task(id); };
  hooks->rejoin = [this](std::uint64_t id) { rejoin_task(id); };
  detail::set_worker_hooks(std::move(hooks));
  // A thread per slot, and one per core: tasks that hold cores hold no slot (WorkerState).
  const std::size_t core_threads = static_cast<std::size_t>(state_->core_task_limit());
  for (std::size_t i = 0; i < options_.nthreads + core_threads; ++i) executors_.emplace_back([this] { executor_loop(); });
  if (options_.memory_limit > 0) {
    monitor_ = std::thread([this] { memory_monitor(); });
    monitor_.detach();  // the process leaves with _exit; nothing to join
  }
  if (options_.config.inline_us > 0) std::thread([this] { relief_watch(); }).detach();  // as the monitor
  last_from_scheduler_ = Clock::now();
  return io_loop("");
}

int Worker::io_loop(const std::string& relieved) {
  std::vector<zmq::pollitem_t> items;
  int exit_code = 0;
  // The state is ours for the whole turn, except while we wait in poll (executors finishing
  // tasks take it then).
  std::unique_lock turn(state_mu_);
  // Taken over from a run of `relieved` that blocked: the function's next tasks would block this
  // thread too, before that run ends and says so.
  if (!relieved.empty()) inline_policy_.relieved(relieved);
  while (!g_stop.load()) {
    // The data port's socket, asked only when something may be queued there unsignalled: an
    // idle port costs libzmq a poll(2) and a getpid(2) a turn otherwise (the round trip's path).
    zmq::pollitem_t data_item{static_cast<void*>(data_->socket()), 0, ZMQ_POLLIN, 0};
    if (data_quiet_) data_item = {nullptr, data_->socket().get(zmq::sockopt::fd), ZMQ_POLLIN, 0};
    items.assign({data_item, {nullptr, wake_fd_, ZMQ_POLLIN, 0}});
    // The scheduler's: its DEALER, and its control link while there is one.
    const std::size_t sched_items = channels_->add_poll_items(items);
    const std::size_t first_peer = fetcher_->add_poll_items(items);
    auto wait = std::chrono::milliseconds(options_.config.heartbeat_ms);
    for (const auto& [id, deadline] : deadlines_) {  // a time limit is kept within ~10 ms
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline.first - Clock::now());
      wait = std::max(std::chrono::milliseconds(1), std::min(wait, left + std::chrono::milliseconds(1)));
    }
    if (const auto due = batch_.deadline()) {  // batched results go then (an executor that opens a batch wakes us)
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*due - Clock::now());
      wait = std::max(std::chrono::milliseconds(0), std::min(wait, left + std::chrono::milliseconds(1)));
    }
    turn.unlock();
    try {
      protocol::poll(items, wait);
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
    turn.lock();
    inline_policy_.new_turn();
    // Wake-ups only say "look at the completion queue".
    if (items[1].revents & ZMQ_POLLIN) {
      std::uint64_t n;
      (void)!::read(wake_fd_, &n, sizeof n);
    }
    if (pause_.load() != state_->paused()) {  // the monitor decided: start nothing new, or again
      state_->pause(pause_.load());
      last_heartbeat_ = {};  // tell the scheduler now
    }
    drain_completions();
    if (const std::uint64_t rss = over_limit_rss_.load(); rss > 0) {
      over_memory_limit(rss);
      exit_code = 3;
      break;
    }
    bool shutdown = false;
    // What the scheduler sent, in order, on whichever way it came (net/channel.hpp).
    from_scheduler_.clear();
    const bool link_ok = channels_->receive(items, sched_items, from_scheduler_);
    if (!from_scheduler_.empty()) last_from_scheduler_ = Clock::now();
    for (auto& msg : from_scheduler_) {
      on_scheduler_message(msg, shutdown);
      if (shutdown) break;
    }
    if (!shutdown && !link_ok) {
      exit_code = 2;
      break;
    }
    if (shutdown) break;
    // Its descriptor fired (commands or a message) or it was asked and had one: serve, and ask
    // it again next turn; else it stays quiet (its descriptor says when that changes).
    data_quiet_ = (items[0].revents & ZMQ_POLLIN) == 0;
    if (!data_quiet_) data_->serve([this](TaskId id) { return store_.get(id); });
    const auto now = Clock::now();
    fetcher_->receive(items, first_peer, fetch_events_, now);
    fetcher_->expire(now, fetch_events_);
    carry_out();
    if (batch_.send_now(now)) flush_results();
    if (!deadlines_.empty()) check_deadlines(now);
    if (!channels_->expire(now)) {
      exit_code = 2;
      break;
    }
    if (now - last_from_scheduler_ > std::chrono::milliseconds(options_.config.timeout_ms)) {
      HERD_LOG(error) << "scheduler at " << options_.scheduler << " silent for " << options_.config.timeout_ms
                      << " ms; exiting";
      exit_code = 2;
      break;
    }
    if (g_drain_signals.load() > 0 && !draining_) {
      // Preemption, scancel or the walltime warning: stop taking work, let the scheduler move
      // it and copy our results, and leave before SIGKILL.
      draining_ = true;
      auto grace = std::chrono::milliseconds(options_.config.drain_grace_ms);
      if (end_time_ > 0) {
        const auto unix_now = std::chrono::duration_cast<std::chrono::seconds>(
                                  std::chrono::system_clock::now().time_since_epoch()).count();
        grace = std::min(grace, std::chrono::milliseconds(std::max<std::int64_t>(0, (end_time_ - unix_now - 2) * 1000)));
      }
      drain_deadline_ = now + grace;
      // Running tasks learn it (this_task().draining(), seconds_left()): time to checkpoint.
      detail::set_worker_end_time(std::chrono::duration_cast<std::chrono::seconds>(
                                      std::chrono::system_clock::now().time_since_epoch()).count() +
                                  std::chrono::duration_cast<std::chrono::seconds>(grace).count());
      detail::set_worker_draining();
      HERD_LOG(info) << "signal received: draining for at most " << grace.count() << " ms";
      if (!retire_asked_) {
        retire_asked_ = true;
        protocol::send<MessageType::retire_request>(*channels_, "", {"drain on signal (preemption, scancel or walltime warning)"});
      }
    }
    if (draining_ && now >= drain_deadline_) {
      HERD_LOG(warning) << "drain deadline passed; leaving with " << state_->executing() << " tasks running";
      goodbye("drain deadline passed");
      break;
    }
    if (end_time_ > 0 && !retire_asked_) {
      const auto unix_now = std::chrono::duration_cast<std::chrono::seconds>(
                                std::chrono::system_clock::now().time_since_epoch()).count();
      if (unix_now + retire_before_s_ >= end_time_) {
        retire_asked_ = true;
        detail::set_worker_draining();
        HERD_LOG(info) << "walltime ends in " << (end_time_ - unix_now) << " s: asking to retire";
        protocol::send<MessageType::retire_request>(*channels_, "", {"walltime ends in " + std::to_string(end_time_ - unix_now) + " s"});
      }
    }
    if (now - last_heartbeat_ >= std::chrono::milliseconds(options_.config.heartbeat_ms)) {
      last_heartbeat_ = now;
      protocol::HeartbeatEvent hb;
      hb.memory_rss = rss_bytes();
      hb.executing = static_cast<std::uint32_t>(state_->executing());
      hb.stored = store_.size();
      hb.spilled_bytes = store_.spilled_bytes();
      hb.cpu = cpu_.percent();
      {
        std::lock_guard lock(pause_mu_);
        hb.paused = pause_reason_;
      }
      protocol::send<MessageType::heartbeat>(*channels_, "", hb);
    }
    if (inline_next_) {
      Run run = std::move(*inline_next_);
      inline_next_.reset();
      if (!run_inline(std::move(run), turn)) {
        // Another thread has the loop now, and ends the process when it ends (leave_process).
        for (;;) ::pause();
      }
      carry_out();  // its result, and what the state starts next
      if (inline_log_open_ != 0) task::LogBook::instance().task_finished(std::exchange(inline_log_open_, 0));
    }
  }
  if (g_stop.load()) goodbye("worker stopped by signal");
  // What is still queued on the link goes before the process does (as the DEALER's linger).
  channels_->drain(std::chrono::milliseconds(1000));
  // Executors that end a task from now on find no one to send its result: the worker leaves.
  return exit_code;
}

void Worker::on_scheduler_message(protocol::Received& msg, bool& shutdown) {
  std::string error;
  auto type = protocol::parse_header(msg, error);
  if (!type) {
    HERD_LOG(error) << "malformed message from the scheduler: " << error;
    return;
  }
  switch (*type) {
    case MessageType::execute_tasks: {
      // Into the same list every time (its tasks are moved out, its storage kept): a batch of
      // hundreds of tasks would otherwise take fresh pages in each of many worker processes.
      if (protocol::decode<MessageType::execute_tasks>(msg, execute_in_, error)) {
        if (!execute_in_.free.empty()) state_->free_keys(execute_in_.free);  // first, as a free_keys before
        on_execute(execute_in_);
      }
      execute_in_.tasks.clear();
      execute_in_.free.clear();
      if (execute_in_.tasks.capacity() > kKeptEntries) std::vector<protocol::ExecuteTask>().swap(execute_in_.tasks);
      break;
    }
    case MessageType::peers_gone: {
      protocol::PeersGoneEvent ev;
      if (protocol::decode<MessageType::peers_gone>(msg, ev, error)) {
        for (const auto& a : ev.addresses) fetcher_->forget(a);
      }
      break;
    }
    case MessageType::free_keys: {
      protocol::KeysEvent ev;
      if (protocol::decode<MessageType::free_keys>(msg, ev, error)) state_->free_keys(ev.ids);
      break;
    }
    case MessageType::cancel_tasks: {
      protocol::KeysEvent ev;
      if (protocol::decode<MessageType::cancel_tasks>(msg, ev, error)) state_->cancel(ev.ids);
      break;
    }
    case MessageType::abandon_tasks: {
      protocol::AbandonTasksEvent ev;
      if (!protocol::decode<MessageType::abandon_tasks>(msg, ev, error)) break;
      for (protocol::TaskId id : ev.ids) {
        const std::string key = state_->running(id) ? state_->running_key(id) : std::string();
        abandon(id, {"herd::CancelledError", "task " + key + " " + ev.reason, key, options_.name});
      }
      break;
    }
    case MessageType::acquire_keys: {
      protocol::AcquireKeysEvent ev;
      if (protocol::decode<MessageType::acquire_keys>(msg, ev, error)) state_->acquire(ev.keys);
      break;
    }
    case MessageType::put_data: {
      protocol::PutDataEvent ev;
      if (!protocol::decode<MessageType::put_data>(msg, ev, error)) break;
      if (!ev.source.empty()) {
        state_->put_from(ev.id, ev.source);  // a big scatter, fetched from its client's data port
      } else if (msg.payloads.size() == 1) {
        auto bytes = std::make_shared<const net::MessagePayload>(std::move(msg.payloads[0]));
        const std::uint64_t n = bytes->size();
        store_.put(ev.id, std::move(bytes));
        spill_to_target();
        state_->put(ev.id, n);
      }
      break;
    }
    case MessageType::retiring: {
      protocol::RetiringEvent ev;
      if (protocol::decode<MessageType::retiring>(msg, ev, error)) on_retiring(ev);
      break;
    }
    case MessageType::shutdown: {
      protocol::GoodbyeEvent bye;
      (void)protocol::decode<MessageType::shutdown>(msg, bye, error);
      HERD_LOG(info) << "scheduler asked this worker to stop: " << bye.reason;
      shutdown = true;
      return;
    }
    case MessageType::gang_ready:
    case MessageType::gang_abort:
      on_gang_message(*type, msg);
      break;
    case MessageType::logs_fetch: {
      protocol::LogsRequest req;
      if (protocol::decode<MessageType::logs_fetch>(msg, req, error)) on_logs_fetch(req);  // worker_logs.cpp
      break;
    }
    case MessageType::heartbeat:
    case MessageType::error:
      break;
    default:
      HERD_LOG(warning) << "unexpected " << protocol::to_string(*type) << " from the scheduler";
  }
  if (!error.empty()) HERD_LOG(error) << "bad message from the scheduler: " << error;
}

void Worker::on_retiring(const protocol::RetiringEvent& ev) {
  // The scheduler retires us (the pool shrinks): it hands our running tasks to other workers
  // after ev.seconds and then says shutdown. Nothing to do here but let the tasks know, so that
  // a checkpointable one saves and gives up in time. A worker draining on its own (a signal)
  // keeps the deadline it set, and the scheduler, which it asked, does not send this.
  if (draining_) return;
  retire_asked_ = true;  // the walltime check need not ask again
  const std::int64_t unix_now =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::int64_t end = unix_now + ev.seconds;
  if (end_time_ > 0) end = std::min(end, end_time_);
  detail::set_worker_end_time(end);
  detail::set_worker_draining();
  HERD_LOG(info) << "retired by the scheduler (" << ev.reason << "): running tasks have " << (end - unix_now)
                 << " s";
}

void Worker::on_execute(protocol::ExecuteTasksEvent& ev) {
  for (const auto& task : ev.tasks) {
    if (task.gang == 0) continue;
    std::lock_guard lock(gang_mu_);
    gangs_[{task.gang, task.gang_attempt}] =
        std::make_shared<collective::GangSession>(task.gang, task.gang_attempt, task.gang_rank, task.gang_size);
    HERD_LOG(debug) << "gang member " << task.key << " (rank " << task.gang_rank << " of " << task.gang_size
                    << ", attempt " << task.gang_attempt << ") arrived";
  }
  state_->set_clock(steady_us());
  state_->execute(std::move(ev.tasks));
}

void Worker::goodbye(const std::string& reason) {
  flush_results();
  protocol::send<MessageType::goodbye>(*channels_, "", {reason});
  const auto deadline = Clock::now() + std::chrono::milliseconds(2000);
  std::vector<zmq::pollitem_t> items;
  std::vector<protocol::Received> in;
  while (Clock::now() < deadline) {
    items.clear();
    const std::size_t first = channels_->add_poll_items(items);
    try {
      protocol::poll(items, std::chrono::milliseconds(50));
    } catch (const zmq::error_t&) {
    }
    in.clear();
    if (!channels_->receive(items, first, in)) return;  // nobody left to answer
    for (auto& msg : in) {
      std::string error;
      auto type = protocol::parse_header(msg, error);
      if (type && *type == MessageType::shutdown) return;
    }
  }
}

void leave_process(Worker& w, int rc) {
  // Tasks may still be running when the scheduler lets us go, and a C++ thread cannot be
  // interrupted: leave without joining them (or running static destructors under them).
  kill_isolated_children();  // they would die with this process anyway (PR_SET_PDEATHSIG): now
  w.remove_local_files();  // spilled results: nobody can ask for them any more
  std::fflush(nullptr);
  task::LogBook::instance().stop_capture();  // what is still in the capture pipes reaches the log files
  ::_exit(rc);
}

int run_worker(WorkerOptions options) {
  auto* w = new Worker(std::move(options));  // never destroyed: see leave_process
  leave_process(*w, w->run());
}

}  // namespace herd::worker
