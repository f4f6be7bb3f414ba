#!/usr/bin/env bash
# Instructions per task through the scheduler core, counted by callgrind (repeatable on a busy
# machine, unlike wall-clock time). Runs herd_sim under valgrind with collection switched on only
# inside the core's entry points (the calls herd_sim times), one output file per run.
#   bench/sim_callgrind.sh build/bench/herd_sim --workers 10,10000 --tasks 100000 --workload independent
# Prints, per run: workload, workers, tasks, core instructions (Ir) and Ir per task. Keeps the
# callgrind files in $OUT (default /tmp/herd-sim-cg) for callgrind_annotate.
set -euo pipefail
sim=$1; shift
out=${OUT:-/tmp/herd-sim-cg}
rm -rf "$out"; mkdir -p "$out"
core='herd::scheduler::'
valgrind --tool=callgrind --callgrind-out-file="$out/cg.%p" --collect-atstart=no \
  --toggle-collect="${core}SchedulerState::submit(*" --toggle-collect="${core}SchedulerState::schedule(*" \
  --toggle-collect="${core}SchedulerState::task_results(*" --toggle-collect="${core}SchedulerState::release(*" \
  --toggle-collect="${core}SchedulerState::tick(*" --toggle-collect="${core}SchedulerState::heartbeat(*" \
  --toggle-collect="${core}SchedulerState::heard_from_client(*" --toggle-collect="${core}Outbox::clear(*" --toggle-collect="*drop_sent(*" \
  "$sim" --pending 0 --no-table "$@" 2>/dev/null > "$out/runs.jsonl"
# One file per run (herd_sim forks a child per run; its pid is in the run's JSON line), and one
# for herd_sim's parent, which collects nothing.
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
print("%-12s %8s %9s %14s %9s  %s" % ("workload", "workers", "tasks", "core Ir", "Ir/task", "file"))
for line in open(out + "/runs.jsonl"):
    r = json.loads(line)
    if "pid" not in r:
        continue
    f = "%s/cg.%d" % (out, r["pid"])
    ir = next(int(l.split()[1]) for l in open(f) if l.startswith("summary:"))
    print("%-12s %8d %9d %14s %9.0f  %s" % (r["workload"], r["workers"], r["tasks"], format(ir, ","), ir / r["tasks"], f))
PY
