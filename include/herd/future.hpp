#pragma once
/// @file future.hpp
/// @brief herd::Future<T>: a typed handle to a task's result, which stays on a worker until
/// asked for. Copies share one state; when the last copy is dropped the result is released.
///
/// @code
/// herd::Future<int> f = client.submit(add, 1, 2);
/// int v = f.result();                                  // waits; rethrows a remote exception
/// bool ok = f.wait_for(std::chrono::seconds(1));       // true when finished (or failed)
/// if (auto e = f.exception()) std::rethrow_exception(e);  // waits; no throw of its own
/// f.add_done_callback([](const herd::Future<int>& g) { log(g.key()); });
/// @endcode

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include <msgpack.hpp>

#include "herd/detail/client_core.hpp"
#include "herd/detail/scratch_zone.hpp"
#include "herd/error.hpp"

namespace herd {

template <typename T>
class Future {
 public:
  using value_type = T;

  Future() = default;
  explicit Future(std::shared_ptr<detail::FutureState> state) : state_(std::move(state)) {}

  /// @brief Waits for the task and returns its value.
  /// @throws TaskError if it (or an input) raised; CancelledError; ConnectionError if the
  ///         scheduler was lost; WorkerLostError.
  T result() const { return fetch(-1); }

  /// @brief As result(), but gives up after `timeout`.
  /// @throws TimeoutError when the result is not there in time.
  template <typename Rep, typename Period>
  T result(std::chrono::duration<Rep, Period> timeout) const {
    return fetch(std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count());
  }

  /// Same as result().
  T get() const { return result(); }

  /// True when the task finished, failed or was cancelled.
  bool done() const { return detail::future_done(checked()); }

  /// Blocks until done().
  void wait() const { (void)detail::future_wait(checked(), -1); }

  /// Blocks until done() or the timeout; returns done().
  template <typename Rep, typename Period>
  bool wait_for(std::chrono::duration<Rep, Period> timeout) const {
    return detail::future_wait(
        checked(), std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count());
  }

  /// Cancels the task if it has not finished; result() then throws CancelledError. A task
  /// already running goes on to its end (its result discarded), unless `force`: then its
  /// worker stops waiting for it at once, frees the slot and discards the result, and a shell
  /// task's command is killed (a C++ function cannot be stopped: its thread is left to end).
  void cancel(bool force = false) const { detail::future_cancel(checked(), force); }

  /// @brief Waits for the task; then null when it finished, else the exception result()
  /// would throw (TaskError, CancelledError, ConnectionError...), without throwing it.
  std::exception_ptr exception() const { return detail::future_exception(checked(), -1); }

  /// @brief As exception(), giving up after `timeout`.
  /// @throws TimeoutError when the task is not done in time
  template <typename Rep, typename Period>
  std::exception_ptr exception(std::chrono::duration<Rep, Period> timeout) const {
    return detail::future_exception(
        checked(), std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count());
  }

  /// @brief Calls `fn(future)` once the task is done (finished, failed, cancelled or lost);
  /// at once if it already is.
  ///
  /// Threading: every callback of a client runs on that client's *callback thread* (one per
  /// Client, started by the first add_done_callback), one at a time, in the order the futures
  /// completed: never on the caller's thread and never on the I/O thread, so a callback may
  /// call result() (which may wait for the bytes), submit(), or add further callbacks. A
  /// callback that throws is logged and ignored. The future is kept alive (its task is not
  /// released) until its callbacks ran. Client::close() runs those still pending (their
  /// futures then say "lost") before it returns; one added after close() runs at once, on the
  /// caller's thread, as there is no callback thread any more.
  template <typename F>
    requires std::invocable<F&, const Future<T>&>
  void add_done_callback(F fn) const {
    detail::future_add_callback(checked(), [state = state_, fn = std::move(fn)]() mutable {
      const Future<T> self(state);
      fn(self);
    });
  }

  /// "pending", "finished", "error", "cancelled" or "lost"; while no connected worker can run
  /// the task, "no-worker: " and the reason (e.g. "no connected worker offers {gpu: 1}").
  std::string status() const { return detail::future_status(checked()); }

  /// The task's key, e.g. "add-1f".
  std::string key() const { return detail::future_key(checked()); }

  bool valid() const { return state_ != nullptr; }
  const std::shared_ptr<detail::FutureState>& state() const { return state_; }

 private:
  detail::FutureState& checked() const {
    if (!state_) throw Error("herd::Future: empty future (default-constructed or moved from)");
    return *state_;
  }
  T fetch(std::int64_t timeout_ms) const {
    if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, std::vector<char>> ||
                  std::is_same_v<T, std::vector<unsigned char>>) {
      // Bytes: a large result is handed over and copied into the value a slice at a time, each
      // slice of the received bytes let go once copied, so a 1 GiB result costs the client
      // about 1 GiB, not its bytes and its value side by side.
      auto payload = detail::future_take_payload(checked(), timeout_ms);
      std::size_t offset = 0, size = 0;
      if (payload->size() >= detail::kHandOverBytes && payload.use_count() == 1 &&
          detail::raw_extent(*payload, offset, size)) {
        constexpr std::size_t kSlice = detail::kHandOverSlice;
        T out;
        out.reserve(size);  // not touched yet: its pages come as the slices are copied
        const char* bytes = payload->data() + offset;
        for (std::size_t done = 0, prev = 0; done < size;) {
          const std::size_t n = std::min(kSlice, size - done);
          // The slice copied last lends its pages to the one copied next: no fresh page
          // faulted and zeroed for the value (on this kind of VM that halves a gather's time).
          if (done > 0) payload->recycle(offset + prev, offset + done, reinterpret_cast<char*>(out.data()) + done, n);
          out.insert(out.end(), bytes + done, bytes + done + n);
          prev = done;
          done += n;
        }
        return out;
      }
      return decode(*payload);
    } else {
      auto payload = detail::future_payload(checked(), timeout_ms);
      return decode(*payload);
    }
  }
  T decode(const detail::Payload& payload) const {
    if constexpr (std::is_void_v<T>) {
      (void)payload;
      return;
    } else {
      try {
        // Strings and binaries reference the payload (alive until we return) instead of being
        // copied into msgpack's zone first: a 1 GiB result costs its bytes and its value, not
        // a third copy in between.
        detail::ScratchZone zone;
        const msgpack::object object = zone.unpack(payload.data(), payload.size(), true);
        return object.as<T>();
      } catch (const std::exception& e) {
        detail::throw_decode_error(*state_, typeid(T).name(), e.what());
      }
    }
  }

  std::shared_ptr<detail::FutureState> state_;
};

template <typename T>
struct is_future : std::false_type {};
template <typename T>
struct is_future<Future<T>> : std::true_type {};

}  // namespace herd
