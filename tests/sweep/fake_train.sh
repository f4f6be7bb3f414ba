#!/bin/sh
# fake_train.sh X [EPOCHS] [MARKER]: a stand-in for a training program, for the sweep tests.
# After each of EPOCHS epochs it reports loss = X / epoch as a `herd-metric` line, so the final
# loss is X / EPOCHS; with MARKER, it first appends "$HERD_TRIAL_ID EPOCHS" there, so that a
# test can see every run.
x=$1
epochs=${2:-1}
if [ -n "$3" ]; then echo "$HERD_TRIAL_ID $epochs" >> "$3"; fi
awk -v x="$x" -v n="$epochs" 'BEGIN { for (e = 1; e <= n; e++) printf "herd-metric loss=%.9g\n", x / e }'
