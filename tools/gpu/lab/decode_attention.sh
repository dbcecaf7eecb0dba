#!/usr/bin/env bash
# One GPU call for a change to the decode attention (kernels/cuda/attention_decode*.cu), run THERE
# after tools/gpu/pack.sh: livefuse-bench-attention-decode twice, the suites that run the kernel
# (plans, eager, graphs, decoders), then the context sweep's end points (Llama-1B bf16, prompts
# 128 and 4096, fusion on, each cache), once per setting of DA_SETTINGS ("default" or VAR=VALUE
# pairs joined by commas), alternating. Logs in $OUT/decode_attention.tgz.
# Usage (device tool): bash tools/gpu/lab/decode_attention.sh   [DA_PARTS="bench suites sweep"
#   DA_SUITES="test_planner:*attention* test_ops test_decoder test_replacement" DA_BENCH_RUNS=2
#   DA_SETTINGS="default" DA_LENS="128 4096" DA_MODES="on:static on:concat" DA_PRESET=llama-1b
#   DA_DTYPE=bf16]
. "$(dirname "$0")/../prelude.sh" lf-da-out
pack_out() { tar -czf "$REAL_OUT/decode_attention.tgz" -C "$D" . 2>/dev/null; }
parts=${DA_PARTS:-bench suites sweep}

if [[ $parts == *bench* ]]; then
  for i in $(seq 1 "${DA_BENCH_RUNS:-2}"); do
    at "bench attention-decode ($i)"
    timeout -s KILL 120 "$B/bench/livefuse-bench-attention-decode" --iters 100 --json "$D/bench_$i.json" \
      > "$D/bench_$i.log" 2>&1
    echo "rc=$?"; grep -v "^ *$" "$D/bench_$i.log" | tail -24
  done
  pack_out
fi
if [[ $parts == *suites* ]]; then
  at "suites"
  SUITE_S=200 run_suites "${DA_SUITES:-test_planner:*attention* test_ops test_decoder test_replacement}"
  pack_out
fi
if [[ $parts == *sweep* ]]; then
  for setting in ${DA_SETTINGS:-default}; do
    at "sweep ($setting)"
    env_args=()
    [[ $setting != default ]] && IFS=, read -r -a env_args <<< "$setting"
    env "${env_args[@]}" SWEEP_LENS="${DA_LENS:-128 4096}" SWEEP_MODES="${DA_MODES:-on:static on:concat}" \
      SWEEP_PRESET="${DA_PRESET:-llama-1b}" SWEEP_DTYPE="${DA_DTYPE:-bf16}" bash tools/gpu/sweep.sh
    cp "$REAL_OUT/sweep.tgz" "$D/sweep_${setting//[^A-Za-z0-9_]/_}.tgz" 2>/dev/null
    pack_out
  done
fi
at "done"
