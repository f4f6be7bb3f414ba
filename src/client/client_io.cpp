// ClientCore's own functions (client_io.hpp): connecting, the I/O thread and the callback
// thread, the outbox sent, the scheduler's messages and the data client's events handled.
#include "client/client_io.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <typeinfo>

#include "common/logging.hpp"
#include "common/util.hpp"
#include "net/interfaces.hpp"
#include "task/this_task.hpp"

namespace herd::detail {

using util::hostname;

FutureState::~FutureState() {
  std::lock_guard lock(core->mu_);
  core->states_.erase(id);
  if (!core->campaign_futures_.empty()) core->campaign_futures_.erase(id);
  if (!core->scatter_held_.empty()) core->scatter_held_.erase(id);
  if (core->lost_reason_.empty()) {
    core->out_releases_.push_back(id);
    // The I/O thread comes by within 2 ms while a thread reads for its future (or just did),
    // and the next submit takes it along: no wake-up of its own for a release then.
    if (!core->io_looks_soon_) core->wake_locked();
  }
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
  hello.name = options.name.empty() ? hostname() + ":" + std::to_string(::getpid()) : options.name;
  hello.host = hostname();
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
    client_index_ = reply.peer_index;
    config_.heartbeat_ms = reply.heartbeat_ms;
    config_.timeout_ms = reply.timeout_ms;
    max_message_bytes_ = reply.max_message_bytes;
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
  if (lost_reason_.empty()) lose_all_locked(reason);
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

std::string ClientCore::over_limit(const char* what, std::size_t bytes) const {
  // The rest of the message (ids, key, function, the batch around it) in a generous margin.
  constexpr std::size_t kMargin = kSubmitBatchBytes + 4096;
  if (max_message_bytes_ == 0 || bytes + kMargin <= max_message_bytes_) return "";
  return std::string(what) + ": " + util::format_bytes(bytes) + " (" + std::to_string(bytes) +
         " bytes), over the scheduler's message limit of " + util::format_bytes(max_message_bytes_) +
         " (HERD_MAX_MESSAGE_BYTES=" + std::to_string(max_message_bytes_) +
         "); pass big data as the result of a task, which stays on the workers";
}

void ClientCore::add_submits_locked(protocol::TaskSpec* specs, std::size_t n) {
  // A big task starts a batch of its own, so no batch grows past the limit by packing.
  const bool big = n > 0 && specs[0].args.size() > kSubmitBatchBytes;
  if (out_submits_.empty() || out_submits_.back().size() >= kSubmitBatchBytes || (big && out_submits_.back().size() > 0)) {
    if (spare_batches_.empty()) {
      out_submits_.emplace_back();
    } else {
      out_submits_.push_back(std::move(spare_batches_.back()));
      spare_batches_.pop_back();
    }
  }
  for (std::size_t i = 0; i < n; ++i) out_submits_.back().add(specs[i]);
}

void ClientCore::wake_locked() {
  if (wake_pending_ || wake_fd_ < 0) return;
  wake_pending_ = true;
  const std::uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
}

void ClientCore::finish_locked(FutureState& s) {
  if (s.callbacks) {
    for (auto& fn : *s.callbacks) run_callback_locked(std::move(fn));
    s.callbacks.reset();
  }
  if (!s.watchers) return;
  for (auto& [weak, index] : *s.watchers) {
    if (auto q = weak.lock()) {
      {
        std::lock_guard ql(q->mu);
        q->ready.push_back(index);
      }
      q->cv.notify_all();
    }
  }
  s.watchers.reset();
}

void ClientCore::lose_all_locked(const std::string& reason) {
  lost_reason_ = reason;
  for (auto& [id, s] : states_) {
    if (s->status == Status::pending || (s->status == Status::finished && !s->data)) {
      s->status = Status::lost;
      finish_locked(*s);
    }
  }
  notify_locked();
}

void ClientCore::notify_locked() {
  cv_.notify_all();
  if (reader_active_ && reader_thread_ != std::this_thread::get_id()) {
    const std::uint64_t one = 1;
    (void)!::write(reader_fd_, &one, sizeof one);
  }
}

bool ClientCore::send_outbox(bool io_thread) {
  // Take the outbox; send submissions before releases so an input is never released ahead
  // of the task that needs it.
  std::vector<protocol::BatchWriter> submits;
  std::vector<TaskId> releases, cancels, force_cancels, fire_and_forget;
  std::vector<std::pair<protocol::ScatterRequest, net::PayloadPtr>> scatters;
  std::map<std::string, std::vector<TaskId>> fetches;
  std::vector<protocol::ScalePoolRequest> scales;
  std::vector<protocol::StatusRequest> statuses;
  std::vector<protocol::LogsRequest> logs;
  std::vector<protocol::ReplicateRequest> replicates;
  std::vector<protocol::RestartRequest> restarts;
  std::vector<protocol::CampaignRequest> campaigns;
  {
    std::lock_guard lock(mu_);
    if (!io_thread && (!out_scatters_.empty() || !out_fetches_.empty())) {
      wake_locked();
      return false;
    }
    restarts.swap(out_restarts_);
    campaigns.swap(out_campaigns_);
    scales.swap(out_scales_);
    statuses.swap(out_statuses_);
    logs.swap(out_logs_);
    submits.swap(out_submits_);
    releases.swap(out_releases_);
    cancels.swap(out_cancels_);
    replicates.swap(out_replicates_);
    force_cancels.swap(out_force_cancels_);
    fire_and_forget.swap(out_fire_and_forget_);
    scatters.swap(out_scatters_);
    fetches.swap(out_fetches_);
    wake_pending_ = false;
  }
  const bool any = !(scatters.empty() && submits.empty() && releases.empty() && replicates.empty() &&
                     fire_and_forget.empty() && cancels.empty() && force_cancels.empty() && scales.empty() &&
                     campaigns.empty() && statuses.empty() && logs.empty() && restarts.empty());
  for (auto& [req, bytes] : scatters) {
    if (req.nbytes > 0) {  // a big one, served from here: the scheduler learns where
      req.source = scatter_source();
      if (!req.source.empty()) {
        protocol::send<MessageType::scatter_data>(sched_, "", req);
        continue;
      }
      req.nbytes = 0;  // no data port: through the scheduler after all
      std::lock_guard lock(mu_);
      scatter_held_.erase(req.id);
    }
    std::vector<zmq::message_t> payload;
    payload.push_back(net::zero_copy(bytes));
    protocol::send<MessageType::scatter_data>(sched_, "", req, std::move(payload));
  }
  // Releases ride with the last submissions when nothing else goes between them (one message,
  // not two, on a round trip's path): the scheduler takes them after those tasks.
  const bool release_with_submits = !submits.empty() && !releases.empty() && releases.size() <= 4096 && replicates.empty() &&
                                    fire_and_forget.empty() && cancels.empty() && force_cancels.empty();
  if (!submits.empty()) {
    for (std::size_t i = 0; i < submits.size(); ++i) {
      const bool last = i + 1 == submits.size();
      protocol::send(sched_, "", last && release_with_submits ? submits[i].message(releases) : submits[i].message());
    }
    if (release_with_submits) releases.clear();
    std::lock_guard lock(mu_);
    for (auto& batch : submits) {
      if (spare_batches_.size() >= kSpareBatches || batch.capacity() > 4 * kSubmitBatchBytes) continue;
      batch.clear();
      spare_batches_.push_back(std::move(batch));
    }
  }
  for (const auto& req : replicates) {  // after the scatters and submissions they name
    protocol::send<MessageType::replicate>(sched_, "", req);
  }
  if (!fire_and_forget.empty()) {  // after the submissions, before any release of them
    protocol::send<MessageType::fire_and_forget>(sched_, "", protocol::KeysEvent{fire_and_forget});
  }
  if (!cancels.empty()) {
    protocol::send<MessageType::cancel_tasks>(sched_, "", protocol::KeysEvent{cancels});
  }
  if (!force_cancels.empty()) {
    protocol::send<MessageType::force_cancel_tasks>(sched_, "", protocol::KeysEvent{force_cancels});
  }
  if (!releases.empty()) {
    protocol::send<MessageType::release_keys>(sched_, "", protocol::KeysEvent{releases});
  }
  for (const auto& req : scales) {
    protocol::send<MessageType::scale_pool>(sched_, "", req);
  }
  for (const auto& req : campaigns) {  // after the submissions: a campaign just submitted is there
    protocol::send<MessageType::campaign_request>(sched_, "", req);
  }
  for (const auto& req : statuses) {
    protocol::send<MessageType::status_request>(sched_, "", req);
  }
  for (const auto& req : logs) protocol::send<MessageType::logs_request>(sched_, "", req);
  // After this turn's submissions: a task submitted before restart() is cancelled by it.
  for (const auto& req : restarts) protocol::send<MessageType::restart_request>(sched_, "", req);
  for (auto& [address, ids] : fetches) fetcher_->request(address, std::move(ids), std::chrono::steady_clock::now());
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
  const bool alone = !wake_pending_ && now - last_submit_ > std::chrono::microseconds(50) && lost_reason_.empty();
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
  if (reader_active_ || !lost_reason_.empty() || stop_.load()) return false;
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
        if (done() || !lost_reason_.empty() || stop_.load()) break;
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
  if (unread || io_skips_long_ || !peers_gone_.empty()) wake_locked();
  return true;
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
        gone.swap(peers_gone_);
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
        auto it = scatter_held_.find(id);
        return it == scatter_held_.end() ? nullptr : it->second;
      });
    }
    fetcher_->receive(items, first_peer, events, now);
    fetcher_->expire(now, events);
    {
      std::lock_guard lock(mu_);
      if (!lost_reason_.empty()) break;
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
        if (lost_reason_.empty()) {
          submits.swap(out_submits_);
          fire_and_forget.swap(out_fire_and_forget_);
        }
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
      if (!scatter_direct_) return "";
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
      scatter_direct_ = false;
      return "";
    }
  }
  return scatter_server_->address();
}

void ClientCore::on_scatter_inline(const protocol::ScatterInlineEvent& ev) {
  std::lock_guard lock(mu_);
  if (scatter_direct_) {
    HERD_LOG(warning) << "herd: a worker could not fetch a scattered value from this client's data port "
                      << (scatter_server_ ? scatter_server_->address() : std::string()) << " (" << ev.reason
                      << "); big scattered values go through the scheduler from now on";
    scatter_direct_ = false;
  }
  for (TaskId id : ev.ids) {
    auto held = scatter_held_.find(id);
    if (held == scatter_held_.end()) continue;  // released meanwhile
    net::PayloadPtr bytes = std::move(held->second);
    scatter_held_.erase(held);
    auto it = states_.find(id);
    if (it == states_.end()) continue;
    FutureState& s = *it->second;
    if (std::string why = over_limit("the scattered value", bytes->size()); !why.empty()) {
      s.status = Status::erred;
      s.error = std::make_unique<protocol::ErrorInfo>(protocol::ErrorInfo{
          "herd::MessageTooLarge",
          "scatter " + s.key() + " could not be fetched from this client (" + ev.reason +
              ") and cannot go through the scheduler: " + why,
          s.key(), ""});
      finish_locked(s);
      continue;
    }
    out_scatters_.push_back({protocol::ScatterRequest{id, "", "", 0}, std::move(bytes)});
  }
  notify_locked();
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
      apply_updates_locked(ev);
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
      auto it = campaign_replies_.find(reply.request_id);
      if (it == campaign_replies_.end()) break;  // the caller gave up
      if (reply.ok && !reply.tasks.empty()) {
        auto& made = campaign_states_[reply.request_id];
        made.reserve(reply.tasks.size());
        for (const auto& t : reply.tasks) {
          auto held = campaign_futures_.find(t.id);
          if (held != campaign_futures_.end()) {
            if (auto s = held->second.lock()) {
              made.push_back(std::move(s));
              continue;
            }
          }
          auto state = std::make_shared<FutureState>();
          state->core = self_.lock();
          state->id = t.id;
          state->custom_key = t.key;
          state->function = intern_locked(t.function);
          states_[t.id] = state.get();
          campaign_futures_[t.id] = state;
          made.push_back(std::move(state));
        }
        apply_updates_locked(reply.current);
      }
      it->second = std::move(reply);
      notify_locked();
      break;
    }
    case MessageType::cluster_state: {
      protocol::ClusterStateEvent ev;
      if (!protocol::decode<MessageType::cluster_state>(msg, ev, error)) break;
      std::lock_guard lock(mu_);
      n_workers_ = static_cast<int>(ev.workers);
      pools_ = std::move(ev.pools);
      notify_locked();
      break;
    }
    case MessageType::scale_reply: {
      protocol::ScalePoolReply reply;
      if (!protocol::decode<MessageType::scale_reply>(msg, reply, error)) break;
      std::lock_guard lock(mu_);
      if (auto it = scale_replies_.find(reply.request_id); it != scale_replies_.end()) it->second = reply;
      notify_locked();
      break;
    }
    case MessageType::restart_reply: {
      protocol::RestartReply reply;
      if (!protocol::decode<MessageType::restart_reply>(msg, reply, error)) break;
      std::lock_guard lock(mu_);
      if (auto it = restart_replies_.find(reply.request_id); it != restart_replies_.end()) it->second = reply;
      notify_locked();
      break;
    }
    case MessageType::status_reply: {
      protocol::StatusReply reply;
      if (!protocol::decode<MessageType::status_reply>(msg, reply, error)) break;
      std::lock_guard lock(mu_);
      if (auto it = status_replies_.find(reply.request_id); it != status_replies_.end()) {
        it->second = std::move(reply);
      }
      notify_locked();
      break;
    }
    case MessageType::peers_gone: {
      protocol::PeersGoneEvent ev;
      if (protocol::decode<MessageType::peers_gone>(msg, ev, error)) {
        // The fetcher is the I/O thread's own (this may be a waiting user thread).
        std::lock_guard lock(mu_);
        for (auto& a : ev.addresses) peers_gone_.push_back(std::move(a));
        if (std::this_thread::get_id() != io_id_) wake_locked();
      }
      break;
    }
    case MessageType::logs_reply: {
      protocol::LogsReply reply;
      if (!protocol::decode<MessageType::logs_reply>(msg, reply, error)) break;
      std::lock_guard lock(mu_);
      if (auto it = logs_replies_.find(reply.request_id); it != logs_replies_.end()) it->second = std::move(reply);
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

void ClientCore::apply_updates_locked(protocol::TaskUpdatesEvent& ev) {
  std::vector<std::uint32_t> locations;  // ev.addresses as indexes into addresses_
  locations.reserve(ev.addresses.size());
  for (const auto& address : ev.addresses) locations.push_back(address_locked(address));
  for (auto& u : ev.updates) {
    auto it = states_.find(u.id);
    if (it == states_.end()) continue;
    FutureState& s = *it->second;
    if (s.status == Status::cancelled) continue;
    const auto st = static_cast<protocol::TaskState>(u.state);
    if (!scatter_held_.empty() && st != protocol::TaskState::no_worker && st != protocol::TaskState::processing) {
      scatter_held_.erase(u.id);  // a worker holds it now (or it failed): this client's copy goes
    }
    if (st == protocol::TaskState::no_worker || st == protocol::TaskState::processing) {
      // Not final: no connected worker can run it now (why), or it runs again after that.
      if (s.status != Status::pending) continue;
      if (st == protocol::TaskState::no_worker) s.error = std::make_unique<protocol::ErrorInfo>(std::move(u.error));
      else s.error.reset();
      continue;
    }
    if (st == protocol::TaskState::memory) {
      s.status = Status::finished;
      s.error.reset();
      if (!u.inline_data.empty()) s.data = std::make_shared<VectorPayload>(std::move(u.inline_data));
      if (u.location >= 0 && static_cast<std::size_t>(u.location) < ev.addresses.size()) {
        s.location = locations[static_cast<std::size_t>(u.location)];
      }
      s.fetching = false;  // a new location (recomputed result) is fetched anew
    } else if (st == protocol::TaskState::cancelled) {
      // Also a finished future: Client::restart() (by any client) cancels every one.
      s.status = Status::cancelled;
      s.error = std::make_unique<protocol::ErrorInfo>(std::move(u.error));
      s.data.reset();
      s.location = 0;
      s.fetching = false;
    } else {
      s.status = Status::erred;
      s.error = std::make_unique<protocol::ErrorInfo>(std::move(u.error));
    }
    finish_locked(s);
  }
  notify_locked();
}

void ClientCore::on_fetched(TaskId id, net::PayloadPtr bytes) {
  std::lock_guard lock(mu_);
  auto it = states_.find(id);
  if (it == states_.end()) return;
  it->second->data = std::move(bytes);
  it->second->fetching = false;
  notify_locked();
}

void ClientCore::on_not_there(const std::string& address, TaskId id) {
  std::lock_guard lock(mu_);
  auto it = states_.find(id);
  if (it == states_.end()) return;
  // The holder lost it (or is being replaced): wait for the scheduler's next word on it.
  HERD_LOG(info) << "result " << it->second->key() << " is no longer at " << address;
  it->second->fetching = false;
  it->second->location = 0;
  it->second->status = Status::pending;
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
    for (TaskId id : ids) {
      auto it = states_.find(id);
      if (it == states_.end()) continue;
      FutureState& st = *it->second;
      // Already here, or already pointed at another holder (a late failure of an old fetch):
      // nothing to ask.
      if (st.data || (st.location != 0 && addresses_[st.location - 1] != address)) continue;
      st.fetching = false;
      st.location = 0;
      asked.push_back(id);
    }
  }
  if (!asked.empty()) {
    std::lock_guard sl(sched_mu_);
    protocol::send<MessageType::fetch_failed>(sched_, "", {asked, address, why});
    tell_reader_if_unread();
  }
}

std::shared_ptr<ClientCore> make_core(const std::string& address, const ClientOptions& options) {
  auto core = std::make_shared<ClientCore>(address, options);
  core->self_ = core;
  return core;
}

}  // namespace herd::detail
