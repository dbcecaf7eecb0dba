#!/usr/bin/env bash
# The context sweep of the decode issue, run THERE after tools/gpu/pack.sh: per-token time of a
# random-weight Llama-3.2-1B-shaped decoder (bf16) after prompts of 128 / 1024 / 4096 tokens,
# fusion on with either cache style and off, next to the KV bytes each step reads. Results in
# $OUT/sweep.tgz; the table is printed.
# Usage (device tool): bash tools/gpu/sweep.sh   [SWEEP_LENS="128 1024 4096" SWEEP_STEPS=64
#   SWEEP_PRESET=llama-1b SWEEP_DTYPE=bf16 SWEEP_MODES="on:static on:concat off:static" SWEEP_TIMEOUT=150]
. "$(dirname "$0")/prelude.sh" lf-sweep-out
for len in ${SWEEP_LENS:-128 1024 4096}; do
  for mode in ${SWEEP_MODES:-on:static on:concat off:static}; do
    name="${len}_${mode/:/_}"
    LIVEFUSE=${mode%%:*} LIVEFUSE_REPORT="$D/$name.report.json" timeout -s KILL "${SWEEP_TIMEOUT:-150}" "$B/tools/generate/livefuse-generate" \
      --random 1 --preset "${SWEEP_PRESET:-llama-1b}" --dtype "${SWEEP_DTYPE:-bf16}" --device cuda \
      --cache "${mode##*:}" --prompt-len "$len" --steps "${SWEEP_STEPS:-64}" --runs 3 \
      --json "$D/$name.json" --quiet > "$D/$name.log" 2>&1
    rc=$?
    python3 - "$D/$name.json" "$len" "$mode" "$rc" "$D/$name.report.json" <<'PY'
import json, sys
path, length, mode, rc, report = sys.argv[1:]
try:
    d = json.load(open(path))
except Exception:
    print(f"prompt {length:>5} {mode:<10} rc={rc} (no timings)")
    sys.exit()
try:  # which attention kernel the steps took (tensor cores with LIVEFUSE_DECODE_TC=1)
    att = json.load(open(report))['counters'].get('cuda.attention', {})
    att = " ".join(f"{k} {v}" for k, v in att.items() if v)
except Exception:
    att = "?"
print(f"prompt {length:>5} {mode:<10} ms/token {d.get('step_median_ms', -1):8.4f}  p99 {d.get('step_p99_ms', -1):8.4f}"
      f"  served_calls {d.get('served_calls', '?')}  attention: {att}")
PY
  done
done
tar -czf "$REAL_OUT/sweep.tgz" -C "$D" . 2>/dev/null
