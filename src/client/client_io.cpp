// ClientCore, the client's IO shell (client_io.hpp): the scheduler's socket, the I/O thread,
// the callback thread, the data client and server, heartbeats. What to send and what an event
// means is the ClientState's (client_state.hpp); this carries it out.
#include "client/client_io.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <typeinfo>

#include "common/logging.hpp"
#include "common/roles.hpp"
#include "common/util.hpp"
#include "herd/error.hpp"
#include "net/interfaces.hpp"
#include "task/this_task.hpp"

namespace herd::detail {

using protocol::MessageType;

FutureState::~FutureState() {
  if (!core) return;  // made by a ClientState alone (its unit tests)
  std::lock_guard lock(core->mu_);
  // The I/O thread comes by within 2 ms while a thread reads for its future (or just did),
  // and the next submit takes the release along: no wake-up of its own for it then.
  if (core->state_.dropped(id) && !core->io_looks_soon_) core->wake_locked();
}

ClientCore::ClientCore(std::string address, const ClientOptions& options)
    : address_(std::move(address)), sched_(context_, zmq::socket_type::dealer) {
  sched_.set(zmq::sockopt::linger, 0);
  sched_.set(zmq::sockopt::sndhwm, 0);
  sched_.set(zmq::sockopt::rcvhwm, 0);
  auth_.client(sched_);
  security::HandshakeWatch handshake(context_, sched_, "the scheduler at " + address_);
  try {
    sched_.connect(address_);
  } catch (const zmq::error_t& e) {
    throw ConnectionError("invalid scheduler address '" + address_ + "': " + e.what());
  }
  protocol::HelloRequest hello;
  hello.role = static_cast<std::uint8_t>(protocol::Role::client);
  hello.name = options.name.empty() ? util::hostname() + ":" + std::to_string(::getpid()) : options.name;
  hello.host = util::hostname();
  hello.pid = ::getpid();
  protocol::send<MessageType::hello_request>(sched_, "", hello);
  zmq::pollitem_t item{static_cast<void*>(sched_), 0, ZMQ_POLLIN, 0};
  const auto deadline = std::chrono::steady_clock::now() + options.connect_timeout;
  bool connected = false;
  while (!connected) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      throw ConnectionError("no herd scheduler answered at " + address_ + " within " +
                            std::to_string(options.connect_timeout.count()) + " ms");
    }
    try {
      zmq::poll(&item, 1, std::min(left, std::chrono::milliseconds(50)));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
    if (const std::string why = handshake.failure(); !why.empty()) throw ConnectionError(why);
    auto msg = protocol::try_receive(sched_, false);
    if (!msg) continue;
    std::string error;
    auto type = protocol::parse_header(*msg, error);
    if (!type) throw ConnectionError("the peer at " + address_ + " is not a herd scheduler: " + error);
    if (*type != MessageType::hello_reply) continue;
    protocol::HelloReply reply;
    if (!protocol::decode<MessageType::hello_reply>(*msg, reply, error)) {
      throw ConnectionError("bad hello reply from " + address_ + ": " + error);
    }
    if (!reply.ok) throw ConnectionError("scheduler at " + address_ + " refused the client: " + reply.error);
    config_.heartbeat_ms = reply.heartbeat_ms;
    config_.timeout_ms = reply.timeout_ms;
    state_.connected(reply.peer_index, reply.max_message_bytes);
    connected = true;
  }
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  reader_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0 || reader_fd_ < 0) throw Error(std::string("eventfd failed: ") + std::strerror(errno));
  sched_fd_ = sched_.get(zmq::sockopt::fd);
  heard();
  fetcher_ = std::make_unique<net::DataClient>(context_, auth_, std::chrono::milliseconds(config_.timeout_ms));
  // Results of up to 64 MiB are received into pages the last ones of about their size left
  // faulted in (a gather loop's second result onwards costs no page faults); bigger ones are
  // handed over to their values page by page instead (future.hpp). Not in a worker's process
  // (get_client): there the memory limit counts every page, and the worker keeps nothing.
  if (!detail::worker_hooks()) net::Buffer::keep_for_reuse(std::size_t{64} << 20);
  fetcher_->take_lanes(config_.data_lanes != 0);
  io_ = std::thread([this] { io_loop(); });
  io_id_ = io_.get_id();
}

ClientCore::~ClientCore() {
  close("client closed");
  if (reader_fd_ >= 0) ::close(reader_fd_);
}

std::shared_ptr<ClientCore> make_core(const std::string& address, const ClientOptions& options) {
  auto core = std::make_shared<ClientCore>(address, options);
  core->self_ = core;
  return core;
}

void ClientCore::close(const std::string& reason) {
  if (io_.joinable()) {
    stop_.store(true);
    {
      std::lock_guard lock(mu_);
      wake_locked();
    }
    io_.join();
  }
  std::unique_lock lock(mu_);
  if (!state_.lost()) lose_all_locked(reason);
  if (wake_fd_ >= 0) {
    ::close(wake_fd_);
    wake_fd_ = -1;
  }
  // The callbacks still queued (those of futures lost just now too) run before close returns.
  if (callback_thread_.joinable()) {
    callbacks_stop_ = true;
    callback_cv_.notify_all();
    lock.unlock();
    if (callback_thread_.get_id() == std::this_thread::get_id()) {
      callback_thread_.detach();  // closed from a callback: the thread ends after it
    } else {
      callback_thread_.join();
    }
  }
}

void ClientCore::run_callback_locked(std::function<void()> fn) {
  callback_queue_.push_back(std::move(fn));
  if (!callback_thread_.joinable() && !callbacks_stop_) {
    callback_thread_ = std::thread([this] { callback_loop(); });
  }
  callback_cv_.notify_one();
}

void ClientCore::callback_loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    callback_cv_.wait(lock, [&] { return callbacks_stop_ || !callback_queue_.empty(); });
    if (callback_queue_.empty()) return;  // stopping, and nothing left
    std::function<void()> fn = std::move(callback_queue_.front());
    callback_queue_.pop_front();
    lock.unlock();
    try {
      fn();
    } catch (const std::exception& e) {
      HERD_LOG(error) << "a done-callback threw " << util::demangle(typeid(e).name()) << ": " << e.what();
    } catch (...) {
      HERD_LOG(error) << "a done-callback threw a non-std exception";
    }
    fn = nullptr;  // may drop the last reference to a future: not under mu_
    lock.lock();
  }
}

void ClientCore::wake_locked() {
  if (wake_pending_ || wake_fd_ < 0) return;
  wake_pending_ = true;
  const std::uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
}

void ClientCore::deliver_finished_locked() {
  client::Finished& done = state_.finished();
  for (auto& fn : done.callbacks) run_callback_locked(std::move(fn));
  for (auto& [weak, index] : done.watchers) {
    if (auto q = weak.lock()) {
      {
        std::lock_guard ql(q->mu);
        q->ready.push_back(index);
      }
      q->cv.notify_all();
    }
  }
  done.clear();
}

void ClientCore::notify_locked() {
  cv_.notify_all();
  if (reader_active_ && reader_thread_ != std::this_thread::get_id()) {
    const std::uint64_t one = 1;
    (void)!::write(reader_fd_, &one, sizeof one);
  }
}

namespace {
/// Sends one request of the state's table as its message.
struct RequestSender {
  zmq::socket_t& socket;
  void operator()(const protocol::ScalePoolRequest& r) const { protocol::send<MessageType::scale_pool>(socket, "", r); }
  void operator()(const protocol::StatusRequest& r) const { protocol::send<MessageType::status_request>(socket, "", r); }
  void operator()(const protocol::RestartRequest& r) const { protocol::send<MessageType::restart_request>(socket, "", r); }
  void operator()(const protocol::LogsRequest& r) const { protocol::send<MessageType::logs_request>(socket, "", r); }
  void operator()(const protocol::CampaignRequest& r) const {
    protocol::send<MessageType::campaign_request>(socket, "", r);
  }
  void operator()(const protocol::ReportRequest& r) const { protocol::send<MessageType::report_request>(socket, "", r); }
  void operator()(const protocol::JobRequest& r) const { protocol::send<MessageType::job_request>(socket, "", r); }
};
}  // namespace

bool ClientCore::send_outbox(bool io_thread) {
  // The outbox is taken whole and sent in its order (client::Outbox): scatters and submissions
  // before what names them, and before the releases, so that an input is never released ahead
  // of the task that needs it.
  client::Outbox out;
  {
    std::lock_guard lock(mu_);
    if (!io_thread && state_.io_only()) {
      wake_locked();
      return false;
    }
    state_.take_outbox(out);
    wake_pending_ = false;
  }
  const bool any = out.to_scheduler();
  for (auto& [req, bytes] : out.scatters) {
    if (req.nbytes > 0) {  // a big one, served from here: the scheduler learns where
      req.source = scatter_source();
      if (!req.source.empty()) {
        protocol::send<MessageType::scatter_data>(sched_, "", req);
        continue;
      }
      req.nbytes = 0;  // no data port: through the scheduler after all
      std::lock_guard lock(mu_);
      state_.scatter_not_held(req.id);
    }
    std::vector<zmq::message_t> payload;
    payload.push_back(net::zero_copy(bytes));
    protocol::send<MessageType::scatter_data>(sched_, "", req, std::move(payload));
  }
  if (!out.submits.empty()) {
    // The scheduler takes releases that ride with the submissions after those tasks.
    const bool ride = out.releases_ride();
    for (std::size_t i = 0; i < out.submits.size(); ++i) {
      const bool last = i + 1 == out.submits.size();
      protocol::send(sched_, "", last && ride ? out.submits[i].message(out.releases) : out.submits[i].message());
    }
    if (ride) out.releases.clear();
    std::lock_guard lock(mu_);
    state_.recycle(out.submits);
  }
  for (const auto& req : out.replicates) {  // after the scatters and submissions they name
    protocol::send<MessageType::replicate>(sched_, "", req);
  }
  if (!out.fire_and_forget.empty()) {  // after the submissions, before any release of them
    protocol::send<MessageType::fire_and_forget>(sched_, "", protocol::KeysEvent{out.fire_and_forget});
  }
  if (!out.cancels.empty()) {
    protocol::send<MessageType::cancel_tasks>(sched_, "", protocol::KeysEvent{out.cancels});
  }
  if (!out.force_cancels.empty()) {
    protocol::send<MessageType::force_cancel_tasks>(sched_, "", protocol::KeysEvent{out.force_cancels});
  }
  if (!out.releases.empty()) {
    protocol::send<MessageType::release_keys>(sched_, "", protocol::KeysEvent{out.releases});
  }
  // After this turn's submissions: a campaign just submitted is there, and a task submitted
  // before restart() is cancelled by it.
  for (const auto& req : out.requests) std::visit(RequestSender{sched_}, req);
  for (auto& [address, ids] : out.fetches) fetcher_->request(address, std::move(ids), std::chrono::steady_clock::now());
  return any;
}

void ClientCore::tell_reader_if_unread() {
  if (!sched_unread()) return;
  std::lock_guard lock(mu_);
  if (reader_active_) notify_locked();
}

bool ClientCore::read_one() {
  if (!sched_unread()) return false;
  auto msg = protocol::try_receive(sched_, false);
  if (!msg) return false;
  heard();
  handle_scheduler(*msg);
  return true;
}

void ClientCore::send_or_wake(std::unique_lock<std::mutex>& lock) {
  const auto now = std::chrono::steady_clock::now();
  const bool alone = !wake_pending_ && now - last_submit_ > std::chrono::microseconds(50) && !state_.lost();
  last_submit_ = now;
  if (!alone) {
    wake_locked();
    return;
  }
  lock.unlock();
  std::unique_lock sl(sched_mu_, std::try_to_lock);
  if (!sl.owns_lock() || stop_.load()) {  // the I/O thread has it: it sends, once woken
    lock.lock();
    wake_locked();
    return;
  }
  send_outbox(false);
  // A send can take the socket's signal of a message that came meanwhile: whoever polls it
  // would not wake for that one.
  const bool unread = sched_unread_last();
  sl.unlock();
  lock.lock();
  if (unread) {
    if (reader_active_) {
      notify_locked();
    } else {
      wake_locked();
    }
  }
}

bool ClientCore::read_while_waiting(std::unique_lock<std::mutex>& lock, const std::function<bool()>& done,
                                    std::optional<std::chrono::steady_clock::time_point> deadline) {
  if (reader_active_ || state_.lost() || stop_.load()) return false;
  reader_active_ = true;
  reader_thread_ = std::this_thread::get_id();
  reader_since_ = std::chrono::steady_clock::now();
  lock.unlock();
  bool unread = false;
  {
    std::unique_lock sl(sched_mu_);
    // What this thread submitted, if the I/O thread has not yet. When the submit went from here
    // and found the socket quiet, and nobody used the socket since, the first look is the poll.
    bool quiet = !send_outbox(false) && sched_quiet();
    for (;;) {
      // One message at a time, and out as soon as it is done: a message after it is left to the
      // I/O thread (its next turn asks the socket), not looked for here (a system call).
      const bool got = !quiet && read_one();
      quiet = false;
      {
        std::lock_guard l(mu_);
        if (done() || state_.lost() || stop_.load()) break;
      }
      if (got) continue;
      int wait_ms = static_cast<int>(config_.heartbeat_ms);
      if (deadline) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) break;
        wait_ms = static_cast<int>(std::min<std::int64_t>(wait_ms, left.count() + 1));
      }
      sl.unlock();
      pollfd fds[2] = {{sched_fd_, POLLIN, 0}, {reader_fd_, POLLIN, 0}};
      (void)::poll(fds, 2, wait_ms);
      if (fds[1].revents & POLLIN) {
        std::uint64_t n;
        (void)!::read(reader_fd_, &n, sizeof n);
      }
      sl.lock();
    }
    // A message that came after the last one read here took the socket's signal: the I/O thread
    // finds it at its next turn, within 2 ms when it polls briefly (io_looks_soon_); else it
    // sleeps on that signal, and is woken for it.
    bool soon;
    {
      std::lock_guard l(mu_);
      soon = io_looks_soon_;
    }
    unread = !soon && sched_unread_last();
  }
  lock.lock();
  reader_active_ = false;
  // The I/O thread, asleep without the socket for a long wait, reads it again from now on.
  if (unread || io_skips_long_ || !state_.peers_gone().empty()) wake_locked();
  return true;
}

client::Pending ClientCore::ask(std::unique_lock<std::mutex>& lock, client::Request req,
                                std::chrono::milliseconds timeout, const std::string& late) {
  if (state_.lost()) throw ConnectionError(state_.lost_reason());
  const std::uint64_t id = state_.request(std::move(req));
  wake_locked();
  const bool answered = cv_.wait_for(lock, timeout, [&] { return state_.settled(id); });
  client::Pending p = state_.take(id);
  if (p.failed.empty() && answered) return p;
  // An attach's futures are let go without mu_ (their destructor takes it).
  std::vector<std::shared_ptr<FutureState>> futures = std::move(p.futures);
  const std::string failed = std::move(p.failed);
  lock.unlock();
  futures.clear();
  if (!failed.empty()) throw ConnectionError(failed);
  throw TimeoutError(late);
}

void ClientCore::io_loop() {
  using Clock = std::chrono::steady_clock;
  auto last_beat = Clock::now();
  std::vector<zmq::pollitem_t> items;
  net::DataEvents events;
  events.found = [this](const std::string&, TaskId id, net::PayloadPtr bytes) { on_fetched(id, std::move(bytes)); };
  events.missing = [this](const std::string& address, TaskId id) { on_not_there(address, id); };
  events.failed = [this](const std::string& address, const std::vector<TaskId>& ids, const std::string& why) {
    on_fetch_failed(address, ids, why);
  };
  while (!stop_.load()) {
    // The scheduler's socket is polled unless a waiting thread reads it (read_while_waiting);
    // then this thread looks again every 2 ms, in case that one stopped (a loop of round trips
    // has one reader after another), and once a reader has waited 20 ms, at the heartbeat (a
    // long wait costs no wake-ups: the reader wakes this thread when it stops).
    bool skip_sched, long_wait, readable = false;
    {
      std::lock_guard sl(sched_mu_);
      {
        std::lock_guard lock(mu_);
        skip_sched = reader_active_;
        long_wait = skip_sched && Clock::now() - reader_since_ > std::chrono::milliseconds(20);
        io_looks_soon_ = skip_sched && !long_wait;
        io_skips_long_ = long_wait;
      }
      if (!skip_sched) readable = sched_unread();
    }
    items.assign({{nullptr, wake_fd_, ZMQ_POLLIN, 0}});
    if (!skip_sched) items.push_back({nullptr, sched_fd_, ZMQ_POLLIN, 0});
    const std::size_t served = scatter_server_ ? items.size() : SIZE_MAX;
    if (scatter_server_) items.push_back({static_cast<void*>(scatter_server_->socket()), 0, ZMQ_POLLIN, 0});
    const std::size_t first_peer = fetcher_->add_poll_items(items);
    auto wait = std::chrono::milliseconds(config_.heartbeat_ms);
    if (readable) wait = std::chrono::milliseconds(0);
    if (skip_sched && !long_wait) wait = std::min(wait, std::chrono::milliseconds(2));
    try {
      protocol::poll(items, wait);
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
    if (items[0].revents & ZMQ_POLLIN) {
      std::uint64_t n;
      (void)!::read(wake_fd_, &n, sizeof n);
    }
    std::vector<std::string> gone;
    const auto now = Clock::now();
    {
      std::lock_guard sl(sched_mu_);
      send_outbox(true);
      bool reader;
      {
        std::lock_guard lock(mu_);
        reader = reader_active_;
        gone.swap(state_.peers_gone());
      }
      if (now - last_beat >= std::chrono::milliseconds(config_.heartbeat_ms)) {
        last_beat = now;
        protocol::send<MessageType::heartbeat>(sched_, "", protocol::HeartbeatEvent{});
      }
      if (!reader) {
        read_scheduler();
      } else {
        tell_reader_if_unread();
      }
    }
    for (const auto& a : gone) fetcher_->forget(a);
    if (served != SIZE_MAX && (items[served].revents & ZMQ_POLLIN) != 0) {
      scatter_server_->serve([this](TaskId id) -> net::PayloadPtr {
        std::lock_guard lock(mu_);
        return state_.held_scatter(id);
      });
    }
    fetcher_->receive(items, first_peer, events, now);
    fetcher_->expire(now, events);
    {
      std::lock_guard lock(mu_);
      if (state_.lost()) break;
      const auto last_heard = Clock::time_point(Clock::duration(last_heard_ns_.load()));
      if (now - last_heard > std::chrono::milliseconds(config_.timeout_ms)) {
        lose_all_locked("scheduler lost: no message from " + address_ + " for " +
                        std::to_string(config_.timeout_ms) + " ms");
        break;
      }
    }
  }
  if (stop_.load()) {
    try {
      // What was submitted and fired-and-forgotten just before close() still goes out (in that
      // order), so that a fire_and_forget followed at once by close() is honoured.
      std::vector<protocol::BatchWriter> submits;
      std::vector<TaskId> fire_and_forget;
      {
        std::lock_guard lock(mu_);
        state_.take_for_goodbye(submits, fire_and_forget);
      }
      std::lock_guard sl(sched_mu_);
      for (auto& batch : submits) protocol::send(sched_, "", batch.message());
      if (!fire_and_forget.empty()) {
        protocol::send<MessageType::fire_and_forget>(sched_, "", protocol::KeysEvent{fire_and_forget});
      }
      protocol::send<MessageType::goodbye>(sched_, "", protocol::GoodbyeEvent{"client closed"});
    } catch (const zmq::error_t&) {
    }
  }
}

std::string ClientCore::scatter_source() {
  if (!scatter_server_) {
    {
      std::lock_guard lock(mu_);
      if (!state_.scatter_direct()) return "";
    }
    try {
      // On the interface that routes to the scheduler, as a worker's data port: the workers
      // reach the scheduler, so they most likely reach this host the same way.
      auth_.serve_too(context_);
      scatter_server_ = std::make_unique<net::DataServer>(context_, auth_, net::listen_host_toward(address_),
                                                           config_.chunk_bytes,
                                                           std::chrono::milliseconds(config_.timeout_ms));
      if (security::auth_off()) {
        HERD_LOG(warning) << "HERD_AUTH=off: this client serves its big scattered values at "
                          << scatter_server_->address()
                          << " WITHOUT AUTHENTICATION OR ENCRYPTION, as the workers serve their results: anyone "
                             "who can reach it can read them while a worker fetches them";
      } else {
        HERD_LOG(debug) << "serving big scattered values at " << scatter_server_->address();
      }
    } catch (const std::exception& e) {
      HERD_LOG(warning) << "herd: big scattered values go through the scheduler: " << e.what();
      std::lock_guard lock(mu_);
      state_.no_scatter_port();
      return "";
    }
  }
  return scatter_server_->address();
}

void ClientCore::on_scatter_inline(const protocol::ScatterInlineEvent& ev) {
  std::lock_guard lock(mu_);
  if (state_.scatter_inline(ev)) {
    HERD_LOG(warning) << "herd: a worker could not fetch a scattered value from this client's data port "
                      << (scatter_server_ ? scatter_server_->address() : std::string()) << " (" << ev.reason
                      << "); big scattered values go through the scheduler from now on";
  }
  settle_locked();
  wake_locked();
}

void ClientCore::handle_scheduler(protocol::Received& msg) {
  std::string error;
  auto type = protocol::parse_header(msg, error);
  if (!type) {
    HERD_LOG(warning) << "bad message from the scheduler: " << error;
    return;
  }
  switch (*type) {
    case MessageType::task_updates: {
      protocol::TaskUpdatesEvent ev;
      if (!protocol::decode<MessageType::task_updates>(msg, ev, error)) break;
      std::lock_guard lock(mu_);
      state_.apply_updates(ev);
      settle_locked();
      break;
    }
    case MessageType::scatter_inline: {
      protocol::ScatterInlineEvent ev;
      if (protocol::decode<MessageType::scatter_inline>(msg, ev, error)) on_scatter_inline(ev);
      break;
    }
    case MessageType::campaign_reply: {
      protocol::CampaignReply reply;
      if (!protocol::decode<MessageType::campaign_reply>(msg, reply, error)) break;
      std::lock_guard lock(mu_);
      // An attach's reply makes the futures it names (held by the request until its caller
      // takes them), so that no update after it finds no future.
      if (!state_.answer(std::move(reply), self_.lock())) break;  // the caller gave up
      settle_locked();
      break;
    }
    case MessageType::cluster_state: {
      protocol::ClusterStateEvent ev;
      if (!protocol::decode<MessageType::cluster_state>(msg, ev, error)) break;
      std::lock_guard lock(mu_);
      state_.cluster_state(ev);
      notify_locked();
      break;
    }
    case MessageType::scale_reply: {
      protocol::ScalePoolReply reply;
      if (!protocol::decode<MessageType::scale_reply>(msg, reply, error)) break;
      std::lock_guard lock(mu_);
      state_.answer(std::move(reply));
      notify_locked();
      break;
    }
    case MessageType::restart_reply: {
      protocol::RestartReply reply;
      if (!protocol::decode<MessageType::restart_reply>(msg, reply, error)) break;
      std::lock_guard lock(mu_);
      state_.answer(std::move(reply));
      notify_locked();
      break;
    }
    case MessageType::status_reply: {
      protocol::StatusReply reply;
      if (!protocol::decode<MessageType::status_reply>(msg, reply, error)) break;
      std::lock_guard lock(mu_);
      state_.answer(std::move(reply));
      notify_locked();
      break;
    }
    case MessageType::peers_gone: {
      protocol::PeersGoneEvent ev;
      if (protocol::decode<MessageType::peers_gone>(msg, ev, error)) {
        // The fetcher is the I/O thread's own (this may be a waiting user thread).
        std::lock_guard lock(mu_);
        state_.workers_gone(ev.addresses);
        if (std::this_thread::get_id() != io_id_) wake_locked();
      }
      break;
    }
    case MessageType::report_reply: {
      protocol::ReportReply reply;
      if (!protocol::decode<MessageType::report_reply>(msg, reply, error)) break;
      std::lock_guard lock(mu_);
      state_.answer(std::move(reply));
      notify_locked();
      break;
    }
    case MessageType::logs_reply: {
      protocol::LogsReply reply;
      if (!protocol::decode<MessageType::logs_reply>(msg, reply, error)) break;
      std::lock_guard lock(mu_);
      state_.answer(std::move(reply));
      notify_locked();
      break;
    }
    case MessageType::job_reply: {
      protocol::JobReply reply;
      if (!protocol::decode<MessageType::job_reply>(msg, reply, error)) break;
      std::lock_guard lock(mu_);
      state_.answer(std::move(reply));
      notify_locked();
      break;
    }
    case MessageType::shutdown: {
      protocol::GoodbyeEvent bye;
      (void)protocol::decode<MessageType::shutdown>(msg, bye, error);
      std::lock_guard lock(mu_);
      lose_all_locked("scheduler at " + address_ + " shut down: " + bye.reason);
      break;
    }
    case MessageType::error: {
      protocol::ErrorEvent ev;
      (void)protocol::decode<MessageType::error>(msg, ev, error);
      HERD_LOG(error) << "scheduler refused a message: " << ev.message;
      break;
    }
    default:
      break;
  }
  if (!error.empty()) HERD_LOG(warning) << "bad message from the scheduler: " << error;
}

void ClientCore::on_fetched(TaskId id, net::PayloadPtr bytes) {
  std::lock_guard lock(mu_);
  if (state_.fetched(id, std::move(bytes))) notify_locked();
}

void ClientCore::on_not_there(const std::string& address, TaskId id) {
  std::lock_guard lock(mu_);
  // The holder lost it (or is being replaced): the future waits for the scheduler's next word on it.
  const FutureState* s = state_.not_there(id);
  if (s == nullptr) return;
  HERD_LOG(info) << "result " << s->key() << " is no longer at " << address;
  notify_locked();
}

void ClientCore::on_fetch_failed(const std::string& address, const std::vector<TaskId>& ids, const std::string& why) {
  // The holder did not answer (a host out of reach, a partition): the scheduler points us at
  // another holder, has another worker copy it, or fails it with the reason. Until then the
  // future waits, with no location.
  HERD_LOG(warning) << "could not fetch " << ids.size() << " result(s) from " << address << ": " << why;
  std::vector<TaskId> asked;
  {
    std::lock_guard lock(mu_);
    asked = state_.fetch_failed(address, ids);
  }
  if (!asked.empty()) {
    std::lock_guard sl(sched_mu_);
    protocol::send<MessageType::fetch_failed>(sched_, "", {asked, address, why});
    tell_reader_if_unread();
  }
}

}  // namespace herd::detail
