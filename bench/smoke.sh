#!/usr/bin/env bash
# Runs every benchmark once at a small size and checks each output line is a JSON object.
set -euo pipefail
out=$("$1" all --small)
echo "$out"
n=$(echo "$out" | grep -c '^{"system":"herd","bench":"[a-z_]*".*}$' || true)
total=$(echo "$out" | grep -c . || true)
[ "$n" -eq "$total" ] && [ "$n" -ge 8 ] || { echo "malformed or missing benchmark output ($n of $total lines)"; exit 1; }
if command -v python3 >/dev/null; then
  python3 -c 'import json,sys; [json.loads(l) for l in sys.stdin]' <<<"$out"
fi
# The round trip's relay (zmq_round_trip, built beside herd_bench) takes its turns with herd:
# every turn answered, its p50 and the ratio given.
if [ -x "$(dirname "$1")/zmq_round_trip" ] && command -v python3 >/dev/null; then
  rt=$(echo "$out" | grep '"bench":"round_trip"') || { echo "no round_trip line"; exit 1; }
  python3 - "$rt" <<'PY' || exit 1
import json, math, sys
r = json.loads(sys.argv[1])
want = math.ceil(r["rounds"] / 50)
if r["relay_blocks"] != want or r["relay_p50_us"] <= 0 or r["p50_over_relay"] <= 0:
    sys.exit(f"round_trip: the relay took {r['relay_blocks']} of {want} turns "
             f"(relay_p50_us {r['relay_p50_us']}, p50_over_relay {r['p50_over_relay']})")
PY
fi
