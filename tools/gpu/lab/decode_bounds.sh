#!/usr/bin/env bash
# Run THERE. Where a decode token is bound, and the streaming decode kernel's early keys:
#  1. the suites that cover early keys (DB_SUITES), the attention bench's graph columns (each
#     kernel with and without its first keys loaded before its PDL wait);
#  2. livefuse-bench-gemv-chain: each decode step's GEMVs as one graph, and as one graph a layer
#     launched back to back ("/layers": what a layer plan's replays cost at their seams);
#  3. Llama-1B bf16 processes alternating LIVEFUSE_GEMV_NORM=2 | 1 (its norm chains inside the
#     GEMVs, now that those load their weights early);
#  4. the context sweep's ends with LIVEFUSE_EARLY_READS=1 | 0 (4096 keys: the streaming kernel).
# DB_PARTS picks parts ("1 2 3 4"). (A GPT-2 process pinned to a core it shared with a busy loop
# was tried to slow its host side: its issue time did not move -- the GPU machine's sandbox does
# not seem to hold the affinity -- so that part was dropped.)
. "$(dirname "$0")/../prelude.sh" decode_bounds
parts=" ${DB_PARTS:-1 2 3 4} "
if [[ $parts == *" 1 "* ]]; then
  run_suites "${DB_SUITES:-test_ops:*pdl* test_planner:*attention*}"
  attention_bench
fi
if [[ $parts == *" 2 "* ]]; then
  timeout -s KILL 240 "$B/bench/livefuse-bench-gemv-chain" --reps 50 --bw 3350 --json "$D/gemv_chain.json" \
    > "$D/gemv_chain.log" 2>&1
  echo "gemv chain rc=$?"
  grep -E "^(gpt2|llama-1b) +(off|pdl_early|off/layers|pdl_early/layers) " "$D/gemv_chain.log"
fi
if [[ $parts == *" 3 "* ]]; then
  AB_A="LIVEFUSE_GEMV_NORM=2" AB_B="LIVEFUSE_GEMV_NORM=1" MODEL=llama-1b DTYPE=bf16 ROUNDS=${DB_ROUNDS:-2} STEPS=256 RUNS=3 \
    timeout -s KILL 300 bash tools/gpu/ab_generate.sh 2>&1 | tee "$D/norm_ab.log" | grep -E "round|tokens"
fi
[[ $parts == *" 4 "* ]] && setting_sweep LIVEFUSE_EARLY_READS
cp "$D"/*.log "$D"/*.json "$REAL_OUT"/ 2>/dev/null || true
