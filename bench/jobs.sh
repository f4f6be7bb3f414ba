#!/bin/bash
# Jobs from the shell, side by side (issue 44): N tasks of `true` on 2 local workers through
# `herd submit --array`, through `xargs -P 2` (the floor: fork and exec alone) and through GNU
# `parallel -j 2`; M tasks through herd against a Slurm job array (`sbatch --array`) on the
# one-machine Slurm (skipped when there is no sbatch); and the accept time of a million-task
# array with the scheduler's resident memory before and after. Prints one JSON line per figure.
#   bench/jobs.sh [N] [M]       defaults 20000 and 1000 (measure on a quiet machine)
#   bench/jobs.sh --small       tiny sizes: shows it works (ctest bench.jobs_smoke)
set -euo pipefail
cd "$(dirname "$0")/.."
HERD=${HERD:-build/herd}
N=20000 M=1000 BIG=1000000
if [[ "${1:-}" == "--small" ]]; then
  N=200 M=10 BIG=100000
  shift
fi
N=${1:-$N}
M=${2:-$M}
dir=$(mktemp -d /tmp/herd-bench-jobs.XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export HERD_SCHEDULER="tcp://127.0.0.1:$port"
"$HERD" scheduler --listen "$HERD_SCHEDULER" --local-workers 2 --nthreads 1 --no-dashboard > "$dir/scheduler.log" 2>&1 &
scheduler=$!
trap 'kill $scheduler 2>/dev/null; wait $scheduler 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 200); do grep -q "listening at" "$dir/scheduler.log" && break; sleep 0.1; done
# Both workers connected (a warm-up job of 2 tasks), so that no run counts their start.
"$HERD" submit --array 1-2 --stdout none --stderr none --wait -- true > /dev/null

now() { date +%s.%N; }
line() {  # name tasks seconds
  python3 -c "import json,sys; n=int(sys.argv[2]); s=float(sys.argv[3]); print(json.dumps({'bench': 'jobs', 'what': sys.argv[1], 'tasks': n, 'seconds': round(s, 3), 'tasks_per_s': round(n / s, 1)}))" "$@"
}

t0=$(now)
"$HERD" submit --array "1-$N" --stdout none --stderr none --wait -- true > /dev/null
line "herd submit --array (2 workers)" "$N" "$(python3 -c "print($(now) - $t0)")"

t0=$(now)
seq "$N" | xargs -P 2 -n 1 true
line "xargs -P 2" "$N" "$(python3 -c "print($(now) - $t0)")"

if command -v parallel > /dev/null; then
  t0=$(now)
  seq "$N" | parallel -j 2 true
  line "parallel -j 2" "$N" "$(python3 -c "print($(now) - $t0)")"
else
  echo '{"bench": "jobs", "what": "parallel -j 2", "skipped": "GNU parallel is not installed (apt-get install parallel)"}'
fi

if command -v sbatch > /dev/null && sinfo -h > /dev/null 2>&1; then
  t0=$(now)
  "$HERD" submit --array "1-$M" --stdout none --stderr none --wait -- true > /dev/null
  line "herd submit --array (Slurm comparison size)" "$M" "$(python3 -c "print($(now) - $t0)")"
  t0=$(now)
  job=$(sbatch --parsable --array="1-$M" --output=/dev/null --wrap true)
  while [[ -n "$(squeue -h -j "$job" 2>/dev/null)" ]]; do sleep 0.2; done
  line "sbatch --array" "$M" "$(python3 -c "print($(now) - $t0)")"
else
  echo '{"bench": "jobs", "what": "sbatch --array", "skipped": "no Slurm here (scripts/local-slurm.sh start)"}'
fi

rss() { awk '/VmRSS/ {print $2 * 1024}' "/proc/$scheduler/status"; }
before=$(rss)
t0=$(now)
big=$("$HERD" submit --array "1-$BIG" --stdout none --stderr none -- true)
accept=$(python3 -c "print($(now) - $t0)")
after=$(rss)
"$HERD" job cancel "$big" > /dev/null
python3 -c "import json; print(json.dumps({'bench': 'jobs', 'what': 'accept --array 1-$BIG', 'tasks': $BIG, 'accept_seconds': round($accept, 3), 'scheduler_rss_before_mb': round($before / 2**20, 1), 'scheduler_rss_after_mb': round($after / 2**20, 1)}))"
