#!/usr/bin/env bash
# Issue 20's warm-up, run THERE (device tool) after tools/gpu/pack.sh: for each model and cache,
# one process LIVEFUSE=off and one on (32 + WARM_STEPS tokens, 2 runs each), their first runs
# compared token by token until plans serve (tools/gpu/warmup_table.py), then the on process again
# under LIVEFUSE_TRACE: what its slowest warm-up tokens waited on (tools/gpu/trace_warmup.py).
# Logs in $OUT/warmup.tgz.
# Usage: bash tools/gpu/warmup.sh   [WARM_MODELS="gpt2:f16:concat llama-1b:bf16:concat" WARM_STEPS=128 WARM_TRACE=1]
. "$(dirname "$0")/prelude.sh" lf-warmup
for spec in ${WARM_MODELS:-gpt2:f16:concat gpt2:f16:static llama-1b:bf16:concat}; do
  IFS=: read -r preset dtype cache <<< "$spec"
  gen=("$B/tools/generate/livefuse-generate" --random 1 --preset "$preset" --dtype "$dtype" --device cuda
       --prompt-len 32 --steps "${WARM_STEPS:-128}" --runs 2 --cache "$cache" --quiet)
  tag="${preset}_${dtype}_$cache"
  echo "== $tag"
  for mode in off on; do
    LIVEFUSE=$mode timeout -s KILL 120 "${gen[@]}" --json "$D/$tag.$mode.json" > "$D/$tag.$mode.log" 2>&1 ||
      echo "  $mode: rc=$? $(tail -2 "$D/$tag.$mode.log")"
  done
  python3 tools/gpu/warmup_table.py "$D/$tag.off.json" "$D/$tag.on.json"
  if [ "${WARM_TRACE:-1}" = 1 ]; then
    LIVEFUSE_TRACE="$D/$tag.trace.json" timeout -s KILL 120 "${gen[@]}" > "$D/$tag.trace.log" 2>&1
    python3 tools/gpu/trace_warmup.py "$D/$tag.trace.json" 80 4 2>&1 | head -40
  fi
done
tar -czf "$REAL_OUT/warmup.tgz" -C "$D" --exclude='*.trace.json' . 2>/dev/null
