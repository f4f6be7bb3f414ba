#!/bin/bash
# The sweep driver's cost per trial as the sweep grows (issue 19): a sweep of `true` with 1,000
# trials and with N (default 100,000) trials, against one scheduler with local workers started
# apart (herd scheduler --local-workers), so that the CPU time measured is the driver's alone.
# Prints the driver's CPU microseconds per trial at each size and their ratio (big / small),
# which should stay at or below about 1: the driver's work per trial does not grow with the
# number of trials. Usage: bench/sweep_scale.sh [N] [workers]
set -euo pipefail
cd "$(dirname "$0")/.."
HERD=${HERD:-build/herd}
N=${1:-100000}
WORKERS=${2:-2}
dir=$(mktemp -d /tmp/herd-sweep-scale.XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
address="tcp://127.0.0.1:$port"
"$HERD" scheduler --listen "$address" --local-workers "$WORKERS" --nthreads 2 --dashboard-address 127.0.0.1:0 \
  > "$dir/scheduler.log" 2>&1 &
scheduler=$!
trap 'kill $scheduler 2>/dev/null; wait $scheduler 2>/dev/null; rm -rf "$dir"' EXIT

grid() {  # a grid of exactly $1 trials: a x b
  local n=$1 a=10
  while (( n / a > 1000 )); do a=$((a * 10)); done
  echo "--grid a=$(seq -s, 0 $((a - 1))) --grid b=$(seq -s, 0 $((n / a - 1)))"
}

run() {  # prints "trials cpu_us_per_trial wall_s"
  local n=$1 TIMEFORMAT='%U %S %R' t
  # shellcheck disable=SC2046
  t=$( { time "$HERD" sweep --scheduler "$address" $(grid "$n") --max-running 64 --progress none -q \
           --results "$dir/r$n" -- true > "$dir/out$n" 2>&1; } 2>&1 )
  local rows
  rows=$(($(wc -l < "$dir/r$n.csv") - 1))
  [[ $rows -eq $n ]] || { echo "sweep of $n recorded $rows trials" >&2; tail "$dir/out$n" >&2; exit 1; }
  read -r user sys wall <<< "$t"
  python3 -c "print($n, round(($user + $sys) * 1e6 / $n, 1), $wall)"
}

small=$(run 1000)
big=$(run "$N")
echo "trials  driver_cpu_us_per_trial  wall_s"
echo "$small"
echo "$big"
python3 -c "s='$small'.split(); b='$big'.split(); print('ratio (per trial, %s / %s): %.2f' % (b[0], s[0], float(b[1]) / float(s[1])))"
