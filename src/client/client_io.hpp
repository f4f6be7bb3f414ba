// ClientCore: the client's IO shell around its ClientState (client_state.hpp). One I/O thread
// owns a DEALER to the scheduler and DEALERs to worker data ports. User threads make their
// events in the state under mu_ (submissions, releases, cancels, fetches go to its outbox) and
// wake the I/O thread through an eventfd only when none is pending, so a loop of submits costs
// one wake-up per batch. Two exceptions, for the round trip of one task: a submit that comes
// alone sends the outbox itself (send_or_wake), and a thread that waits for a future reads the
// scheduler's socket itself meanwhile (read_while_waiting), so neither waits for a hand-off to
// or from the I/O thread. `sched_mu_` makes the socket one thread's at a time; the I/O thread
// polls its file descriptor, not the socket. What finishing futures leaves (callbacks, queues
// to tell) is carried out under mu_ right after the event (settle_locked).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "client/client_state.hpp"
#include "common/config.hpp"
#include "common/security.hpp"
#include "herd/client.hpp"
#include "net/data_port.hpp"
#include "protocol/codec.hpp"

namespace herd::detail {

using protocol::TaskId;

class ClientCore {
 public:
  ClientCore(std::string address, const ClientOptions& options);
  ~ClientCore();

  void close(const std::string& reason);
  void wake_locked();
  /// Wakes the threads waiting on cv_, and the thread reading for its future (mu_ held).
  void notify_locked();
  /// After an event of the state (mu_ held): the callbacks and completion queues of the futures
  /// it finished, then notify_locked().
  void settle_locked() {
    if (!state_.finished().empty()) deliver_finished_locked();
    notify_locked();
  }
  void deliver_finished_locked();
  /// The state loses every future and request; the waiting threads hear of it (mu_ held).
  void lose_all_locked(const std::string& reason) {
    state_.lose_all(reason);
    settle_locked();
  }
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
  /// Sends `req` (the I/O thread does) and waits, holding `lock` on mu_, up to `timeout` for the
  /// reply with its id: the request's table entry, its reply in it.
  /// @throws ConnectionError when the connection is lost (before or meanwhile)
  /// @throws TimeoutError with `late` when no reply came in time
  client::Pending ask(std::unique_lock<std::mutex>& lock, client::Request req, std::chrono::milliseconds timeout,
                      const std::string& late);
  /// Queues a done-callback for the callback thread (started on first use).
  void run_callback_locked(std::function<void()> fn);
  void callback_loop();
  void io_loop();
  void handle_scheduler(protocol::Received& msg);
  /// The DataClient's events: results that arrived, moved, or could not be fetched.
  void on_fetched(TaskId id, net::PayloadPtr bytes);
  void on_not_there(const std::string& address, TaskId id);
  void on_fetch_failed(const std::string& address, const std::vector<TaskId>& ids, const std::string& why);
  /// The I/O thread's data port for the state's big scatters (made at the first one): its
  /// address, or "" when it cannot listen.
  std::string scatter_source();
  void on_scatter_inline(const protocol::ScatterInlineEvent& ev);

  std::string address_;
  Config config_ = Config::from_env();
  std::mutex mu_;
  std::condition_variable cv_;
  client::ClientState state_{config_.chunk_bytes};  // guarded by mu_
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
  std::unique_ptr<net::DataServer> scatter_server_;  // serves the state's held scatters (I/O thread)
  int wake_fd_ = -1;
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
