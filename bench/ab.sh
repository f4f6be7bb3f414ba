#!/usr/bin/env bash
# Two builds of herd side by side, in one run on one machine: the user-visible figures of each
# (map + gather with 2 and 256 workers, the round trip beside its ZeroMQ relay, the tree, gathers
# of 16 and 256 MiB), runs of A and B interleaved so that a noisy neighbour hits both alike.
# Prints each run's JSON line, then a table of medians and B/A.
#
#   bench/ab.sh BUILD_A BUILD_B [RUNS]        e.g. bench/ab.sh /work/base/build build 5
#   AB_WORKLOADS="throughput2 latency" bench/ab.sh ...   only some of: throughput2 throughput256
#                                                          latency tree data
# Each build directory needs bench/herd_bench (and bench/zmq_round_trip for the relay).
set -euo pipefail
if (($# < 2)); then
  sed -n '2,10p' "$0"
  exit 2
fi
a="$1/bench/herd_bench"
b="$2/bench/herd_bench"
runs="${3:-5}"
for exe in "$a" "$b"; do
  [ -x "$exe" ] || { echo "ab.sh: no herd_bench at $exe" >&2; exit 2; }
done
workloads="${AB_WORKLOADS:-throughput2 throughput256 latency tree data}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

args_of() {
  case "$1" in
    throughput2) echo "throughput --tasks 100000 --workers 2 --repeat 1" ;;
    throughput256) echo "throughput --tasks 100000 --workers 256 --repeat 1" ;;
    latency) echo "latency --rounds 2000" ;;
    tree) echo "tree --leaves 8192 --workers 2 --repeat 1" ;;
    data) echo "data --mib 16,256 --warmup 2" ;;
    *) echo "ab.sh: unknown workload $1" >&2; exit 2 ;;
  esac
}

for w in $workloads; do
  read -r -a args <<<"$(args_of "$w")"
  for ((i = 1; i <= runs; i++)); do
    for side in A B; do
      exe="$a"; [ "$side" = B ] && exe="$b"
      # shellcheck disable=SC2086
      if ! timeout 600 "$exe" "${args[@]}" >"$out/run.json" 2>"$out/run.err"; then
        echo "ab.sh: $side $w run $i failed: $(tail -3 "$out/run.err")" >&2
        continue
      fi
      sed "s/^/$side $w /" "$out/run.json" | tee -a "$out/all"
    done
  done
done

# Medians per (workload, bench line, field) and B/A.
python3 - "$out/all" <<'EOF'
import json, sys, statistics
from collections import defaultdict
rows = defaultdict(lambda: defaultdict(list))
for line in open(sys.argv[1]):
    side, w, js = line.split(" ", 2)
    d = json.loads(js)
    bench = d.get("bench", "?")
    if bench == "submit_loop":
        continue
    key = (w, bench, d.get("workers", d.get("mib", "")))
    for field in ("tasks_per_s", "p50_us", "relay_p50_us", "p50_over_relay", "mb_per_s"):
        if field in d:
            rows[(key, field)][side].append(float(d[field]))
print()
print("| workload | bench | workers/MiB | figure | A (median) | B (median) | B/A | runs |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for (key, field), sides in sorted(rows.items(), key=lambda kv: (kv[0][0][0], kv[0][0][1], str(kv[0][0][2]), kv[0][1])):
    if "A" not in sides or "B" not in sides:
        continue
    ma, mb = statistics.median(sides["A"]), statistics.median(sides["B"])
    ratio = mb / ma if ma else float("nan")
    fmt = (lambda v: f"{v:.3f}") if max(ma, mb) < 10 else (lambda v: f"{v:,.1f}")
    print(f"| {key[0]} | {key[1]} | {key[2]} | {field} | {fmt(ma)} | {fmt(mb)} | {ratio:.3f} | {len(sides['A'])}+{len(sides['B'])} |")
EOF
