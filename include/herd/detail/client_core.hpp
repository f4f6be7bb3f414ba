#pragma once
// The non-template half of Client and Future: implemented in src/client/future.cpp (Client's own
// methods in client.cpp). Users never name anything here.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "herd/detail/payload.hpp"
#include "herd/options.hpp"

namespace herd::detail {

class ClientCore;
struct FutureState;
struct ClientAccess;  // src/client/jobs.hpp

/// Results at least this large are handed over by the future that fetched them: result()
/// copies them into the value while the bytes copied are let go, and the future keeps nothing
/// (a later result() fetches them again from their worker, as Dask's does each time).
inline constexpr std::size_t kHandOverBytes = std::size_t{4} << 20;
/// They are copied kHandOverSlice bytes at a time, each slice's pages lent to the next slice's
/// place in the value (Payload::recycle): only the first slice's pages are new to the value.
inline constexpr std::size_t kHandOverSlice = std::size_t{4} << 20;

/// Where the bytes of a msgpack bin or str object that is the whole of `p` start, and how
/// many there are; false when `p` is not one.
bool raw_extent(const Payload& p, std::size_t& offset, std::size_t& size);

struct ArgRefSpec {
  std::uint64_t id;     // task whose result fills the slot
  std::uint32_t arg;    // parameter index
  std::int32_t elem;    // -1 = the whole parameter, else an element of it
};

/// Completed futures' indexes, in completion order (for as_completed).
struct CompletionQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::size_t> ready;
};

// --- FutureState accessors (timeouts in ms; negative = forever) ---
std::shared_ptr<const Payload> future_payload(FutureState& s, std::int64_t timeout_ms);
/// As future_payload; a payload of kHandOverBytes or more is no longer kept by the future.
std::shared_ptr<const Payload> future_take_payload(FutureState& s, std::int64_t timeout_ms);
bool future_done(const FutureState& s);
bool future_wait(const FutureState& s, std::int64_t timeout_ms);
void future_cancel(FutureState& s, bool force = false);
std::string future_key(const FutureState& s);
std::uint64_t future_id(const FutureState& s);
std::string future_status(const FutureState& s);
/// Waits (negative = forever) until done; null when it finished, else what result() throws.
/// @throws TimeoutError when not done in time
std::exception_ptr future_exception(const FutureState& s, std::int64_t timeout_ms);
/// Queues `callback` to run once the future is done, on the client's callback thread.
void future_add_callback(FutureState& s, std::function<void()> callback);
const ClientCore* future_owner(const FutureState& s);
[[noreturn]] void throw_decode_error(const FutureState& s, const char* type, const char* what);

// --- ClientCore operations ---
std::shared_ptr<FutureState> core_submit(ClientCore& core, const std::string& function,
                                         std::vector<char>&& args, std::vector<ArgRefSpec>&& refs,
                                         const TaskOptions& options);
/// `n` members of one gang (ranks 0..n-1, consecutive ids), all with the same arguments.
std::vector<std::shared_ptr<FutureState>> core_submit_gang(ClientCore& core, const std::string& function,
                                                           std::vector<char>&& args,
                                                           std::vector<ArgRefSpec>&& refs,
                                                           const TaskOptions& options, int n);
std::shared_ptr<FutureState> core_scatter(ClientCore& core, std::vector<char>&& bytes);
void core_prefetch(ClientCore& core, const std::vector<FutureState*>& states);
bool core_wait_all(ClientCore& core, const std::vector<FutureState*>& states, std::int64_t timeout_ms);
/// Pushes `first_index + i` to `queue` when states[i] is done (at once if it is already).
void core_watch(ClientCore& core, const std::vector<FutureState*>& states,
                const std::shared_ptr<CompletionQueue>& queue, std::size_t first_index = 0);
/// Waits (negative = forever) until one of `states` is done; true when one is.
bool core_wait_any(const std::vector<FutureState*>& states, std::int64_t timeout_ms);
/// Whether each of `states` is done, read at one instant.
std::vector<bool> core_done(const std::vector<FutureState*>& states);
void core_fire_and_forget(ClientCore& core, const std::vector<FutureState*>& states);
void core_cancel(ClientCore& core, const std::vector<FutureState*>& states, bool force = false);
void core_replicate(ClientCore& core, const std::vector<FutureState*>& states, std::uint32_t n);
/// Attaches to campaign `name`: a future per task, in submission order.
/// @throws Error when the scheduler has no such campaign
std::vector<std::shared_ptr<FutureState>> core_attach_campaign(ClientCore& core, const std::string& name);
[[noreturn]] void throw_foreign_future();

/// msgpack write target appending to a vector (no intermediate sbuffer copy).
struct VectorWriter {
  std::vector<char>& out;
  void write(const char* data, std::size_t size) { out.insert(out.end(), data, data + size); }
};

}  // namespace herd::detail
