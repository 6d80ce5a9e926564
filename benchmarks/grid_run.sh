#!/usr/bin/env bash
# Issue 50: k3plan's own step graph over a grid on one TPU v5e chip (probe step --grid), one process a model
# (weights drawn once on the device, reused by its points). From the checkout's top, after the device prelude
# (docs/device.md "On the lent machine"):  benchmarks/grid_run.sh OUT PART   (PART 1 or 2: two <10 min calls)
# Records go under /tmp/grid/<model>/ and are tarred into OUT/grid-PART.tgz after every model, so a command
# killed at its limit still brings back what it measured.
set -u
out=$1; part=$2; rec=/tmp/grid; mkdir -p "$rec"
dec=decode:1x2048,decode:1x32768,decode:8x8192,decode:16x8192,decode:64x2048,decode:32x32768,decode:64x32768
pre=prefill:1024,prefill:4096,prefill:8192
one() {  # name seconds args...
  local name=$1 secs=$2; shift 2
  local t0=$(date +%s)
  timeout "$secs" python3 -m k3plan probe step --width k3 --hardware tpu-v5e --records reports/probes \
    --repeats 5 --warmup 1 --timeout $((secs - 30)) --out "$rec/$name" "$@" > "$rec/$name.log" 2>&1
  echo "$name rc=$? $(( $(date +%s) - t0 ))s" | tee -a "$rec/summary.txt"
  tar -czf "$out/grid-$part.tgz" -C "$rec" .
}
if [ "$part" = 1 ]; then
  one tt-bf16-4l32e 200 --stack torchtpu-vllm --expert-format bf16 --layers 4 --experts 32 --grid "$dec,$pre"
  one jn-bf16-2l16e 170 --stack jax-native --expert-format bf16 --layers 2 --experts 16 --grid "$dec,$pre"
  one tt-bf16-6l16e 150 --stack torchtpu-vllm --expert-format bf16 --layers 6 --experts 16 \
    --grid decode:1x2048,decode:16x8192,decode:64x32768,prefill:1024,prefill:8192
elif [ "$part" = 2 ]; then
  one tt-mxfp4-4l16e 200 --stack torchtpu-vllm --expert-format runtime --layers 4 --experts 16 --grid "$dec,$pre"
  one jn-mxfp4-2l32e 170 --stack jax-native --expert-format runtime --layers 2 --experts 32 --grid "$dec,$pre"
  one tt-mxfp4-8l16e 150 --stack torchtpu-vllm --expert-format runtime --layers 8 --experts 16 \
    --grid decode:1x2048,decode:16x8192,decode:64x32768,prefill:1024,prefill:8192
elif [ "$part" = 3 ]; then  # the batch-1..4 decode region, 2 layers, 2,048-token prefill
  one tt-bf16-2l16e 110 --stack torchtpu-vllm --expert-format bf16 --layers 2 --experts 16 \
    --grid decode:1x2048,decode:2x2048,decode:4x2048,decode:16x8192,decode:64x32768,prefill:1024,prefill:2048,prefill:4096,prefill:8192
  one tt-bf16-4l32e-b 80 --stack torchtpu-vllm --expert-format bf16 --layers 4 --experts 32 \
    --grid decode:2x8192,decode:4x8192,prefill:2048
  one jn-bf16-4l16e 90 --stack jax-native --expert-format bf16 --layers 4 --experts 16 \
    --grid decode:1x2048,decode:16x8192,decode:64x32768,prefill:1024,prefill:2048
  one tt-mxfp4-2l16e 100 --stack torchtpu-vllm --expert-format runtime --layers 2 --experts 16 \
    --grid decode:1x2048,decode:4x2048,decode:16x8192,decode:64x32768,prefill:1024,prefill:2048,prefill:8192
elif [ "$part" = 4 ]; then  # re-run (22:4xZ) of the 4/6/8-layer models with today's graph: their 17:2xZ records were
  # of an older validate graph (reports/probes/grid-placement-20261204/README.md); the stale prefill points first
  one tt-mxfp4-4l16e 150 --stack torchtpu-vllm --expert-format runtime --layers 4 --experts 16 \
    --grid prefill:1024,prefill:4096,$dec,prefill:8192
  one tt-mxfp4-8l16e 130 --stack torchtpu-vllm --expert-format runtime --layers 8 --experts 16 \
    --grid prefill:1024,decode:1x2048,decode:16x8192,decode:64x32768,prefill:8192
  one tt-bf16-6l16e 80 --stack torchtpu-vllm --expert-format bf16 --layers 6 --experts 16 \
    --grid prefill:1024,decode:1x2048,decode:16x8192,decode:64x32768,prefill:8192
  one tt-bf16-4l32e 110 --stack torchtpu-vllm --expert-format bf16 --layers 4 --experts 32 \
    --grid prefill:2048,prefill:1024,decode:2x8192,decode:4x8192,$dec,prefill:4096,prefill:8192
  one jn-bf16-4l16e 50 --stack jax-native --expert-format bf16 --layers 4 --experts 16 \
    --grid decode:1x2048,decode:16x8192,decode:64x32768,prefill:1024,prefill:2048
elif [ "$part" = 5 ]; then  # the points part 4's timeouts cut (still of the older graph), with today's graph
  one tt-bf16-4l32e 300 --stack torchtpu-vllm --expert-format bf16 --layers 4 --experts 32 \
    --grid decode:32x32768,decode:64x32768,prefill:4096,prefill:8192
  one tt-bf16-6l16e 120 --stack torchtpu-vllm --expert-format bf16 --layers 6 --experts 16 --grid prefill:8192
  one jn-bf16-4l16e 120 --stack jax-native --expert-format bf16 --layers 4 --experts 16 --grid prefill:1024,prefill:2048
fi
