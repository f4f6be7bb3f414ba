// What the files of SchedulerState (state.cpp and the state_*.cpp beside it) share beside
// state.hpp. Nothing outside them includes it.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "scheduler/state.hpp"

namespace herd::scheduler {

/// Resource amounts are compared with this slack (fractions of a resource add up inexactly).
inline constexpr double kEps = 1e-9;

/// Puts worker `id` in (`want`) or out of one of shape `shape`'s lists of workers (Shape::free or
/// Shape::open), in O(1): `pos` (the worker's `member`, by shape) keeps its index there, -1 when
/// out, and the worker moved into a removed one's place has its own index updated. In
/// state_placement.cpp.
void list_set(std::vector<WorkerId>& list, std::vector<std::int32_t>& pos, std::uint16_t shape, WorkerId id,
              bool want, std::unordered_map<WorkerId, WorkerRec>& workers,
              std::vector<std::int32_t> WorkerRec::*member);

}  // namespace herd::scheduler
