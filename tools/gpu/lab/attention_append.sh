#!/usr/bin/env bash
# One GPU call for the KV cache's append done by the attention step (LIVEFUSE_ATTENTION_APPEND;
# pass_attention, kernels/cuda/attention_decode.cu), run THERE after tools/gpu/pack.sh: the suites
# (the attention cases first), the decode kernel benchmark (--append), decode processes alternating
# LIVEFUSE_ATTENTION_APPEND=1|0 (GPT-2 f16 and Llama-1B bf16, concat cache), then the sweep's end
# points with each. Logs in $OUT/attention_append.tgz. Usage: bash tools/gpu/lab/attention_append.sh
#   [AP_PARTS="suites bench ab sweep" AP_ROUNDS=3 AP_SUITES="test_planner:*attention* ..."]
. "$(dirname "$0")/../prelude.sh" lf-attention-append
pack_out() { tar -czf "$REAL_OUT/attention_append.tgz" -C "$D" . 2>/dev/null; }
parts=${AP_PARTS:-suites bench ab sweep}
if [[ $parts == *suites* ]]; then
  at "suites"
  SUITE_S=${SUITE_S:-120} run_suites "${AP_SUITES:-test_planner:*attention* test_decoder test_planner test_bert test_replacement test_ops test_runtime test_monitor test_inspect}"
  pack_out
fi
if [[ $parts == *bench* ]]; then
  # Each case's kernel appending the step's rows itself against the copy launch + the kernel.
  at "livefuse-bench-attention-decode --append"
  timeout -k 5 150 stdbuf -oL "$B/bench/livefuse-bench-attention-decode" --iters 100 --append \
    --json "$D/attention_append.json" > "$D/attention_append.log" 2>&1
  echo "rc=$?"; grep -B1 "appending in the kernel" "$D/attention_append.log" | grep -v "^--"; tail -1 "$D/attention_append.log"
  pack_out
fi
if [[ $parts == *ab* ]]; then
  setting_ab LIVEFUSE_ATTENTION_APPEND ${AP_ROUNDS:-3}
  pack_out
fi
if [[ $parts == *sweep* ]]; then
  setting_sweep LIVEFUSE_ATTENTION_APPEND
  pack_out
fi
at "done"
