#!/usr/bin/env bash
# Installs what the build needs (Debian 12 packages) when it is missing, then configures and
# builds herd in ./build. Run again, it reuses that build: the same configuration, so only what
# changed is rebuilt (ccache, when installed, is the compiler launcher).
#   scripts/setup.sh                    build (Release with debug info)
#   BUILD_DIR=... scripts/setup.sh
#   HERD_CMAKE_ARGS="-D..." scripts/setup.sh
#   HERD_EXTRA_PACKAGES="..."           more Debian packages to install (scripts/test.sh: the tests')
#   HERD_REQUIRE_WERROR=1               warnings are errors, whatever the compiler (scripts/test.sh)
#   HERD_PGO=1 scripts/setup.sh         a profile-guided build (GCC) in ./build-pgo: built instrumented,
#                                       trained on herd_bench (round trips, a map, a tree; ~1 min),
#                                       built again from the counts. Twice the build time; the
#                                       figures in bench/README.md say what it gains
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${HERD_PGO:-0}" = 1 ]; then BUILD_DIR=${BUILD_DIR:-build-pgo}; fi
BUILD_DIR=${BUILD_DIR:-build}

# shellcheck disable=SC2206  # HERD_EXTRA_PACKAGES is a list of words
packages=(g++ cmake ninja-build pkg-config libzmq3-dev libsodium-dev libssl-dev cppzmq-dev libmsgpack-cxx-dev libboost-dev
          libcli11-dev doctest-dev libcpp-httplib-dev nlohmann-json3-dev libtomlplusplus-dev
          ${HERD_EXTRA_PACKAGES:-})
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "herd setup: installing ${missing[*]}"
  SUDO=; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# ccache through CMake's environment defaults: they set the launcher when the build directory is
# made, and never change it later (a changed launcher would rebuild everything).
if command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}
  export CMAKE_CUDA_COMPILER_LAUNCHER=${CMAKE_CUDA_COMPILER_LAUNCHER:-ccache}
  # The build precompiles headers (cmake/herd_layers.cmake, tests/CMakeLists.txt): ccache
  # caches the compilations that use them only with these.
  export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
fi
# Line tables, not full debug information (-g1): backtraces and profiles still name functions
# and lines, and the build takes about a quarter less time, with objects a seventh the size.
# shellcheck disable=SC2206  # HERD_CMAKE_ARGS is words on purpose, after ours so that they win
args=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" ${HERD_CMAKE_ARGS:-})
if [ "${HERD_PGO:-0}" = 1 ]; then
  # Counts from an earlier source would not match this one: instrumented, and trained afresh.
  mkdir -p "$BUILD_DIR"
  profile="$(cd "$BUILD_DIR" && pwd)/pgo-profile"
  rm -rf "$profile"
  args+=(-DHERD_PGO=GENERATE -DHERD_PGO_DIR="$profile")
fi
cmake -S . -B "$BUILD_DIR" "${args[@]}" >/dev/null
# HERD_WERROR=AUTO (the default) has -Werror with GCC 12, the compiler of the first build too, so
# nothing changes there; with another compiler, asking for it changes the flags (one rebuild).
if [ "${HERD_REQUIRE_WERROR:-0}" = 1 ] && ! grep -q '^HERD_WERROR_ACTIVE:INTERNAL=ON$' "$BUILD_DIR/CMakeCache.txt"; then
  cmake -S . -B "$BUILD_DIR" -DHERD_WERROR=ON >/dev/null
fi
if [ "${HERD_PGO:-0}" = 1 ]; then
  cmake --build "$BUILD_DIR" -j "$(nproc)" --target herd_bench
  echo "herd setup: training the profile-guided build (herd_bench latency, throughput, tree)"
  bench="$BUILD_DIR/bench/herd_bench"
  for run in "latency --rounds 3000" "throughput --tasks 20000 --repeat 1" "tree --leaves 2048 --repeat 1"; do
    # shellcheck disable=SC2086  # $run is the workload's words
    if ! timeout 300 "$bench" $run >/dev/null; then
      echo "herd setup: the training run 'herd_bench $run' failed; the profile-guided build needs it" >&2
      exit 1
    fi
  done
  if ! compgen -G "$profile/*.gcda" >/dev/null; then
    echo "herd setup: the training wrote no counts under $profile" >&2
    exit 1
  fi
  cmake -S . -B "$BUILD_DIR" -DHERD_PGO=USE >/dev/null
fi
cmake --build "$BUILD_DIR" -j "$(nproc)"
