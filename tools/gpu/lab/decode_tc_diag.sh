#!/usr/bin/env bash
# Where the tensor-core decode attention stops (run THERE, after tools/gpu/pack.sh built
# .gpu/build): the kernel alone shape by shape (decode_tc_min.cu), each
# benchmark case alone and each attention test case alone, line-buffered under a short limit, then
# compute-sanitizer on the first benchmark case that did not finish. Found on an H100 in session
# 36: `test_planner -tc=*attention*` and `livefuse-bench-attention-decode` never finished (150 s),
# while decode processes ran.
. "$(dirname "$0")/../prelude.sh" lf-decode-tc-diag
echo "== the kernel alone (tools/gpu/lab/decode_tc_min.cu), each launch waited on for at most 5 s"
nvcc -std=c++20 -arch=sm_90 -O2 -I. -Iruntime/include tools/gpu/lab/decode_tc_min.cu -L"$B" -llivefuse \
  -Xlinker -rpath="$PWD/$B" -Xlinker -rpath-link="$PWD/$B" -Xlinker --allow-shlib-undefined -o "$D/decode_tc_min" && timeout -s KILL 120 "$D/decode_tc_min"
echo "rc=$?"
bad=""
for c in "gpt2 f16 32" "gpt2 f16 128" "gpt2 f16 4096" "llama-gqa bf16 300" "llama-gqa bf16 4096" \
         "gqa d 128 (8B-shaped) bf16 300" "kv view" "mask [1,1,1,sk]" "fully masked" "batch 4" "t 4"; do
  echo "== bench case: $c"
  timeout -s KILL 15 stdbuf -oL -eL "$B/bench/livefuse-bench-attention-decode" --iters 20 --case "$c" 2>&1 | tail -3
  rc=${PIPESTATUS[0]}; echo "rc=$rc"
  [ "$rc" != 0 ] && [ -z "$bad" ] && bad="$c"
done
for t in "*BERT pattern*" "*step equals eager*" "*split key groups*" "*grouped-query form*" "*rows of all -inf*" \
         "*decode steps over long*" "*decode splits merge*" "*decode shapes run*"; do
  echo "== test: $t"
  timeout -s KILL 30 stdbuf -oL -eL "$B/tests/test_planner" -tc="$t" 2>&1 | grep -v "^$" | tail -6
  echo "rc=${PIPESTATUS[0]}"
done
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
echo "== compute-sanitizer ($CS) on bench case '${bad:-gpt2 f16 32}'"
[ -n "$CS" ] && timeout -s KILL 60 "$CS" --print-limit 5 "$B/bench/livefuse-bench-attention-decode" --iters 2 --case "${bad:-gpt2 f16 32}" 2>&1 | head -40
