#include "worker/worker.hpp"

#include <cxxabi.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <typeinfo>

#include <malloc.h>

#include "task/this_task.hpp"
#include "net/lane.hpp"
#include "net/tcp.hpp"
#include "common/logging.hpp"
#include "net/interfaces.hpp"
#include "common/process.hpp"
#include "common/util.hpp"
#include "herd/detail/scratch_zone.hpp"
#include "herd/error.hpp"
#include "herd/remote.hpp"
#include "task/log_capture.hpp"

namespace herd::worker {

using protocol::MessageType;
using protocol::TaskId;

namespace {
std::atomic<bool> g_stop{false};
std::atomic<int> g_drain_signals{0};
std::atomic<long long> g_first_drain_ms{0};  // CLOCK_MONOTONIC, when the first one came

long long monotonic_ms() {  // async-signal-safe
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

using util::demangle;
using util::hostname;

// The lists kept from one message to the next (execute_tasks decoded, results to send) keep
// storage for this many entries at most: ~1,000 a message is what batches of tiny tasks bring
// (HERD_BATCH_US), and a burst far bigger should not stay on every worker's heap.
constexpr std::size_t kKeptEntries = 2048;

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
    const char* job = std::getenv("HERD_JOB_ID");
    options_.name = job != nullptr && *job ? std::string(job) : hostname() + ":" + std::to_string(::getpid());
    // Several workers of one job: "12345_0.1" (the job script numbers them on one node, srun's
    // SLURM_PROCID across nodes).
    const char* per_job = std::getenv("HERD_WORKERS_PER_JOB");
    if (job != nullptr && *job && per_job != nullptr && std::atoi(per_job) > 1) {
      const char* index = std::getenv("HERD_WORKER_INDEX");
      if (index == nullptr) index = std::getenv("SLURM_PROCID");
      options_.name += "." + (index != nullptr ? std::string(index) : std::to_string(::getpid()));
    }
  }
  // The batch job's end: Slurm's own figure when it gives one, else start + walltime.
  const auto now_unix = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch()).count();
  if (const char* end = std::getenv("SLURM_JOB_END_TIME"); end != nullptr && std::atoll(end) > 0) {
    end_time_ = std::atoll(end);
  } else if (const char* wall = std::getenv("HERD_WALLTIME_S"); wall != nullptr && std::atoll(wall) > 0) {
    end_time_ = now_unix + std::atoll(wall);
  }
  if (const char* before = std::getenv("HERD_RETIRE_BEFORE_S")) retire_before_s_ = std::atoll(before);
  detail::set_worker_end_time(end_time_);
  // Under Slurm, stay below the job's memory (the cgroup would kill us without a word).
  if (options_.memory_limit == 0) {
    if (const char* mb = std::getenv("SLURM_MEM_PER_NODE"); mb != nullptr && std::atoll(mb) > 0) {
      options_.memory_limit = static_cast<std::uint64_t>(std::atoll(mb)) * 1024 * 1024 * 95 / 100;
      // The workers of one node share its memory.
      if (const char* p = std::getenv("HERD_PROCESSES_PER_NODE"); p != nullptr && std::atoi(p) > 1) {
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
  // cheaper than an inproc ZeroMQ message (bench/README.md, "Profile: the round trip").
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
  state_ = std::make_unique<WorkerState>(so);
  fetcher_ = std::make_unique<net::DataClient>(context_, auth_, std::chrono::milliseconds(options_.config.timeout_ms));
  fetcher_->take_lanes(options_.config.data_lanes != 0);
  // Fetched results go into the store first, then the state hears of them.
  fetch_events_.found = [this](const std::string& address, TaskId id, net::PayloadPtr bytes) {
    const std::uint64_t n = bytes->size();
    store_.put(id, std::move(bytes));
    spill_to_target();
    state_->fetched(address, id, n);
  };
  fetch_events_.missing = [this](const std::string& address, TaskId id) { state_->not_there(address, id); };
  fetch_events_.failed = [this](const std::string& address, const std::vector<TaskId>& ids, const std::string& why) {
    HERD_LOG(warning) << "could not fetch " << ids.size() << " input(s) from " << address << ": " << why;
    state_->fetch_failed(address, ids, why);
  };
  make_spill_directory();  // last: nothing below can throw and leave it behind
}

void Worker::make_spill_directory() {
  if (options_.memory_limit == 0 || options_.config.memory_target_percent + options_.config.memory_spill_percent == 0) return;
  // As Dask: the local directory the user chose, else the job's own scratch space, else the
  // system's temporary directory; a private directory inside, as several workers may share it.
  std::string base = options_.local_directory;
  const bool chosen = !base.empty();
  if (base.empty()) {
    if (const char* t = std::getenv("SLURM_TMPDIR"); t != nullptr && *t != '\0') base = t;
  }
  if (base.empty()) {
    std::error_code ec;
    base = std::filesystem::temp_directory_path(ec).string();
    if (ec) base = "/tmp";
  }
  std::error_code ec;
  std::filesystem::create_directories(base, ec);
  std::string dir = base + "/herd-worker-XXXXXX";
  if (ec || ::mkdtemp(dir.data()) == nullptr) {
    const std::string why = "cannot make a spill directory in " + base + ": " +
                            (ec ? ec.message() : std::string(std::strerror(errno)));
    if (chosen) throw std::runtime_error(why + " (--local-directory)");
    HERD_LOG(warning) << why << "; results will not spill to disk (the worker pauses when memory is short)";
    return;
  }
  store_.set_spill_directory(dir);
  HERD_LOG(info) << "results spill to " << dir << " past " << options_.config.memory_target_percent
                 << "% of the memory limit of " << util::format_bytes(options_.memory_limit);
}

void Worker::spill_to_target() {
  if (options_.memory_limit == 0 || options_.config.memory_target_percent == 0) return;
  const std::uint64_t keep = options_.memory_limit / 100 * options_.config.memory_target_percent;
  if (store_.memory_bytes() <= keep) return;
  if (store_.spill_until(keep) > 0) ::malloc_trim(0);  // give the freed pages back to the system
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
  if (const char* job = std::getenv("HERD_JOB_ID")) {
    hello.job_id = job;
  } else if (const char* sjob = std::getenv("SLURM_JOB_ID")) {
    hello.job_id = sjob;
  }
  if (const char* pool = std::getenv("HERD_POOL")) hello.pool = pool;
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
  for (std::size_t i = 0; i < options_.nthreads; ++i) executors_.emplace_back([this] { executor_loop(); });
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
  state_->execute(std::move(ev.tasks));
}

void Worker::carry_out() {
  WorkerInstructions& out = state_->out();
  if (out.empty()) return;
  const auto now = Clock::now();
  std::vector<std::tuple<std::string, std::vector<TaskId>, std::string>> silent;
  for (auto& [address, ids] : out.fetch) {
    if (std::string why = fetcher_->recently_silent(address, now); !why.empty()) {
      silent.emplace_back(address, std::move(ids), std::move(why));
    } else {
      fetcher_->request(address, std::move(ids), now);
    }
  }
  if (!out.free.empty()) {
    const std::uint64_t before = store_.memory_bytes();
    for (TaskId id : out.free) store_.erase(id);
    // Under a memory limit, big results released give their pages back at once (else the
    // allocator may keep them, and a paused worker would stay paused).
    if (options_.memory_limit > 0 && before - store_.memory_bytes() >= (4u << 20)) ::malloc_trim(0);
  }
  // The turn's run for the I/O thread waits for the turn's end (io_loop), where nothing of the
  // turn is left to do if another thread has to take the loop meanwhile.
  if (auto here = take_inline_run_locked(out)) inline_next_ = std::move(here);
  hand_off_runs_locked(out, now, false);
  for (auto& r : out.results) results_out_.push_back(std::move(r));
  acquired_out_.insert(acquired_out_.end(), out.acquired.begin(), out.acquired.end());
  acquire_failed_out_.insert(acquire_failed_out_.end(), out.acquire_failed.begin(), out.acquire_failed.end());
  if (!out.seceded.empty() || !out.rejoined.empty()) {
    // Before the results of the same turn: the scheduler counts the slot before the task ends.
    protocol::SecedeEvent ev;
    ev.seceded = out.seceded;
    ev.rejoined = out.rejoined;
    protocol::send<MessageType::task_seceded>(*channels_, "", ev);
    for (TaskId id : out.rejoined) {
      if (auto w = rejoin_waiters_.find(id); w != rejoin_waiters_.end()) {
        w->second->set_value();
        rejoin_waiters_.erase(w);
      }
    }
  }
  out.clear();
  if (!silent.empty()) {
    // Failed at once, as the last request there did; the state tries the next holder or
    // reports the inputs out of reach (a new round of instructions).
    for (auto& [address, ids, why] : silent) state_->fetch_failed(address, ids, why);
    carry_out();
    return;
  }
  flush_results();
}

bool Worker::hand_off_runs_locked(WorkerInstructions& out, Clock::time_point now, bool self) {
  bool more;
  // Executors to wake: not the one calling, which takes its next task without sleeping.
  const std::size_t n = out.run.size() - (self && !out.run.empty() ? 1 : 0);
  {
    std::lock_guard lock(run_mu_);
    for (auto& r : out.run) {
      if (r.task.timeout_ms > 0) {  // a gang member's too: it fails the gang attempt
        deadlines_[r.task.id] = {now + std::chrono::milliseconds(r.task.timeout_ms), r.task.timeout_ms};
      }
      handoff_.push_back(std::move(r));
    }
    more = !handoff_.empty();
  }
  out.run.clear();
  if (n > 1) {
    run_cv_.notify_all();
  } else if (n == 1) {
    run_cv_.notify_one();
  }
  return more;
}

namespace {
/// True on the I/O thread while it runs a task itself (Worker::run_inline).
bool& running_inline() {
  thread_local bool here = false;
  return here;
}
/// The task running on this thread's I/O turn called secede.
bool& inline_seceded() {
  thread_local bool seceded = false;
  return seceded;
}
}  // namespace

std::optional<Run> Worker::take_inline_run_locked(WorkerInstructions& out) {
  if (!inline_policy_.take(out.run)) return std::nullopt;
  std::optional<Run> here(std::move(out.run.front()));
  out.run.clear();
  return here;
}

bool Worker::run_inline(Run run, std::unique_lock<std::mutex>& turn) {
  const std::string function = run.task.function;
  std::uint64_t seq;
  {
    std::lock_guard lock(relief_mu_);
    seq = relief_.started(&function, Clock::now());
  }
  // The state is free meanwhile, as while the loop waits in poll: executors end their tasks,
  // and a relief takes the loop.
  turn.unlock();
  running_inline() = true;
  task::LogBook::instance().task_started(run.task.id, run.task.key);
  detail::current_task_id() = run.task.id;
  Completion c = execute(run.task, run.devices, nullptr);
  detail::current_task_id() = 0;
  task::LogBook::task_returned();
  running_inline() = false;
  const bool seceded = std::exchange(inline_seceded(), false);
  bool relieved;
  {
    std::lock_guard lock(relief_mu_);
    relieved = relief_.ended(seq);
  }
  if (relieved) {
    // The new loop has marked the function for executors (io_loop).
    task::LogBook::instance().task_finished(run.task.id);
    finish_on_executor(std::move(c), function, false);
    return false;
  }
  turn.lock();
  using Slow = InlinePolicy::Verdict::Slow;
  const InlinePolicy::Verdict verdict = inline_policy_.ran_inline(function, c.duration_us, seceded);
  if (verdict.slow == Slow::twice || verdict.slow == Slow::too_often) {
    HERD_LOG(info) << "function " << function << " took " << c.duration_us << " us on the I/O thread, "
                   << (verdict.slow == Slow::twice ? "twice in " + std::to_string(verdict.within) + " runs there"
                                                   : std::to_string(verdict.slow_runs) + " times")
                   << "; its tasks run on executors from now on";
  } else if (verdict.slow == Slow::once) {
    HERD_LOG(debug) << "function " << function << " took " << c.duration_us << " us on the I/O thread";
  }
  state_->finished(std::move(c));
  inline_log_open_ = run.task.id;  // finished in the log once its result is out (io_loop)
  return true;
}

void Worker::relief_watch() {
  for (;;) {
    std::this_thread::sleep_for(ReliefPolicy::kLookEvery);
    std::lock_guard lock(relief_mu_);
    std::optional<ReliefPolicy::Relief> relief = relief_.look(Clock::now());
    if (!relief) continue;
    HERD_LOG(warning) << "a task of " << relief->function << " has held the I/O thread for " << relief->held.count()
                      << " ms: another thread takes the sockets, and its tasks run on executors from now on";
    std::thread([this, function = std::move(relief->function)] {
      ::pthread_setname_np(::pthread_self(), "herd-io");
      leave_process(*this, io_loop(function));
    }).detach();
  }
}

void Worker::finish_on_executor(Completion c, const std::string& function, bool takes_next) {
  bool wake = false;
  {
    std::lock_guard lock(state_mu_);
    inline_policy_.ran(function, c.duration_us);
    if (!deadlines_.empty()) deadlines_.erase(c.id);
    state_->finished(std::move(c));
    WorkerInstructions& out = state_->out();
    const auto now = Clock::now();
    const bool more = hand_off_runs_locked(out, now, takes_next);  // this thread takes the next one itself?
    for (auto& r : out.results) exec_results_.push_back(std::move(r));
    out.results.clear();
    if (!out.empty()) wake = true;  // what only the I/O thread does (a rejoin granted...)
    if (batch_.finished(now, more)) wake = true;
  }
  if (wake) wake_io();
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

namespace {
/// True on an executor thread whose task seceded: the thread ends with that task.
bool& seceded_thread() {
  thread_local bool seceded = false;
  return seceded;
}
}  // namespace

void Worker::executor_loop() {
  // Set when the worker stops waiting for this thread's task (Worker::abandon): the thread then
  // ends after it, its completion dropped, as a new executor has taken its place.
  auto abandoned = std::make_shared<std::atomic<bool>>(false);
  detail::current_abandoned() = abandoned;
  while (true) {
    Run run;
    std::shared_ptr<IsolatedChild> child;
    {
      std::unique_lock lock(run_mu_);
      run_cv_.wait(lock, [&] { return stopping_ || !handoff_.empty(); });
      if (stopping_) return;
      run = std::move(handoff_.front());
      handoff_.pop_front();
      OnExecutor& on = on_executor_[run.task.id];
      on = OnExecutor{abandoned, std::this_thread::get_id(), nullptr, run.task.gang, run.task.gang_attempt};
      if (run.task.isolated && run.task.gang == 0) on.child = child = std::make_shared<IsolatedChild>();
      // Still under run_mu_, as on_logs_fetch looks: it finds the task queued or in the
      // LogBook, never between them (lock order: run_mu_, then the LogBook's).
      task::LogBook::instance().task_started(run.task.id, run.task.key);  // output capture
    }
    detail::current_task_id() = run.task.id;
    Completion c = execute(run.task, run.devices, child.get());
    detail::current_task_id() = 0;
    task::LogBook::instance().task_finished(run.task.id);
    {
      std::lock_guard lock(run_mu_);
      auto it = on_executor_.find(run.task.id);
      if (it != on_executor_.end() && it->second.abandoned == abandoned) on_executor_.erase(it);
      if (abandoned->load()) {  // reported failed already; a new executor has the slot
        ended_threads_.push_back(std::this_thread::get_id());  // joined by the next abandon or secede
        return;
      }
    }
    if (!seceded_thread()) {
      finish_on_executor(std::move(c), run.task.function);
      continue;
    }
    // Its task seceded: another executor has had its slot since. Through the I/O thread, after
    // the secede call this thread made (the scheduler hears of the secession first).
    bool was_empty;
    {
      std::lock_guard lock(done_mu_);
      was_empty = done_.empty();
      done_.push_back(std::move(c));
      seceded_functions_.push_back(run.task.function);
    }
    if (was_empty) wake_io();
    {
      std::lock_guard lock(run_mu_);
      ended_threads_.push_back(std::this_thread::get_id());
      return;
    }
  }
}

void Worker::secede_task(TaskId id) {
  if (running_inline()) {
    // On the I/O thread (a function that was quick until now): nothing to give back; if it
    // takes long, a relief takes the loop (relief_watch). Never there again.
    inline_seceded() = true;
    return;
  }
  {
    std::lock_guard lock(run_mu_);
    if (!seceded_thread()) {
      // This thread is the task's until it ends: the slot it leaves gets a thread of its own.
      seceded_thread() = true;
      if (!stopping_) {
        join_ended_locked();
        executors_.emplace_back([this] { executor_loop(); });
      }
    }
  }
  {
    std::lock_guard lock(done_mu_);
    secede_calls_.push_back({id, nullptr});
  }
  wake_io();
}

void Worker::join_ended_locked() {
  for (auto it = executors_.begin(); it != executors_.end();) {
    if (std::find(ended_threads_.begin(), ended_threads_.end(), it->get_id()) != ended_threads_.end()) {
      std::erase(ended_threads_, it->get_id());
      std::erase(abandoned_threads_, it->get_id());
      it->join();  // it has returned, or is about to (it noted itself under run_mu_)
      it = executors_.erase(it);
    } else {
      ++it;
    }
  }
}

void Worker::rejoin_task(TaskId id) {
  if (running_inline()) return;  // it never left its slot (secede_task)
  auto granted = std::make_shared<std::promise<void>>();
  auto f = granted->get_future();
  {
    std::lock_guard lock(done_mu_);
    secede_calls_.push_back({id, granted});
  }
  wake_io();
  // Until the state gives the task a slot again, or the worker stops (the task then goes on).
  while (f.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    if (io_gone_.load()) return;
  }
}

void Worker::release_rejoin_waiters() {
  io_gone_.store(true);
  for (auto& [id, w] : rejoin_waiters_) w->set_value();
  rejoin_waiters_.clear();
}

Completion Worker::execute(const protocol::ExecuteTask& task, const std::vector<int>& devices, IsolatedChild* child) {
  Completion c;
  c.id = task.id;
  // What the task may know about itself: its GPUs (with a stream of its own) and its gang.
  TaskInfo info;
  info.key = task.key;
  info.worker = options_.name;
  info.results_held = store_.size();
  info.result_bytes_held = store_.bytes();
  for (int d : devices) info.gpus.push_back(gpus_[static_cast<std::size_t>(d)].ordinal);
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
      IsolatedOutcome o = run_isolated([&](msgpack::sbuffer& out) { entry->invoke(args, out); },
                                       task.isolated_memory, *child);
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
  c.duration_us = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count());
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

bool Worker::abandon(protocol::TaskId id, protocol::ErrorInfo error) {
  protocol::TaskId gang = 0;
  std::uint32_t gang_attempt = 0;
  {
    std::lock_guard lock(run_mu_);
    auto it = on_executor_.find(id);
    // Not on an executor: not started (handed back below), or it just ended and its completion
    // is on its way (it finished in time).
    if (it == on_executor_.end()) {
      if (state_->running(id)) return false;
      state_->abandon(id, std::move(error));
      return false;
    }
    it->second.abandoned->store(true);
    // Its thread then returns as soon as the child is reaped (and is joined later).
    if (it->second.child) it->second.child->kill();
    gang = it->second.gang;
    gang_attempt = it->second.gang_attempt;
    abandoned_threads_.push_back(it->second.thread);
    on_executor_.erase(it);
    if (!stopping_) {
      join_ended_locked();
      executors_.emplace_back([this] { executor_loop(); });  // the slot, with a thread
    }
  }
  if (gang != 0) {
    // Its collective operations throw GangAborted (the thread may then end); the scheduler
    // aborts the other ranks when it hears of this failure.
    std::shared_ptr<collective::GangSession> session;
    {
      std::lock_guard lock(gang_mu_);
      if (auto g = gangs_.find({gang, gang_attempt}); g != gangs_.end()) session = g->second;
    }
    if (session) session->abort(error.type + ": " + error.message);
  }
  deadlines_.erase(id);
  HERD_LOG(warning) << "stopped waiting for task " << error.task << ": " << error.message;
  state_->abandon(id, std::move(error));
  if (auto w = rejoin_waiters_.find(id); w != rejoin_waiters_.end()) {  // it may go on; it is not waited for
    w->second->set_value();
    rejoin_waiters_.erase(w);
  }
  return true;
}

void Worker::check_deadlines(Clock::time_point now) {
  std::vector<std::pair<protocol::TaskId, std::uint32_t>> due;
  for (const auto& [id, deadline] : deadlines_) {
    if (now >= deadline.first) due.emplace_back(id, deadline.second);
  }
  for (const auto& [id, limit_ms] : due) {
    deadlines_.erase(id);
    if (!state_->running(id)) continue;
    char limit[32];
    std::snprintf(limit, sizeof limit, "%.3g s", limit_ms / 1000.0);
    const std::string key = state_->running_key(id);
    abandon(id, {"herd::TimeoutError",
                 "task " + key + " exceeded its time limit of " + limit +
                     " (TaskOptions::timeout); worker " + options_.name +
                     " stopped waiting for it and freed its slot",
                 key, options_.name});
  }
  if (!due.empty()) carry_out();
}

void Worker::drain_completions() {
  std::vector<Completion> done;
  std::vector<protocol::GangJoinRequest> joins;
  std::vector<SecedeCall> calls;
  std::vector<std::string> seceded;
  {
    std::lock_guard lock(done_mu_);
    done.swap(done_);
    seceded.swap(seceded_functions_);
    joins.swap(gang_joins_);
    calls.swap(secede_calls_);
  }
  for (auto& call : calls) {
    if (!call.rejoined) {
      state_->secede(call.id);
    } else if (!state_->running(call.id)) {
      call.rejoined->set_value();  // abandoned meanwhile: nothing to rejoin
    } else {
      const auto& granted = state_->out().rejoined;
      if (state_->rejoin(call.id) && std::find(granted.begin(), granted.end(), call.id) == granted.end()) {
        call.rejoined->set_value();  // it had not seceded
      } else {
        rejoin_waiters_[call.id] = call.rejoined;  // answered in carry_out, once the state grants it
      }
    }
  }
  for (const auto& function : seceded) inline_policy_.seceded(function);  // never on the I/O thread
  for (const auto& join : joins) protocol::send<MessageType::gang_join>(*channels_, "", join);
  for (auto& c : done) {
    if (!deadlines_.empty()) deadlines_.erase(c.id);
    state_->finished(std::move(c));
  }
  carry_out();
}

void Worker::flush_results() {
  batch_.sent(Clock::now());
  if (results_out_.empty() && exec_results_.empty() && acquired_out_.empty() && acquire_failed_out_.empty()) return;
  protocol::TaskResultsEvent ev;
  ev.results.swap(results_out_);
  if (ev.results.empty()) {
    ev.results.swap(exec_results_);
  } else {
    for (auto& r : exec_results_) ev.results.push_back(std::move(r));
    exec_results_.clear();
  }
  ev.acquired.swap(acquired_out_);
  ev.acquire_failed.swap(acquire_failed_out_);
  protocol::send<MessageType::task_results>(*channels_, "", ev);
  // The executors' list keeps its storage for the next batch (not grown anew by doubling).
  ev.results.clear();
  if (ev.results.capacity() > exec_results_.capacity() && ev.results.capacity() <= kKeptEntries) {
    exec_results_.swap(ev.results);
  }
}

void Worker::memory_monitor() {
  // A task can allocate gigabytes between two heartbeats: sample often (a few small /proc reads).
  // Past the spill share of the limit, results go to disk (least recently used first) until
  // the process is back at the target share; past the pause share, the worker starts nothing
  // new until it is back under (as Dask's memory.spill and memory.pause).
  const Config& c = options_.config;
  const std::uint64_t limit = options_.memory_limit;
  const std::uint64_t target = limit / 100 * (c.memory_target_percent > 0 ? c.memory_target_percent : c.memory_spill_percent);
  while (!g_stop.load() && over_limit_rss_.load() == 0) {
    const std::uint64_t rss = rss_bytes();
    if (rss > limit) {
      // An isolated task's child is what can be stopped: the largest goes, its task fails,
      // and the worker stays (while none is left to kill, it leaves as before).
      const pid_t killed = kill_largest_isolated_child([&](std::uint64_t child_rss) {
        return "it had " + util::format_bytes(child_rss) + " resident when the worker reached " + util::format_bytes(rss) +
               ", over its memory limit of " + util::format_bytes(limit);
      });
      if (killed != 0) {
        HERD_LOG(warning) << "over the memory limit of " << util::format_bytes(limit) << ": killed isolated child " << killed;
        // Its memory is gone once it is reaped; till then it would still be counted.
        for (int i = 0; i < 200 && ::kill(killed, 0) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      over_limit_rss_.store(rss);
      wake_io();
      return;
    }
    if (c.memory_spill_percent > 0 && rss > limit / 100 * c.memory_spill_percent) {
      const std::uint64_t over = rss - std::min(rss, target);
      const std::uint64_t in_memory = store_.memory_bytes();
      if (store_.spill_until(in_memory > over ? in_memory - over : 0) > 0) ::malloc_trim(0);
    }
    update_pause();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void Worker::update_pause() {
  const Config& c = options_.config;
  const std::uint64_t limit = options_.memory_limit;
  // Sampled under the lock: the monitor and an executor decide in turn, each on a fresh figure
  // (an older sample must not undo a pause that a newer one decided).
  std::lock_guard lock(pause_mu_);
  const std::uint64_t rss = rss_bytes();
  const bool want_pause = c.memory_pause_percent > 0 && rss > limit / 100 * c.memory_pause_percent;
  std::string why;
  if (want_pause) {  // kept current while paused: `herd status` shows it
    const std::string error = store_.spill_error();
    why = "memory " + util::format_bytes(rss) + " is past " + std::to_string(c.memory_pause_percent) +
          "% of its limit of " + util::format_bytes(limit) + "; " +
          (!error.empty() ? error
           : store_.spill_directory().empty() ? std::string("it has no spill directory")
           : store_.memory_bytes() == 0 ? std::string("no result is left in memory to spill")
                                        : std::string("spilling"));
  }
  pause_reason_ = why;
  if (want_pause == pause_.load()) return;
  if (want_pause) {
    HERD_LOG(warning) << "pausing: " << why;
  } else {
    HERD_LOG(info) << "resuming: memory " << util::format_bytes(rss) << " is back under " << c.memory_pause_percent
                   << "% of its limit";
  }
  pause_.store(want_pause);
  wake_io();
}

void Worker::over_memory_limit(std::uint64_t rss) {
  // The running task(s) pushed us over: they fail with a clear error; tasks not started are
  // handed back; then the worker leaves (its threads cannot be stopped, its memory is gone)
  // and the pool replaces it.
  {
    std::lock_guard lock(run_mu_);
    stopping_ = true;
    for (const auto& r : handoff_) state_->not_started(r.task.id);  // no executor took it yet
    handoff_.clear();
  }
  const std::string figures = "worker " + options_.name + " reached " + std::to_string(rss >> 20) +
                              " MiB resident, over its memory limit of " + std::to_string(options_.memory_limit >> 20) + " MiB";
  HERD_LOG(error) << figures << "; failing " << state_->executing() << " running task(s) and leaving";
  state_->over_memory(figures);
  carry_out();
  goodbye(figures);
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

std::uint64_t Worker::rss_bytes() const {
  // With the commands its tasks started; less its own file-backed pages (the program's text,
  // spilled results mapped while they are served): clean page cache, not its memory.
  const std::uint64_t all = process::tree_rss_bytes(::getpid());
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("RssFile:", 0) == 0) {
      const std::uint64_t file = std::strtoull(line.c_str() + 8, nullptr, 10) * 1024;  // "NNN kB"
      return all > file ? all - file : 0;
    }
  }
  return all;
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
