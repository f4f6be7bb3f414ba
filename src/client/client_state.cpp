// ClientState: the client's decisions (client_state.hpp), with no IO.
#include "client/client_state.hpp"

#include <cstdio>
#include <type_traits>

#include "common/util.hpp"
#include "protocol/codec.hpp"

namespace herd {
namespace detail {

std::string FutureState::key() const {
  if (!custom_key.empty()) return custom_key;
  char buf[24];
  std::snprintf(buf, sizeof buf, "-%llx", static_cast<unsigned long long>(id));
  return *function + buf;
}

}  // namespace detail

namespace client {

namespace {

class VectorPayload : public detail::Payload {
 public:
  explicit VectorPayload(std::vector<char> v) : v_(std::move(v)) {}
  const char* data() const override { return v_.data(); }
  std::size_t size() const override { return v_.size(); }

 private:
  std::vector<char> v_;
};

/// The alternative of Reply that answers Request alternative `kind`.
constexpr std::size_t reply_index(std::size_t kind) { return kind + 1; }
static_assert(std::variant_size_v<Reply> == std::variant_size_v<Request> + 1);
static_assert(std::is_same_v<std::variant_alternative_t<reply_index(2), Reply>, protocol::RestartReply>);

}  // namespace

Outbox::Outbox() = default;
Outbox::~Outbox() = default;

void Outbox::swap(Outbox& other) noexcept {
  submits.swap(other.submits);
  releases.swap(other.releases);
  cancels.swap(other.cancels);
  force_cancels.swap(other.force_cancels);
  fire_and_forget.swap(other.fire_and_forget);
  replicates.swap(other.replicates);
  scatters.swap(other.scatters);
  requests.swap(other.requests);
  fetches.swap(other.fetches);
}

bool Outbox::has_submits() const { return !submits.empty(); }

bool Outbox::to_scheduler() const {
  return !(scatters.empty() && submits.empty() && releases.empty() && replicates.empty() && fire_and_forget.empty() &&
           cancels.empty() && force_cancels.empty() && requests.empty());
}

ClientState::ClientState(std::size_t chunk_bytes) : chunk_bytes_(chunk_bytes) {}
ClientState::~ClientState() = default;

void ClientState::connected(std::uint64_t client_index, std::uint64_t max_message_bytes) {
  client_index_ = client_index;
  max_message_bytes_ = max_message_bytes;
}

std::string ClientState::over_limit(const char* what, std::size_t bytes) const {
  // The rest of the message (ids, key, function, the batch around it) in a generous margin.
  constexpr std::size_t kMargin = kSubmitBatchBytes + 4096;
  if (max_message_bytes_ == 0 || bytes + kMargin <= max_message_bytes_) return "";
  return std::string(what) + ": " + util::format_bytes(bytes) + " (" + std::to_string(bytes) +
         " bytes), over the scheduler's message limit of " + util::format_bytes(max_message_bytes_) +
         " (HERD_MAX_MESSAGE_BYTES=" + std::to_string(max_message_bytes_) +
         "); pass big data as the result of a task, which stays on the workers";
}

std::uint32_t ClientState::address_index(const std::string& address) {
  auto [it, added] = address_index_.try_emplace(address, static_cast<std::uint32_t>(addresses_.size() + 1));
  if (added) addresses_.push_back(address);
  return it->second;
}

void ClientState::add_submits(protocol::TaskSpec* specs, std::size_t n) {
  // A big task starts a batch of its own, so no batch grows past the limit by packing.
  auto& batches = outbox_.submits;
  const bool big = n > 0 && specs[0].args.size() > kSubmitBatchBytes;
  if (batches.empty() || batches.back().size() >= kSubmitBatchBytes || (big && batches.back().size() > 0)) {
    if (spare_batches_.empty()) {
      batches.emplace_back();
    } else {
      batches.push_back(std::move(spare_batches_.back()));
      spare_batches_.pop_back();
    }
  }
  for (std::size_t i = 0; i < n; ++i) batches.back().add(specs[i]);
}

void ClientState::recycle(std::vector<protocol::BatchWriter>& sent) {
  for (auto& batch : sent) {
    if (spare_batches_.size() >= kSpareBatches || batch.capacity() > 4 * kSubmitBatchBytes) continue;
    batch.clear();
    spare_batches_.push_back(std::move(batch));
  }
}

void ClientState::take_for_goodbye(std::vector<protocol::BatchWriter>& submits, std::vector<TaskId>& fire_and_forget) {
  if (lost()) return;
  submits.swap(outbox_.submits);
  fire_and_forget.swap(outbox_.fire_and_forget);
}

void ClientState::fail(FutureState& s, std::string message) {
  s.status = Status::erred;
  s.error = std::make_unique<protocol::ErrorInfo>(
      protocol::ErrorInfo{"herd::MessageTooLarge", std::move(message), s.key(), ""});
}

bool ClientState::submit(const std::shared_ptr<FutureState>& f, protocol::TaskSpec& spec) {
  f->id = spec.id = next_id();
  f->function = intern(spec.function);
  if (std::string why = over_limit("its arguments", spec.args.size()); !why.empty()) {
    // This task fails, alone: the session and every other task go on.
    fail(*f, "task " + f->key() + " was not sent: " + why);
    return false;
  }
  states_[f->id] = f.get();
  if (!spec.campaign.empty()) campaign_futures_[f->id] = f;
  add_submits(&spec, 1);
  return true;
}

bool ClientState::submit_gang(const std::vector<std::shared_ptr<FutureState>>& fs,
                              std::vector<protocol::TaskSpec>& specs, std::size_t args_bytes) {
  // Consecutive ids: the gang id is rank 0's, and rank r's id is gang + r.
  const TaskId first = next_id(fs.size());
  const std::string* name = fs.empty() ? nullptr : intern(specs.front().function);
  const std::string why = over_limit("its arguments (a copy per rank)", args_bytes);
  for (std::size_t rank = 0; rank < fs.size(); ++rank) {
    FutureState& f = *fs[rank];
    f.id = specs[rank].id = first + rank;
    specs[rank].gang = first;
    f.function = name;
    if (!why.empty()) {
      fail(f, "gang task " + f.key() + " was not sent: " + why);
      continue;
    }
    states_[f.id] = &f;
    if (!specs[rank].campaign.empty()) campaign_futures_[f.id] = fs[rank];
  }
  if (!why.empty()) return false;
  add_submits(specs.data(), specs.size());  // one message: a gang arrives whole
  return true;
}

bool ClientState::scatter(const std::shared_ptr<FutureState>& f, std::vector<char>&& bytes) {
  f->id = next_id();
  f->function = intern("scatter");
  const std::size_t n = bytes.size();
  auto payload = std::make_shared<const VectorPayload>(std::move(bytes));
  if ((n > chunk_bytes_ || !over_limit("", n).empty()) && scatter_direct_) {
    // Big (or over the scheduler's message limit): the chosen worker fetches it from this
    // client's data port, streamed.
    states_[f->id] = f.get();
    scatter_held_[f->id] = payload;
    outbox_.scatters.push_back({protocol::ScatterRequest{f->id, "", "", n}, std::move(payload)});
    return true;
  }
  if (std::string why = over_limit("the scattered value", n); !why.empty()) {
    fail(*f, "scatter " + f->key() + " was not sent: " + why);
    return false;
  }
  states_[f->id] = f.get();
  outbox_.scatters.push_back({protocol::ScatterRequest{f->id, "", "", 0}, std::move(payload)});
  return true;
}

bool ClientState::request_fetch(FutureState& s) {
  if (s.data || s.fetching || s.location == 0) return false;
  s.fetching = true;
  outbox_.fetches[addresses_[s.location - 1]].push_back(s.id);
  return true;
}

bool ClientState::cancel(FutureState& s, bool force) {
  if (s.status != Status::pending) return false;
  s.status = Status::cancelled;
  finish(s);
  if (!lost()) (force ? outbox_.force_cancels : outbox_.cancels).push_back(s.id);
  return true;
}

bool ClientState::dropped(TaskId id) {
  states_.erase(id);
  if (!campaign_futures_.empty()) campaign_futures_.erase(id);
  if (!scatter_held_.empty()) scatter_held_.erase(id);
  if (lost()) return false;
  outbox_.releases.push_back(id);
  return true;
}

void ClientState::cancel_restarted(std::uint64_t boundary) {
  for (auto& [id, st] : states_) {
    if ((id & ((std::uint64_t{1} << 40) - 1)) >= boundary || st->status == Status::cancelled) continue;
    st->status = Status::cancelled;
    st->error = std::make_unique<protocol::ErrorInfo>();
    st->error->type = "herd::CancelledError";
    st->error->message = "cancelled: the cluster was restarted by this client";
    st->data.reset();
    st->location = 0;
    st->fetching = false;
    finish(*st);
  }
}

void ClientState::finish(FutureState& s) {
  if (s.callbacks) {
    for (auto& fn : *s.callbacks) finished_.callbacks.push_back(std::move(fn));
    s.callbacks.reset();
  }
  if (!s.watchers) return;
  for (auto& w : *s.watchers) finished_.watchers.push_back(std::move(w));
  s.watchers.reset();
}

void ClientState::apply_updates(protocol::TaskUpdatesEvent& ev) {
  std::vector<std::uint32_t> locations;  // ev.addresses as indexes into addresses_
  locations.reserve(ev.addresses.size());
  for (const auto& address : ev.addresses) locations.push_back(address_index(address));
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
    finish(s);
  }
}

bool ClientState::scatter_inline(const protocol::ScatterInlineEvent& ev) {
  const bool first = scatter_direct_;
  scatter_direct_ = false;
  for (TaskId id : ev.ids) {
    auto held = scatter_held_.find(id);
    if (held == scatter_held_.end()) continue;  // released meanwhile
    PayloadPtr bytes = std::move(held->second);
    scatter_held_.erase(held);
    FutureState* s = find(id);
    if (s == nullptr) continue;
    if (std::string why = over_limit("the scattered value", bytes->size()); !why.empty()) {
      fail(*s, "scatter " + s->key() + " could not be fetched from this client (" + ev.reason +
                   ") and cannot go through the scheduler: " + why);
      finish(*s);
      continue;
    }
    outbox_.scatters.push_back({protocol::ScatterRequest{id, "", "", 0}, std::move(bytes)});
  }
  return first;
}

void ClientState::workers_gone(std::vector<std::string>& addresses) {
  for (auto& a : addresses) peers_gone_.push_back(std::move(a));
}

void ClientState::lose_all(const std::string& reason) {
  lost_reason_ = reason;
  for (auto& [id, s] : states_) {
    if (s->status == Status::pending || (s->status == Status::finished && !s->data)) {
      s->status = Status::lost;
      finish(*s);
    }
  }
  // Also a request answered but not yet taken: its caller finds the connection gone.
  for (auto& [id, p] : requests_) p.failed = reason;
}

bool ClientState::fetched(TaskId id, PayloadPtr bytes) {
  FutureState* s = find(id);
  if (s == nullptr) return false;
  s->data = std::move(bytes);
  s->fetching = false;
  return true;
}

const FutureState* ClientState::not_there(TaskId id) {
  FutureState* s = find(id);
  if (s == nullptr) return nullptr;
  s->fetching = false;
  s->location = 0;
  s->status = Status::pending;
  return s;
}

std::vector<TaskId> ClientState::fetch_failed(const std::string& address, const std::vector<TaskId>& ids) {
  std::vector<TaskId> asked;
  for (TaskId id : ids) {
    FutureState* s = find(id);
    if (s == nullptr) continue;
    // Already here, or already pointed at another holder (a late failure of an old fetch):
    // nothing to ask.
    if (s->data || (s->location != 0 && addresses_[s->location - 1] != address)) continue;
    s->fetching = false;
    s->location = 0;
    asked.push_back(id);
  }
  return asked;
}

PayloadPtr ClientState::held_scatter(TaskId id) const {
  auto it = scatter_held_.find(id);
  return it == scatter_held_.end() ? nullptr : it->second;
}

std::uint64_t ClientState::request(Request req) {
  const std::uint64_t id = next_request_++;
  std::visit([id](auto& r) { r.request_id = id; }, req);
  requests_[id].kind = req.index();
  outbox_.requests.push_back(std::move(req));
  return id;
}

bool ClientState::answer(Reply reply, const std::shared_ptr<detail::ClientCore>& owner) {
  if (reply.index() == 0) return false;
  const std::uint64_t id = std::visit(
      [](auto& r) -> std::uint64_t {
        if constexpr (std::is_same_v<std::decay_t<decltype(r)>, std::monostate>) {
          return 0;
        } else {
          return r.request_id;
        }
      },
      reply);
  auto it = requests_.find(id);
  // The caller gave up (timed out), or a reply of another kind under its id: not ours.
  if (it == requests_.end() || reply_index(it->second.kind) != reply.index() || it->second.settled()) return false;
  Pending& p = it->second;
  if (auto* campaign = std::get_if<protocol::CampaignReply>(&reply)) answer_attach(p, *campaign, owner);
  p.reply = std::move(reply);
  return true;
}

bool ClientState::answer_attach(Pending& p, protocol::CampaignReply& reply,
                                const std::shared_ptr<detail::ClientCore>& owner) {
  if (!reply.ok || reply.tasks.empty()) return false;
  p.futures.reserve(reply.tasks.size());
  for (const auto& t : reply.tasks) {
    auto held = campaign_futures_.find(t.id);
    if (held != campaign_futures_.end()) {
      if (auto s = held->second.lock()) {
        p.futures.push_back(std::move(s));
        continue;
      }
    }
    auto state = std::make_shared<FutureState>();
    state->core = owner;
    state->id = t.id;
    state->custom_key = t.key;
    state->function = intern(t.function);
    states_[t.id] = state.get();
    campaign_futures_[t.id] = state;
    p.futures.push_back(std::move(state));
  }
  apply_updates(reply.current);
  return true;
}

bool ClientState::settled(std::uint64_t id) const {
  auto it = requests_.find(id);
  return it != requests_.end() && it->second.settled();
}

Pending ClientState::take(std::uint64_t id) {
  Pending p;
  auto it = requests_.find(id);
  if (it == requests_.end()) return p;
  p = std::move(it->second);
  requests_.erase(it);
  return p;
}

std::string ClientState::validate() const {
  for (const auto& [id, s] : states_) {
    if (s == nullptr || s->id != id) return "future " + std::to_string(id) + " is filed under another id";
    if (s->function == nullptr) return "future " + std::to_string(id) + " has no function";
    if (s->location > addresses_.size()) return "future " + std::to_string(id) + " names no known data port";
    if (s->status != Status::pending && (s->watchers || s->callbacks)) {
      return "future " + std::to_string(id) + " is done with watchers or callbacks left";
    }
  }
  for (const auto& [id, bytes] : scatter_held_) {
    if (!states_.count(id)) return "scatter " + std::to_string(id) + " is held for no future";
  }
  if (addresses_.size() != address_index_.size()) return "data ports and their index out of step";
  for (const auto& req : outbox_.requests) {
    const std::uint64_t id = std::visit([](const auto& r) { return r.request_id; }, req);
    // One its caller gave up on before it went is still in the outbox, no longer in the table.
    auto it = requests_.find(id);
    if (id == 0 || id >= next_request_ || (it != requests_.end() && it->second.kind != req.index())) {
      return "request " + std::to_string(id) + " in the outbox is not the one of its id";
    }
  }
  return "";
}

}  // namespace client
}  // namespace herd
