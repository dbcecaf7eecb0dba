#!/usr/bin/env bash
# Run THERE. The decode attention's first cached keys and values loaded before its PDL wait
# (AttentionArgs::early_kv, planner/plan.cpp "a plan's reads before its PDL wait"): the suites
# that cover it, the attention bench (each kernel in a graph of 20; the FMA kernel with and
# without its early keys), the user programs, then decode processes alternating
# LIVEFUSE_EARLY_READS=1 | 0 (the GEMVs' early weights and the attention's keys together).
# EK_SUITES: run_suites' list; EK_CASE: the bench's --case filter; EK_ROUNDS: rounds of the A/B (2).
. "$(dirname "$0")/../prelude.sh" early_kv
run_suites "${EK_SUITES:-test_ops test_decoder test_planner:*attention*,*decode*,*family*,*gemv*,*GEMV*}"
timeout -s KILL 240 "$B/bench/livefuse-bench-attention-decode" --iters 100 ${EK_CASE:+--case "$EK_CASE"} \
  --json "$D/attention_decode.json" > "$D/attention_decode.log" 2>&1
echo "attention bench rc=$?"
grep -E "PASS|FAIL|in a graph" "$D/attention_decode.log" | cut -c1-230
[ "${EK_USERS:-1}" = 1 ] && RUNS=1 EXIT_RUNS=2 bash tools/gpu/users.sh "$B" "$D/users" 2>&1 | tail -14
setting_ab LIVEFUSE_EARLY_READS "${EK_ROUNDS:-2}"
cp -r "$D"/*.log "$D"/*.json "$D/users" "$REAL_OUT"/ 2>/dev/null || true
