#pragma once
/// @file future.hpp
/// @brief herd::Future<T>: a typed handle to a task's result, which stays on a worker until
/// asked for. Copies share one state; when the last copy is dropped the result is released.
///
/// @code
/// herd::Future<int> f = client.submit(add, 1, 2);
/// int v = f.result();                                  // waits; rethrows a remote exception
/// bool ok = f.wait_for(std::chrono::seconds(1));       // true when finished (or failed)
/// @endcode

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <typeinfo>

#include <msgpack.hpp>

#include "herd/detail/client_core.hpp"
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

  /// Cancels the task if it has not finished; result() then throws CancelledError.
  void cancel() const { detail::future_cancel(checked()); }

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
    auto payload = detail::future_payload(checked(), timeout_ms);
    if constexpr (std::is_void_v<T>) {
      return;
    } else {
      try {
        // Strings and binaries reference the payload (alive until we return) instead of being
        // copied into msgpack's zone first: a 1 GiB result costs its bytes and its value, not
        // a third copy in between.
        msgpack::object_handle handle = msgpack::unpack(
            payload->data(), payload->size(), [](msgpack::type::object_type, std::size_t, void*) { return true; });
        return handle.get().as<T>();
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
