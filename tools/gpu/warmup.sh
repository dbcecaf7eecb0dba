#!/usr/bin/env bash
# Issue 20's warm-up, run THERE (device tool) after tools/gpu/pack.sh: for each model and cache,
# one process LIVEFUSE=off, then WARM_PAIRS processes on (32 + WARM_STEPS tokens, one run each),
# alternating with WARM_ENV's setting when given; each on process's first-run tokens until plans
# serve are set against the off process's same tokens (tools/gpu/warmup_table.py). With
# WARM_TRACE=1 the on process once more under LIVEFUSE_TRACE: what its slowest warm-up tokens
# waited on (tools/gpu/trace_warmup.py). WARM_COLD=1: every on process (the traced one too)
# starts with an empty kernel cache, as a fresh machine's first process does (Llama's slowest
# warm-up token there: 11 ms, 2.9x eager's, session 35). Logs in $OUT/warmup.tgz.
# Usage: bash tools/gpu/warmup.sh   [WARM_MODELS="gpt2:f16:concat llama-1b:bf16:concat" WARM_STEPS=128
#   WARM_PAIRS=1 WARM_ENV="CUDA_MODULE_LOADING=EAGER" WARM_TRACE=0 WARM_COLD=0]
. "$(dirname "$0")/prelude.sh" lf-warmup
for spec in ${WARM_MODELS:-gpt2:f16:concat gpt2:f16:static llama-1b:bf16:concat}; do
  IFS=: read -r preset dtype cache <<< "$spec"
  gen=("$B/tools/generate/livefuse-generate" --random 1 --preset "$preset" --dtype "$dtype" --device cuda
       --prompt-len 32 --steps "${WARM_STEPS:-128}" --runs 1 --cache "$cache" --quiet)
  tag="${preset}_${dtype}_$cache"
  echo "== $tag"
  LIVEFUSE=off timeout -s KILL 120 "${gen[@]}" --json "$D/$tag.off.json" > "$D/$tag.off.log" 2>&1 ||
    echo "  off: rc=$? $(tail -2 "$D/$tag.off.log")"
  for i in $(seq 1 "${WARM_PAIRS:-1}"); do
    modes=(default); [ -n "${WARM_ENV:-}" ] && modes+=("$WARM_ENV")
    for mode in "${modes[@]}"; do
      envs=(); [ "$mode" != default ] && read -r -a envs <<< "$mode"
      [ "${WARM_COLD:-0}" = 1 ] && rm -rf "$LIVEFUSE_CACHE_DIR"
      out="$D/$tag.on_${i}_$(echo "$mode" | tr -c 'A-Za-z0-9' _).json"
      env "${envs[@]}" timeout -s KILL 120 "${gen[@]}" --json "$out" > "$out.log" 2>&1 || echo "  rc=$? $(tail -2 "$out.log")"
      echo "  -- on, $mode ($i)"
      python3 tools/gpu/warmup_table.py "$D/$tag.off.json" "$out"
    done
  done
  if [ "${WARM_TRACE:-0}" = 1 ]; then
    [ "${WARM_COLD:-0}" = 1 ] && rm -rf "$LIVEFUSE_CACHE_DIR"
    LIVEFUSE_TRACE="$D/$tag.trace.json" timeout -s KILL 120 "${gen[@]}" > "$D/$tag.trace.log" 2>&1
    python3 tools/gpu/trace_warmup.py "$D/$tag.trace.json" 80 4 2>&1 | head -40
  fi
done
tar -czf "$REAL_OUT/warmup.tgz" -C "$D" --exclude='*.trace.json' . 2>/dev/null
