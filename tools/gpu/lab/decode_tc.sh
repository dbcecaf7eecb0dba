#!/usr/bin/env bash
# One GPU call for the tensor-core decode attention (kernels/cuda/attention_mma_decode.cu), run
# THERE after tools/gpu/pack.sh: the attention suites, the kernel benchmark (tensor cores / FMA /
# general, same process), then decode processes alternating LIVEFUSE_DECODE_TC=1|0 (Llama-1B bf16
# and GPT-2 f16, concat cache) and the context sweep's end points with each. Logs in
# $OUT/decode_tc.tgz. Usage: bash tools/gpu/lab/decode_tc.sh   [TC_PARTS="min suites bench ab sweep"
#   TC_ROUNDS=2 TC_SUITES="test_planner:*attention* test_decoder"]
. "$(dirname "$0")/../prelude.sh" lf-decode-tc
pack_out() { tar -czf "$REAL_OUT/decode_tc.tgz" -C "$D" . 2>/dev/null; }
parts=${TC_PARTS:-min suites bench ab sweep}
if [[ $parts == *min* ]]; then
  # The kernel alone first: a shape that hangs or faults is named within seconds (each launch is
  # waited on for at most 5 s), before a suite or the benchmark would spend its whole limit.
  at "the kernel alone (tools/gpu/lab/decode_tc_min.cu)"
  nvcc -std=c++20 -arch=sm_90 -O2 -I. -Iruntime/include tools/gpu/lab/decode_tc_min.cu -L"$B" -llivefuse \
    -Xlinker -rpath="$PWD/$B" -Xlinker -rpath-link="$PWD/$B" -Xlinker --allow-shlib-undefined \
    -o "$D/decode_tc_min" && timeout -s KILL 120 "$D/decode_tc_min" | tee "$D/decode_tc_min.log"
  [ "${PIPESTATUS[0]}" = 0 ] || { echo "the kernel alone failed: the rest is skipped"; pack_out; exit 1; }
fi
if [[ $parts == *suites* ]]; then
  at "suites"
  SUITE_S=${SUITE_S:-100} run_suites "${TC_SUITES:-test_planner:*attention* test_decoder}"
  pack_out
fi
if [[ $parts == *bench* ]]; then
  at "livefuse-bench-attention-decode --iters 100"
  timeout -k 5 150 stdbuf -oL "$B/bench/livefuse-bench-attention-decode" --iters 100 --json "$D/attention_decode.json" \
    > "$D/attention_decode.log" 2>&1
  echo "rc=$?"; cat "$D/attention_decode.log"
  pack_out
fi
if [[ $parts == *ab* ]]; then
  setting_ab LIVEFUSE_DECODE_TC ${TC_ROUNDS:-2}
  pack_out
fi
if [[ $parts == *sweep* ]]; then
  setting_sweep LIVEFUSE_DECODE_TC
  pack_out
fi
at "done"
