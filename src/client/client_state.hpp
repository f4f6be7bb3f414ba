// ClientState: what a client knows and decides, with no socket, no thread, no clock and no lock
// inside (as SchedulerState and WorkerState beside their processes). Its IO shell, ClientCore
// (client_io.hpp), holds its mutex around every call, turns each user call (submit, cancel,
// result) and each message from the scheduler or a data port into an event here, and carries
// out what the state leaves:
//   - the outbox: submissions packed into submit_tasks batches, releases, cancels,
//     fire-and-forget, replicates, scatters, requests that wait for a reply, fetches by holder;
//   - the futures it finished: their done-callbacks to run and the completion queues to tell;
//   - the replies to requests, kept under their id until the caller who waits for it takes it.
// The futures table (id -> FutureState) lives here: a future's fields are the state's, read by
// the API's functions (future_payload, ...) under the same mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include "herd/detail/client_core.hpp"
#include "herd/detail/payload.hpp"
#include "protocol/messages.hpp"

namespace herd::protocol {
class BatchWriter;  // codec.hpp: the state packs submissions, the shell sends them
}  // namespace herd::protocol

namespace herd::detail {

enum class Status : std::uint8_t { pending, finished, erred, cancelled, lost };

/// One per future, so kept small (every new page costs a fault): the default key is made when
/// asked for, the holder is an index, an error is allocated only when there is one. Made by the
/// shell (a submit, a scatter) or by the state (an attach to a campaign); every field after
/// `function` is the state's, read and written under the shell's mutex.
struct FutureState {
  std::shared_ptr<ClientCore> core;      // null for a future made by a ClientState alone (tests)
  protocol::TaskId id = 0;
  std::string custom_key;                // the user's key ("" = "<function>-<id in hex>")
  const std::string* function = nullptr; // interned by the state
  Status status = Status::pending;
  bool fetching = false;
  std::uint32_t location = 0;            // 1 + index of the holder's data port in the state's addresses
  std::shared_ptr<const Payload> data;
  std::unique_ptr<protocol::ErrorInfo> error;  // erred / cancelled by the scheduler
  using Watchers = std::vector<std::pair<std::weak_ptr<CompletionQueue>, std::size_t>>;
  std::unique_ptr<Watchers> watchers;
  // add_done_callback's, run on the callback thread once done.
  std::unique_ptr<std::vector<std::function<void()>>> callbacks;
  std::string key() const;
  /// Tells its client that it is gone (ClientCore: ClientState::dropped); defined by the shell.
  ~FutureState();
};

}  // namespace herd::detail

namespace herd::client {

using detail::FutureState;
using detail::PayloadPtr;
using detail::Status;
using protocol::TaskId;

/// A submit_tasks message holds about this much (~2,000 no-op tasks): big enough that a map()
/// costs few messages, small enough that the scheduler starts on the first tasks early and no
/// batch needs fresh pages.
inline constexpr std::size_t kSubmitBatchBytes = 64 << 10;
/// Sent batches kept for reuse (their buffers stay faulted in).
inline constexpr std::size_t kSpareBatches = 64;
/// Released ids ride with the last submissions (SubmitTasksRequest::released) up to this many.
inline constexpr std::size_t kReleasesWithSubmits = 4096;

/// What a caller asks the scheduler and waits for the answer to. One table holds them all, under
/// ids of one sequence (the scheduler echoes the id in the reply).
using Request = std::variant<protocol::ScalePoolRequest, protocol::StatusRequest, protocol::RestartRequest,
                             protocol::LogsRequest, protocol::CampaignRequest, protocol::ReportRequest,
                             protocol::JobRequest>;
/// An answer: alternative i + 1 answers Request alternative i; monostate while none came.
using Reply = std::variant<std::monostate, protocol::ScalePoolReply, protocol::StatusReply, protocol::RestartReply,
                           protocol::LogsReply, protocol::CampaignReply, protocol::ReportReply, protocol::JobReply>;

/// An outstanding request: sent (or in the outbox), and the slot for its reply.
struct Pending {
  std::size_t kind = 0;  // the Request's alternative: only the matching reply fills `reply`
  Reply reply;
  std::string failed;    // why no reply will count (the connection was lost), or ""
  // An attach's futures, made as its reply arrived (so that no update after it finds no future).
  std::vector<std::shared_ptr<FutureState>> futures;
  /// The caller may stop waiting: answered, or failed.
  bool settled() const { return reply.index() != 0 || !failed.empty(); }
};

/// What the shell sends, in this order (ClientCore::send_outbox): scatters (before the tasks
/// that use them), submissions (before the releases, so that an input is never released ahead
/// of the task that needs it), replicates, fire-and-forget, cancels, force-cancels, releases,
/// requests; fetches go to the holders' data ports.
struct Outbox {
  Outbox();
  ~Outbox();  // out of line: protocol::BatchWriter is only declared here
  Outbox(const Outbox&) = delete;
  Outbox& operator=(const Outbox&) = delete;

  // Submissions, packed as they come into batches of about kSubmitBatchBytes, each one message.
  std::vector<protocol::BatchWriter> submits;
  std::vector<TaskId> releases, cancels, force_cancels, fire_and_forget;
  std::vector<protocol::ReplicateRequest> replicates;
  // Small values (and big ones whose workers cannot reach this client) go with their bytes
  // through the scheduler; big ones (nbytes > 0) with only their size: the chosen worker
  // fetches them from this client's data port.
  std::vector<std::pair<protocol::ScatterRequest, PayloadPtr>> scatters;
  std::vector<Request> requests;                       // in the order of their ids
  std::map<std::string, std::vector<TaskId>> fetches;  // holder's data port -> results

  void swap(Outbox& other) noexcept;
  /// Something goes to the scheduler (fetches go elsewhere).
  bool to_scheduler() const;
  /// The releases go inside the last submit_tasks message (one message, not two, on a round
  /// trip's path): nothing else goes between them, and they are few.
  bool releases_ride() const {
    return !releases.empty() && releases.size() <= kReleasesWithSubmits && replicates.empty() &&
           fire_and_forget.empty() && cancels.empty() && force_cancels.empty() && has_submits();
  }
  bool has_submits() const;
};

/// What finishing futures left for the shell: callbacks for the callback thread, in completion
/// order, and completion queues (as_completed, wait) to push an index to.
struct Finished {
  std::vector<std::function<void()>> callbacks;
  FutureState::Watchers watchers;
  bool empty() const { return callbacks.empty() && watchers.empty(); }
  void clear() {
    callbacks.clear();
    watchers.clear();
  }
};

class ClientState {
 public:
  /// `chunk_bytes`: scattered values bigger than this are served from this client's data port.
  explicit ClientState(std::size_t chunk_bytes);
  ~ClientState();
  ClientState(const ClientState&) = delete;
  ClientState& operator=(const ClientState&) = delete;

  /// The scheduler's hello_reply: this client's index (the high bits of its task ids) and its
  /// message limit (0 = none).
  void connected(std::uint64_t client_index, std::uint64_t max_message_bytes);

  // --- the futures ---

  /// A task: gives `f` its id and function and packs `spec` (its id filled in) into the outbox:
  /// true. False when its arguments are over the scheduler's message limit: the future fails
  /// (herd::MessageTooLarge), alone, and nothing is sent.
  bool submit(const std::shared_ptr<FutureState>& f, protocol::TaskSpec& spec);
  /// A gang's members (ranks in order): consecutive ids, the gang's id rank 0's, packed together
  /// (one message: a gang arrives whole). False, every member failed, when over the limit.
  bool submit_gang(const std::vector<std::shared_ptr<FutureState>>& fs, std::vector<protocol::TaskSpec>& specs,
                   std::size_t args_bytes);
  /// A scattered value: true when queued, false when it failed (over the limit and no port).
  bool scatter(const std::shared_ptr<FutureState>& f, std::vector<char>&& bytes);
  /// Asks the holder for a finished future's bytes, unless here or asked for: true when queued.
  bool request_fetch(FutureState& s);
  /// Cancels a pending future (finished, status cancelled; the scheduler told unless the
  /// connection is lost): false when it was not pending.
  bool cancel(FutureState& s, bool force);
  void fire_and_forget(TaskId id) { outbox_.fire_and_forget.push_back(id); }
  void replicate(protocol::ReplicateRequest req) { outbox_.replicates.push_back(std::move(req)); }
  /// A future was let go: forgotten, its task released. True when a release was queued.
  bool dropped(TaskId id);
  /// After a restart: every future made before `boundary` (a next_seq()) and not cancelled is
  /// cancelled by it, also those the scheduler has not told of yet.
  void cancel_restarted(std::uint64_t boundary);
  /// The sequence number the next task id takes (its low 40 bits).
  std::uint64_t next_seq() const { return next_seq_; }

  // --- events ---

  /// task_updates (or an attach's current states): the futures they name, finished or not.
  void apply_updates(protocol::TaskUpdatesEvent& ev);
  /// A worker could not fetch these scattered values from this client's port: they go through
  /// the scheduler, from now on every big one. True the first time (the shell says so).
  bool scatter_inline(const protocol::ScatterInlineEvent& ev);
  void cluster_state(protocol::ClusterStateEvent& ev) {
    n_workers_ = static_cast<int>(ev.workers);
    pools_ = std::move(ev.pools);
  }
  /// Workers gone (peers_gone): the shell's fetcher forgets their data ports.
  void workers_gone(std::vector<std::string>& addresses);
  /// The connection is gone: pending futures (and finished ones whose bytes are not here) are
  /// lost, and every outstanding request fails, with `reason`.
  void lose_all(const std::string& reason);
  /// A fetch brought a result's bytes: false when no future wants them.
  bool fetched(TaskId id, PayloadPtr bytes);
  /// The holder no longer has it: the future waits for the scheduler's next word on it. Null
  /// when no future wants it.
  const FutureState* not_there(TaskId id);
  /// The holder at `address` did not answer: the ids to tell the scheduler of (fetch_failed),
  /// those not here yet and not pointed at another holder meanwhile.
  std::vector<TaskId> fetch_failed(const std::string& address, const std::vector<TaskId>& ids);

  // --- requests that wait for a reply ---

  /// Queues `req` under a fresh id (set in it), its reply slot empty; returns the id.
  std::uint64_t request(Request req);
  /// A reply: kept for the request with its id; false (dropped) when no request of its kind has
  /// that id (the caller gave up). An attach's reply makes its futures (or gives the ones this
  /// client holds already), owned by `owner`, and applies their current states.
  bool answer(Reply reply, const std::shared_ptr<detail::ClientCore>& owner = nullptr);
  /// Whether request `id` has its answer, or failed (false for an unknown id).
  bool settled(std::uint64_t id) const;
  /// Takes request `id` out of the table (answered, failed or not: the caller stops waiting).
  Pending take(std::uint64_t id);
  std::size_t outstanding() const { return requests_.size(); }

  // --- for the shell ---

  /// Moves what the outbox holds into `into` (emptied before).
  void take_outbox(Outbox& into) { outbox_.swap(into); }
  const Outbox& outbox() const { return outbox_; }
  /// Scatters or fetches wait, which only the I/O thread sends (a scatter must go before the
  /// tasks that use it).
  bool io_only() const { return !outbox_.scatters.empty() || !outbox_.fetches.empty(); }
  /// Sent batches back, emptied, for reuse.
  void recycle(std::vector<protocol::BatchWriter>& sent);
  /// At close: the submissions and fire-and-forgets that still go (none once lost).
  void take_for_goodbye(std::vector<protocol::BatchWriter>& submits, std::vector<TaskId>& fire_and_forget);
  /// Finishing left callbacks and queues to tell: the shell carries them out, then clears.
  Finished& finished() { return finished_; }
  /// Data ports of workers gone, for the fetcher to forget (the I/O thread takes them).
  std::vector<std::string>& peers_gone() { return peers_gone_; }
  /// A big scattered value this client serves (null when a worker holds it now, or released).
  PayloadPtr held_scatter(TaskId id) const;
  /// Big scatters go straight to the workers (false once one could not reach this client).
  bool scatter_direct() const { return scatter_direct_; }
  /// This client cannot serve big scatters (no data port): they go through the scheduler.
  void no_scatter_port() { scatter_direct_ = false; }
  /// A big scatter goes through the scheduler after all (no data port to serve it).
  void scatter_not_held(TaskId id) { scatter_held_.erase(id); }

  bool lost() const { return !lost_reason_.empty(); }
  const std::string& lost_reason() const { return lost_reason_; }
  int n_workers() const { return n_workers_; }
  const std::vector<protocol::PoolStatus>& pools() const { return pools_; }
  FutureState* find(TaskId id) const {
    auto it = states_.find(id);
    return it == states_.end() ? nullptr : it->second;
  }
  std::size_t futures() const { return states_.size(); }
  const std::string& address(std::uint32_t location) const { return addresses_[location - 1]; }
  /// Why a message carrying `bytes` of one task's data would be refused by the scheduler (which
  /// would drop the whole connection), or "" when it fits.
  std::string over_limit(const char* what, std::size_t bytes) const;
  /// Checks the invariants; the first one broken, or "".
  std::string validate() const;

 private:
  TaskId next_id(std::uint64_t n = 1) {
    const TaskId id = (client_index_ << 40) | next_seq_;
    next_seq_ += n;
    return id;
  }
  const std::string* intern(const std::string& function) { return &*function_names_.insert(function).first; }
  std::uint32_t address_index(const std::string& address);
  void add_submits(protocol::TaskSpec* specs, std::size_t n);
  /// Status set (not pending): the callbacks and watchers go to finished_.
  void finish(FutureState& s);
  void fail(FutureState& s, std::string message);  // erred with herd::MessageTooLarge
  bool answer_attach(Pending& p, protocol::CampaignReply& reply, const std::shared_ptr<detail::ClientCore>& owner);

  std::size_t chunk_bytes_;
  std::uint64_t client_index_ = 0;
  std::uint64_t max_message_bytes_ = 0;   // the scheduler's message limit (0 = none known)
  std::uint64_t next_seq_ = 1;            // task ids: client_index_ << 40 | sequence
  std::unordered_map<TaskId, FutureState*> states_;
  std::unordered_set<std::string> function_names_;  // FutureState::function points here
  std::vector<std::string> addresses_;               // data ports (FutureState::location)
  std::unordered_map<std::string, std::uint32_t> address_index_;
  Outbox outbox_;
  std::vector<protocol::BatchWriter> spare_batches_;
  // Big scattered values, served from this client's own data port until a worker holds them:
  // they go to the worker in one streamed transfer (on a bulk lane), not through the scheduler.
  std::unordered_map<TaskId, PayloadPtr> scatter_held_;
  bool scatter_direct_ = true;  // false once a worker could not reach that port, or it could not bind
  std::uint64_t next_request_ = 1;
  std::map<std::uint64_t, Pending> requests_;
  // The futures of campaign tasks this client holds (submitted or attached), so that attaching
  // again gives the same ones: two states for one id would steal each other's updates.
  std::unordered_map<TaskId, std::weak_ptr<FutureState>> campaign_futures_;
  Finished finished_;
  std::vector<std::string> peers_gone_;
  std::string lost_reason_;  // non-empty once the connection is gone
  int n_workers_ = 0;
  std::vector<protocol::PoolStatus> pools_;
};

}  // namespace herd::client
