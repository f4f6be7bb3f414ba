#include "worker/worker.hpp"

#include <cxxabi.h>
#include <dlfcn.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <typeinfo>

#include "task/this_task.hpp"
#include "common/logging.hpp"
#include "herd/error.hpp"
#include "herd/remote.hpp"
#include "task/log_capture.hpp"

namespace herd::worker {

using protocol::MessageType;
using protocol::TaskId;

namespace {
std::atomic<bool> g_stop{false};
std::atomic<int> g_drain_signals{0};

std::string demangle(const char* name) {
  int status = 0;
  char* out = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string s = (status == 0 && out != nullptr) ? out : name;
  std::free(out);
  return s;
}

std::string hostname() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host;
}

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
  if (g_drain_signals.fetch_add(1) >= 1) g_stop.store(true);  // a second signal: leave now
}

Worker::Worker(WorkerOptions options)
    : options_(std::move(options)), auth_(security::Auth::for_server(context_)),
      sched_(context_, zmq::socket_type::dealer), data_(context_, zmq::socket_type::router) {
  auth_.server(data_);
  auth_.client(sched_);
  if (options_.name.empty()) {
    const char* job = std::getenv("HERD_JOB_ID");
    options_.name = job != nullptr && *job ? std::string(job) : hostname() + ":" + std::to_string(::getpid());
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
  // Under Slurm, stay below the job's memory (the cgroup would kill us without a word).
  if (options_.memory_limit == 0) {
    if (const char* mb = std::getenv("SLURM_MEM_PER_NODE"); mb != nullptr && std::atoll(mb) > 0) {
      options_.memory_limit = static_cast<std::uint64_t>(std::atoll(mb)) * 1024 * 1024 * 95 / 100;
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
  gpu_free_.assign(gpus_.size(), 1.0);
  free_resources_ = options_.resources;
  for (const auto& lib : options_.load) {
    if (::dlopen(lib.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
      throw std::runtime_error("cannot load task library " + lib + ": " + ::dlerror());
    }
  }
  std::string host = options_.listen_host;
  if (host.empty()) {
    const bool loopback = options_.scheduler.find("127.0.0.1") != std::string::npos ||
                          options_.scheduler.find("localhost") != std::string::npos;
    host = loopback ? "127.0.0.1" : "0.0.0.0";
  }
  data_.set(zmq::sockopt::sndhwm, 0);
  data_.set(zmq::sockopt::linger, 0);
  data_.bind("tcp://" + host + ":*");
  data_address_ = data_.get(zmq::sockopt::last_endpoint);
  ring_host_ = host == "0.0.0.0" ? hostname() : host;
  if (const auto pos = data_address_.find("0.0.0.0"); pos != std::string::npos) {
    data_address_.replace(pos, 7, hostname());
  }
  // Executors (and the memory monitor) wake the I/O thread through an eventfd: one write(2),
  // cheaper than an inproc ZeroMQ message (bench/README.md, "Profile: the round trip").
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) throw std::runtime_error("eventfd failed");
  sched_.set(zmq::sockopt::linger, 1000);
  sched_.set(zmq::sockopt::sndhwm, 0);
  sched_.set(zmq::sockopt::rcvhwm, 0);
}

Worker::~Worker() {
  {
    std::lock_guard lock(run_mu_);
    stopping_ = true;
  }
  run_cv_.notify_all();
  for (auto& t : executors_) t.join();
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
  protocol::send(sched_, "", MessageType::hello_request, protocol::encode(hello));
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
    auto type = msg->frames.size() >= 2 ? protocol::parse_header(msg->frames[0], error) : std::nullopt;
    if (!type || *type != MessageType::hello_reply) continue;
    protocol::HelloReply reply;
    if (!protocol::decode(msg->frames[1], reply, error)) {
      HERD_LOG(error) << "bad hello reply from " << options_.scheduler << ": " << error;
      return false;
    }
    if (!reply.ok) {
      HERD_LOG(error) << "scheduler at " << options_.scheduler << " refused this worker: " << reply.error;
      return false;
    }
    options_.config.heartbeat_ms = reply.heartbeat_ms;
    options_.config.timeout_ms = reply.timeout_ms;
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
  for (std::size_t i = 0; i < options_.nthreads; ++i) {
    executors_.emplace_back([this, i] { executor_loop(i); });
  }
  if (options_.memory_limit > 0) {
    monitor_ = std::thread([this] { memory_monitor(); });
    monitor_.detach();  // the process leaves with _exit; nothing to join
  }
  last_from_scheduler_ = Clock::now();
  std::vector<zmq::pollitem_t> items;
  std::vector<std::string> item_peers;
  int exit_code = 0;
  while (!g_stop.load()) {
    items.assign({{static_cast<void*>(sched_), 0, ZMQ_POLLIN, 0},
                  {static_cast<void*>(data_), 0, ZMQ_POLLIN, 0},
                  {nullptr, wake_fd_, ZMQ_POLLIN, 0}});
    item_peers.clear();
    for (auto& [address, socket] : peers_) {
      items.push_back({static_cast<void*>(socket), 0, ZMQ_POLLIN, 0});
      item_peers.push_back(address);
    }
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(options_.config.heartbeat_ms));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
    // Wake-ups only say "look at the completion queue".
    if (items[2].revents & ZMQ_POLLIN) {
      std::uint64_t n;
      (void)!::read(wake_fd_, &n, sizeof n);
    }
    drain_completions();
    if (const std::uint64_t rss = over_limit_rss_.load(); rss > 0) {
      over_memory_limit(rss);
      exit_code = 3;
      break;
    }
    bool shutdown = false;
    std::map<std::string, std::vector<TaskId>> wanted;
    // Not when only the eventfd woke us: an empty non-blocking receive costs libzmq a poll(2)
    // and a getpid(2), on the round trip's path (bench/README.md).
    for (int n = 0; n < 1000 && (items[0].revents & ZMQ_POLLIN) != 0; ++n) {
      auto msg = protocol::try_receive(sched_, false);
      if (!msg) break;
      last_from_scheduler_ = Clock::now();
      std::string error;
      auto type = msg->frames.size() >= 2 ? protocol::parse_header(msg->frames[0], error) : std::nullopt;
      if (!type) {
        HERD_LOG(error) << "malformed message from the scheduler: " << error;
        continue;
      }
      switch (*type) {
        case MessageType::execute_tasks: {
          protocol::ExecuteTasksEvent ev;
          if (protocol::decode(msg->frames[1], ev, error)) on_execute(ev);
          break;
        }
        case MessageType::free_keys: {
          protocol::KeysEvent ev;
          if (protocol::decode(msg->frames[1], ev, error)) {
            for (TaskId id : ev.ids) store_.erase(id);
          }
          break;
        }
        case MessageType::cancel_tasks: {
          protocol::KeysEvent ev;
          if (protocol::decode(msg->frames[1], ev, error)) on_cancel(ev);
          break;
        }
        case MessageType::acquire_keys: {
          protocol::AcquireKeysEvent ev;
          if (protocol::decode(msg->frames[1], ev, error)) on_acquire(ev);
          break;
        }
        case MessageType::put_data: {
          protocol::PutDataEvent ev;
          if (protocol::decode(msg->frames[1], ev, error) && msg->frames.size() == 3) {
            auto bytes = std::make_shared<const Bytes>(std::move(msg->frames[2]));
            protocol::TaskResult r;
            r.id = ev.id;
            r.ok = true;
            r.nbytes = bytes->size();
            store_.put(ev.id, std::move(bytes));
            results_out_.push_back(std::move(r));
          }
          break;
        }
        case MessageType::shutdown: {
          protocol::GoodbyeEvent bye;
          (void)protocol::decode(msg->frames[1], bye, error);
          HERD_LOG(info) << "scheduler asked this worker to stop: " << bye.reason;
          shutdown = true;
          break;
        }
        case MessageType::gang_ready:
        case MessageType::gang_abort:
          on_gang_message(*type, msg->frames[1]);
          break;
        case MessageType::logs_fetch:
          on_logs_fetch(msg->frames[1]);  // src/worker/worker_logs.cpp
          break;
        case MessageType::heartbeat:
        case MessageType::error:
          break;
        default:
          HERD_LOG(warning) << "unexpected " << protocol::to_string(*type) << " from the scheduler";
      }
      if (!error.empty()) HERD_LOG(error) << "bad message from the scheduler: " << error;
    }
    if (shutdown) break;
    for (int n = 0; n < 1000; ++n) {
      auto msg = protocol::try_receive(data_, true);
      if (!msg) break;
      on_data_request(*msg);
    }
    for (std::size_t i = 0; i < item_peers.size(); ++i) {
      if ((items[3 + i].revents & ZMQ_POLLIN) == 0) continue;
      auto& socket = peers_.at(item_peers[i]);
      while (auto msg = protocol::try_receive(socket, false)) on_data_reply(item_peers[i], *msg);
    }
    const auto now = Clock::now();
    // Inputs that did not come in time are asked of the next holder.
    std::vector<std::uint64_t> expired;
    for (const auto& [rid, f] : fetches_) {
      if (now - f.sent > std::chrono::milliseconds(options_.config.timeout_ms)) expired.push_back(rid);
    }
    for (auto rid : expired) {
      Fetch f = std::move(fetches_.at(rid));
      fetches_.erase(rid);
      HERD_LOG(warning) << "no answer from " << f.address << " for " << f.ids.size() << " inputs";
      for (TaskId id : f.ids) fetch_from_next_holder(id, wanted);
    }
    request_inputs(wanted);
    drain_completions();
    if (now - last_from_scheduler_ > std::chrono::milliseconds(options_.config.timeout_ms)) {
      HERD_LOG(error) << "scheduler at " << options_.scheduler << " silent for "
                      << options_.config.timeout_ms << " ms; exiting";
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
      HERD_LOG(info) << "signal received: draining for at most " << grace.count() << " ms";
      if (!retire_asked_) {
        retire_asked_ = true;
        protocol::send(sched_, "", MessageType::retire_request,
                       protocol::encode(protocol::GoodbyeEvent{"drain on signal (preemption, scancel or walltime warning)"}));
      }
    }
    if (draining_ && now >= drain_deadline_) {
      HERD_LOG(warning) << "drain deadline passed; leaving with " << executing_.load() << " tasks running";
      goodbye("drain deadline passed");
      break;
    }
    if (end_time_ > 0 && !retire_asked_) {
      const auto unix_now = std::chrono::duration_cast<std::chrono::seconds>(
                                std::chrono::system_clock::now().time_since_epoch()).count();
      if (unix_now + retire_before_s_ >= end_time_) {
        retire_asked_ = true;
        HERD_LOG(info) << "walltime ends in " << (end_time_ - unix_now) << " s: asking to retire";
        protocol::send(sched_, "", MessageType::retire_request,
                       protocol::encode(protocol::GoodbyeEvent{"walltime ends in " + std::to_string(end_time_ - unix_now) + " s"}));
      }
    }
    if (now - last_heartbeat_ >= std::chrono::milliseconds(options_.config.heartbeat_ms)) {
      last_heartbeat_ = now;
      protocol::HeartbeatEvent hb;
      hb.memory_rss = rss_bytes();
      hb.executing = executing_.load();
      hb.stored = store_.size();
      protocol::send(sched_, "", MessageType::heartbeat, protocol::encode(hb));
    }
  }
  if (g_stop.load()) goodbye("worker stopped by signal");
  return exit_code;
}

void Worker::on_execute(protocol::ExecuteTasksEvent& ev) {
  std::map<std::string, std::vector<TaskId>> wanted;
  for (auto& task : ev.tasks) {
    if (task.gang != 0) {
      std::lock_guard lock(gang_mu_);
      gangs_[{task.gang, task.gang_attempt}] = std::make_shared<collective::GangSession>(
          task.gang, task.gang_attempt, task.gang_rank, task.gang_size);
      HERD_LOG(debug) << "gang member " << task.key << " (rank " << task.gang_rank << " of "
                      << task.gang_size << ", attempt " << task.gang_attempt << ") arrived";
    }
    std::uint32_t missing = 0;
    for (const auto& in : task.inputs) {
      if (store_.contains(in.id)) continue;
      ++missing;
      auto& w = waiters_[in.id];
      w.push_back(task.id);
      if (w.size() == 1) {  // first task to need it: start fetching
        holders_[in.id] = {in.holders, 0};
        fetch_from_next_holder(in.id, wanted);
      }
    }
    if (missing == 0) {
      make_runnable(std::move(task));
    } else {
      const TaskId id = task.id;
      pending_[id] = Pending{std::move(task), missing};
    }
  }
  request_inputs(wanted);
}

void Worker::fetch_from_next_holder(TaskId dep, std::map<std::string, std::vector<TaskId>>& wanted) {
  auto h = holders_.find(dep);
  if (h == holders_.end()) return;
  auto& [list, next] = h->second;
  while (next < list.size() && list[next] == data_address_) ++next;
  if (next >= list.size()) {
    input_unavailable(dep);
    return;
  }
  wanted[list[next++]].push_back(dep);
}

void Worker::request_inputs(std::map<std::string, std::vector<TaskId>>& wanted) {
  for (auto& [address, ids] : wanted) {
    const std::uint64_t rid = next_request_++;
    protocol::GetDataRequest req{rid, ids};
    protocol::send(peer(address), "", MessageType::get_data_request, protocol::encode(req));
    fetches_[rid] = Fetch{address, std::move(ids), Clock::now()};
  }
  wanted.clear();
}

zmq::socket_t& Worker::peer(const std::string& address) {
  auto it = peers_.find(address);
  if (it == peers_.end()) {
    zmq::socket_t s(context_, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::rcvhwm, 0);
    auth_.client(s);
    s.connect(address);
    it = peers_.emplace(address, std::move(s)).first;
  }
  return it->second;
}

void Worker::on_data_request(protocol::Received& msg) {
  std::string error;
  auto type = msg.frames.size() >= 2 ? protocol::parse_header(msg.frames[0], error) : std::nullopt;
  protocol::GetDataRequest req;
  if (!type || *type != MessageType::get_data_request || !protocol::decode(msg.frames[1], req, error)) {
    HERD_LOG(warning) << "ignoring a bad request on the data port: "
                      << (error.empty() ? "not a get_data_request" : error);
    return;
  }
  protocol::GetDataReply reply;
  reply.request_id = req.request_id;
  std::vector<zmq::message_t> payloads;
  for (TaskId id : req.ids) {
    if (auto bytes = store_.get(id)) {
      reply.found.push_back(id);
      payloads.push_back(zero_copy_message(bytes));
    } else {
      reply.missing.push_back(id);
    }
  }
  protocol::send(data_, msg.identity, MessageType::get_data_reply, protocol::encode(reply),
                 std::move(payloads));
}

void Worker::on_data_reply(const std::string& address, protocol::Received& msg) {
  std::string error;
  auto type = msg.frames.size() >= 2 ? protocol::parse_header(msg.frames[0], error) : std::nullopt;
  protocol::GetDataReply reply;
  if (!type || *type != MessageType::get_data_reply || !protocol::decode(msg.frames[1], reply, error) ||
      msg.frames.size() != 2 + reply.found.size()) {
    HERD_LOG(warning) << "bad data reply from " << address << ": " << error;
    return;
  }
  auto f = fetches_.find(reply.request_id);
  if (f == fetches_.end()) return;  // answered after we gave up on it
  fetches_.erase(f);
  for (std::size_t i = 0; i < reply.found.size(); ++i) {
    const TaskId id = reply.found[i];
    store_.put(id, std::make_shared<const Bytes>(std::move(msg.frames[2 + i])));
    acquired_out_.push_back(id);
    input_arrived(id);
  }
  std::map<std::string, std::vector<TaskId>> wanted;
  for (TaskId id : reply.missing) fetch_from_next_holder(id, wanted);
  request_inputs(wanted);
}

void Worker::input_arrived(TaskId dep) {
  holders_.erase(dep);
  auto w = waiters_.find(dep);
  if (w == waiters_.end()) return;
  std::vector<TaskId> tasks = std::move(w->second);
  waiters_.erase(w);
  for (TaskId id : tasks) {
    auto p = pending_.find(id);
    if (p == pending_.end()) continue;
    if (--p->second.missing == 0) {
      protocol::ExecuteTask task = std::move(p->second.task);
      pending_.erase(p);
      make_runnable(std::move(task));
    }
  }
}

void Worker::input_unavailable(TaskId dep) {
  holders_.erase(dep);
  auto w = waiters_.find(dep);
  if (w == waiters_.end()) return;
  std::vector<TaskId> tasks = std::move(w->second);
  waiters_.erase(w);
  for (TaskId id : tasks) {
    if (pending_.erase(id) == 0) continue;
    protocol::TaskResult r;
    r.id = id;
    r.missing_input = true;
    r.error = {"herd::MissingInput", "input could not be fetched from any holder", "", options_.name};
    results_out_.push_back(std::move(r));
  }
}

void Worker::on_cancel(const protocol::KeysEvent& ev) {
  for (TaskId id : ev.ids) {
    bool dropped = pending_.erase(id) > 0;
    if (!dropped) {
      std::lock_guard lock(run_mu_);
      auto it = std::find_if(runnable_.begin(), runnable_.end(), [id](const auto& t) { return t.id == id; });
      if (it != runnable_.end()) {
        runnable_.erase(it);
        dropped = true;
      }
    }
    if (dropped) {
      // Unstarted: given back. The scheduler knows whether it was cancelled or is moving it.
      protocol::TaskResult r;
      r.id = id;
      r.handed_back = true;
      r.error = {"herd::HandedBack", "given back before it started", "", options_.name};
      results_out_.push_back(std::move(r));
    }
  }
}

void Worker::on_acquire(const protocol::AcquireKeysEvent& ev) {
  std::map<std::string, std::vector<TaskId>> wanted;
  for (const auto& key : ev.keys) {
    if (store_.contains(key.id) || holders_.count(key.id)) continue;
    waiters_[key.id];  // no task waits; input_arrived reports it as acquired
    holders_[key.id] = {key.holders, 0};
    fetch_from_next_holder(key.id, wanted);
  }
  request_inputs(wanted);
}

void Worker::make_runnable(protocol::ExecuteTask task) {
  {
    std::lock_guard lock(run_mu_);
    // A gang member goes first: the other ranks are waiting for it.
    if (task.gang != 0) runnable_.push_front(std::move(task));
    else runnable_.push_back(std::move(task));
  }
  run_cv_.notify_all();
}

std::vector<int> Worker::pick_gpus(double need) const {
  std::vector<int> out;
  if (need <= 0) return out;
  if (need < 1) {
    // One device with room, the fullest that fits (so whole devices stay whole).
    int best = -1;
    for (std::size_t i = 0; i < gpu_free_.size(); ++i) {
      if (gpu_free_[i] + 1e-9 >= need && (best < 0 || gpu_free_[i] < gpu_free_[static_cast<std::size_t>(best)])) {
        best = static_cast<int>(i);
      }
    }
    if (best >= 0) out.push_back(best);
    return out;
  }
  const auto n = static_cast<std::size_t>(std::ceil(need - 1e-9));
  for (std::size_t i = 0; i < gpu_free_.size() && out.size() < n; ++i) {
    if (gpu_free_[i] >= 1.0 - 1e-9) out.push_back(static_cast<int>(i));
  }
  if (out.size() < n) out.clear();
  return out;
}

void Worker::on_gang_message(MessageType type, const zmq::message_t& body) {
  std::string error;
  std::shared_ptr<collective::GangSession> session;
  if (type == MessageType::gang_ready) {
    protocol::GangReadyEvent ev;
    if (!protocol::decode(body, ev, error)) {
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
  if (!protocol::decode(body, ev, error)) {
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

void Worker::executor_loop(std::size_t index) {
  std::vector<int> devices;  // indexes into gpus_ held by the current task
  while (true) {
    protocol::ExecuteTask task;
    {
      std::unique_lock lock(run_mu_);
      std::deque<protocol::ExecuteTask>::iterator chosen;
      run_cv_.wait(lock, [&] {
        if (stopping_) return true;
        chosen = std::find_if(runnable_.begin(), runnable_.end(), [&](const auto& t) {
          for (const auto& [r, amount] : t.resources) {
            auto have = free_resources_.find(r);
            if (have == free_resources_.end() || have->second + 1e-9 < amount) return false;
            if (r == "gpu" && pick_gpus(amount).empty() && amount > 0) return false;
          }
          return true;
        });
        return chosen != runnable_.end();
      });
      if (stopping_) return;
      task = std::move(*chosen);
      runnable_.erase(chosen);
      for (const auto& [r, amount] : task.resources) free_resources_[r] -= amount;
      devices.clear();
      if (auto g = task.resources.find("gpu"); g != task.resources.end() && g->second > 0) {
        devices = pick_gpus(g->second);
        for (int d : devices) gpu_free_[static_cast<std::size_t>(d)] -= std::min(1.0, g->second);
      }
      // Still under run_mu_, as on_logs_fetch looks: it finds the task queued or in the
      // LogBook, never between them (lock order: run_mu_, then the LogBook's).
      running_[task.id] = task.key;
      task::LogBook::instance().task_started(task.id, task.key);  // output capture (log_capture.hpp)
    }
    ++executing_;
    Completion c = execute(task, devices);
    task::LogBook::instance().task_finished(task.id);
    {
      std::lock_guard lock(run_mu_);
      running_.erase(task.id);
    }
    --executing_;
    if (!task.resources.empty()) {
      {
        std::lock_guard lock(run_mu_);
        for (const auto& [r, amount] : task.resources) free_resources_[r] += amount;
        if (auto g = task.resources.find("gpu"); g != task.resources.end()) {
          for (int d : devices) gpu_free_[static_cast<std::size_t>(d)] += std::min(1.0, g->second);
        }
      }
      run_cv_.notify_all();
    }
    bool was_empty;
    {
      std::lock_guard lock(done_mu_);
      was_empty = done_.empty();
      done_.push_back(std::move(c));
    }
    if (was_empty) wake_io();
  }
  (void)index;
}

Worker::Completion Worker::execute(const protocol::ExecuteTask& task, const std::vector<int>& devices) {
  Completion c;
  c.id = task.id;
  c.full_result = task.full_result;
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
    msgpack::object_handle args_handle = msgpack::unpack(task.args.data(), task.args.size());
    msgpack::object args = args_handle.get();
    std::vector<msgpack::object_handle> inputs;
    std::vector<BytesPtr> keep;
    for (const auto& ref : task.refs) {
      BytesPtr bytes = store_.get(ref.id);
      if (!bytes) {
        c.missing_input = true;
        c.error = {"herd::MissingInput", "input was freed before the task ran", task.key, options_.name};
        return c;
      }
      inputs.push_back(msgpack::unpack(bytes->data(), bytes->size()));
      keep.push_back(std::move(bytes));
      if (!substitute(args, ref, inputs.back().get())) {
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
    // Stored until the client drops its future: msgpack's default 8 KiB first block would be
    // held (and page-faulted in) for every small result. It grows by doubling (realloc).
    msgpack::sbuffer out(64);
    entry->invoke(args, out);
    detail::current_task() = TaskInfo{};
    const std::size_t size = out.size();
    c.bytes = std::make_shared<const Bytes>(out.release(), size);
    c.ok = true;
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
  if (c.ok) store_.put(c.id, c.bytes);
  return c;
}

void Worker::drain_completions() {
  std::vector<Completion> done;
  std::vector<protocol::GangJoinRequest> joins;
  {
    std::lock_guard lock(done_mu_);
    done.swap(done_);
    joins.swap(gang_joins_);
  }
  for (const auto& join : joins) protocol::send(sched_, "", MessageType::gang_join, protocol::encode(join));
  for (auto& c : done) {
    protocol::TaskResult r;
    r.id = c.id;
    r.ok = c.ok;
    r.duration_us = c.duration_us;
    r.missing_input = c.missing_input;
    if (c.ok) {
      r.nbytes = c.bytes->size();
      if (r.nbytes <= protocol::kInlineResultBytes || c.full_result) {
        r.inline_data.assign(c.bytes->data(), c.bytes->data() + c.bytes->size());
      }
    } else {
      r.error = std::move(c.error);
    }
    results_out_.push_back(std::move(r));
  }
  flush_results();
}

void Worker::flush_results() {
  if (results_out_.empty() && acquired_out_.empty()) return;
  protocol::TaskResultsEvent ev;
  ev.results.swap(results_out_);
  ev.acquired.swap(acquired_out_);
  protocol::send(sched_, "", MessageType::task_results, protocol::encode(ev));
}

void Worker::memory_monitor() {
  // A task can allocate gigabytes between two heartbeats: sample often. /proc/self/statm is
  // cheap (one read of a few bytes).
  while (!g_stop.load() && over_limit_rss_.load() == 0) {
    const std::uint64_t rss = rss_bytes();
    if (rss > options_.memory_limit) {
      over_limit_rss_.store(rss);
      wake_io();
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void Worker::over_memory_limit(std::uint64_t rss) {
  // The running task(s) pushed us over: they fail with a clear error; tasks not started are
  // handed back; then the worker leaves (its threads cannot be stopped, its memory is gone)
  // and the pool replaces it.
  std::map<TaskId, std::string> running;
  std::vector<protocol::ExecuteTask> queued;
  {
    std::lock_guard lock(run_mu_);
    running = running_;
    queued.assign(std::make_move_iterator(runnable_.begin()), std::make_move_iterator(runnable_.end()));
    runnable_.clear();
    stopping_ = true;
  }
  const std::string figures = "worker " + options_.name + " reached " + std::to_string(rss >> 20) +
                              " MiB resident, over its memory limit of " + std::to_string(options_.memory_limit >> 20) +
                              " MiB";
  HERD_LOG(error) << figures << "; failing " << running.size() << " running task(s) and leaving";
  for (const auto& [id, key] : running) {
    protocol::TaskResult r;
    r.id = id;
    r.error = {"herd::MemoryLimitExceeded", "task " + key + " was running when " + figures, key, options_.name};
    results_out_.push_back(std::move(r));
  }
  auto hand_back = [&](TaskId id) {
    protocol::TaskResult r;
    r.id = id;
    r.handed_back = true;
    results_out_.push_back(std::move(r));
  };
  for (const auto& t : queued) hand_back(t.id);
  for (const auto& [id, p] : pending_) hand_back(id);
  flush_results();
  goodbye(figures);
}

void Worker::goodbye(const std::string& reason) {
  flush_results();
  protocol::send(sched_, "", MessageType::goodbye, protocol::encode(protocol::GoodbyeEvent{reason}));
  zmq::pollitem_t item{static_cast<void*>(sched_), 0, ZMQ_POLLIN, 0};
  const auto deadline = Clock::now() + std::chrono::milliseconds(2000);
  while (Clock::now() < deadline) {
    try {
      zmq::poll(&item, 1, std::chrono::milliseconds(50));
    } catch (const zmq::error_t&) {
    }
    while (auto msg = protocol::try_receive(sched_, false)) {
      std::string error;
      auto type = msg->frames.empty() ? std::nullopt : protocol::parse_header(msg->frames[0], error);
      if (type && *type == MessageType::shutdown) return;
    }
  }
}

std::uint64_t Worker::rss_bytes() const {
  std::ifstream statm("/proc/self/statm");
  std::uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

int run_worker(WorkerOptions options) {
  // Tasks may still be running when the scheduler lets us go, and a C++ thread cannot be
  // interrupted: leave without joining them (or running static destructors under them).
  auto* w = new Worker(std::move(options));
  const int rc = w->run();
  std::fflush(nullptr);
  task::LogBook::instance().stop_capture();  // what is still in the capture pipes reaches the log files
  ::_exit(rc);
}

}  // namespace herd::worker
