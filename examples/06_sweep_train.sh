#!/bin/sh
# 06_sweep_train.sh LR EPOCHS: a stand-in for a training script, for 06_sweep_shell. It fits
# y = 2x + 1 on 20 points by gradient descent and prints the loss after each epoch as a
# `herd-metric` line: what `herd sweep` reads (the last one is the final loss).
awk -v lr="$1" -v epochs="$2" 'BEGIN {
  w = 0; b = 0
  for (e = 1; e <= epochs; e++) {
    gw = 0; gb = 0; loss = 0
    for (i = 0; i < 20; i++) {
      x = i / 10; err = w * x + b - (2 * x + 1)
      gw += err * x; gb += err; loss += err * err
    }
    w -= lr * 2 * gw / 20; b -= lr * 2 * gb / 20
    printf "herd-metric loss=%.6g\n", loss / 20
  }
}'
