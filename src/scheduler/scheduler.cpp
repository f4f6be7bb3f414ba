#include "scheduler/scheduler.hpp"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <optional>
#include <random>

#include "common/logging.hpp"
#include "common/util.hpp"
#include "net/frames.hpp"
#include "net/interfaces.hpp"
#include "herd/error.hpp"
#include "scheduler/http_server.hpp"
#include "common/env.hpp"

namespace herd::scheduler {

using protocol::MessageType;

namespace {
std::atomic<bool> g_stop{false};

// A turn reads at most this many messages, and for at most this long, before it places tasks,
// sends and looks at the clock: a client submitting a million tasks at once cannot starve the
// heartbeats.
constexpr int kMaxMessagesPerTurn = 10000;
constexpr auto kMaxTurnReading = std::chrono::milliseconds(50);

std::string random_id() {
  std::random_device rd;
  std::mt19937_64 gen(rd());
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(gen()));
  return buf;
}

StateOptions state_options(const SchedulerOptions& o) {
  StateOptions s;
  s.heartbeat_ms = o.config.heartbeat_ms;
  s.timeout_ms = o.config.timeout_ms;
  s.allowed_failures = o.config.allowed_failures;
  s.queue_horizon_us = o.config.queue_horizon_us;
  s.max_queue_per_slot = o.config.max_queue_per_slot;
  s.batch_us = o.config.batch_us;
  s.retire_grace_s = o.retire_grace_s;
  s.full_results = !o.journal.empty();
  s.record = o.config.record != 0;
#ifndef NDEBUG
  s.validate = true;  // debug builds check every invariant after every event
#endif
  if (const char* v = env::get(env::Var::validate_state); v != nullptr && *v == '1') s.validate = true;
  return s;
}
}  // namespace

void Scheduler::request_stop() { g_stop.store(true); }

Now Scheduler::now() {
  const std::int64_t us =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  return Now{Clock::now(), us / 1000, us};
}

Scheduler::Scheduler(SchedulerOptions options)
    : options_(std::move(options)), auth_(security::Auth::for_server(context_)),
      socket_(context_, zmq::socket_type::router), scheduler_id_(random_id()), state_(state_options(options_)) {
  auth_.server(socket_);
  socket_.set(zmq::sockopt::maxmsgsize, options_.config.max_message_bytes);
  socket_.set(zmq::sockopt::sndhwm, 0);  // batches are few; never drop one silently
  socket_.set(zmq::sockopt::rcvhwm, 0);
  socket_.set(zmq::sockopt::linger, 1000);
  // A connection that has not finished ZeroMQ's handshake (and CURVE's) by then is dropped
  // (libzmq's default: 30 s). Real peers take milliseconds and reconnect if they miss it; a
  // stranger's flood of idle connections then holds a few seconds' worth of descriptors, not
  // half a minute's.
  socket_.set(zmq::sockopt::handshake_ivl, static_cast<int>(std::min<std::uint32_t>(kHandshakeMs, options_.config.timeout_ms)));
  // The listen queue a whole allocation's workers connect through at once (ZeroMQ's default is
  // 100: the rest lose their SYNs and retry a second or more later); the kernel caps it at
  // net.core.somaxconn. The control-link port listens with the same (net/tcp.cpp).
  socket_.set(zmq::sockopt::backlog, 4096);
  waker_ = std::make_unique<Waker>(context_, socket_);
  commands_.set_wake_hook([w = waker_.get()] { w->wake(); });
  start_recording();
  if (!options_.journal.empty()) {
    Journal::Options jo;
    jo.memory_bytes = options_.config.journal_memory_bytes;
    jo.on_wake = [w = waker_.get()] { w->wake(); };
    journal_ = std::make_unique<Journal>(options_.journal, jo);
    HERD_LOG(info) << "journal " << journal_->path() << ": " << journal_->size() << " finished tasks"
                   << (journal_->dropped_bytes() ? ", " + std::to_string(journal_->dropped_bytes()) +
                                                       " bytes of a torn last record dropped"
                                                 : std::string());
    // Detached campaigns come back, for a client that attaches: finished tasks with their
    // results or errors, the others to run again from their recipes.
    std::size_t restored = 0;
    for (const Journal::CampaignMember& m : journal_->campaign_members()) {
      const bool done = journal_->contains(m.key);
      const std::vector<char>* bytes = done ? journal_->find(m.key) : nullptr;
      const TaskId id = state_.restore_campaign_task(m.campaign, m.key, bytes, done && bytes == nullptr,
                                                     done ? nullptr : journal_->error_of(m.key), m.recipe);
      if (done && bytes == nullptr) journal_->read(m.key, id);  // on disk only: read, then placed
      ++restored;
    }
    // Jobs of shell commands come back too: finished tasks with their outcomes, the rest to run.
    const std::size_t job_records = journal_->job_records().size();
    for (const std::vector<char>& record : journal_->job_records()) state_.restore_job_record(record);
    if (job_records > 0) HERD_LOG(info) << "journal: " << state_.jobs().size() << " jobs restored";
    journal_->drop_recipes();
    state_.restore_done();
    if (restored > 0) HERD_LOG(info) << "journal: " << restored << " campaign tasks restored";
  }
}

Scheduler::Waker::Waker(zmq::context_t& context, zmq::socket_t& router) : socket_(context, zmq::socket_type::dealer) {
  // Per context, so one name serves every scheduler in a process (tests run several).
  const char* endpoint = "inproc://herd-scheduler-wake";
  router.bind(endpoint);
  socket_.set(zmq::sockopt::routing_id, kIdentity);
  socket_.set(zmq::sockopt::linger, 0);
  socket_.connect(endpoint);
}

void Scheduler::Waker::wake() {
  if (pending_.exchange(true)) return;  // one is on its way; run() has not read it yet
  std::lock_guard lock(mu_);
  (void)socket_.send(zmq::const_buffer(), zmq::send_flags::dontwait);
}

void Scheduler::Waker::woken() { pending_.store(false); }

Scheduler::~Scheduler() {
  http_.reset();  // the dashboard thread stops before the state it shows goes away
  for (auto& p : pools_) p->close();
  stop_recording();
}

std::string Scheduler::bind() {
  socket_.bind(options_.listen);
  address_ = socket_.get(zmq::sockopt::last_endpoint);
  // A wildcard bind reports 0.0.0.0; peers on other hosts need a name or address they can
  // reach: the host name when it resolves to one that is not loopback (on Debian it resolves
  // to 127.0.1.1 on the host itself), else the first outside interface's address. To choose,
  // bind one interface: --listen tcp://ib0:* (ZeroMQ binds an interface by name).
  if (const auto pos = address_.find("0.0.0.0"); pos != std::string::npos) address_.replace(pos, 7, net::reachable_host());
  std::unique_ptr<net::LinkHub> hub;
  if (options_.config.links != 0) {
    // Beside the ROUTER, on the interface it binds (a worker that cannot reach this port stays
    // on ZeroMQ, so a firewall that opens only the scheduler's port costs speed, not data).
    try {
      std::string host = net::endpoint_host(options_.listen);
      host = host == "*" ? "" : net::bind_host(host);
      hub = std::make_unique<net::LinkHub>(host, static_cast<std::uint64_t>(std::max<std::int64_t>(0, options_.config.max_message_bytes)),
                                           std::chrono::milliseconds(options_.config.timeout_ms));
      HERD_LOG(info) << "control links at port " << hub->port();
    } catch (const std::exception& e) {
      HERD_LOG(warning) << "no control links, workers stay on ZeroMQ: " << e.what();
    }
  }
  channels_ = std::make_unique<net::SchedulerChannels>(socket_, std::move(hub));
  start_dashboard();
  return address_;
}

void Scheduler::add_pool(std::unique_ptr<Pool> pool) {
  pool->attach(commands_);
  pools_.push_back(std::move(pool));
  state_.outbox().cluster_changed = true;
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
  // Whatever finished before this loop woke nobody yet: look once.
  commands_.drain();
  if (journal_) drain_journal();
  Clock::time_point last_parent_look{};
  while (!g_stop.load()) {
    // Every wake-up comes on the socket (other threads' through waker_), so the loop sleeps in
    // its receive. At least every 250 ms with a dashboard (a request may want a snapshot) or an
    // owner (its pipe is looked at then).
    const bool look_often = http_ || options_.parent_fd >= 0;
    const auto wait = std::chrono::milliseconds(look_often ? std::min<std::int64_t>(options_.config.heartbeat_ms, 250)
                                                          : static_cast<std::int64_t>(options_.config.heartbeat_ms));
    const auto turn_start = Clock::now();
    channels_->wait(wait);
    Now t = now();
    // The links' turn when due: claims answered, messages read, broken links' workers dropped.
    step_links(t);
    // Read on while messages are queued, bounded by count and time so the timers below still
    // run under a flood; else one message a turn.
    const bool backlog = channels_->backlog();
    std::optional<protocol::Received> msg = channels_->next_zmq();
    bool woken = false;
    for (int n = 0; msg && n < kMaxMessagesPerTurn; ++n) {
      if (msg->identity == Waker::kIdentity) {
        woken = true;
        waker_->woken();  // before the drains below: a wake after this sends again
      } else {
        handle(*msg, t);
      }
      if (!backlog) break;
      if ((n & 63) == 63) {
        t = now();
        if (t.mono - turn_start > kMaxTurnReading) break;
      }
      msg = channels_->next_zmq();
    }
    t = now();
    if (options_.parent_fd >= 0 && t.mono - last_parent_look >= std::chrono::milliseconds(250)) {
      last_parent_look = t.mono;
      pollfd owner{options_.parent_fd, POLLIN, 0};
      char b;
      if (::poll(&owner, 1, 0) > 0 && ::read(options_.parent_fd, &b, 1) <= 0) {
        HERD_LOG(info) << "owner process is gone; shutting down";
        break;
      }
    }
    // The batch system's answers (they update the pools; see step_pools): only when woken for
    // them (an empty read is a system call on every turn, on a round trip's path). The
    // journal's are drained by flush().
    if (woken) commands_.drain();
    state_.set_clock(t.unix_us);
    state_.tick(t);
    if (t.mono - last_pool_step_ >= std::chrono::milliseconds(200)) {
      last_pool_step_ = t.mono;
      step_pools(t);  // starts commands, never waits for one
    }
    state_.schedule(t);
    if (!pools_.empty() && t.mono - last_state_broadcast_ >= std::chrono::seconds(1)) {
      state_.outbox().cluster_changed = true;
    }
    flush();
    if (!restarts_.empty()) check_restarts(t);
    if (!logs_queries_.empty()) expire_logs_queries();
    if (http_ && http_->wanted() && t.mono - last_publish_ >= std::chrono::milliseconds(100)) {
      last_publish_ = t.mono;
      publish_dashboard();
    }
    channels_->flush();  // last: one write per worker for all the turn sent it
  }
  // Tell everyone, then stop the workers we started.
  for (const auto& [id, identity] : worker_identity_) {
    protocol::send<MessageType::shutdown>(*channels_, identity, {"scheduler is shutting down"});
  }
  for (const auto& [id, identity] : client_identity_) {
    protocol::send<MessageType::shutdown>(*channels_, identity, {"scheduler is shutting down"});
  }
  channels_->drain(std::chrono::milliseconds(1000));  // as the ROUTER's linger
  for (auto& p : pools_) p->close();  // no job of ours stays in the queue
  http_.reset();
  return 0;
}

void Scheduler::step_links(const Now& now) {
  link_events_.messages.clear();
  link_events_.broken.clear();
  channels_->step_links(now.mono, [this](const std::string& peer) { return peers_.count(peer) != 0; }, link_events_);
  for (auto& msg : link_events_.messages) handle(msg, now);
  for (const auto& [peer, why] : link_events_.broken) {
    // What was on its way on the link is lost with it: the worker is lost, as when its ZeroMQ
    // connection breaks (it would come back as a peer nobody knows).
    if (peers_.count(peer) != 0) drop_peer(peer, "its control link broke: " + why);
  }
}

void Scheduler::send_error(const std::string& identity, const std::string& message) {
  try {
    protocol::send<MessageType::error>(*channels_, identity, {message});
  } catch (const zmq::error_t&) {
  }
}

const std::string* Scheduler::identity_of(Role role, std::uint32_t id) const {
  if (role == Role::worker) {
    auto it = worker_identity_.find(id);
    return it == worker_identity_.end() ? nullptr : &it->second;
  }
  auto it = client_identity_.find(id);
  return it == client_identity_.end() ? nullptr : &it->second;
}

void Scheduler::handle(protocol::Received& msg, const Now& now) {
  std::string error;
  const auto type = protocol::parse_header(msg, error);
  if (!type) {
    drop_peer(msg.identity, error);
    return;
  }
  auto peer = peers_.find(msg.identity);
  if (peer == peers_.end()) {
    if (*type == MessageType::hello_request) {
      handle_hello(msg.identity, msg, now);
    } else {
      // A worker declared lost (silent too long, retired) or a peer that skipped the hello:
      // its message is ignored, and it is told to leave rather than work for nobody.
      HERD_LOG(info) << "ignoring " << protocol::to_string(*type) << " from an unregistered peer";
      protocol::send<MessageType::shutdown>(*channels_, msg.identity,
                                            {"not registered with this scheduler (declared lost, retired, or no hello)"});
    }
    return;
  }
  const Peer p = peer->second;
  state_.set_clock(now.unix_us);
  if (p.role == Role::worker) handle_worker(p.id, *type, msg, now);
  else handle_client(p.id, *type, msg, now);
}

void Scheduler::handle_hello(const std::string& identity, protocol::Received& msg, const Now& now) {
  protocol::HelloRequest hello;
  std::string error;
  protocol::HelloReply reply;
  reply.heartbeat_ms = options_.config.heartbeat_ms;
  reply.timeout_ms = options_.config.timeout_ms;
  reply.max_message_bytes = static_cast<std::uint64_t>(std::max<std::int64_t>(0, options_.config.max_message_bytes));
  reply.scheduler_id = scheduler_id_;
  if (!protocol::decode<MessageType::hello_request>(msg, hello, error)) {
    reply.error = "malformed hello: " + error;
  } else if (hello.protocol != protocol::kProtocolVersion) {
    reply.error = "protocol version " + std::to_string(hello.protocol) + " is not supported by this scheduler (version " +
                  std::to_string(protocol::kProtocolVersion) + ")";
  } else if (hello.role == static_cast<std::uint8_t>(protocol::Role::worker)) {
    const WorkerId id = state_.add_worker(hello, now);
    record_worker_joined(hello, now);
    peers_[identity] = {Role::worker, id};
    worker_identity_[id] = identity;
    reply.ok = true;
    reply.peer_index = id;
    if (hello.links) {
      if (const auto offer = channels_->offer_link(identity, auth_.keys.has_value())) {
        reply.link_port = offer->port;
        reply.link_offer = offer->ticket.id;
        reply.link_secret = offer->ticket.secret;
      }
    }
  } else if (hello.role == static_cast<std::uint8_t>(protocol::Role::client)) {
    const ClientId id = state_.add_client(hello, now);
    peers_[identity] = {Role::client, id};
    client_identity_[id] = identity;
    reply.ok = true;
    reply.peer_index = id;
  } else {
    reply.error = "unknown role " + std::to_string(hello.role);
  }
  if (!reply.ok) HERD_LOG(warning) << "refused a hello: " << reply.error;
  protocol::send<MessageType::hello_reply>(*channels_, identity, reply);
}

void Scheduler::handle_worker(WorkerId id, MessageType type, protocol::Received& msg, const Now& now) {
  state_.heard_from_worker(id, now);
  std::string error;
  switch (type) {
    case MessageType::heartbeat: {
      protocol::HeartbeatEvent hb;
      if (protocol::decode<MessageType::heartbeat>(msg, hb, error)) {
        state_.heartbeat(id, hb, now);
        record_heartbeat(id, hb, now);
      }
      break;
    }
    case MessageType::link_switch:
      // Its last ZeroMQ message: its link is read from now on.
      if (!channels_->peer_switched(msg.identity)) error = "a link switch without a control link";
      break;
    case MessageType::task_results: {
      protocol::TaskResultsEvent ev;
      if (protocol::decode<MessageType::task_results>(msg, ev, error)) state_.task_results(id, ev, now);
      break;
    }
    case MessageType::task_seceded: {
      protocol::SecedeEvent ev;
      if (protocol::decode<MessageType::task_seceded>(msg, ev, error)) state_.task_seceded(id, ev, now);
      break;
    }
    case MessageType::goodbye: {
      protocol::GoodbyeEvent bye;
      (void)protocol::decode<MessageType::goodbye>(msg, bye, error);
      error.clear();  // leaving either way
      state_.goodbye(id, bye.reason);
      return;
    }
    case MessageType::gang_join: {
      protocol::GangJoinRequest req;
      if (protocol::decode<MessageType::gang_join>(msg, req, error)) state_.gang_join(id, req);
      break;
    }
    case MessageType::worker_logs_reply: {
      protocol::LogsReply reply;
      if (protocol::decode<MessageType::worker_logs_reply>(msg, reply, error)) on_worker_logs_reply(id, reply);
      break;
    }
    case MessageType::retire_request: {
      protocol::GoodbyeEvent why;
      if (protocol::decode<MessageType::retire_request>(msg, why, error)) state_.retire_request(id, why.reason, now);
      break;
    }
    default:
      error = "a worker may not send " + protocol::to_string(type);
  }
  if (!error.empty()) drop_peer(msg.identity, error);
}

void Scheduler::handle_client(ClientId id, MessageType type, protocol::Received& msg, const Now& now) {
  state_.heard_from_client(id, now);
  std::string error;
  switch (type) {
    case MessageType::heartbeat:
      break;
    case MessageType::submit_tasks: {
      // A SubmitTasksRequest, read one TaskSpec at a time (no vector of specs to allocate).
      std::vector<protocol::TaskId> released;
      (void)protocol::decode_each<protocol::TaskSpec>(
          msg.body(),
          [&](const protocol::TaskSpec& spec) {
            const bool journaled = journal_ && !spec.key.empty() && journal_->contains(spec.key);
            const std::vector<char>* done = journaled ? journal_->find(spec.key) : nullptr;
            if (!state_.submit(id, spec, done, error)) return false;
            if (journaled && done == nullptr && state_.await_journal(spec.id)) {
              // A large result kept on disk only: read on the journal's reader thread, and put
              // on a worker when it arrives (drain_journal); not run meanwhile.
              journal_->read(spec.key, spec.id);
            }
            return true;
          },
          error, {}, &released);
      if (!released.empty()) state_.release(id, released);  // after the tasks, as a release_keys
      break;
    }
    case MessageType::release_keys: {
      protocol::KeysEvent ev;
      if (protocol::decode<MessageType::release_keys>(msg, ev, error)) state_.release(id, ev.ids);
      break;
    }
    case MessageType::cancel_tasks: {
      protocol::KeysEvent ev;
      if (protocol::decode<MessageType::cancel_tasks>(msg, ev, error)) state_.cancel(id, ev.ids);
      break;
    }
    case MessageType::fire_and_forget: {
      protocol::KeysEvent ev;
      if (protocol::decode<MessageType::fire_and_forget>(msg, ev, error)) state_.fire_and_forget(id, ev.ids);
      break;
    }
    case MessageType::force_cancel_tasks: {
      protocol::KeysEvent ev;
      if (protocol::decode<MessageType::force_cancel_tasks>(msg, ev, error)) state_.force_cancel(id, ev.ids);
      break;
    }
    case MessageType::scatter_data: {
      protocol::ScatterRequest req;
      if (!protocol::decode<MessageType::scatter_data>(msg, req, error)) break;
      if (msg.payloads.size() != (req.source.empty() ? 1u : 0u)) {
        error = req.source.empty() ? "scatter_data needs exactly one payload frame"
                                   : "scatter_data with a source carries no payload frame";
        break;
      }
      (void)state_.scatter(id, req,
                          req.source.empty() ? std::make_shared<net::MessagePayload>(std::move(msg.payloads[0])) : nullptr,
                          error);
      break;
    }
    case MessageType::replicate: {
      protocol::ReplicateRequest req;
      if (protocol::decode<MessageType::replicate>(msg, req, error)) state_.replicate(id, req.ids, req.n);
      break;
    }
    case MessageType::scale_pool: {
      protocol::ScalePoolRequest req;
      if (protocol::decode<MessageType::scale_pool>(msg, req, error)) handle_scale(id, req, now);
      break;
    }
    case MessageType::restart_request: {
      protocol::RestartRequest req;
      if (protocol::decode<MessageType::restart_request>(msg, req, error)) handle_restart(id, req, now);
      break;
    }
    case MessageType::report_request: {
      protocol::ReportRequest req;
      if (protocol::decode<MessageType::report_request>(msg, req, error)) handle_report(id, req);  // recording.cpp
      break;
    }
    case MessageType::logs_request: {
      protocol::LogsRequest req;
      if (protocol::decode<MessageType::logs_request>(msg, req, error)) handle_logs_request(id, req);  // logs.cpp
      break;
    }
    case MessageType::status_request: {
      protocol::StatusRequest req;
      if (!protocol::decode<MessageType::status_request>(msg, req, error)) break;
      if (req.explain) {  // `herd explain` (status.cpp)
        protocol::StatusReply reply;
        reply.explanation = explain(req);
        reply.request_id = req.request_id;
        protocol::send<MessageType::status_reply>(*channels_, msg.identity, reply);
        break;
      }
      protocol::StatusReply reply = status_snapshot(std::min<std::uint32_t>(req.max_events, 10000));
      reply.request_id = req.request_id;
      protocol::send<MessageType::status_reply>(*channels_, msg.identity, reply);
      break;
    }
    case MessageType::campaign_request: {
      protocol::CampaignRequest req;
      if (!protocol::decode<MessageType::campaign_request>(msg, req, error)) break;
      protocol::CampaignReply reply;
      reply.request_id = req.request_id;
      switch (static_cast<protocol::CampaignOp>(req.op)) {
        case protocol::CampaignOp::list:
          reply.ok = true;
          reply.campaigns = state_.campaigns();
          break;
        case protocol::CampaignOp::attach:
          (void)state_.attach_campaign(id, req.name, reply);
          break;
        case protocol::CampaignOp::release:
          reply.ok = state_.release_campaign(req.name);
          if (!reply.ok) reply.error = "no campaign named '" + req.name + "'";
          break;
        default:
          reply.error = "unknown campaign operation " + std::to_string(req.op);
      }
      protocol::send<MessageType::campaign_reply>(*channels_, msg.identity, reply);
      break;
    }
    case MessageType::job_request: {
      protocol::JobRequest req;
      if (!protocol::decode<MessageType::job_request>(msg, req, error)) break;
      protocol::JobReply reply;
      reply.request_id = req.request_id;
      switch (static_cast<protocol::JobOp>(req.op)) {
        case protocol::JobOp::submit:
          reply.job = state_.submit_job(std::move(req.spec), now, reply.error);
          reply.ok = reply.job != 0;
          break;
        case protocol::JobOp::list:
          reply.ok = true;
          reply.jobs = state_.jobs();
          reply.campaigns = state_.campaigns();
          break;
        case protocol::JobOp::info:
          (void)state_.job_info(req.job, req.all_tasks, reply);
          break;
        case protocol::JobOp::cancel:
          reply.ok = state_.cancel_job(req.job, "cancelled by " + (req.spec.submitted_by.empty() ? std::string("a client")
                                                                                                   : req.spec.submitted_by),
                                       reply.error);
          if (reply.ok) (void)state_.job_info(req.job, false, reply);
          break;
        case protocol::JobOp::resubmit:
          reply.job = state_.resubmit_job(req.job, !req.all_tasks, now, reply.error);
          reply.ok = reply.job != 0;
          break;
        default:
          reply.error = "unknown job operation " + std::to_string(req.op);
      }
      job_replies_.emplace_back(id, std::move(reply));  // sent by flush(), once journaled
      break;
    }
    case MessageType::fetch_failed: {
      protocol::FetchFailedEvent ev;
      if (protocol::decode<MessageType::fetch_failed>(msg, ev, error)) state_.client_fetch_failed(id, ev);
      break;
    }
    case MessageType::goodbye:
      state_.client_lost(id, "said goodbye");
      return;
    default:
      error = "a client may not send " + protocol::to_string(type);
  }
  if (!error.empty()) drop_peer(msg.identity, error);
}

void Scheduler::drop_peer(const std::string& identity, const std::string& why) {
  auto it = peers_.find(identity);
  if (it == peers_.end()) {
    HERD_LOG(warning) << "ignoring a message from an unknown peer: " << why;
    send_error(identity, why);
    return;
  }
  const Peer p = it->second;
  HERD_LOG(warning) << "dropping " << (p.role == Role::worker ? "worker" : "client") << " #" << p.id << ": " << why;
  send_error(identity, why);
  if (p.role == Role::worker) state_.worker_lost(p.id, why);
  else state_.client_lost(p.id, why);
}

void Scheduler::note_done(const Departure& d) {
  // Left on its own (walltime, drain signal): its job ends by itself and is no capacity, or the
  // pool would count it until Slurm says it ended and retire the new workers that replace it,
  // results and all.
  Pool* p = find_pool(d.pool);
  if (p == nullptr || d.pool.empty() || d.job_id.empty()) return;
  for (const auto& [wid, w] : state_.workers()) {
    if (wid != d.id && w.pool == d.pool && w.job_id == d.job_id) return;  // a sibling stays
  }
  p->worker_done(d.job_id);
}

void Scheduler::flush() {
  Outbox& out = state_.outbox();
  // Clients hear of this turn's results only once its journal records are on disk: a scheduler
  // killed after telling a client would otherwise recompute, after its restart, a task the
  // client saw finish. The writer thread writes and syncs (one fdatasync per batch); the
  // updates wait in held_updates_, in order, and the loop goes on. While the disk refuses
  // writes (full, I/O error) they go out at once and the status says how far behind the
  // journal is: results are not held hostage to a full disk (the journal only saves work
  // after a restart; see docs/architecture.md).
  bool hold = false;
  std::uint64_t turn = 0;
  auto send_updates = [&](ClientId c, const protocol::TaskUpdatesEvent& ev) {
    if (const std::string* identity = identity_of(Role::client, c)) {
      protocol::send<MessageType::task_updates>(*channels_, *identity, ev);
    }
  };
  if (journal_) {
    for (auto& [key, bytes] : out.journal) journal_->append(key, std::move(bytes));
    journal_->flush();
    drain_journal();
    turn = journal_->appended();
    held_updates_.release(journal_->durable(), journal_->failing(), send_updates);
    hold = !journal_->failing() && (turn > journal_->durable() || !held_updates_.empty());
  }
  auto send_job_reply = [&](ClientId c, const protocol::JobReply& reply) {
    if (const std::string* identity = identity_of(Role::client, c)) {
      protocol::send<MessageType::job_reply>(*channels_, *identity, reply);
    }
  };
  if (journal_) held_job_replies_.release(journal_->durable(), journal_->failing(), send_job_reply);
  for (auto& [c, reply] : job_replies_) {
    if (journal_ && !journal_->failing() && (turn > journal_->durable() || !held_job_replies_.empty())) {
      held_job_replies_.hold(turn, c, std::move(reply));
    } else {
      send_job_reply(c, reply);
    }
  }
  job_replies_.clear();
  out.journal.clear();
  for (auto& [id, w] : out.workers) flush_worker(id);
  for (auto& [id, c] : out.clients) {
    const std::string* identity = identity_of(Role::client, id);
    if (identity == nullptr) continue;
    if (!c.updates.updates.empty()) {
      if (hold) held_updates_.hold(turn, id, std::move(c.updates));
      else send_updates(id, c.updates);
    }
    if (!c.scatter_inline.ids.empty()) protocol::send<MessageType::scatter_inline>(*channels_, *identity, c.scatter_inline);
    if (c.heartbeat) protocol::send<MessageType::heartbeat>(*channels_, *identity, {});
    if (c.shutdown) protocol::send<MessageType::shutdown>(*channels_, *identity, {*c.shutdown});
  }
  protocol::PeersGoneEvent gone;
  const Now departed_at = out.departed.empty() ? Now{} : now();
  for (const Departure& d : out.departed) {
    record_departure(d, departed_at);
    if (!d.address.empty()) gone.addresses.push_back(d.address);
    if (auto identity = worker_identity_.find(d.id); identity != worker_identity_.end()) {
      channels_->close(identity->second);  // after what is queued there (its shutdown)
      peers_.erase(identity->second);
      worker_identity_.erase(identity);
    }
    if (Pool* pool = find_pool(d.pool); pool != nullptr && !d.pool.empty() && !d.job_id.empty() && d.release_job) {
      // A job of several workers stays while one of them is still connected.
      bool siblings = false;
      for (const auto& [wid, w] : state_.workers()) {
        siblings = siblings || (wid != d.id && w.pool == d.pool && w.job_id == d.job_id);
      }
      pool->worker_left(d.job_id, d.worked, siblings);
    } else {
      note_done(d);
    }
    logs_worker_gone(d.id, d.name, d.why);  // pending `herd logs` requests stop waiting for it
  }
  for (ClientId id : out.clients_departed) {
    if (auto identity = client_identity_.find(id); identity != client_identity_.end()) {
      peers_.erase(identity->second);
      client_identity_.erase(identity);
    }
  }
  if (!gone.addresses.empty()) {
    // One message per peer per turn, however many left in it.
    for (const auto& [identity, p] : peers_) protocol::send<MessageType::peers_gone>(*channels_, identity, gone);
  }
  if (out.cluster_changed) broadcast_cluster_state();
  out.clear();
  record_turn();
}

void Scheduler::drain_journal() {
  for (auto& r : journal_->poll()) {
    if (r.error.empty()) {
      state_.journal_read(r.tag, std::make_shared<net::MessagePayload>(std::move(r.bytes)));
    } else {
      HERD_LOG(warning) << r.error << "; " << r.key << " runs again";
      state_.journal_read(r.tag, nullptr);
    }
  }
}

void Scheduler::flush_worker(WorkerId id) {
  Outbox& outbox = state_.outbox();
  auto it = outbox.workers.find(id);
  if (it == outbox.workers.end()) return;
  WorkerOut& w = it->second;
  const std::string* identity = identity_of(Role::worker, id);
  if (identity != nullptr) {
    // Freed results ride with the tasks to run when nothing else goes between (one message, not
    // two, on a round trip's path); the worker frees them first, as it would a free_keys.
    const bool free_with_execute = !w.free.empty() && !w.execute.empty() && w.put.empty() && w.put_from.empty() &&
                                   w.acquire.empty();
    if (!w.free.empty() && !free_with_execute) {
      protocol::send<MessageType::free_keys>(*channels_, *identity, {std::move(w.free)});
    }
    for (auto& [tid, payload] : w.put) {
      std::vector<zmq::message_t> payloads;
      payloads.push_back(net::zero_copy(payload));
      protocol::send<MessageType::put_data>(*channels_, *identity, {tid, ""}, std::move(payloads));
    }
    for (auto& ev : w.put_from) protocol::send<MessageType::put_data>(*channels_, *identity, ev);
    if (!w.acquire.empty()) protocol::send<MessageType::acquire_keys>(*channels_, *identity, {std::move(w.acquire)});
    if (!w.execute.empty()) {
      protocol::ExecuteTasksEvent ev{std::move(w.execute), free_with_execute ? std::move(w.free) : std::vector<protocol::TaskId>{}};
      protocol::send<MessageType::execute_tasks>(*channels_, *identity, ev);
      w.execute = std::move(ev.tasks);  // its memory, for the entry's next turn (reset below)
    }
    if (!w.cancel.empty()) protocol::send<MessageType::cancel_tasks>(*channels_, *identity, {std::move(w.cancel)});
    if (w.retiring) protocol::send<MessageType::retiring>(*channels_, *identity, *w.retiring);
    if (!w.abandon.empty()) {
      protocol::send<MessageType::abandon_tasks>(*channels_, *identity,
                                                 {std::move(w.abandon), "cancelled while running (cancel(force))"});
    }
    for (const auto& ev : w.gang_ready) protocol::send<MessageType::gang_ready>(*channels_, *identity, ev);
    for (const auto& ev : w.gang_abort) protocol::send<MessageType::gang_abort>(*channels_, *identity, ev);
    if (w.heartbeat) protocol::send<MessageType::heartbeat>(*channels_, *identity, {});
    if (w.shutdown) protocol::send<MessageType::shutdown>(*channels_, *identity, {*w.shutdown});
  }
  w.reset();  // sent (the entry goes with the turn's outbox)
}

void Scheduler::broadcast_cluster_state() {
  last_state_broadcast_ = Clock::now();
  protocol::ClusterStateEvent ev;
  ev.workers = static_cast<std::uint32_t>(state_.workers().size());
  for (const auto& [id, w] : state_.workers()) ev.threads += w.nthreads;
  for (const auto& p : pools_) ev.pools.push_back(pool_status(*p));
  for (const auto& [id, identity] : client_identity_) protocol::send<MessageType::cluster_state>(*channels_, identity, ev);
}

namespace {

/// "a, b, c" (at most `most` named, then "and N more").
template <typename Names>
std::string name_list(const Names& names, std::size_t most = 20) {
  std::string out;
  std::size_t n = 0;
  for (const std::string& name : names) {
    if (n++ == most) break;
    out += (out.empty() ? "" : ", ") + name;
  }
  if (names.size() > most) out += " and " + std::to_string(names.size() - most) + " more";
  return out;
}

}  // namespace

void Scheduler::describe_change(protocol::ScalePoolReply& reply, const Pool& pool, std::uint64_t submitted_before) const {
  const protocol::PoolStatus s = pool_status(pool);
  reply.pool = pool.name();
  reply.after = s.target;
  reply.adaptive = s.adaptive;
  reply.minimum = s.minimum;
  reply.maximum = s.maximum;
  reply.submitted = static_cast<std::uint32_t>(s.submitted >= submitted_before ? s.submitted - submitted_before : 0);
  reply.user_paused = s.user_paused;
  reply.kept_for_data = s.kept_for_data;
  reply.workers_per_job = s.workers_per_job;
  reply.retiring = 0;
  for (const auto& [wid, w] : state_.workers()) reply.retiring += (w.pool == pool.name() && w.retiring);
}

void Scheduler::handle_scale(ClientId id, const protocol::ScalePoolRequest& req, const Now& now) {
  protocol::ScalePoolReply reply;
  reply.request_id = req.request_id;
  const auto send_reply = [this, id](const protocol::ScalePoolReply& r) {
    if (const std::string* identity = identity_of(Role::client, id)) protocol::send<MessageType::scale_reply>(*channels_, *identity, r);
  };
  if (req.action == "retire") {
    retire_by_name(req, reply, now);
    send_reply(reply);
    return;
  }
  if (!req.action.empty() && req.action != "pause" && req.action != "resume") {
    reply.error = "unknown pool action '" + req.action + "' (pause, resume, retire)";
    send_reply(reply);
    return;
  }
  Pool* pool = find_pool(req.pool);
  if (pool == nullptr) {
    std::vector<std::string> names;
    for (const auto& p : pools_) names.push_back(p->name());
    reply.error = pools_.empty() ? std::string("this scheduler has no worker pool to scale")
                                 : "no pool named '" + req.pool + "'; the pools are: " + name_list(names);
    send_reply(reply);
    return;
  }
  const protocol::PoolStatus before = pool_status(*pool);
  reply.before = before.target;
  std::string refused;
  if (req.action == "pause") {
    pool->pause();
  } else if (req.action == "resume") {
    pool->resume();
  } else if (req.adaptive) {
    pool->adapt(req.minimum, req.maximum, std::chrono::seconds(req.idle_timeout_s));
    pool->adapt_pace(std::chrono::milliseconds(req.interval_ms), std::chrono::milliseconds(req.target_duration_ms),
                     req.wait_count);
  } else if (const auto jobs = scale_jobs(pool->policy(), req, refused)) {
    pool->scale(*jobs);
  }
  if (!refused.empty()) {
    reply.error = refused;
    send_reply(reply);
    return;
  }
  step_pools(now);  // start the submission now
  state_.outbox().cluster_changed = true;
  // The reply waits for sbatch's answer, so that a refusal reaches the caller; the loop does
  // not (the client may have gone by then: its identity finds nobody, harmlessly).
  const std::string* identity = identity_of(Role::client, id);
  if (identity == nullptr) return;
  pool->when_settled([this, identity = *identity, reply, name = pool->name(), submitted = before.submitted](
                         const std::string& error) mutable {
    reply.ok = error.empty();
    reply.error = error;
    if (const Pool* p = find_pool(name)) describe_change(reply, *p, submitted);
    protocol::send<MessageType::scale_reply>(*channels_, identity, reply);
  });
}

void Scheduler::retire_by_name(const protocol::ScalePoolRequest& req, protocol::ScalePoolReply& reply, const Now& now) {
  const WorkerRec* found = nullptr;
  std::vector<std::string> names;
  for (const auto& [wid, w] : state_.workers()) {
    names.push_back(w.name);
    if (w.name == req.worker) found = &w;
  }
  if (found == nullptr) {
    reply.error = names.empty() ? "no worker named '" + req.worker + "': no worker is connected"
                                : "no worker named '" + req.worker + "'; the workers are: " + name_list(names);
    return;
  }
  const WorkerId wid = found->id;
  reply.worker = found->name;
  reply.pool = found->pool;
  Pool* pool = found->pool.empty() ? nullptr : find_pool(found->pool);
  std::uint64_t submitted = 0;
  if (pool != nullptr) {
    const protocol::PoolStatus before = pool_status(*pool);
    reply.before = before.target;
    submitted = before.submitted;
  }
  std::uint64_t bytes = 0;
  const std::uint32_t unique = state_.unique_results(wid, &bytes);
  const std::size_t running = found->processing.size();
  bool others = false;  // a worker that stays, to take its results
  for (const auto& [oid, other] : state_.workers()) others = others || (oid != wid && !other.retiring);
  if (found->retiring) {
    reply.note = "worker " + found->name + " was already retiring";
  } else {
    // A fixed-size pool shrinks by the worker's job, so that it does not replace it; an adaptive
    // one follows its backlog within its bounds (it may bring a new worker for work waiting).
    if (pool != nullptr && !pool->policy().adaptive && pool->policy().workers_per_job <= 1 && pool->desired() > 0) {
      pool->scale(pool->desired() - 1);
    }
    state_.retire(wid, "retired by the user (herd worker retire)", /*by_pool=*/true, now);
    reply.note = "worker " + found->name + " retires: " +
                 (running > 0 ? std::to_string(running) + " task(s) it runs finish (unstarted ones go elsewhere)"
                              : std::string("it runs no task"));
    if (unique > 0) {
      reply.note += "; " + std::to_string(unique) + " result(s) only it holds (" + util::format_bytes(bytes) + ") " +
                    (others ? "are copied to a worker that stays before it leaves"
                            : "have no worker to go to: they are computed again if needed");
    }
  }
  reply.ok = true;
  if (pool != nullptr) {
    step_pools(now);
    describe_change(reply, *pool, submitted);
  }
  state_.outbox().cluster_changed = true;
}

void Scheduler::handle_restart(ClientId id, const protocol::RestartRequest& req, const Now& now) {
  const std::string* identity = identity_of(Role::client, id);
  if (identity == nullptr) return;
  std::string who = "#" + std::to_string(id);
  if (auto c = state_.clients().find(id); c != state_.clients().end() && !c->second.name.empty()) who = c->second.name;
  // Workers a pool replaces: as many as it had before (an adaptive pool brings back at most
  // its minimum: with no task left it wants no more). Workers connected by hand are stopped
  // and not replaced, so not waited for.
  std::uint32_t wanted = 0;
  for (const auto& p : pools_) {
    std::uint32_t had = 0;
    for (const auto& [wid, w] : state_.workers()) had += (w.pool == p->name());
    if (p->policy().adaptive) had = std::min(had, p->policy().minimum);
    wanted += had;
  }
  // The journal forgets first, so that this turn's records (dropped by the core) and every
  // earlier one stay forgotten after a restart of the scheduler too.
  if (journal_) journal_->forget_all();
  // Every job of a pool goes (in the pool's next scancel / SIGTERM), replaced by a new one.
  for (const auto& [wid, w] : state_.workers()) {
    if (Pool* p = find_pool(w.pool); p != nullptr && !w.pool.empty() && !w.job_id.empty()) p->stop_job(w.job_id);
  }
  const auto done = state_.restart("cancelled: the cluster was restarted by client " + who);
  PendingRestart pending;
  pending.client = *identity;
  pending.reply.request_id = req.request_id;
  pending.reply.stopped = done.stopped;
  pending.reply.wanted = wanted;
  pending.reply.cancelled = done.cancelled;
  pending.timeout_ms = req.timeout_ms;
  pending.deadline = now.mono + std::chrono::milliseconds(req.timeout_ms);
  restarts_.push_back(std::move(pending));
  // The pools hear of the workers gone at the end of this turn (flush: each job is cancelled)
  // and submit replacements at their next step.
}

void Scheduler::check_restarts(const Now& now) {
  const auto connected = static_cast<std::uint32_t>(state_.workers().size());
  for (auto it = restarts_.begin(); it != restarts_.end();) {
    protocol::RestartReply& r = it->reply;
    if (connected < r.wanted && now.mono < it->deadline) {
      ++it;
      continue;
    }
    r.workers = connected;
    r.ok = connected >= r.wanted;
    if (!r.ok) {
      r.error = "restart: " + std::to_string(connected) + " of " + std::to_string(r.wanted) +
                " workers came back within " + std::to_string(it->timeout_ms) + " ms";
      for (const auto& p : pools_) {
        const auto s = p->status(0);
        if (!s.paused.empty()) r.error += "; pool " + p->name() + " is paused: " + s.paused;
        else if (!s.last_error.empty()) r.error += "; pool " + p->name() + ": " + s.last_error;
      }
    }
    protocol::send<MessageType::restart_reply>(*channels_, it->client, r);
    it = restarts_.erase(it);
  }
}

void Scheduler::step_pools(const Now& now) {
  if (pools_.empty()) return;
  for (auto& pool : pools_) {
    // A worker whose job has ended is gone, whatever its last heartbeat said: no need to wait
    // for the timeout (a crashed local process, a job Slurm killed or lost). The pool's polls
    // run off the loop; these are the ones answered since the last step.
    const PoolState::Ended ended = pool->take_ended();
    for (const auto& [job, how] : ended) state_.job_ended(pool->name(), job, how);
    // A worker of a suspended job is frozen, not dead: when it goes silent its tasks go
    // elsewhere without counting a death.
    for (const auto& [wid, w] : state_.workers()) {
      if (w.pool == pool->name() && !w.job_id.empty()) state_.set_job_suspended(wid, pool->job_suspended(w.job_id));
    }
    // Backlog this pool could serve: ready and processing tasks whose resources it offers.
    const std::size_t backlog = pool->policy().adaptive ? state_.backlog(pool->policy().resources) : 0;
    // Workers that left this turn, before the pool counts its jobs (flush() comes after).
    std::vector<PoolWorker> view;
    for (const Departure& d : state_.outbox().departed) {
      if (!d.release_job) {
        note_done(d);
      } else if (d.retired_by_pool && d.pool == pool->name() && !d.job_id.empty()) {
        // Its job is released in flush(), after this step: until then it is on its way out,
        // not capacity, or a shrink whose first worker left this turn retires a second one.
        view.push_back({d.id, d.job_id, /*idle=*/true, now.mono, /*leaving=*/true, /*ending=*/false});
      }
    }
    for (const auto& w : state_.pool_workers(pool->name(), pool->policy().replace_lead_s(), now)) {
      view.push_back({w.id, w.job_id, w.idle, w.idle_since, w.leaving, w.ending});
    }
    const auto holds_data = [this](std::uint32_t wid) { return state_.unique_results(wid); };
    for (std::uint32_t wid : pool->step(now.mono, backlog, state_.avg_task_us(), view, holds_data)) {
      state_.retire(wid, "pool " + pool->name() + " shrinks", /*by_pool=*/true, now);
    }
    state_.set_kept_for_data(pool->name(), pool->state().kept());
    record_pool(*pool, ended, now);
  }
}

}  // namespace herd::scheduler
