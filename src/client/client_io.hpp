// ClientCore: the client's machinery, declared for the files that use it (client_io.cpp: the
// socket and the threads; future.cpp: the futures' and the templates' non-template half;
// client.cpp: herd::Client's own methods). ClientCore owns one I/O thread with a DEALER to the
// scheduler and DEALERs to worker data ports. User threads append to an outbox (submissions,
// releases, cancels, fetches) and wake the I/O thread through an eventfd only when the outbox
// was empty, so a loop of submits costs one wake-up per batch. Two exceptions, for the round
// trip of one task: a submit that comes alone sends the outbox itself, and a thread that waits
// for a future reads the scheduler's socket itself meanwhile, so neither waits for a hand-off
// to or from the I/O thread. `sched_mu_` makes the socket one thread's at a time; the I/O thread
// polls its file descriptor, not the socket.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <zmq.hpp>

#include "common/config.hpp"
#include "common/security.hpp"
#include "herd/client.hpp"
#include "net/data_port.hpp"
#include "protocol/codec.hpp"

namespace herd::detail {

using protocol::MessageType;
using protocol::TaskId;

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
// batch needs fresh pages.
inline constexpr std::size_t kSubmitBatchBytes = 64 << 10;
inline constexpr std::size_t kSpareBatches = 64;

inline std::string display_key(const std::string& function, TaskId id) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "-%llx", static_cast<unsigned long long>(id));
  return function + buf;
}

enum class Status : std::uint8_t { pending, finished, erred, cancelled, lost };

// One per future, so kept small (every new page costs a fault): the default key is made when
// asked for, the holder is an index, an error is allocated only when there is one.
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

std::shared_ptr<ClientCore> make_core(const std::string& address, const ClientOptions& options);

}  // namespace herd::detail
