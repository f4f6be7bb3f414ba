#pragma once
/// @file herd.hpp
/// @brief The only include a herd user needs.
///
/// @code
/// #include <herd/herd.hpp>
/// int add(int a, int b) { return a + b; }
/// HERD_TASK(add);
/// int main() {
///   herd::Client client{herd::LocalCluster{2}};
///   std::cout << client.submit(add, 1, 2).result() << '\n';   // 3
/// }
/// @endcode

#include "herd/client.hpp"
#include "herd/cluster.hpp"
#include "herd/collective.hpp"
#include "herd/error.hpp"
#include "herd/future.hpp"
#include "herd/logs.hpp"
#include "herd/options.hpp"
#include "herd/progress.hpp"
#include "herd/remote.hpp"
#include "herd/shell.hpp"
#include "herd/slurm.hpp"
#include "herd/status.hpp"
#include "herd/sweep.hpp"
