#include "scheduler/scheduler.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <random>

#include "common/logging.hpp"
#include "herd/error.hpp"
#include "scheduler/http_server.hpp"

namespace herd::scheduler {

using protocol::MessageType;
using protocol::Role;

namespace {
std::atomic<bool> g_stop{false};

std::string random_id() {
  std::random_device rd;
  std::mt19937_64 gen(rd());
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(gen()));
  return buf;
}
}  // namespace

void Scheduler::request_stop() { g_stop.store(true); }

Scheduler::Scheduler(SchedulerOptions options)
    : options_(std::move(options)), auth_(security::Auth::for_server(context_)),
      socket_(context_, zmq::socket_type::router), scheduler_id_(random_id()) {
  auth_.server(socket_);
  if (!options_.journal.empty()) {
    Journal::Options jo;
    jo.memory_bytes = options_.config.journal_memory_bytes;
    journal_ = std::make_unique<Journal>(options_.journal, jo);
    HERD_LOG(info) << "journal " << journal_->path() << ": " << journal_->size() << " finished tasks"
                   << (journal_->dropped_bytes() ? ", " + std::to_string(journal_->dropped_bytes()) +
                                                       " bytes of a torn last record dropped"
                                                 : std::string());
  }
  socket_.set(zmq::sockopt::maxmsgsize, options_.config.max_message_bytes);
  socket_.set(zmq::sockopt::sndhwm, 0);  // batches are few; never drop one silently
  socket_.set(zmq::sockopt::rcvhwm, 0);
  socket_.set(zmq::sockopt::linger, 1000);
}

Scheduler::~Scheduler() {
  http_.reset();  // the dashboard thread stops before the state it shows goes away
  for (auto& p : pools_) p->close();
}

std::string Scheduler::bind() {
  socket_.bind(options_.listen);
  address_ = socket_.get(zmq::sockopt::last_endpoint);
  // A wildcard bind reports 0.0.0.0; peers need a name they can reach.
  if (const auto pos = address_.find("0.0.0.0"); pos != std::string::npos) {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    address_.replace(pos, 7, host);
  }
  start_dashboard();
  return address_;
}

void Scheduler::add_pool(std::unique_ptr<Pool> pool) {
  pool->attach(commands_);
  pools_.push_back(std::move(pool));
  cluster_changed_ = true;
}

Pool* Scheduler::find_pool(const std::string& name) {
  if (name.empty()) return pools_.empty() ? nullptr : pools_.front().get();
  for (auto& p : pools_) {
    if (p->name() == name) return p.get();
  }
  return nullptr;
}

int Scheduler::run() {
  HERD_LOG(info) << "scheduler " << scheduler_id_ << " listening at " << address_;
  std::vector<zmq::pollitem_t> items = {{static_cast<void*>(socket_), 0, ZMQ_POLLIN, 0}};
  if (options_.parent_fd >= 0) items.push_back({nullptr, options_.parent_fd, ZMQ_POLLIN, 0});
  // Answers from the batch system and the journal's writer wake the loop (drained in tick()
  // and flush()): nothing on the loop waits for either.
  items.push_back({nullptr, commands_.wake_fd(), ZMQ_POLLIN, 0});
  if (journal_) items.push_back({nullptr, journal_->wake_fd(), ZMQ_POLLIN, 0});
  while (!g_stop.load()) {
    try {
      // With a dashboard, wake at least every 250 ms to see whether a request wants a snapshot.
      const auto wait = std::chrono::milliseconds(http_ ? std::min<std::int64_t>(options_.config.heartbeat_ms, 250)
                                                        : static_cast<std::int64_t>(options_.config.heartbeat_ms));
      zmq::poll(items.data(), items.size(), wait);
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
    if (options_.parent_fd >= 0 && (items[1].revents & (ZMQ_POLLIN | ZMQ_POLLERR)) != 0) {
      char b;
      if (::read(options_.parent_fd, &b, 1) <= 0) {
        HERD_LOG(info) << "owner process is gone; shutting down";
        break;
      }
    }
    // Drain what is queued, bounded so that the timers below still run under a flood.
    for (int n = 0; n < 10000; ++n) {
      auto msg = protocol::try_receive(socket_, true);
      if (!msg) break;
      handle(*msg);
    }
    schedule();
    flush();
    tick();
  }
  // Tell everyone, then stop the workers we started.
  for (auto& [id, w] : workers_) {
    protocol::send(socket_, w.identity, MessageType::shutdown,
                   protocol::encode(protocol::GoodbyeEvent{"scheduler is shutting down"}));
  }
  for (auto& [idx, c] : clients_) {
    protocol::send(socket_, c.identity, MessageType::shutdown,
                   protocol::encode(protocol::GoodbyeEvent{"scheduler is shutting down"}));
  }
  for (auto& p : pools_) p->close();  // no job of ours stays in the queue
  http_.reset();
  return 0;
}

void Scheduler::send_error(const std::string& identity, const std::string& message) {
  try {
    protocol::send(socket_, identity, MessageType::error, protocol::encode(protocol::ErrorEvent{message}));
  } catch (const zmq::error_t&) {
  }
}

void Scheduler::handle(protocol::Received& msg) {
  std::string error;
  if (msg.frames.size() < 2) {
    drop_peer(msg.identity, "message with " + std::to_string(msg.frames.size()) + " frames");
    return;
  }
  const auto type = protocol::parse_header(msg.frames[0], error);
  if (!type) {
    drop_peer(msg.identity, error);
    return;
  }
  auto peer = peers_.find(msg.identity);
  if (peer == peers_.end()) {
    if (*type == MessageType::hello_request) {
      handle_hello(msg.identity, msg.frames[1]);
    } else {
      // A worker declared lost (silent too long, retired) or a peer that skipped the hello:
      // its message is ignored, and it is told to leave rather than work for nobody.
      HERD_LOG(info) << "ignoring " << protocol::to_string(*type) << " from an unregistered peer";
      protocol::send(socket_, msg.identity, MessageType::shutdown,
                     protocol::encode(protocol::GoodbyeEvent{
                         "not registered with this scheduler (declared lost, retired, or no hello)"}));
    }
    return;
  }
  auto [role, index] = peer->second;
  if (role == Role::worker) {
    auto it = workers_.find(index);
    if (it != workers_.end()) handle_worker(it->second, *type, msg);
  } else {
    auto it = clients_.find(index);
    if (it != clients_.end()) handle_client(it->second, *type, msg);
  }
}

void Scheduler::handle_hello(const std::string& identity, const zmq::message_t& body) {
  protocol::HelloRequest hello;
  std::string error;
  protocol::HelloReply reply;
  reply.heartbeat_ms = options_.config.heartbeat_ms;
  reply.timeout_ms = options_.config.timeout_ms;
  reply.scheduler_id = scheduler_id_;
  if (!protocol::decode(body, hello, error)) {
    reply.error = "malformed hello: " + error;
  } else if (hello.protocol != protocol::kProtocolVersion) {
    reply.error = "protocol version " + std::to_string(hello.protocol) +
                  " is not supported by this scheduler (version " +
                  std::to_string(protocol::kProtocolVersion) + ")";
  } else if (hello.role == static_cast<std::uint8_t>(Role::worker)) {
    WorkerRec w;
    w.id = next_worker_id_++;
    w.identity = identity;
    w.name = hello.name;
    w.host = hello.host;
    w.address = hello.data_address;
    w.job_id = hello.job_id;
    w.pool = hello.pool;
    w.nthreads = std::max<std::uint32_t>(1, hello.nthreads);
    w.resources = hello.resources;
    w.end_time = hello.end_time;
    w.gpus = hello.gpus;
    w.memory_limit = hello.memory_limit;
    w.last_seen = Clock::now();
    w.idle_since = w.last_seen;
    peers_[identity] = {Role::worker, w.id};
    reply.ok = true;
    reply.peer_index = w.id;
    HERD_LOG(info) << "worker " << w.name << " (" << w.address << ", " << w.nthreads
                   << " threads) registered as #" << w.id;
    workers_.emplace(w.id, std::move(w));
    cluster_changed_ = true;
    // Scatters that waited for a first worker.
    auto backlog = std::move(scatter_backlog_);
    scatter_backlog_.clear();
    for (auto& [id, payload] : backlog) dispatch_scatter(id, std::move(payload));
    // Tasks that no worker could fit may fit this one.
    for (TaskId id : no_worker_) {
      if (const Task* t = graph_.find(id); t && t->st() == TaskState::ready) {
        ready_.push({t->priority, t->seq, id});
      }
    }
    no_worker_.clear();
  } else if (hello.role == static_cast<std::uint8_t>(Role::client)) {
    ClientRec c;
    c.index = next_client_index_++;
    c.identity = identity;
    c.name = hello.name;
    c.last_seen = Clock::now();
    peers_[identity] = {Role::client, c.index};
    reply.ok = true;
    reply.peer_index = c.index;
    HERD_LOG(info) << "client " << c.name << " connected as #" << c.index;
    clients_.emplace(c.index, std::move(c));
    cluster_changed_ = true;
  } else {
    reply.error = "unknown role " + std::to_string(hello.role);
  }
  if (!reply.ok) HERD_LOG(warning) << "refused a hello: " << reply.error;
  protocol::send(socket_, identity, MessageType::hello_reply, protocol::encode(reply));
}

void Scheduler::handle_worker(WorkerRec& w, MessageType type, protocol::Received& msg) {
  w.last_seen = Clock::now();
  std::string error;
  switch (type) {
    case MessageType::heartbeat: {
      protocol::HeartbeatEvent hb;
      if (protocol::decode(msg.frames[1], hb, error)) {
        w.memory_rss = hb.memory_rss;
        w.executing = hb.executing;
      }
      break;
    }
    case MessageType::task_results: {
      protocol::TaskResultsEvent ev;
      if (!protocol::decode(msg.frames[1], ev, error)) break;
      for (auto& r : ev.results) {
        w.processing.erase(r.id);
        if (gang_result(w, r)) continue;
        if (!r.handed_back && !r.missing_input) record_run(graph_.find(r.id), w, r);
        if (r.ok) {
          const double us = static_cast<double>(r.duration_us);
          if (const Task* t = graph_.find(r.id); t != nullptr && !t->scattered) {
            avg_task_us_ = avg_task_us_ < 0 ? us : 0.9 * avg_task_us_ + 0.1 * us;
          }
          if (const Task* t = graph_.find(r.id); journal_ && t != nullptr && t->keyed && !t->scattered &&
                                                 t->st() == TaskState::processing && r.nbytes == r.inline_data.size()) {
            journal_->append(t->key, r.inline_data);
          }
          graph_.finished(r.id, w.id, r.nbytes, fx_);
          if (const Task* t = graph_.find(r.id); t && t->in_memory()) {
            w.has.insert(r.id);
            if (!r.inline_data.empty() && t->wanted) inline_results_[r.id] = std::move(r.inline_data);
          }
        } else if (r.handed_back) {
          graph_.requeue(r.id, fx_);  // unstarted task given back by a retiring worker
        } else if (r.missing_input) {
          graph_.input_missing(r.id, fx_);
        } else {
          r.error.worker = w.name;
          graph_.failed(r.id, std::move(r.error), fx_);
        }
      }
      if (w.processing.empty()) w.idle_since = Clock::now();
      for (TaskId id : ev.acquired) {
        graph_.add_holder(id, w.id);
        if (const Task* t = graph_.find(id); t && t->in_memory()) w.has.insert(id);
        else w.free_out.push_back(id);
      }
      apply(fx_);
      break;
    }
    case MessageType::goodbye: {
      protocol::GoodbyeEvent bye;
      (void)protocol::decode(msg.frames[1], bye, error);
      // Acknowledged, so the worker knows everything it sent before arrived (it leaves with
      // _exit, which flushes nothing).
      protocol::send(socket_, w.identity, MessageType::shutdown, protocol::encode(protocol::GoodbyeEvent{"goodbye received"}));
      // A worker that was draining leaves on purpose: its running tasks did nothing wrong.
      worker_lost(w.id, "said goodbye: " + bye.reason, /*count_deaths=*/!w.retiring);
      return;
    }
    case MessageType::gang_join: {
      protocol::GangJoinRequest req;
      if (protocol::decode(msg.frames[1], req, error)) gang_join(w, req);
      break;
    }
    case MessageType::worker_logs_reply:
      on_worker_logs_reply(w, msg.frames[1]);  // src/scheduler/logs.cpp
      break;
    case MessageType::retire_request: {
      protocol::GoodbyeEvent why;
      if (protocol::decode(msg.frames[1], why, error)) retire(w, why.reason);
      break;
    }
    default:
      error = "a worker may not send " + protocol::to_string(type);
  }
  if (!error.empty()) drop_peer(w.identity, error);
}

void Scheduler::handle_client(ClientRec& c, MessageType type, protocol::Received& msg) {
  c.last_seen = Clock::now();
  std::string error;
  switch (type) {
    case MessageType::heartbeat:
      break;
    case MessageType::submit_tasks: {
      // A SubmitTasksRequest, read one TaskSpec at a time (no vector of specs to allocate).
      (void)protocol::decode_each<protocol::TaskSpec>(msg.frames[1], [&](const protocol::TaskSpec& spec) {
        if ((spec.id >> 40) != c.index) {
          error = "task id " + std::to_string(spec.id) + " does not belong to this client";
          return false;
        }
        graph_.add(spec, c.index, fx_);
        if (spec.gang != 0) gang_member_added(spec);
        // Finished before a restart: put the journaled result on a worker instead of running
        // the task again (its recipe stays, for lineage).
        if (journal_ && !spec.key.empty() && journal_->contains(spec.key)) {
          const Task* t = graph_.find(spec.id);
          if (t != nullptr && (t->st() == TaskState::ready || t->st() == TaskState::waiting)) {
            if (const std::vector<char>* done = journal_->find(spec.key)) {
              dispatch_scatter(spec.id, zmq::message_t(done->data(), done->size()));
            } else {
              // A large result kept on disk only: read on the journal's reader thread, placed
              // when it arrives (drain_journal); not placed to run meanwhile.
              journal_->read(spec.key, spec.id);
              std::erase(fx_.ready, spec.id);
            }
          }
        }
        return true;
      }, error);
      apply(fx_);
      break;
    }
    case MessageType::release_keys:
    case MessageType::cancel_tasks: {
      protocol::KeysEvent ev;
      if (!protocol::decode(msg.frames[1], ev, error)) break;
      for (TaskId id : ev.ids) {
        const Task* t = graph_.find(id);
        if (t == nullptr || t->client != c.index) continue;
        if (type == MessageType::release_keys) {
          graph_.release(id, fx_);
        } else if (t->gang != 0) {
          cancel_gang(t->gang, "gang member " + t->key + " was cancelled");
        } else {
          graph_.cancel(id, fx_);
        }
      }
      apply(fx_);
      break;
    }
    case MessageType::scatter_data: {
      protocol::ScatterRequest req;
      if (!protocol::decode(msg.frames[1], req, error)) break;
      if (msg.frames.size() != 3) {
        error = "scatter_data needs exactly one payload frame";
        break;
      }
      if ((req.id >> 40) != c.index) {
        error = "scatter id does not belong to this client";
        break;
      }
      graph_.add_scattered(req.id, req.key, c.index);
      dispatch_scatter(req.id, std::move(msg.frames[2]));
      break;
    }
    case MessageType::scale_pool: {
      protocol::ScalePoolRequest req;
      if (protocol::decode(msg.frames[1], req, error)) handle_scale(c, req);
      break;
    }
    case MessageType::logs_request: {
      protocol::LogsRequest req;
      if (protocol::decode(msg.frames[1], req, error)) handle_logs_request(c, req);  // logs.cpp
      break;
    }
    case MessageType::status_request: {
      protocol::StatusRequest req;
      if (!protocol::decode(msg.frames[1], req, error)) break;
      protocol::StatusReply reply = status_snapshot(std::min<std::uint32_t>(req.max_events, 10000));
      reply.request_id = req.request_id;
      protocol::send(socket_, c.identity, MessageType::status_reply, protocol::encode(reply));
      break;
    }
    case MessageType::goodbye:
      client_lost(c.index, "said goodbye");
      return;
    default:
      error = "a client may not send " + protocol::to_string(type);
  }
  if (!error.empty()) drop_peer(c.identity, error);
}

void Scheduler::dispatch_scatter(TaskId id, zmq::message_t payload) {
  WorkerRec* best = nullptr;
  for (auto& [wid, w] : workers_) {
    if (best == nullptr || w.has.size() < best->has.size()) best = &w;
  }
  if (best == nullptr) {
    scatter_backlog_.emplace_back(id, std::move(payload));
    return;
  }
  graph_.started(id, best->id);
  best->processing.insert(id);  // so that losing the worker fails the scatter, not hangs it
  std::vector<zmq::message_t> payloads;
  payloads.push_back(std::move(payload));
  protocol::send(socket_, best->identity, MessageType::put_data,
                 protocol::encode(protocol::PutDataEvent{id}), std::move(payloads));
}

void Scheduler::drop_peer(const std::string& identity, const std::string& why) {
  auto it = peers_.find(identity);
  if (it == peers_.end()) {
    HERD_LOG(warning) << "ignoring a message from an unknown peer: " << why;
    send_error(identity, why);
    return;
  }
  HERD_LOG(warning) << "dropping " << (it->second.first == Role::worker ? "worker" : "client")
                    << " #" << it->second.second << ": " << why;
  send_error(identity, why);
  if (it->second.first == Role::worker) {
    worker_lost(it->second.second, why);
  } else {
    client_lost(it->second.second, why);
  }
}

void Scheduler::worker_lost(std::uint32_t id, const std::string& why, bool count_deaths) {
  auto it = workers_.find(id);
  if (it == workers_.end()) return;
  WorkerRec w = std::move(it->second);
  workers_.erase(it);
  peers_.erase(w.identity);
  if (count_deaths) {
    HERD_LOG(warning) << "worker " << w.name << " lost (" << why << "); " << w.processing.size()
                      << " tasks running, " << w.has.size() << " results held";
  } else {
    HERD_LOG(info) << "worker " << w.name << " left (" << why << ")";
  }
  // The job goes too when the pool let the worker go or the worker died in it. A worker that
  // left on its own (drain signal, walltime, requeue) leaves its job alone: a requeued job's
  // next incarnation must not be cancelled for its predecessor.
  if (Pool* pool = find_pool(w.pool); pool != nullptr && !w.pool.empty() && !w.job_id.empty() &&
                                      (w.retired_by_pool || !w.retiring)) {
    pool->worker_left(w.job_id, !w.processing.empty() || !w.has.empty());
  }
  std::vector<TaskId> processing(w.processing.begin(), w.processing.end());
  gang_worker_lost(w, processing);
  std::vector<TaskId> held(w.has.begin(), w.has.end());
  graph_.worker_lost(id, processing, held, options_.config.allowed_failures, fx_, count_deaths, w.name);
  logs_worker_gone(w, why);  // pending `herd logs` requests stop waiting for it
  // Clients must not keep pointing at this worker's data port.
  for (auto& [idx, c] : clients_) c.address_index.erase(id);
  apply(fx_);
  cluster_changed_ = true;
}

void Scheduler::client_lost(std::uint32_t index, const std::string& why) {
  auto it = clients_.find(index);
  if (it == clients_.end()) return;
  HERD_LOG(info) << "client #" << index << " gone (" << why << "); releasing its tasks";
  peers_.erase(it->second.identity);
  clients_.erase(it);
  std::vector<TaskId> owned;
  for (const auto& [id, t] : graph_.tasks()) {
    if (t.client == index && t.wanted) owned.push_back(id);
  }
  for (TaskId id : owned) graph_.release(id, fx_);
  apply(fx_);
}

void Scheduler::apply(Effects& fx) {
  for (TaskId id : fx.ready) {
    if (const Task* t = graph_.find(id)) ready_.push({t->priority, t->seq, id});
  }
  for (TaskId id : fx.notify) {
    const Task* t = graph_.find(id);
    if (t == nullptr) continue;
    auto c = clients_.find(t->client);
    if (c == clients_.end()) continue;
    protocol::TaskUpdate u;
    u.id = id;
    u.state = t->state;
    u.nbytes = t->nbytes;
    if (t->in_memory() && !t->who_has.empty()) {
      const std::uint32_t holder = t->who_has.front();
      auto& idx = c->second.address_index;
      auto found = idx.find(holder);
      if (found == idx.end()) {
        auto& addrs = c->second.out.addresses;
        found = idx.emplace(holder, static_cast<std::int32_t>(addrs.size())).first;
        addrs.push_back(workers_.at(holder).address);
      }
      u.location = found->second;
      if (auto in = inline_results_.find(id); in != inline_results_.end()) {
        u.inline_data = std::move(in->second);
      }
    }
    if (t->error) u.error = *t->error;
    c->second.out.updates.push_back(std::move(u));
  }
  for (auto [wid, id] : fx.free) {
    if (auto w = workers_.find(wid); w != workers_.end()) {
      w->second.has.erase(id);
      w->second.free_out.push_back(id);
    }
  }
  for (auto [wid, id] : fx.cancel) {
    if (auto w = workers_.find(wid); w != workers_.end()) w->second.cancel_out.push_back(id);
  }
  inline_results_.clear();
  fx.clear();
}

std::size_t Scheduler::capacity(const WorkerRec& w) const {
  // Keep about queue_horizon_us of expected work queued beyond the free slots, so a worker
  // never idles between batches, yet a slow worker does not hoard what others could run.
  std::size_t extra_per_slot = 1;
  if (avg_task_us_ >= 0) {
    const double n = options_.config.queue_horizon_us / std::max(avg_task_us_, 1.0);
    extra_per_slot = static_cast<std::size_t>(
        std::clamp(n, 1.0, static_cast<double>(options_.config.max_queue_per_slot)));
  }
  return w.nthreads * (1 + extra_per_slot);
}

Scheduler::WorkerRec* Scheduler::pick_worker(const Task& t) {
  WorkerRec* best = nullptr;
  double best_score = 0;
  const std::int64_t now_unix = std::chrono::duration_cast<std::chrono::seconds>(
                                    std::chrono::system_clock::now().time_since_epoch()).count();
  const bool suspect = t.deaths > 0 && t.gang == 0;
  if (suspect) {
    for (auto& [id, w] : workers_) {
      if (w.reserved_for == t.id && !w.retiring) return w.processing.empty() ? &w : nullptr;
    }
  }
  for (auto& [id, w] : workers_) {
    if (w.retiring || w.processing.size() >= capacity(w)) continue;
    if (isolated(w)) continue;
    // Near its memory limit a worker takes nothing new until it is back under.
    if (w.memory_limit > 0 && w.memory_rss > w.memory_limit / 10 * 9) continue;
    // A task that says how long it needs does not go to a worker whose job ends sooner.
    if (t.duration_s > 0 && w.end_time > 0 && now_unix + t.duration_s > w.end_time) continue;
    bool fits = true;
    for (const auto& [r, amount] : t.resources) {
      auto have = w.resources.find(r);
      if (have == w.resources.end() || have->second < amount) fits = false;
    }
    if (!fits) continue;
    // Lower is better: bytes of input to move, then load per slot.
    double to_move = 0;
    for (TaskId d : t.deps) {
      if (!w.has.count(d)) {
        if (const Task* dep = graph_.find(d)) to_move += static_cast<double>(dep->nbytes) + 1;
      }
    }
    const double load = static_cast<double>(w.processing.size()) / w.nthreads;
    const double score = to_move * 1e3 + load;
    if (best == nullptr || score < best_score) {
      best = &w;
      best_score = score;
    }
  }
  if (best != nullptr && suspect && !best->processing.empty()) {
    // A suspect runs alone: the worker finishes what it has, takes nothing new, then runs it.
    best->reserved_for = t.id;
    return nullptr;
  }
  return best;
}

bool Scheduler::isolated(WorkerRec& w) {
  if (w.suspect != 0 && w.processing.count(w.suspect) == 0) w.suspect = 0;
  if (w.reserved_for != 0) {
    const Task* t = graph_.find(w.reserved_for);
    if (t == nullptr || t->st() != TaskState::ready) w.reserved_for = 0;
  }
  return w.suspect != 0 || w.reserved_for != 0;
}

void Scheduler::schedule() {
  std::vector<ReadyItem> deferred;  // suspects waiting for a worker to drain
  while (!ready_.empty()) {
    const ReadyItem item = ready_.top();
    Task* t = graph_.find(item.id);
    if (t == nullptr || t->st() != TaskState::ready) {
      ready_.pop();
      continue;
    }
    if (t->gang != 0) {
      const GangPlacement p = place_gang(*t);
      if (p == GangPlacement::wait) break;  // it blocks what comes after it, or it would starve
      ready_.pop();
      if (p == GangPlacement::set_aside) no_worker_.push_back(t->id);
      continue;
    }
    WorkerRec* w = pick_worker(*t);
    if (w == nullptr && t->deaths > 0 &&
        std::any_of(workers_.begin(), workers_.end(),
                    [&](const auto& kv) { return kv.second.reserved_for == t->id; })) {
      deferred.push_back(item);  // a worker drains for it; the others go on meanwhile
      ready_.pop();
      continue;
    }
    if (w == nullptr) {
      // Full, or nobody could ever run it: set such a task aside so it does not block others.
      bool anyone_fits = false;
      for (const auto& [id, wr] : workers_) {
        bool fits = true;
        for (const auto& [r, amount] : t->resources) {
          auto have = wr.resources.find(r);
          if (have == wr.resources.end() || have->second < amount) fits = false;
        }
        anyone_fits = anyone_fits || fits;
      }
      if (anyone_fits || workers_.empty()) break;
      ready_.pop();
      no_worker_.push_back(t->id);
      continue;
    }
    ready_.pop();
    if (t->deaths > 0) {
      w->suspect = t->id;
      w->reserved_for = 0;
    }
    dispatch(*t, *w, {});
  }
  for (const ReadyItem& item : deferred) ready_.push(item);
}

void Scheduler::dispatch(Task& t, WorkerRec& w, protocol::ExecuteTask e) {
  graph_.started(t.id, w.id);
  w.processing.insert(t.id);
  w.idle_since = Clock::time_point::max();
  e.id = t.id;
  e.function = t.function;
  e.args = t.args;
  e.refs = t.refs;
  e.key = t.key;
  e.resources = t.resources;
  e.full_result = journal_ != nullptr && t.keyed;
  for (TaskId d : t.deps) {
    protocol::DepLocation loc;
    loc.id = d;
    if (const Task* dep = graph_.find(d)) {
      for (std::uint32_t h : dep->who_has) {
        if (auto hw = workers_.find(h); hw != workers_.end()) loc.holders.push_back(hw->second.address);
      }
    }
    e.inputs.push_back(std::move(loc));
  }
  w.exec_out.push_back(std::move(e));
}

void Scheduler::flush() {
  // Clients hear of this turn's results only once its journal records are on disk: a scheduler
  // killed after telling a client would otherwise recompute, after its restart, a task the
  // client saw finish. The writer thread writes and syncs (one fdatasync per batch); the
  // updates wait in held_updates_, in order, and the loop goes on. While the disk refuses
  // writes (full, I/O error) they go out at once and the status says how far behind the
  // journal is: results are not held hostage to a full disk (the journal only saves work
  // after a restart; see docs/architecture.md).
  bool hold = false;
  std::uint64_t turn = 0;
  auto send_updates = [&](std::uint32_t idx, const protocol::TaskUpdatesEvent& ev) {
    if (auto c = clients_.find(idx); c != clients_.end()) {
      protocol::send(socket_, c->second.identity, MessageType::task_updates, protocol::encode(ev));
    }
  };
  if (journal_) {
    journal_->flush();
    drain_journal();
    turn = journal_->appended();
    held_updates_.release(journal_->durable(), journal_->failing(), send_updates);
    hold = !journal_->failing() && (turn > journal_->durable() || !held_updates_.empty());
  }
  for (auto& [id, w] : workers_) flush_worker(w);
  for (auto& [idx, c] : clients_) {
    if (c.out.updates.empty()) continue;
    if (hold) {
      held_updates_.hold(turn, idx, std::move(c.out));
      c.out = protocol::TaskUpdatesEvent{};
    } else {
      send_updates(idx, c.out);
    }
    c.out.updates.clear();
    c.out.addresses.clear();
    c.address_index.clear();
  }
  if (cluster_changed_) broadcast_cluster_state();
}

void Scheduler::drain_journal() {
  for (auto& r : journal_->poll()) {
    const Task* t = graph_.find(r.tag);
    if (t == nullptr || (t->st() != TaskState::ready && t->st() != TaskState::waiting)) continue;
    if (r.error.empty()) {
      dispatch_scatter(r.tag, std::move(r.bytes));
    } else {
      HERD_LOG(warning) << r.error << "; " << r.key << " runs again";
      if (t->st() == TaskState::ready) ready_.push({t->priority, t->seq, t->id});
    }
  }
}

void Scheduler::flush_worker(WorkerRec& w) {
  if (!w.exec_out.empty()) {
    protocol::ExecuteTasksEvent ev;
    ev.tasks.swap(w.exec_out);
    protocol::send(socket_, w.identity, MessageType::execute_tasks, protocol::encode(ev));
  }
  if (!w.free_out.empty()) {
    protocol::KeysEvent ev;
    ev.ids.swap(w.free_out);
    protocol::send(socket_, w.identity, MessageType::free_keys, protocol::encode(ev));
  }
  if (!w.cancel_out.empty()) {
    protocol::KeysEvent ev;
    ev.ids.swap(w.cancel_out);
    protocol::send(socket_, w.identity, MessageType::cancel_tasks, protocol::encode(ev));
  }
}

void Scheduler::broadcast_cluster_state() {
  cluster_changed_ = false;
  last_state_broadcast_ = Clock::now();
  protocol::ClusterStateEvent ev;
  ev.workers = static_cast<std::uint32_t>(workers_.size());
  for (const auto& [id, w] : workers_) ev.threads += w.nthreads;
  for (const auto& p : pools_) {
    std::uint32_t connected = 0;
    for (const auto& [id, w] : workers_) connected += (w.pool == p->name());
    ev.pools.push_back(p->status(connected));
  }
  for (auto& [idx, c] : clients_) {
    protocol::send(socket_, c.identity, MessageType::cluster_state, protocol::encode(ev));
  }
}

void Scheduler::tick() {
  commands_.drain();  // the batch system's answers (they update the pools; see step_pools)
  const auto now = Clock::now();
  if (now - last_heartbeat_ >= std::chrono::milliseconds(options_.config.heartbeat_ms)) {
    last_heartbeat_ = now;
    const auto timeout = std::chrono::milliseconds(options_.config.timeout_ms);
    std::vector<std::uint32_t> silent_workers, silent_clients;
    for (auto& [id, w] : workers_) {
      if (now - w.last_seen > timeout) silent_workers.push_back(id);
      else protocol::send(socket_, w.identity, MessageType::heartbeat, protocol::encode(protocol::HeartbeatEvent{}));
    }
    for (auto& [idx, c] : clients_) {
      if (now - c.last_seen > timeout) silent_clients.push_back(idx);
      else protocol::send(socket_, c.identity, MessageType::heartbeat, protocol::encode(protocol::HeartbeatEvent{}));
    }
    for (auto id : silent_workers) {
      // The worker of a suspended job is frozen, not dead: its tasks go elsewhere without a death.
      const WorkerRec& w = workers_.at(id);
      const Pool* pool = w.pool.empty() || w.job_id.empty() ? nullptr : find_pool(w.pool);
      if (pool != nullptr && pool->job_suspended(w.job_id)) {
        worker_lost(id, "its job " + w.job_id + " is suspended (silent for " + std::to_string(options_.config.timeout_ms) + " ms)",
                    /*count_deaths=*/false);
      } else {
        worker_lost(id, "no heartbeat for " + std::to_string(options_.config.timeout_ms) + " ms");
      }
    }
    for (auto idx : silent_clients) client_lost(idx, "no heartbeat for " + std::to_string(options_.config.timeout_ms) + " ms");
  }
  if (now - last_pool_step_ >= std::chrono::milliseconds(200)) {
    last_pool_step_ = now;
    step_pools();  // starts commands, never waits for one
    progress_retirements();
  }
  if (!pools_.empty() && now - last_state_broadcast_ >= std::chrono::seconds(1)) cluster_changed_ = true;
  if (!logs_queries_.empty()) expire_logs_queries();
  if (http_ && http_->wanted() && now - last_publish_ >= std::chrono::milliseconds(100)) {
    last_publish_ = now;
    publish_dashboard();
  }
  // Worker losses and client losses may have made tasks ready.
  schedule();
  flush();
}


void Scheduler::handle_scale(ClientRec& c, const protocol::ScalePoolRequest& req) {
  protocol::ScalePoolReply reply;
  reply.request_id = req.request_id;
  Pool* pool = find_pool(req.pool);
  if (pool == nullptr) {
    reply.error = pools_.empty() ? std::string("this scheduler has no worker pool to scale")
                                 : "no pool named '" + req.pool + "'";
  } else {
    if (req.adaptive) {
      pool->adapt(req.minimum, req.maximum, std::chrono::seconds(req.idle_timeout_s));
    } else {
      pool->scale(req.target);
    }
    step_pools();  // start the submission now
    cluster_changed_ = true;
    // The reply waits for sbatch's answer, so that a refusal reaches the caller; the loop does
    // not (the client may have gone by then: its identity finds nobody, harmlessly).
    pool->when_settled([this, identity = c.identity, reply](const std::string& error) mutable {
      reply.ok = error.empty();
      reply.error = error;
      protocol::send(socket_, identity, MessageType::scale_reply, protocol::encode(reply));
    });
    return;
  }
  cluster_changed_ = true;
  protocol::send(socket_, c.identity, MessageType::scale_reply, protocol::encode(reply));
}

void Scheduler::step_pools() {
  if (pools_.empty()) return;
  const auto now = Clock::now();
  const std::int64_t now_unix = std::chrono::duration_cast<std::chrono::seconds>(
                                    std::chrono::system_clock::now().time_since_epoch()).count();
  for (auto& pool : pools_) {
    // A worker whose job has ended is gone, whatever its last heartbeat said: no need to wait
    // for the timeout (a crashed local process, a job Slurm killed or lost). The pool's polls
    // run off the loop; these are the ones answered since the last step.
    for (const auto& [job, how] : pool->take_ended()) {
      std::uint32_t gone = 0;
      for (const auto& [id, w] : workers_) {
        if (w.pool == pool->name() && w.job_id == job) gone = id;
      }
      if (gone != 0) worker_lost(gone, "its job " + job + " ended: " + how, !workers_.at(gone).retiring);
    }
    // Backlog this pool could serve: ready and processing tasks whose resources it offers.
    std::size_t backlog = 0;
    if (pool->policy().adaptive) {
      for (const auto& [id, t] : graph_.tasks()) {
        if (t.st() != TaskState::ready && t.st() != TaskState::processing) continue;
        bool fits = true;
        for (const auto& [r, amount] : t.resources) {
          auto have = pool->policy().resources.find(r);
          if (have == pool->policy().resources.end() || have->second < amount) fits = false;
        }
        backlog += fits;
      }
    }
    std::vector<PoolWorker> view;
    for (const auto& [id, w] : workers_) {
      if (w.pool != pool->name()) continue;
      PoolWorker pw;
      pw.id = id;
      pw.job_id = w.job_id;
      pw.idle = w.processing.empty();
      pw.idle_since = w.idle_since;
      // Replace a worker ahead of its walltime: near its end it no longer counts as capacity,
      // so its successor is queued while it still works.
      const std::int64_t lead = pool->policy().replace_lead_s();
      pw.leaving = w.retiring || (w.end_time > 0 && now_unix + lead >= w.end_time);
      view.push_back(pw);
    }
    for (std::uint32_t id : pool->step(now, backlog, avg_task_us_, view)) {
      if (auto it = workers_.find(id); it != workers_.end()) {
        retire(it->second, "pool " + pool->name() + " shrinks");
        it->second.retired_by_pool = true;
      }
    }
  }
}

void Scheduler::retire(WorkerRec& w, const std::string& why) {
  if (w.retiring) return;
  HERD_LOG(info) << "retiring worker " << w.name << ": " << why;
  w.retiring = true;
  w.retire_since = Clock::now();
  // Tasks it has not started come back; running ones finish.
  for (TaskId id : w.processing) w.cancel_out.push_back(id);
  cluster_changed_ = true;
}

void Scheduler::progress_retirements() {
  const auto now = Clock::now();
  std::vector<std::uint32_t> done;
  for (auto& [id, w] : workers_) {
    if (!w.retiring) continue;
    // Running tasks may finish; past the grace they are handed back (not counted as failures).
    // The grace never runs past a few seconds before the job's own end.
    const std::int64_t now_unix = std::chrono::duration_cast<std::chrono::seconds>(
                                      std::chrono::system_clock::now().time_since_epoch()).count();
    const bool grace_over = now - w.retire_since > std::chrono::seconds(options_.retire_grace_s) ||
                            (w.end_time > 0 && now_unix + 5 >= w.end_time);
    if (!w.processing.empty() && !grace_over) continue;
    // Results only this worker holds, that someone still needs, go to another worker first.
    std::map<std::uint32_t, std::vector<protocol::DepLocation>> copies;
    std::size_t unique = 0;
    for (TaskId key : w.has) {
      const Task* t = graph_.find(key);
      if (t == nullptr || !t->in_memory() || t->who_has.size() != 1 || !(t->wanted || t->waiters > 0)) continue;
      ++unique;
      if (w.acquire_sent) continue;
      WorkerRec* target = nullptr;
      for (auto& [oid, other] : workers_) {
        if (oid == id || other.retiring) continue;
        if (target == nullptr || other.has.size() < target->has.size()) target = &other;
      }
      if (target != nullptr) copies[target->id].push_back({key, {w.address}});
    }
    if (!w.acquire_sent) {
      w.acquire_sent = true;
      if (!copies.empty()) {
        for (auto& [target, keys] : copies) {
          protocol::AcquireKeysEvent ev;
          ev.keys = std::move(keys);
          protocol::send(socket_, workers_.at(target).identity, MessageType::acquire_keys, protocol::encode(ev));
        }
        continue;  // leave once the copies are confirmed (or the grace is over)
      }
      // Nowhere to copy to: what it holds is recomputed from lineage if needed again.
    } else if (unique > 0 && !grace_over) {
      continue;
    }
    done.push_back(id);
  }
  for (std::uint32_t id : done) {
    auto& w = workers_.at(id);
    protocol::send(socket_, w.identity, MessageType::shutdown, protocol::encode(protocol::GoodbyeEvent{"retired"}));
    worker_lost(id, "retired", /*count_deaths=*/false);
  }
}

}  // namespace herd::scheduler
