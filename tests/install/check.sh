#!/usr/bin/env bash
# herd as a dependency: install to a prefix and build a consumer with find_package(herd), then
# again with only what `module load herd` (Lmod) set, then with add_subdirectory(herd); every
# binary must run.
set -euo pipefail
src=$1 build=$2 work=$3
rm -rf "$work"; mkdir -p "$work"
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
cmake -S "$src/tests/install/consumer" -B "$work/installed" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/installed" >/dev/null
"$work/installed/consumer"

# --- Lmod: `module use PREFIX/share/modulefiles && module load herd` --------------------------
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$build/CMakeCache.txt")
modulefile=$prefix/share/modulefiles/herd/$version.lua
[ -f "$modulefile" ] || { echo "install check: no modulefile $modulefile" >&2; exit 1; }
lmod_init() {
  for f in /usr/share/lmod/lmod/init/bash /usr/share/lmod/*/init/bash /opt/apps/lmod/lmod/init/bash; do
    [ -f "$f" ] && { echo "$f"; return; }
  done
}
if [ -z "$(lmod_init)" ]; then
  echo "install check: installing Lmod (Debian: lmod)"
  SUDO=; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends lmod >/dev/null
fi
init=$(lmod_init)
[ -n "$init" ] || { echo "install check: Lmod's init script not found after installing lmod" >&2; exit 1; }
(
  # A clean slate: nothing that could find herd but what the module sets.
  unset CMAKE_PREFIX_PATH LD_LIBRARY_PATH HERD_ROOT
  export PATH=/usr/local/bin:/usr/bin:/bin
  # Lmod refuses to run as root unless told it may (Debian's profile script does the same).
  export LMOD_ALLOW_ROOT_USE=yes
  set +u  # Lmod's shell functions read unset variables
  # shellcheck disable=SC1090
  source "$init"
  module use "$prefix/share/modulefiles"
  module load herd
  set -u
  [[ ":$PATH:" == *":$prefix/bin:"* ]] || { echo "module load herd: PATH is $PATH" >&2; exit 1; }
  [[ ":$LD_LIBRARY_PATH:" == *":$prefix/$libdir:"* ]] || { echo "module load herd: LD_LIBRARY_PATH is $LD_LIBRARY_PATH" >&2; exit 1; }
  [[ ":$CMAKE_PREFIX_PATH:" == *":$prefix:"* ]] || { echo "module load herd: CMAKE_PREFIX_PATH is $CMAKE_PREFIX_PATH" >&2; exit 1; }
  [ "$(command -v herd)" = "$prefix/bin/herd" ] || { echo "module load herd: herd on PATH is $(command -v herd)" >&2; exit 1; }
  out=$(herd version)
  [[ "$out" =~ ^herd\ $version\ \(wire\ protocol\ [0-9]+\)$ ]] || { echo "herd version printed '$out'" >&2; exit 1; }
  # find_package(herd) through CMAKE_PREFIX_PATH from the environment, no path given; and not
  # through PATH either (CMake also looks next to the bin/ directories on PATH), so that this
  # proves the module's CMAKE_PREFIX_PATH. Without PATH, CMake is told where its tools are.
  cmake -S "$src/tests/install/consumer" -B "$work/module" -G Ninja -DCMAKE_FIND_USE_SYSTEM_ENVIRONMENT_PATH=OFF \
        -DCMAKE_MAKE_PROGRAM="$(command -v ninja)" -DCMAKE_CXX_COMPILER="$(command -v c++)" >/dev/null
  cmake --build "$work/module" >/dev/null
  grep -q "^herd_DIR:PATH=$prefix/" "$work/module/CMakeCache.txt" || { grep herd_DIR "$work/module/CMakeCache.txt" >&2; exit 1; }
  "$work/module/consumer"
  set +u
  module unload herd
  set -u
  [[ ":$PATH:" != *":$prefix/bin:"* ]] || { echo "module unload herd: PATH still has $prefix/bin" >&2; exit 1; }
)

# add_subdirectory compiles herd again, as a unity build (CMAKE_UNITY_BUILD: a few source files
# compiled as one) with no optimisation and no debug info (CMAKE_BUILD_TYPE=None). What this
# checks is that herd configures, builds and links as another project's subdirectory, not its
# speed: the unity build parses each header once per batch instead of once per file, and takes
# less than half the time of the file-by-file build (3 min 41 s against 8 min 33 s alone on 2
# cores, no ccache). It also keeps herd buildable so for users who build their projects that
# way. The build under test's compiler launcher (ccache) is kept.
cache() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
same=(-DHERD_WERROR="$(cache HERD_WERROR_ACTIVE)" -DHERD_WITH_CUDA="$(cache HERD_WITH_CUDA)" -DCMAKE_BUILD_TYPE=None
      -DCMAKE_UNITY_BUILD=ON)
for launcher in CMAKE_CXX_COMPILER_LAUNCHER CMAKE_CUDA_COMPILER_LAUNCHER; do
  [ -z "$(cache "$launcher")" ] || same+=("-D$launcher=$(cache "$launcher")")
done
# As scripts/setup.sh: ccache caches compilations that use precompiled headers only with these.
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
# Beside the build under test, at the same depth below the source (ccache's base_dir).
subdir="${build%/}-consumer"
rm -rf "$subdir"
cmake -S "$src/tests/install/consumer" -B "$subdir" -G Ninja -DHERD_SOURCE_DIR="$src" "${same[@]}" >/dev/null
CCACHE_NOHASHDIR=1 cmake --build "$subdir" >/dev/null
"$subdir/consumer"
rm -rf "$subdir"
