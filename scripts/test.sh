#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds with warnings as errors, starts the
# project's one-machine Slurm (scripts/local-slurm.sh), runs every test against it (labels:
# unit, multiprocess, slurm, examples, install, bench), stops Slurm; then starts the multi-node
# test bed (local-slurm.sh start --nodes 3: a login host and 3 compute hosts in network
# namespaces), runs the multinode tests on its login host, stops it. Prints ctest's summaries;
# the exit code is non-zero if either run failed. It reuses the build of the first command
# (scripts/setup.sh): same directory, same flags.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
slurm="$root/scripts/local-slurm.sh"
# What only tests need: Chromium (the dashboard test), Lmod (the install test's module load).
# OpenMPI (the multi-node MPI tests and the collective comparison) and Gloo (that comparison).
export HERD_EXTRA_PACKAGES="chromium lmod parallel openmpi-bin libopenmpi-dev libgloo-dev ${HERD_EXTRA_PACKAGES:-}"
export HERD_REQUIRE_WERROR=1
t0=$SECONDS
scripts/setup.sh
t_build=$((SECONDS - t0))

# Absolute paths: the trap runs wherever the script happens to be when it exits.
trap '"$slurm" stop >/dev/null 2>&1 || true; "$slurm" stop --multi >/dev/null 2>&1 || true' EXIT
"$slurm" start
eval "$("$slurm" env)"
export HERD_REQUIRE_SLURM=1   # a Slurm test that cannot reach Slurm fails instead of skipping

cd "${BUILD_DIR:-build}"
rc=0
t0=$SECONDS
ctest --output-on-failure -j 2 --timeout 600 -LE multinode || rc=$?
t_suite=$((SECONDS - t0))
"$slurm" stop >/dev/null 2>&1 || true   # its CPU and memory are the bed's now

multi_rc=0
t0=$SECONDS
if "$slurm" start --nodes 3; then
  ctest --output-on-failure --timeout 600 -L multinode || multi_rc=$?
else
  echo "test.sh: the multi-node test bed did not start; the multinode tests did not run" >&2
  multi_rc=1
fi
"$slurm" stop --multi >/dev/null 2>&1 || true
t_multi=$((SECONDS - t0))
# Wall time of each part (ctest's "Label Time Summary" above gives each label's test time).
mmss() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
echo "test.sh: wall time: install and build $(mmss "$t_build"); suite (-j 2, every label but multinode)" \
     "$(mmss "$t_suite"); multinode (bed start, tests, stop) $(mmss "$t_multi"); total $(mmss "$SECONDS")"
if ((rc != 0 || multi_rc != 0)); then
  echo "test.sh: FAILED (suite on the one-machine Slurm: exit $rc; multinode: exit $multi_rc)" >&2
  exit 1
fi
