#!/usr/bin/env bash
# One GPU call for a launch-level change on the decode path, run THERE after tools/gpu/pack.sh:
# livefuse-bench-gemv-chain (a decode step's GEMVs as one graph, with and without PDL inside one
# process; then each product alone), then decode processes (Llama-1B-shaped bf16 unless AB_MODELS says otherwise)
# alternating the default and AB_ENV, then the
# warm-up of GPT-2 f16 (either cache, 2 runs) under LIVEFUSE_TRACE: its stalls on the program's
# thread (tools/gpu/trace_stalls.py) and the served steps' host time (tools/gpu/trace_host.py). Logs in $OUT/decode_ab.tgz.
# Usage (device tool): bash tools/gpu/decode_ab.sh   [AB_ENV="LIVEFUSE_PDL=0|A=0 B=1" AB_PAIRS=2 AB_STEPS=256
#   AB_MODELS="llama-1b:bf16 gpt2:f16" AB_CACHE=concat|static AB_CHAIN=0 (no GEMV chain)
#   AB_TRACE="concat static" (AB_TRACE= : no traces)]
. "$(dirname "$0")/prelude.sh" lf-ab-out
pack_out() { tar -czf "$REAL_OUT/decode_ab.tgz" -C "$D" . 2>/dev/null; }

if [ "${AB_CHAIN:-1}" != 0 ]; then
  at "GEMV chain"
  timeout -s KILL 120 "$B/bench/livefuse-bench-gemv-chain" --json "$D/gemv_chain.json" 2>&1 | tee "$D/gemv_chain.log"
fi

# Modes: the default, then each "|"-separated setting of AB_ENV (one or more VAR=value each).
IFS='|' read -r -a ab_modes <<< "${AB_ENV-LIVEFUSE_PDL=0}"
for model in ${AB_MODELS:-llama-1b:bf16}; do
  IFS=: read -r preset dtype <<< "$model"
  at "$preset $dtype ${AB_CACHE:-concat}, 32 + ${AB_STEPS:-256} tokens x 2 runs, one process each"
  for i in $(seq 1 "${AB_PAIRS:-2}"); do
    modes=(default "${ab_modes[@]}")
    if [ $((i % 2)) = 0 ]; then  # every other round in reverse order
      rev=(); for ((j = ${#modes[@]} - 1; j >= 0; j--)); do rev+=("${modes[j]}"); done; modes=("${rev[@]}")
    fi
    for mode in "${modes[@]}"; do
      envs=(); [ "$mode" != default ] && read -r -a envs <<< "$mode"
      tag="${preset}_${i}_$(echo "$mode" | tr -c 'A-Za-z0-9' _)"
      env "${envs[@]}" LIVEFUSE_REPORT="$D/report_$tag.json" timeout -s KILL 120 "$B/tools/generate/livefuse-generate" \
        --random 1 --preset "$preset" --dtype "$dtype" --device cuda --prompt-len 32 --steps "${AB_STEPS:-256}" \
        --runs 2 --cache "${AB_CACHE:-concat}" --quiet --json "$D/gen_$tag.json" > "$D/gen_$tag.log" 2>&1
      python3 tools/gpu/decode_summary.py "$D/gen_$tag.json" "$D/report_$tag.json" \
        "  $(printf '%-44s' "$mode") rc=$?" 2>/dev/null | head -4
    done
  done
done
pack_out

for cache in ${AB_TRACE-concat static}; do
  at "GPT-2 f16 $cache warm-up, traced"
  LIVEFUSE_TRACE="$D/trace_$cache.json" LIVEFUSE_REPORT="$D/trace_report_$cache.json" timeout -s KILL 90 \
    "${GPT2_DECODE[@]}" --runs 2 --cache "$cache" --json "$D/trace_gen_$cache.json" > "$D/trace_gen_$cache.log" 2>&1
  python3 tools/gpu/decode_summary.py "$D/trace_gen_$cache.json" "$D/trace_report_$cache.json" "  rc=$?" 2>/dev/null | head -4
  timeout -s KILL 60 python3 tools/gpu/trace_stalls.py "$D/trace_$cache.json" 2>&1 | head -40
  echo "  the served steps' host time (tools/gpu/trace_host.py, last 100 steps):"
  timeout -s KILL 60 python3 tools/gpu/trace_host.py "$D/trace_$cache.json" 100 2>&1 | head -20
  pack_out
done
at "done"
