#!/usr/bin/env bash
# Instructions that herd's own turns spend per round trip, counted by callgrind: repeatable on a
# busy machine, where `herd_bench latency`'s times move by half between runs a minute apart.
#   bench/round_trip_callgrind.sh build/bench/herd_bench            # R1=200 R2=600 rounds
# Runs `herd_bench latency` twice under valgrind (client, scheduler and worker processes),
# collecting only inside the functions of a turn (receive, handle, schedule, send, the task's run
# on the worker's I/O thread, the client's submit and wait), and prints per process
# (Ir(R2) - Ir(R1)) / (R2 - R1): start-up cancels out, and so does work that follows the clock
# (heartbeats, pool steps), which under valgrind would count far more per round trip than in a
# real run. ZeroMQ's I/O threads (encryption, TCP) are not counted: they do the same work as a
# raw relay's. LD_LIBRARY_PATH picks another libherd for an A/B. Needs valgrind.
set -euo pipefail
bench=${1:?usage: $0 path/to/herd_bench}
r1=${R1:-200}
r2=${R2:-600}
command -v valgrind >/dev/null || { echo "round_trip_callgrind.sh: valgrind is not installed" >&2; exit 2; }
[[ -x $bench ]] || { echo "round_trip_callgrind.sh: $bench is not an executable" >&2; exit 2; }
(( r2 > r1 && r1 > 0 )) || { echo "round_trip_callgrind.sh: need 0 < R1 < R2 (got $r1, $r2)" >&2; exit 2; }
out=${OUT:-/tmp/herd-rt-cg}
toggles=()
for f in 'herd::scheduler::Scheduler::handle(*' 'herd::scheduler::Scheduler::flush(*' \
         'herd::scheduler::SchedulerState::schedule(*' 'herd::scheduler::SchedulerState::tick(*' \
         'herd::protocol::try_receive(*' 'herd::protocol::receive(*' 'herd::protocol::poll(*' \
         'herd::worker::Worker::on_scheduler_message(*' 'herd::worker::Worker::carry_out(*' \
         'herd::worker::Worker::run_inline(*' 'herd::worker::Worker::flush_results(*' \
         'herd::worker::Worker::drain_completions(*' 'herd::task::LogBook::task_finished(*' \
         '*::latency(*'; do
  toggles+=("--toggle-collect=$f")
done
for r in "$r1" "$r2"; do
  rm -rf "$out/$r"
  mkdir -p "$out/$r"
  valgrind --tool=callgrind --trace-children=yes --collect-atstart=no "${toggles[@]}" \
    --callgrind-out-file="$out/$r/cg.%p" "$bench" latency --rounds "$r" >/dev/null 2>"$out/$r/stderr" ||
    { echo "round_trip_callgrind.sh: herd_bench failed under valgrind ($out/$r/stderr)" >&2; exit 1; }
done
# One file per process, in the order they started: client, scheduler, worker.
totals() { for f in $(ls "$out/$1"/cg.* | sort -t. -k2 -n); do grep -m1 -E '^(summary|totals):' "$f" | awk '{print $2}'; done; }
mapfile -t a < <(totals "$r1")
mapfile -t b < <(totals "$r2")
(( ${#a[@]} == 3 && ${#b[@]} == 3 )) || { echo "round_trip_callgrind.sh: expected 3 processes, found ${#a[@]} and ${#b[@]}" >&2; exit 1; }
awk -v n=$((r2 - r1)) -v a="${a[*]}" -v b="${b[*]}" 'BEGIN {
  split(a, x); split(b, y); t = 0
  split("client scheduler worker", name)
  for (i = 1; i <= 3; i++) { d = (y[i] - x[i]) / n; t += d; printf "%s_ir_per_round_trip=%.0f ", name[i], d }
  printf "total_ir_per_round_trip=%.0f\n", t }'
