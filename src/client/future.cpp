// The non-template half of Future and of Client's submit, gather and wait templates
// (include/herd/detail/client_core.hpp): each takes the client's mutex, has its ClientState
// decide, and wakes or notifies through its ClientCore.
#include <algorithm>

#include "client/client_io.hpp"
#include "common/util.hpp"
#include "herd/error.hpp"

namespace herd::detail {

namespace {
bool is_done(const FutureState& s) { return s.status != Status::pending; }

void request_fetch_locked(FutureState& s) {
  if (s.core->state_.request_fetch(s)) s.core->wake_locked();
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
      throw ConnectionError("task " + s.key() + ": " + s.core->state_.lost_reason());
    default:
      throw Error("task " + s.key() + ": unexpected state");
  }
}

/// The TaskSpec of a task, but its id (the state gives it) and gang.
protocol::TaskSpec make_spec(const std::string& function, std::vector<char>&& args, const std::vector<ArgRefSpec>& refs,
                             const TaskOptions& options) {
  protocol::TaskSpec spec;
  spec.function = function;
  spec.args = std::move(args);
  spec.refs.reserve(refs.size());
  for (const auto& r : refs) spec.refs.push_back({r.id, r.arg, r.elem});
  spec.key = options.key();
  spec.priority = options.priority();
  spec.retries = options.retries();
  spec.preemptions = options.preemptions();
  spec.resources = options.resources();
  spec.duration_s = options.duration();
  spec.timeout_ms = options.timeout_ms();
  spec.workers = options.workers();
  spec.allow_other_workers = options.allow_other_workers();
  spec.pool = options.pool();
  spec.campaign = options.campaign();
  spec.isolated = options.isolated();
  spec.isolated_memory = options.isolated_memory();
  spec.nodes = options.nodes();
  return spec;
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
  ClientCore& core = *s.core;
  std::lock_guard lock(core.mu_);
  if (!core.state_.cancel(s, force)) return;  // not pending
  if (!core.state_.lost()) core.wake_locked();
  core.settle_locked();
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
  state->custom_key = options.key();
  protocol::TaskSpec spec = make_spec(function, std::move(args), refs, options);
  std::unique_lock lock(core.mu_);
  if (core.state_.lost()) throw ConnectionError("cannot submit: " + core.state_.lost_reason());
  if (core.state_.submit(state, spec)) core.send_or_wake(lock);
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
  if (options.nodes() > 0) {
    // A multi-node task is one task holding whole nodes (an MPI program starts its own ranks).
    throw std::invalid_argument("submit_gang: TaskOptions::nodes() is not supported for gang members; submit one "
                                "task with nodes(n) and start the ranks from it (mpirun)");
  }
  std::vector<std::shared_ptr<FutureState>> states;
  std::vector<protocol::TaskSpec> specs;
  for (int rank = 0; rank < n; ++rank) {
    auto state = std::make_shared<FutureState>();
    state->core = core.self_.lock();
    if (!options.key().empty()) state->custom_key = options.key() + "-rank" + std::to_string(rank);
    protocol::TaskSpec spec = make_spec(function, std::vector<char>(args), refs, options);
    spec.key = state->custom_key;
    spec.isolated = false;
    spec.isolated_memory = 0;
    spec.gang_rank = static_cast<std::uint32_t>(rank);
    spec.gang_size = static_cast<std::uint32_t>(n);
    specs.push_back(std::move(spec));
    states.push_back(std::move(state));
  }
  std::lock_guard lock(core.mu_);
  if (core.state_.lost()) throw ConnectionError("cannot submit: " + core.state_.lost_reason());
  if (core.state_.submit_gang(states, specs, args.size() * static_cast<std::size_t>(n))) core.wake_locked();
  return states;
}

std::shared_ptr<FutureState> core_scatter(ClientCore& core, std::vector<char>&& bytes) {
  auto state = std::make_shared<FutureState>();
  state->core = core.self_.lock();
  std::lock_guard lock(core.mu_);
  if (core.state_.lost()) throw ConnectionError("cannot scatter: " + core.state_.lost_reason());
  if (core.state_.scatter(state, std::move(bytes))) core.wake_locked();
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
  if (core.state_.lost()) throw ConnectionError("cannot replicate: " + core.state_.lost_reason());
  core.state_.replicate(std::move(req));
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
  if (core.state_.lost()) throw ConnectionError("cannot fire_and_forget: " + core.state_.lost_reason());
  for (FutureState* s : states) {
    if (s->core.get() != &core) throw_foreign_future();
    core.state_.fire_and_forget(s->id);
  }
  core.wake_locked();
}

void core_cancel(ClientCore&, const std::vector<FutureState*>& states, bool force) {
  for (FutureState* s : states) future_cancel(*s, force);
}

}  // namespace herd::detail
