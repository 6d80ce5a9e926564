#!/usr/bin/env bash
# Issue 50, third pass: the records the jax-native (f32) grid points lacked. From the checkout's top, after the
# device prelude (docs/device.md "On the lent machine"):   benchmarks/grid_f32_probes.sh OUT
# - probe matmul --dtype float32 at the dense shapes of the grid's jax-native step (benchmarks/grid_f32_matmul.py)
# - probe ragged-dot --dtype float32 at 512, 2,048 and 4,096 rows a group (32 experts, top-16, 1,024 / 4,096 / 8,192
#   tokens): the rows a group of the grid's jax-native prefill points (32 experts at 1,024 and 4,096 tokens, 16
#   experts at 4,096)
# Records under /tmp/f32rec, tarred into OUT/f32-records.tgz after each probe.
set -u
out=$1; rec=/tmp/f32rec; mkdir -p "$rec"
note() { echo "$*" | tee -a "$rec/summary.txt"; tar -czf "$out/f32-records.tgz" -C "$rec" .; }
t0=$(date +%s); timeout 300 python3 benchmarks/grid_f32_matmul.py "$rec/matmul" --timeout 260 > "$rec/matmul.log" 2>&1
note "matmul rc=$? $(( $(date +%s) - t0 ))s"
t0=$(date +%s); timeout 150 python3 -m k3plan probe ragged-dot --dtype float32 --experts 32 --top-k 16 --ep 1 \
  --tokens 1024,4096,8192 --out "$rec/ragged-dot" --timeout 130 > "$rec/ragged-dot.log" 2>&1
note "ragged-dot rc=$? $(( $(date +%s) - t0 ))s"
