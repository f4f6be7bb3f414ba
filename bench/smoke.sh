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
