// The client's machinery: ClientCore owns one I/O thread with a DEALER to the scheduler and
// DEALERs to worker data ports. User threads append to an outbox (submissions, releases,
// cancels, fetches) and wake the I/O thread through an eventfd only when the outbox was empty,
// so a loop of submits costs one wake-up per batch. Two exceptions, for the round trip of one
// task (bench/README.md, "Profile: the round trip"): a submit that comes alone sends the outbox
// itself, and a thread that waits for a future reads the scheduler's socket itself meanwhile,
// so neither waits for a hand-off to or from the I/O thread. `sched_mu_` makes the socket one
// thread's at a time; the I/O thread polls its file descriptor, not the socket.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <typeinfo>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "common/roles.hpp"
#include "common/status_view.hpp"
#include "common/config.hpp"
#include "net/data_port.hpp"
#include "common/logging.hpp"
#include "net/interfaces.hpp"
#include "common/util.hpp"
#include "herd/client.hpp"
#include "herd/slurm.hpp"
#include "common/security.hpp"
#include "protocol/codec.hpp"
#include "task/this_task.hpp"

namespace herd {
namespace detail {

using protocol::MessageType;
using protocol::TaskId;

namespace {
using util::hostname;


class VectorPayload : public Payload {
 public:
  explicit VectorPayload(std::vector<char> v) : v_(std::move(v)) {}
  const char* data() const override { return v_.data(); }
  std::size_t size() const override { return v_.size(); }

 private:
  std::vector<char> v_;
};

// A submit_tasks message holds about this much (~2,000 no-op tasks): big enough that a map()
// costs few messages, small enough that the scheduler starts on the first tasks early and no
// batch needs fresh pages (bench/README.md, "page faults").
constexpr std::size_t kSubmitBatchBytes = 64 << 10;
constexpr std::size_t kSpareBatches = 64;

std::string display_key(const std::string& function, TaskId id) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "-%llx", static_cast<unsigned long long>(id));
  return function + buf;
}
}  // namespace

enum class Status : std::uint8_t { pending, finished, erred, cancelled, lost };

// One per future, so kept small (bench/README.md: every new page costs ~10 us on these VMs):
// the default key is made when asked for, the holder is an index, an error is allocated only
// when there is one.
struct FutureState {
  std::shared_ptr<ClientCore> core;
  TaskId id = 0;
  std::string custom_key;                // the user's key ("" = "<function>-<id in hex>")
  const std::string* function = nullptr; // interned in core->function_names_
  // Guarded by core->mu_:
  Status status = Status::pending;
  bool fetching = false;
  std::uint32_t location = 0;            // 1 + index of the holder's data port in core->addresses_
  std::shared_ptr<const Payload> data;
  std::unique_ptr<protocol::ErrorInfo> error;  // erred / cancelled by the scheduler
  using Watchers = std::vector<std::pair<std::weak_ptr<CompletionQueue>, std::size_t>>;
  std::unique_ptr<Watchers> watchers;
  // add_done_callback's, run on the callback thread once done (guarded by core->mu_).
  std::unique_ptr<std::vector<std::function<void()>>> callbacks;
  std::string key() const { return custom_key.empty() ? display_key(*function, id) : custom_key; }
  ~FutureState();
};

class ClientCore {
 public:
  ClientCore(std::string address, const ClientOptions& options);
  ~ClientCore() {
    close("client closed");
    if (reader_fd_ >= 0) ::close(reader_fd_);
  }

  void close(const std::string& reason);
  void wake_locked();
  /// Wakes the threads waiting on cv_, and the thread reading for its future (mu_ held).
  void notify_locked();
  /// Sends what the outbox holds, in order (sched_mu_ held). From a user thread
  /// (`io_thread` false) nothing goes while scatters or fetches wait, which only the I/O thread
  /// does (a scatter must go before the tasks that use it): the I/O thread is woken instead.
  /// Returns whether anything went.
  bool send_outbox(bool io_thread);
  /// After a send by the I/O thread while a waiting thread reads (sched_mu_ held): the send may
  /// have taken the socket's signal of a message that came meanwhile, for which that thread,
  /// polling the socket's descriptor, would then not wake: it is woken.
  void tell_reader_if_unread();
  /// Whether a message from the scheduler waits (sched_mu_ held). The ask (a poll(2) inside
  /// libzmq, as an empty receive would be) also leaves the socket's descriptor armed for the
  /// next message.
  bool sched_unread() { return (sched_.get(zmq::sockopt::events) & ZMQ_POLLIN) != 0; }
  /// sched_unread() as the last use of the socket in this hold of sched_mu_: when nothing waits,
  /// the next holder knows it without asking if nobody held sched_mu_ in between (sched_quiet()).
  bool sched_unread_last() {
    const bool unread = sched_unread();
    quiet_hold_ = unread ? 0 : sched_mu_.holds;
    return unread;
  }
  /// Nothing from the scheduler waits, and its descriptor fires for the next message: the last
  /// holder of sched_mu_ before this one asked and found nothing (sched_mu_ held, the socket not
  /// used yet in this hold). Saves the ask, a poll(2) and a getpid(2) inside libzmq, on the round trip's path.
  bool sched_quiet() const { return quiet_hold_ != 0 && quiet_hold_ + 1 == sched_mu_.holds; }
  /// Receives and handles one message from the scheduler, if one waits (sched_mu_ held).
  bool read_one();
  /// Receives and handles everything the scheduler sent (sched_mu_ held; the I/O thread).
  void read_scheduler() {
    while (read_one()) {
    }
  }
  /// A submit that comes alone (none in the last 50 us, no wake-up pending) is sent by the
  /// submitting thread, unless the I/O thread has the socket now (mu_ held; released).
  void send_or_wake(std::unique_lock<std::mutex>& lock);
  /// A thread waiting for `done()` (mu_ held by `lock`) reads the scheduler's socket itself until
  /// done, the deadline, or a notify. False when another thread reads already, or the client is
  /// closed: then wait on cv_.
  bool read_while_waiting(std::unique_lock<std::mutex>& lock, const std::function<bool()>& done,
                          std::optional<std::chrono::steady_clock::time_point> deadline);
  void finish_locked(FutureState& s);  // status left pending: notify watchers, queue callbacks
  /// Queues a done-callback for the callback thread (started on first use).
  void run_callback_locked(std::function<void()> fn);
  void callback_loop();
  void lose_all_locked(const std::string& reason);
  void io_loop();
  void handle_scheduler(protocol::Received& msg);
  /// The DataClient's events: results that arrived, moved, or could not be fetched.
  void on_fetched(TaskId id, net::PayloadPtr bytes);
  void on_not_there(const std::string& address, TaskId id);
  void on_fetch_failed(const std::string& address, const std::vector<TaskId>& ids, const std::string& why);

  std::mutex mu_;
  std::condition_variable cv_;
  std::uint64_t max_message_bytes_ = 0;  // the scheduler's message limit (0 = none known)
  /// Why a message carrying `bytes` of one task's data would be refused by the scheduler (which
  /// would drop the whole connection), or "" when it fits.
  std::string over_limit(const char* what, std::size_t bytes) const;
  std::unordered_map<TaskId, FutureState*> states_;
  std::unordered_set<std::string> function_names_;  // FutureState::function points here
  std::vector<std::string> addresses_;               // data ports (FutureState::location)
  std::unordered_map<std::string, std::uint32_t> address_index_;
  const std::string* intern_locked(const std::string& function) {
    return &*function_names_.insert(function).first;
  }
  std::uint32_t address_locked(const std::string& address) {
    auto [it, added] = address_index_.try_emplace(address, static_cast<std::uint32_t>(addresses_.size() + 1));
    if (added) addresses_.push_back(address);
    return it->second;
  }
  // Outbox, guarded by mu_.
  // Submissions, packed as they come (protocol::BatchWriter) into batches of about
  // kSubmitBatchBytes, each one submit_tasks message; spare_batches_ keeps sent ones for reuse.
  std::vector<protocol::BatchWriter> out_submits_;
  std::vector<protocol::BatchWriter> spare_batches_;
  void add_submits_locked(protocol::TaskSpec* specs, std::size_t n);
  std::vector<TaskId> out_releases_, out_cancels_, out_force_cancels_, out_fire_and_forget_;
  std::vector<protocol::ReplicateRequest> out_replicates_;
  // Scatters to send: small values (and big ones whose workers cannot reach this client) as a
  // payload through the scheduler; big ones with only their size, the workers fetch them here.
  std::vector<std::pair<protocol::ScatterRequest, net::PayloadPtr>> out_scatters_;
  // Big scattered values, served from this client's own data port until a worker holds them:
  // they go to the worker in one streamed transfer (on a bulk lane), not through the scheduler.
  std::unordered_map<TaskId, net::PayloadPtr> scatter_held_;
  bool scatter_direct_ = true;  // false once a worker could not reach that port, or it could not bind
  /// The I/O thread's data port for scatter_held_ (made at the first big scatter): its
  /// address, or "" when it cannot listen.
  std::string scatter_source();
  void on_scatter_inline(const protocol::ScatterInlineEvent& ev);
  std::map<std::string, std::vector<TaskId>> out_fetches_;
  std::vector<protocol::ScalePoolRequest> out_scales_;
  std::map<std::uint64_t, std::optional<protocol::ScalePoolReply>> scale_replies_;
  std::uint64_t next_scale_id_ = 1;
  std::vector<protocol::StatusRequest> out_statuses_;
  std::map<std::uint64_t, std::optional<protocol::StatusReply>> status_replies_;
  std::uint64_t next_status_id_ = 1;
  std::vector<protocol::RestartRequest> out_restarts_;  // Client::restart()
  std::map<std::uint64_t, std::optional<protocol::RestartReply>> restart_replies_;
  std::uint64_t next_restart_id_ = 1;
  std::vector<protocol::LogsRequest> out_logs_;  // `herd logs` (detail::logs_request)
  std::map<std::uint64_t, std::optional<protocol::LogsReply>> logs_replies_;
  std::uint64_t next_logs_id_ = 1;
  std::vector<protocol::CampaignRequest> out_campaigns_;  // Client::campaigns() / campaign_futures()
  std::map<std::uint64_t, std::optional<protocol::CampaignReply>> campaign_replies_;
  std::uint64_t next_campaign_id_ = 1;
  // An attach's futures, made by the I/O thread as the reply arrives (so that no update that
  // follows it finds no future), taken by the caller.
  std::map<std::uint64_t, std::vector<std::shared_ptr<FutureState>>> campaign_states_;
  // The futures of campaign tasks this client holds (submitted or attached), so that attaching
  // again gives the same ones: two states for one id would steal each other's updates.
  std::unordered_map<TaskId, std::weak_ptr<FutureState>> campaign_futures_;
  /// Applies task_updates (or an attach's current states) to the futures they name.
  void apply_updates_locked(protocol::TaskUpdatesEvent& ev);
  bool wake_pending_ = false;
  std::chrono::steady_clock::time_point last_submit_{};  // send_or_wake: submits come alone or in a burst
  // The thread reading the scheduler's socket while it waits (read_while_waiting), woken
  // through reader_fd_ when the I/O thread finishes its future (a fetch) or the client closes.
  bool reader_active_ = false;
  bool io_looks_soon_ = false;  // the I/O thread polls for at most 2 ms (a reader is active)
  bool io_skips_long_ = false;  // it sleeps without the socket for longer (a reader waits long)
  std::chrono::steady_clock::time_point reader_since_{};
  std::thread::id reader_thread_;
  int reader_fd_ = -1;
  std::vector<std::string> peers_gone_;  // read by a waiting thread: the I/O thread forgets them
  std::string lost_reason_;  // non-empty once the connection is gone
  int n_workers_ = 0;
  std::vector<protocol::PoolStatus> pools_;

  std::string address_;
  Config config_ = Config::from_env();
  zmq::context_t context_{1};
  security::Auth auth_ = security::Auth::for_client();
  /// A mutex that counts its holds: a holder can tell whether anyone held it since its own
  /// last hold (sched_quiet()).
  struct CountingMutex {
    std::mutex m;
    std::uint64_t holds = 0;  // changed only while m is held
    void lock() {
      m.lock();
      ++holds;
    }
    bool try_lock() {
      if (!m.try_lock()) return false;
      ++holds;
      return true;
    }
    void unlock() { m.unlock(); }
  };
  CountingMutex sched_mu_;  // sched_ is one thread's at a time (lock order: sched_mu_, then mu_)
  std::uint64_t quiet_hold_ = 0;  // the hold of sched_mu_ that last found sched_ quiet (sched_unread_last)
  zmq::socket_t sched_;
  int sched_fd_ = -1;     // its ZMQ_FD: polled, then ZMQ_EVENTS asked under sched_mu_
  std::atomic<std::int64_t> last_heard_ns_{0};  // steady clock: the scheduler's last message
  void heard() { last_heard_ns_.store(std::chrono::steady_clock::now().time_since_epoch().count()); }
  std::unique_ptr<net::DataClient> fetcher_;  // gathers from workers' data ports (I/O thread)
  std::unique_ptr<net::DataServer> scatter_server_;  // serves scatter_held_ (I/O thread)
  int wake_fd_ = -1;
  std::uint64_t client_index_ = 0;
  std::atomic<std::uint64_t> next_seq_{1};
  std::atomic<bool> stop_{false};
  std::thread io_;
  std::thread::id io_id_;  // io_'s, set before the constructor returns
  std::weak_ptr<ClientCore> self_;
  // Future::add_done_callback: one thread runs them, in completion order (guarded by mu_).
  std::deque<std::function<void()>> callback_queue_;
  std::condition_variable callback_cv_;
  std::thread callback_thread_;
  bool callbacks_stop_ = false;
};

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

// ---- free functions used by the templates in client.hpp / future.hpp ----

namespace {
bool is_done(const FutureState& s) { return s.status != Status::pending; }

void request_fetch_locked(FutureState& s) {
  if (s.data || s.fetching || s.location == 0) return;
  s.fetching = true;
  s.core->out_fetches_[s.core->addresses_[s.location - 1]].push_back(s.id);
  s.core->wake_locked();
}

[[noreturn]] void throw_for(const FutureState& s) {
  switch (s.status) {
    case Status::erred: {
      const protocol::ErrorInfo none;
      const protocol::ErrorInfo& error = s.error ? *s.error : none;
      if (error.type == "herd::CancelledError") {
        throw CancelledError("task " + s.key() + " failed because " + error.message);
      }
      if (error.type == "herd::TaskCrashed") {  // an isolated task's child process died
        throw TaskCrashed(error.type, error.message, s.key(), error.worker, error.task);
      }
      throw TaskError(error.type, error.message, s.key(), error.worker, error.task);
    }
    case Status::cancelled:
      // The scheduler's reason when it gave one (Client::restart(): "cancelled: the cluster
      // was restarted by client NAME").
      if (s.error && s.error->message.rfind("cancelled: ", 0) == 0) throw CancelledError("task " + s.key() + " " + s.error->message);
      throw CancelledError("task " + s.key() + " was cancelled");
    case Status::lost:
      throw ConnectionError("task " + s.key() + ": " + s.core->lost_reason_);
    default:
      throw Error("task " + s.key() + ": unexpected state");
  }
}
}  // namespace

std::shared_ptr<const Payload> future_payload(FutureState& s, std::int64_t timeout_ms) {
  ClientCore& core = *s.core;
  std::unique_lock lock(core.mu_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    if (s.status == Status::finished) {
      if (s.data) return s.data;
      request_fetch_locked(s);
    } else if (s.status != Status::pending) {
      throw_for(s);
    }
    const bool timed_out = timeout_ms >= 0 && std::chrono::steady_clock::now() >= deadline;
    if (!timed_out) {
      // Here, without the I/O thread's hand-off, when no other thread reads already.
      // Back to the loop above once there is something to do: a finished result with no bytes
      // here and no fetch asked for yet is fetched there.
      auto ready = [&] { return s.status != Status::pending && (s.data || s.status != Status::finished || !s.fetching); };
      if (core.read_while_waiting(lock, ready, timeout_ms < 0 ? std::nullopt : std::optional(deadline))) continue;
    }
    if (timed_out || (timeout_ms >= 0 && core.cv_.wait_until(lock, deadline) == std::cv_status::timeout)) {
      if (!(s.status == Status::finished && s.data) && (s.status == Status::pending || s.status == Status::finished)) {
        throw TimeoutError("task " + s.key() + " " +
                           (s.status == Status::pending ? "did not finish" : "result did not arrive") +
                           " within " + std::to_string(timeout_ms) + " ms");
      }
    } else if (timeout_ms < 0) {
      core.cv_.wait(lock);
    }
  }
}

std::shared_ptr<const Payload> future_take_payload(FutureState& s, std::int64_t timeout_ms) {
  std::shared_ptr<const Payload> p = future_payload(s, timeout_ms);
  if (p->size() >= kHandOverBytes) {
    std::lock_guard lock(s.core->mu_);
    if (s.data == p) s.data.reset();  // fetched again if asked for again
  }
  return p;
}

bool raw_extent(const Payload& p, std::size_t& offset, std::size_t& size) {
  const auto* b = reinterpret_cast<const unsigned char*>(p.data());
  const std::size_t n = p.size();
  if (n == 0) return false;
  std::size_t head = 0, len = 0;
  const unsigned char c = b[0];
  if (c >= 0xa0 && c <= 0xbf) {
    head = 1;
    len = c & 0x1f;
  } else {
    const int bytes = c == 0xc4 || c == 0xd9 ? 1 : c == 0xc5 || c == 0xda ? 2 : c == 0xc6 || c == 0xdb ? 4 : 0;
    if (bytes == 0 || n < 1 + static_cast<std::size_t>(bytes)) return false;
    head = 1 + static_cast<std::size_t>(bytes);
    for (int i = 1; i <= bytes; ++i) len = (len << 8) | b[i];
  }
  if (head + len != n) return false;
  offset = head;
  size = len;
  return true;
}

bool future_done(const FutureState& s) {
  std::lock_guard lock(s.core->mu_);
  return is_done(s);
}

bool future_wait(const FutureState& s, std::int64_t timeout_ms) {
  std::unique_lock lock(s.core->mu_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max<std::int64_t>(timeout_ms, 0));
  while (!is_done(s) && (timeout_ms < 0 || std::chrono::steady_clock::now() < deadline)) {
    if (!s.core->read_while_waiting(lock, [&] { return is_done(s); },
                                    timeout_ms < 0 ? std::nullopt : std::optional(deadline))) {
      break;  // another thread reads: wait below
    }
  }
  if (timeout_ms < 0) {
    s.core->cv_.wait(lock, [&] { return is_done(s); });
    return true;
  }
  return s.core->cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return is_done(s); });
}

void future_cancel(FutureState& s, bool force) {
  std::lock_guard lock(s.core->mu_);
  if (s.status != Status::pending) return;
  s.status = Status::cancelled;
  s.core->finish_locked(s);
  if (s.core->lost_reason_.empty()) {
    (force ? s.core->out_force_cancels_ : s.core->out_cancels_).push_back(s.id);
    s.core->wake_locked();
  }
  s.core->notify_locked();
}

std::exception_ptr future_exception(const FutureState& s, std::int64_t timeout_ms) {
  std::unique_lock lock(s.core->mu_);
  auto done = [&] { return is_done(s); };
  if (timeout_ms < 0) {
    s.core->cv_.wait(lock, done);
  } else if (!s.core->cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), done)) {
    throw TimeoutError("task " + s.key() + " did not finish within " + std::to_string(timeout_ms) + " ms");
  }
  if (s.status == Status::finished) return nullptr;
  try {
    throw_for(s);
  } catch (...) {
    return std::current_exception();
  }
}

void future_add_callback(FutureState& s, std::function<void()> callback) {
  std::unique_lock lock(s.core->mu_);
  if (s.core->callbacks_stop_) {
    // The client is closed (so the future is done): no callback thread is left to run it.
    lock.unlock();
    callback();
    return;
  }
  if (is_done(s)) {
    s.core->run_callback_locked(std::move(callback));
    return;
  }
  if (!s.callbacks) s.callbacks = std::make_unique<std::vector<std::function<void()>>>();
  s.callbacks->push_back(std::move(callback));
}

std::string future_key(const FutureState& s) { return s.key(); }
std::uint64_t future_id(const FutureState& s) { return s.id; }
const ClientCore* future_owner(const FutureState& s) { return s.core.get(); }

std::string future_status(const FutureState& s) {
  std::lock_guard lock(s.core->mu_);
  switch (s.status) {
    case Status::pending: return s.error && s.error->type == "herd::NoWorker" ? "no-worker: " + s.error->message : "pending";
    case Status::finished: return "finished";
    case Status::erred: return "error";
    case Status::cancelled: return "cancelled";
    case Status::lost: return "lost";
  }
  return "?";
}

void throw_decode_error(const FutureState& s, const char* type, const char* what) {
  throw Error("result of task " + s.key() + " cannot be read as " + util::demangle(type) + ": " + what);
}

void throw_foreign_future() {
  throw Error("a future passed as an argument belongs to another client");
}

std::shared_ptr<FutureState> core_submit(ClientCore& core, const std::string& function,
                                         std::vector<char>&& args, std::vector<ArgRefSpec>&& refs,
                                         const TaskOptions& options) {
  auto state = std::make_shared<FutureState>();
  state->core = core.self_.lock();
  state->id = (core.client_index_ << 40) | core.next_seq_.fetch_add(1);
  state->custom_key = options.key();
  protocol::TaskSpec spec;
  spec.id = state->id;
  spec.function = function;
  spec.args = std::move(args);
  spec.refs.reserve(refs.size());
  for (const auto& r : refs) spec.refs.push_back({r.id, r.arg, r.elem});
  spec.key = options.key();
  spec.priority = options.priority();
  spec.retries = options.retries();
  spec.resources = options.resources();
  spec.duration_s = options.duration();
  spec.timeout_ms = options.timeout_ms();
  spec.workers = options.workers();
  spec.allow_other_workers = options.allow_other_workers();
  spec.pool = options.pool();
  spec.campaign = options.campaign();
  spec.isolated = options.isolated();
  spec.isolated_memory = options.isolated_memory();
  std::unique_lock lock(core.mu_);
  if (!core.lost_reason_.empty()) throw ConnectionError("cannot submit: " + core.lost_reason_);
  state->function = core.intern_locked(function);
  if (std::string why = core.over_limit("its arguments", spec.args.size()); !why.empty()) {
    // This task fails, alone: the session and every other task go on.
    state->status = Status::erred;
    state->error = std::make_unique<protocol::ErrorInfo>(
        protocol::ErrorInfo{"herd::MessageTooLarge", "task " + state->key() + " was not sent: " + why, state->key(), ""});
    return state;
  }
  core.states_[state->id] = state.get();
  if (!spec.campaign.empty()) core.campaign_futures_[state->id] = state;
  core.add_submits_locked(&spec, 1);
  core.send_or_wake(lock);
  return state;
}

std::vector<std::shared_ptr<FutureState>> core_submit_gang(ClientCore& core, const std::string& function,
                                                           std::vector<char>&& args,
                                                           std::vector<ArgRefSpec>&& refs,
                                                           const TaskOptions& options, int n) {
  if (n < 1 || n > 65536) {
    throw std::invalid_argument("submit_gang: a gang has 1 to 65536 members, got " + std::to_string(n));
  }
  if (options.isolated()) {
    // A member's communicator lives in the worker (its rendezvous comes through the worker's
    // socket): a child process could not take part.
    throw std::invalid_argument("submit_gang: TaskOptions::isolated() is not supported for gang members");
  }
  std::vector<std::shared_ptr<FutureState>> states;
  std::vector<protocol::TaskSpec> specs;
  // Consecutive ids: the gang id is rank 0's, and rank r's id is gang + r.
  const TaskId first = (core.client_index_ << 40) | core.next_seq_.fetch_add(static_cast<std::uint64_t>(n));
  for (int rank = 0; rank < n; ++rank) {
    auto state = std::make_shared<FutureState>();
    state->core = core.self_.lock();
    state->id = first + static_cast<TaskId>(rank);
    if (!options.key().empty()) state->custom_key = options.key() + "-rank" + std::to_string(rank);
    protocol::TaskSpec spec;
    spec.id = state->id;
    spec.function = function;
    spec.args = args;
    for (const auto& r : refs) spec.refs.push_back({r.id, r.arg, r.elem});
    spec.key = state->custom_key;
    spec.priority = options.priority();
    spec.retries = options.retries();
    spec.resources = options.resources();
    spec.duration_s = options.duration();
    spec.timeout_ms = options.timeout_ms();
    spec.workers = options.workers();
    spec.allow_other_workers = options.allow_other_workers();
    spec.pool = options.pool();
  spec.workers = options.workers();
  spec.allow_other_workers = options.allow_other_workers();
  spec.pool = options.pool();
    spec.campaign = options.campaign();
    spec.gang = first;
    spec.gang_rank = static_cast<std::uint32_t>(rank);
    spec.gang_size = static_cast<std::uint32_t>(n);
    specs.push_back(std::move(spec));
    states.push_back(std::move(state));
  }
  std::lock_guard lock(core.mu_);
  if (!core.lost_reason_.empty()) throw ConnectionError("cannot submit: " + core.lost_reason_);
  const std::string* name = core.intern_locked(function);
  const std::string why = core.over_limit("its arguments (a copy per rank)", args.size() * static_cast<std::size_t>(n));
  for (const auto& state : states) {
    state->function = name;
    if (!why.empty()) {
      state->status = Status::erred;
      state->error = std::make_unique<protocol::ErrorInfo>(
          protocol::ErrorInfo{"herd::MessageTooLarge", "gang task " + state->key() + " was not sent: " + why, state->key(), ""});
      continue;
    }
    core.states_[state->id] = state.get();
    if (!options.campaign().empty()) core.campaign_futures_[state->id] = state;
  }
  if (!why.empty()) return states;
  core.add_submits_locked(specs.data(), specs.size());  // one message: a gang arrives whole
  core.wake_locked();
  return states;
}

std::shared_ptr<FutureState> core_scatter(ClientCore& core, std::vector<char>&& bytes) {
  auto state = std::make_shared<FutureState>();
  state->core = core.self_.lock();
  state->id = (core.client_index_ << 40) | core.next_seq_.fetch_add(1);
  std::lock_guard lock(core.mu_);
  if (!core.lost_reason_.empty()) throw ConnectionError("cannot scatter: " + core.lost_reason_);
  state->function = core.intern_locked("scatter");
  const std::size_t n = bytes.size();
  auto payload = std::make_shared<const VectorPayload>(std::move(bytes));
  if ((n > core.config_.chunk_bytes || !core.over_limit("", n).empty()) && core.scatter_direct_) {
    // Big (or over the scheduler's message limit): the chosen worker fetches it from this
    // client's data port, streamed.
    core.states_[state->id] = state.get();
    core.scatter_held_[state->id] = payload;
    core.out_scatters_.push_back({protocol::ScatterRequest{state->id, "", "", n}, std::move(payload)});
    core.wake_locked();
    return state;
  }
  if (std::string why = core.over_limit("the scattered value", n); !why.empty()) {
    state->status = Status::erred;
    state->error = std::make_unique<protocol::ErrorInfo>(
        protocol::ErrorInfo{"herd::MessageTooLarge", "scatter " + state->key() + " was not sent: " + why, state->key(), ""});
    return state;
  }
  core.states_[state->id] = state.get();
  core.out_scatters_.push_back({protocol::ScatterRequest{state->id, "", "", 0}, std::move(payload)});
  core.wake_locked();
  return state;
}

void core_prefetch(ClientCore& core, const std::vector<FutureState*>& states) {
  std::lock_guard lock(core.mu_);
  for (FutureState* s : states) {
    if (s->status == Status::finished) request_fetch_locked(*s);
  }
}

bool core_wait_all(ClientCore& core, const std::vector<FutureState*>& states, std::int64_t timeout_ms) {
  std::unique_lock lock(core.mu_);
  auto all = [&] {
    for (FutureState* s : states) {
      if (!is_done(*s)) return false;
    }
    return true;
  };
  if (timeout_ms < 0) {
    core.cv_.wait(lock, all);
    return true;
  }
  return core.cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), all);
}

void core_watch(ClientCore& core, const std::vector<FutureState*>& states,
                const std::shared_ptr<CompletionQueue>& queue, std::size_t first_index) {
  std::lock_guard lock(core.mu_);
  for (std::size_t i = 0; i < states.size(); ++i) {
    if (is_done(*states[i])) {
      std::lock_guard ql(queue->mu);
      queue->ready.push_back(first_index + i);
    } else {
      if (!states[i]->watchers) states[i]->watchers = std::make_unique<FutureState::Watchers>();
      states[i]->watchers->emplace_back(queue, first_index + i);
    }
  }
  queue->cv.notify_all();
}

void core_replicate(ClientCore& core, const std::vector<FutureState*>& states, std::uint32_t n) {
  protocol::ReplicateRequest req;
  req.n = n;
  for (FutureState* s : states) req.ids.push_back(s->id);
  std::lock_guard lock(core.mu_);
  if (!core.lost_reason_.empty()) throw ConnectionError("cannot replicate: " + core.lost_reason_);
  core.out_replicates_.push_back(std::move(req));
  core.wake_locked();
}

bool core_wait_any(const std::vector<FutureState*>& states, std::int64_t timeout_ms) {
  if (states.empty()) return false;
  ClientCore& core = *states.front()->core;
  for (FutureState* s : states) {
    if (s->core.get() != &core) throw Error("herd::wait: the futures belong to different clients");
  }
  // A queue that hears of each completion: no scan of every future per wake-up.
  auto queue = std::make_shared<CompletionQueue>();
  core_watch(core, states, queue, 0);
  std::unique_lock ql(queue->mu);
  auto any = [&] { return !queue->ready.empty(); };
  if (timeout_ms < 0) {
    queue->cv.wait(ql, any);
    return true;
  }
  return queue->cv.wait_for(ql, std::chrono::milliseconds(timeout_ms), any);
}

std::vector<bool> core_done(const std::vector<FutureState*>& states) {
  std::vector<bool> out(states.size(), false);
  if (states.empty()) return out;
  std::lock_guard lock(states.front()->core->mu_);
  for (std::size_t i = 0; i < states.size(); ++i) out[i] = is_done(*states[i]);
  return out;
}

void core_fire_and_forget(ClientCore& core, const std::vector<FutureState*>& states) {
  std::lock_guard lock(core.mu_);
  if (!core.lost_reason_.empty()) throw ConnectionError("cannot fire_and_forget: " + core.lost_reason_);
  for (FutureState* s : states) {
    if (s->core.get() != &core) throw_foreign_future();
    core.out_fire_and_forget_.push_back(s->id);
  }
  core.wake_locked();
}

void core_cancel(ClientCore&, const std::vector<FutureState*>& states, bool force) {
  for (FutureState* s : states) future_cancel(*s, force);
}

std::shared_ptr<ClientCore> make_core(const std::string& address, const ClientOptions& options) {
  auto core = std::make_shared<ClientCore>(address, options);
  core->self_ = core;
  return core;
}

}  // namespace detail

// ---- Client ----

Client::Client() : Client(std::unique_ptr<Cluster>(new LocalCluster()), ClientOptions{}) {}

Client::Client(const std::string& scheduler_address, ClientOptions options) {
  detail::enter_role_if_requested();
  core_ = detail::make_core(scheduler_address, options);
}

Client::Client(std::unique_ptr<Cluster> cluster, ClientOptions options) : cluster_(std::move(cluster)) {
  detail::enter_role_if_requested();
  const std::string address = cluster_->start();
  core_ = detail::make_core(address, options);
  if (cluster_->expected_workers() > 0) wait_for_workers(cluster_->expected_workers(), options.workers_timeout);
}

Client::~Client() { close(); }
Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;

namespace {
/// A pool that cannot get workers: every pool has a submission error and no worker.
std::string pool_failure(const std::vector<protocol::PoolStatus>& pools) {
  std::string why;
  for (const auto& p : pools) {
    if (p.last_error.empty() || p.workers > 0 || p.running > 0) return {};
    why += (why.empty() ? "" : "; ") + p.last_error;
  }
  return why;
}
}  // namespace

void Client::wait_for_workers(int n, std::chrono::milliseconds timeout) {
  std::unique_lock lock(core_->mu_);
  const bool ok = core_->cv_.wait_for(lock, timeout, [&] {
    return core_->n_workers_ >= n || !core_->lost_reason_.empty() || !pool_failure(core_->pools_).empty();
  });
  if (!core_->lost_reason_.empty()) throw ConnectionError(core_->lost_reason_);
  if (core_->n_workers_ < n) {
    if (const std::string why = pool_failure(core_->pools_); !why.empty()) throw JobQueueError(why);
  }
  if (!ok) {
    std::string failures;  // jobs that ended before their workers came: why, in their own words
    for (const auto& p : core_->pools_) {
      if (p.workers == 0 && !p.last_failure.empty()) failures += "; pool " + p.name + ": " + p.last_failure;
    }
    throw TimeoutError("only " + std::to_string(core_->n_workers_) + " of " + std::to_string(n) +
                       " workers connected to " + core_->address_ + " within " +
                       std::to_string(timeout.count()) + " ms" + failures);
  }
}

namespace {
void scale_request(detail::ClientCore& core, protocol::ScalePoolRequest req) {
  std::unique_lock lock(core.mu_);
  if (!core.lost_reason_.empty()) throw ConnectionError(core.lost_reason_);
  req.request_id = core.next_scale_id_++;
  core.scale_replies_[req.request_id] = std::nullopt;
  core.out_scales_.push_back(req);
  core.wake_locked();
  // sbatch answers within seconds; the scheduler replies after its first submission attempt.
  const bool answered = core.cv_.wait_for(lock, std::chrono::seconds(120), [&] {
    return core.scale_replies_[req.request_id].has_value() || !core.lost_reason_.empty();
  });
  auto reply = core.scale_replies_[req.request_id];
  core.scale_replies_.erase(req.request_id);
  if (!core.lost_reason_.empty()) throw ConnectionError(core.lost_reason_);
  if (!answered) throw TimeoutError("the scheduler did not answer a scale request within 120 s");
  if (!reply->ok) throw JobQueueError(reply->error);
}
}  // namespace

void Client::scale(int n, const std::string& pool) {
  if (n < 0) throw std::invalid_argument("scale: n must be >= 0, got " + std::to_string(n));
  protocol::ScalePoolRequest req;
  req.pool = pool;
  req.target = static_cast<std::uint32_t>(n);
  scale_request(*core_, req);
}

void Client::scale(const ScaleTo& to, const std::string& pool) {
  if (to.jobs() < -1 || to.workers() < -1 || to.cores() < -1) {
    throw std::invalid_argument("scale: jobs, workers and cores must be >= 0");
  }
  if (to.jobs() < 0 && to.workers() < 0 && to.cores() < 0 && to.memory().empty()) {
    throw std::invalid_argument("scale: give jobs, workers, cores or memory");
  }
  protocol::ScalePoolRequest req;
  req.pool = pool;
  if (to.workers() >= 0) {
    req.target = static_cast<std::uint32_t>(to.workers());
    if (to.jobs() >= 0 || to.cores() >= 0 || !to.memory().empty()) {
      throw std::invalid_argument("scale: give workers alone, or jobs, cores and memory");
    }
  }
  req.jobs = to.jobs();
  req.cores = to.cores();
  if (!to.memory().empty()) req.memory = memory_bytes(to.memory());
  scale_request(*core_, req);
}

void Client::adapt(int minimum, int maximum, const std::string& pool, std::chrono::seconds idle_timeout) {
  if (minimum < 0 || maximum < minimum) {
    throw std::invalid_argument("adapt: need 0 <= minimum <= maximum, got " + std::to_string(minimum) +
                                ", " + std::to_string(maximum));
  }
  protocol::ScalePoolRequest req;
  req.pool = pool;
  req.adaptive = true;
  req.minimum = static_cast<std::uint32_t>(minimum);
  req.maximum = static_cast<std::uint32_t>(maximum);
  req.idle_timeout_s = static_cast<std::uint32_t>(idle_timeout.count());
  scale_request(*core_, req);
}

void Client::adapt(const AdaptOptions& o, const std::string& pool) {
  if (o.minimum() < 0 || o.maximum() < o.minimum()) {
    throw std::invalid_argument("adapt: need 0 <= minimum <= maximum, got " + std::to_string(o.minimum()) + ", " +
                                std::to_string(o.maximum()));
  }
  if (o.idle_timeout().count() < 0 || o.target_duration().count() < 0 || o.wait_count() < 0 ||
      o.interval().count() < -1) {
    throw std::invalid_argument("adapt: idle_timeout, interval, target_duration and wait_count must not be negative");
  }
  protocol::ScalePoolRequest req;
  req.pool = pool;
  req.adaptive = true;
  req.minimum = static_cast<std::uint32_t>(o.minimum());
  req.maximum = static_cast<std::uint32_t>(o.maximum());
  req.idle_timeout_s = static_cast<std::uint32_t>(o.idle_timeout().count());
  req.interval_ms = o.interval().count();
  req.target_duration_ms = o.target_duration().count();
  req.wait_count = static_cast<std::uint32_t>(o.wait_count());
  scale_request(*core_, req);
}

namespace {
/// A request the I/O thread sends for the caller, who waits (holding `lock` on core.mu_) for
/// the reply with its id: `herd status` and `herd logs` ask this way.
template <typename Request, typename Reply>
Reply ask_scheduler(detail::ClientCore& core, std::unique_lock<std::mutex>& lock, Request req, std::uint64_t& next_id,
                    std::vector<Request>& out, std::map<std::uint64_t, std::optional<Reply>>& replies,
                    const char* what) {
  if (!core.lost_reason_.empty()) throw ConnectionError(core.lost_reason_);
  const std::uint64_t id = next_id++;
  req.request_id = id;
  replies[id] = std::nullopt;
  out.push_back(std::move(req));
  core.wake_locked();
  const bool answered = core.cv_.wait_for(lock, std::chrono::seconds(30), [&] {
    return replies[id].has_value() || !core.lost_reason_.empty();
  });
  auto reply = std::move(replies[id]);
  replies.erase(id);
  if (!core.lost_reason_.empty()) throw ConnectionError(core.lost_reason_);
  if (!answered || !reply) {
    throw TimeoutError(std::string("the scheduler did not answer a ") + what + " request within 30 s");
  }
  return std::move(*reply);
}
}  // namespace

void Client::restart(std::chrono::milliseconds timeout) {
  auto& core = *core_;
  std::unique_lock lock(core.mu_);
  if (!core.lost_reason_.empty()) throw ConnectionError(core.lost_reason_);
  if (timeout.count() < 0) throw std::invalid_argument("restart: the timeout must be >= 0");
  // Every future this client made so far is cancelled by it (the scheduler says so for each
  // task it knew; this covers those whose update it has not sent yet, and made just now).
  const std::uint64_t boundary = core.next_seq_.load();
  protocol::RestartRequest req;
  req.request_id = core.next_restart_id_++;
  req.timeout_ms = static_cast<std::uint32_t>(std::min<std::int64_t>(timeout.count(), UINT32_MAX));
  core.restart_replies_[req.request_id] = std::nullopt;
  core.out_restarts_.push_back(req);
  core.wake_locked();
  // The scheduler answers at its deadline at the latest; a margin for the round trip.
  const bool answered = core.cv_.wait_for(lock, timeout + std::chrono::seconds(30), [&] {
    return core.restart_replies_[req.request_id].has_value() || !core.lost_reason_.empty();
  });
  auto reply = core.restart_replies_[req.request_id];
  core.restart_replies_.erase(req.request_id);
  if (!core.lost_reason_.empty()) throw ConnectionError(core.lost_reason_);
  if (!answered || !reply) {
    throw TimeoutError("restart: the scheduler did not answer within " + std::to_string(timeout.count() / 1000 + 30) + " s");
  }
  for (auto& [id, st] : core.states_) {
    if ((id & ((std::uint64_t{1} << 40) - 1)) >= boundary || st->status == detail::Status::cancelled) continue;
    st->status = detail::Status::cancelled;
    st->error = std::make_unique<protocol::ErrorInfo>();
    st->error->type = "herd::CancelledError";
    st->error->message = "cancelled: the cluster was restarted by this client";
    st->data.reset();
    st->location = 0;
    st->fetching = false;
    core.finish_locked(*st);
  }
  core.notify_locked();
  if (!reply->ok) throw TimeoutError(reply->error);
}

std::vector<std::string> Client::run_targets(const RunOn& on) const {
  const ClusterStatus st = status();
  std::vector<std::string> connected;
  for (const auto& w : st.workers) connected.push_back(w.name);
  if (on.names().empty()) {
    if (connected.empty()) throw Error("run: no worker is connected");
    return connected;
  }
  std::vector<std::string> names;
  for (const std::string& name : on.names()) {
    if (std::find(connected.begin(), connected.end(), name) == connected.end()) {
      throw Error("run: no connected worker is named '" + name + "' (connected: " + util::join(connected, ", ") + ")");
    }
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  return names;
}

TaskOptions Client::run_options(const std::string& worker) {
  // Pinned to its worker, first in its queue, and never run twice.
  return TaskOptions{}.workers({worker}).allow_other_workers(false).priority(INT32_MAX).retries(0);
}

void Client::run_wait(const std::vector<detail::FutureState*>& states, const std::vector<std::string>& names) const {
  // A call whose worker left would wait for it forever (it may run on that worker only): while
  // calls are pending, the scheduler is asked every second which workers are connected.
  while (!detail::core_wait_all(*core_, states, 1000)) {
    const ClusterStatus st = status();
    for (std::size_t i = 0; i < states.size(); ++i) {
      if (detail::future_done(*states[i])) continue;
      const bool there = std::any_of(st.workers.begin(), st.workers.end(), [&](const WorkerInfo& w) {
        return w.name == names[i];
      });
      if (there) continue;
      detail::core_cancel(*core_, states);
      throw WorkerLostError("run: worker " + names[i] + " left before its call " + detail::future_key(*states[i]) +
                            " finished");
    }
  }
}

std::vector<PoolInfo> Client::pools() const {
  std::lock_guard lock(core_->mu_);
  std::vector<PoolInfo> out;
  for (const auto& p : core_->pools_) out.push_back(detail::to_pool_info(p));
  return out;
}

ClusterStatus Client::status(int max_events) const {
  auto& core = *core_;
  std::unique_lock lock(core.mu_);
  protocol::StatusRequest req;
  req.max_events = static_cast<std::uint32_t>(std::max(0, max_events));
  return detail::to_cluster_status(ask_scheduler(core, lock, req, core.next_status_id_, core.out_statuses_,
                                                 core.status_replies_, "status"));
}

TaskExplanation Client::explain(const std::string& key) const {
  auto& core = *core_;
  std::unique_lock lock(core.mu_);
  protocol::StatusRequest req;
  req.explain = true;
  req.explain_key = key;
  return detail::to_task_explanation(ask_scheduler(core, lock, req, core.next_status_id_, core.out_statuses_,
                                                   core.status_replies_, "explain")
                                         .explanation);
}

namespace {
protocol::CampaignReply campaign_request(detail::ClientCore& core, std::unique_lock<std::mutex>& lock,
                                         protocol::CampaignOp op, const std::string& name) {
  protocol::CampaignRequest req;
  req.op = static_cast<std::uint8_t>(op);
  req.name = name;
  return ask_scheduler(core, lock, std::move(req), core.next_campaign_id_, core.out_campaigns_, core.campaign_replies_,
                       "campaign");
}
}  // namespace

std::vector<CampaignInfo> Client::campaigns() const {
  auto& core = *core_;
  std::unique_lock lock(core.mu_);
  const protocol::CampaignReply reply = campaign_request(core, lock, protocol::CampaignOp::list, "");
  std::vector<CampaignInfo> out;
  for (const auto& c : reply.campaigns) out.push_back(detail::to_campaign_info(c));
  return out;
}

void Client::release_campaign(const std::string& name) {
  auto& core = *core_;
  std::unique_lock lock(core.mu_);
  const protocol::CampaignReply reply = campaign_request(core, lock, protocol::CampaignOp::release, name);
  if (!reply.ok) throw Error("release_campaign: " + reply.error);
}

namespace detail {
std::vector<std::shared_ptr<FutureState>> core_attach_campaign(ClientCore& core, const std::string& name) {
  std::unique_lock lock(core.mu_);
  const std::uint64_t id = core.next_campaign_id_;  // the one campaign_request() takes
  const protocol::CampaignReply reply = campaign_request(core, lock, protocol::CampaignOp::attach, name);
  std::vector<std::shared_ptr<FutureState>> states;
  if (auto it = core.campaign_states_.find(id); it != core.campaign_states_.end()) {
    states = std::move(it->second);
    core.campaign_states_.erase(it);
  }
  if (!reply.ok) throw Error("campaign_futures: " + reply.error);
  return states;
}
}  // namespace detail

int Client::n_workers() const {
  std::lock_guard lock(core_->mu_);
  return core_->n_workers_;
}

const std::string& Client::scheduler_address() const { return core_->address_; }

void Client::close() {
  if (core_) core_->close("client closed");
  if (cluster_) cluster_->close();
}

namespace detail {
// Client::worker_logs / task_output / logs (src/api/logs.cpp) ask through this.
protocol::LogsReply logs_request(ClientCore& core, protocol::LogsRequest req) {
  std::unique_lock lock(core.mu_);
  // The scheduler answers within its own bound on silent workers (a few seconds).
  return ask_scheduler(core, lock, std::move(req), core.next_logs_id_, core.out_logs_, core.logs_replies_, "logs");
}
}  // namespace detail

Client& get_client() {
  detail::check_not_isolated("herd::get_client()");
  const auto hooks = detail::worker_hooks();
  if (hooks == nullptr || detail::current_task_id() == 0) {
    throw std::logic_error("herd::get_client() called outside a task: inside a program, make a herd::Client; "
                           "get_client() is for a task running on a worker");
  }
  // Made by the first task that asks, closed (goodbye said) when the worker process exits.
  static std::mutex mu;
  static std::unique_ptr<Client> client;
  std::lock_guard lock(mu);
  if (!client) {
    ClientOptions options;
    options.name = "tasks of worker " + this_task().worker;
    client = std::make_unique<Client>(hooks->scheduler, options);
  }
  return *client;
}

}  // namespace herd
