#!/usr/bin/env bash
# One GPU call for the KV cache's append done by the attention step (LIVEFUSE_ATTENTION_APPEND;
# pass_attention, kernels/cuda/attention_decode.cu), run THERE after tools/gpu/pack.sh: the suites
# (the attention cases first), the decode kernel benchmark, decode processes alternating
# LIVEFUSE_ATTENTION_APPEND=1|0 (GPT-2 f16 and Llama-1B bf16, concat cache), then the sweep's end
# points with each. Logs in $OUT/attention_append.tgz. Usage: bash tools/gpu/lab/attention_append.sh
#   [AP_PARTS="suites bench ab sweep" AP_ROUNDS=3 AP_SUITES="test_planner:*attention* ..."]
. "$(dirname "$0")/../prelude.sh" lf-attention-append
START=$(date +%s)
at() { echo "== $1 ($(( $(date +%s) - START )) s)"; }
pack_out() { tar -czf "$REAL_OUT/attention_append.tgz" -C "$D" . 2>/dev/null; }
parts=${AP_PARTS:-suites bench ab sweep}
if [[ $parts == *suites* ]]; then
  at "suites"
  SUITE_S=${SUITE_S:-120} run_suites "${AP_SUITES:-test_planner:*attention* test_decoder test_planner test_bert test_replacement test_ops test_runtime test_monitor test_inspect}"
  pack_out
fi
if [[ $parts == *bench* ]]; then
  at "livefuse-bench-attention-decode --iters 100"
  timeout -k 5 150 stdbuf -oL "$B/bench/livefuse-bench-attention-decode" --iters 100 --json "$D/attention_decode.json" \
    > "$D/attention_decode.log" 2>&1
  echo "rc=$?"; tail -40 "$D/attention_decode.log"
  pack_out
fi
if [[ $parts == *ab* ]]; then
  for m in gpt2:f16 llama-1b:bf16; do
    at "$m concat, LIVEFUSE_ATTENTION_APPEND=1 | 0 alternating"
    AB_A="LIVEFUSE_ATTENTION_APPEND=1" AB_B="LIVEFUSE_ATTENTION_APPEND=0" MODEL=${m%%:*} DTYPE=${m##*:} \
      ROUNDS=${AP_ROUNDS:-3} STEPS=256 RUNS=3 timeout -s KILL 300 bash tools/gpu/ab_generate.sh 2>&1 | tee -a "$D/ab.log"
  done
  pack_out
fi
if [[ $parts == *sweep* ]]; then
  for ap in 1 0; do
    at "sweep, Llama-1B bf16 concat, LIVEFUSE_ATTENTION_APPEND=$ap"
    LIVEFUSE_ATTENTION_APPEND=$ap SWEEP_LENS="128 4096" SWEEP_MODES="on:concat" timeout -s KILL 200 bash tools/gpu/sweep.sh 2>&1 | tee -a "$D/sweep.log"
  done
  pack_out
fi
at "done"
