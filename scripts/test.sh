#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds with warnings as errors, runs every
# test (unit, multiprocess, examples, install), prints ctest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
export HERD_CMAKE_ARGS="-DHERD_WERROR=ON ${HERD_CMAKE_ARGS:-}"
scripts/setup.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j 2 --timeout 300
