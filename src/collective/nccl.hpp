// The GPU backend of herd::Communicator: NCCL, compiled when HERD_HAVE_NCCL is defined.
//
// Rank 0 makes the ncclUniqueId (nccl_unique_id()); it travels to every rank through the
// scheduler (the gang rendezvous), then each rank calls make_nccl() on its own device.
// Operations are enqueued on the given CUDA stream and waited for in a loop that also watches
// abort() and ncclCommGetAsyncError, so an aborted gang calls ncclCommAbort instead of hanging.
#pragma once

#include <memory>
#include <vector>

#include "herd/collective.hpp"

namespace herd::collective {

/// True when herd was built with NCCL.
bool nccl_built();
/// A fresh ncclUniqueId as bytes; throws std::runtime_error when NCCL is not built in.
std::vector<char> nccl_unique_id();
/// Joins the NCCL communicator of `size` ranks on CUDA device `device` (ordinal in this
/// process), running its operations on `stream` (a cudaStream_t; nullptr = the default).
std::unique_ptr<herd::detail::CommunicatorImpl> make_nccl(int rank, int size,
                                                          const std::vector<char>& unique_id,
                                                          int device, void* stream);

}  // namespace herd::collective
