#pragma once
/// @file collective.hpp
/// @brief Gangs and collectives: N tasks started together, all-reducing data.
///
/// A gang is N tasks the scheduler starts together on N distinct workers (all or nothing, so
/// two gangs never deadlock each other holding half the slots). Inside a member,
/// herd::gang() gives its rank and a communicator shared with the other members:
///
/// @code
/// std::vector<float> train_step(int epoch) {
///   herd::Communicator& comm = herd::gang();       // rank(), size()
///   std::vector<float> grad = compute_gradient(shard(comm.rank(), comm.size()));
///   comm.allreduce(grad, herd::ReduceOp::avg);      // every rank now holds the average
///   return grad;
/// }
/// HERD_TASK(train_step);
///
/// auto futures = client.submit_gang(4, train_step, 0);   // 4 ranks, one Future per rank
/// @endcode
///
/// Backends behind one API: NCCL when every rank holds a GPU and herd was built with NCCL
/// (buffers are then device pointers, and operations run on the task's CUDA stream), and a
/// ring over TCP otherwise (host buffers; reduce-scatter + all-gather, the bandwidth-optimal
/// ring). If one rank raises or its worker dies, the others' pending and future operations
/// throw herd::GangAborted, and every member's future fails with the first error (which names
/// the rank); TaskOptions::retries() retries the whole gang.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace herd {

enum class ReduceOp : std::uint8_t { sum = 0, max = 1, min = 2, avg = 3 };
enum class DataType : std::uint8_t { int32 = 0, int64 = 1, float16 = 2, float32 = 3, float64 = 4 };
enum class CollectiveBackend : std::uint8_t { automatic = 0, cpu_ring = 1, nccl = 2 };

/// IEEE 754 half precision, as stored (the CPU ring converts through float to reduce it).
struct half {
  std::uint16_t bits = 0;
};
float to_float(half h);
half to_half(float f);

std::size_t size_of(DataType t);
const char* to_string(DataType t);
const char* to_string(ReduceOp op);
const char* to_string(CollectiveBackend b);

template <typename T>
constexpr DataType data_type_of();
template <> constexpr DataType data_type_of<std::int32_t>() { return DataType::int32; }
template <> constexpr DataType data_type_of<std::int64_t>() { return DataType::int64; }
template <> constexpr DataType data_type_of<half>() { return DataType::float16; }
template <> constexpr DataType data_type_of<float>() { return DataType::float32; }
template <> constexpr DataType data_type_of<double>() { return DataType::float64; }

namespace detail {
/// One backend's operations; implementations live in src/collective/.
class CommunicatorImpl {
 public:
  virtual ~CommunicatorImpl() = default;
  virtual void allreduce(void* buffer, std::size_t count, DataType type, ReduceOp op) = 0;
  virtual void broadcast(void* buffer, std::size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  /// From any thread: blocked and later operations throw GangAborted(reason).
  virtual void abort(const std::string& reason) = 0;
  virtual CollectiveBackend backend() const = 0;
};
}  // namespace detail

/// @brief A gang's communicator. Every rank must call the same operations in the same order
/// with the same counts (as with MPI and NCCL). Not thread-safe: one caller at a time.
class Communicator {
 public:
  Communicator(int rank, int size, std::unique_ptr<detail::CommunicatorImpl> impl);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  CollectiveBackend backend() const;

  /// In place: every rank ends with op over all ranks' buffers (avg = sum / size, integer
  /// division for integers). Host memory for the CPU ring, device memory for NCCL.
  void allreduce(void* buffer, std::size_t count, DataType type, ReduceOp op = ReduceOp::sum);
  template <typename T>
  void allreduce(T* buffer, std::size_t count, ReduceOp op = ReduceOp::sum) {
    allreduce(static_cast<void*>(buffer), count, data_type_of<T>(), op);
  }
  template <typename T>
  void allreduce(std::vector<T>& values, ReduceOp op = ReduceOp::sum) {
    allreduce(values.data(), values.size(), op);
  }
  /// Copies `bytes` from `root`'s buffer into everybody's.
  void broadcast(void* buffer, std::size_t bytes, int root = 0);
  template <typename T>
  void broadcast(std::vector<T>& values, int root = 0) {
    broadcast(values.data(), values.size() * sizeof(T), root);
  }
  /// Returns once every rank has called it.
  void barrier();

  detail::CommunicatorImpl& impl() { return *impl_; }

 private:
  int rank_ = 0, size_ = 1;
  std::unique_ptr<detail::CommunicatorImpl> impl_;
};

/// @brief The running gang member's communicator, created on first use (every rank must call
/// it; it waits until all have). Throws std::logic_error outside a gang task.
/// `backend` automatic: NCCL when every rank holds a GPU and NCCL is built in, else the ring.
Communicator& gang(CollectiveBackend backend = CollectiveBackend::automatic);

}  // namespace herd
