#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds with warnings as errors, starts the
# project's one-machine Slurm (scripts/local-slurm.sh), runs every test against it (labels:
# unit, multiprocess, slurm, examples, install, bench), stops Slurm, prints ctest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
export HERD_CMAKE_ARGS="-DHERD_WERROR=ON ${HERD_CMAKE_ARGS:-}"
scripts/setup.sh

scripts/local-slurm.sh start
trap 'scripts/local-slurm.sh stop >/dev/null 2>&1 || true' EXIT
eval "$(scripts/local-slurm.sh env)"
export HERD_REQUIRE_SLURM=1   # a Slurm test that cannot reach Slurm fails instead of skipping

cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j 2 --timeout 600
