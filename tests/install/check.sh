#!/usr/bin/env bash
# herd as a dependency: install to a prefix and build a consumer with find_package(herd),
# then build the same consumer with add_subdirectory(herd); both binaries must run.
set -euo pipefail
src=$1 build=$2 work=$3
rm -rf "$work"; mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$src/tests/install/consumer" -B "$work/installed" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/installed" >/dev/null
"$work/installed/consumer"
cmake -S "$src/tests/install/consumer" -B "$work/subdir" -G Ninja -DHERD_SOURCE_DIR="$src" >/dev/null
cmake --build "$work/subdir" >/dev/null
"$work/subdir/consumer"
