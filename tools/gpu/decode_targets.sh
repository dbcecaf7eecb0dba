#!/usr/bin/env bash
# The decode issue's targets that compare.py does not measure, run THERE after tools/gpu/pack.sh:
# GPT-2 small f16 (random weights) with 512 new tokens for either cache style -- plans made,
# calls served over the process and in its last run, device memory in use and cached
# (tools/gpu/decode_summary.py) -- then the context sweep (tools/gpu/sweep.sh). Logs in
# $OUT/targets.tgz (and sweep.tgz).
# Usage (device tool): bash tools/gpu/decode_targets.sh   [TARGET_STEPS=512 TARGET_RUNS=2
#   TARGET_CACHES="concat static" TARGET_PRESET=gpt2 TARGET_DTYPE=f16 TARGET_SWEEP=1
#   (SWEEP_* as sweep.sh)]; TARGET_PRESET=llama-1b TARGET_DTYPE=bf16 for the Llama figures.
. "$(dirname "$0")/prelude.sh" lf-targets-out
steps=${TARGET_STEPS:-512}
preset=${TARGET_PRESET:-gpt2} dtype=${TARGET_DTYPE:-f16}
for cache in ${TARGET_CACHES:-concat static}; do
  LIVEFUSE_REPORT="$D/report_$cache.json" timeout -s KILL 150 "$B/tools/generate/livefuse-generate" \
    --random 1 --preset "$preset" --dtype "$dtype" --device cuda --prompt-len 32 --steps "$steps" \
    --runs "${TARGET_RUNS:-2}" --quiet --cache "$cache" --json "$D/gen_$cache.json" > "$D/gen_$cache.log" 2>&1
  rc=$?
  python3 tools/gpu/decode_summary.py "$D/gen_$cache.json" "$D/report_$cache.json" \
    "$preset $dtype $cache, 32 + $steps tokens x ${TARGET_RUNS:-2} runs, rc=$rc:"
done
tar -czf "$REAL_OUT/targets_$preset.tgz" -C "$D" . 2>/dev/null
if [ "${TARGET_SWEEP:-1}" = 1 ]; then
  echo "== context sweep"
  bash tools/gpu/sweep.sh
fi
