#!/usr/bin/env bash
# Per-step GPU times of the plans (LIVEFUSE_PROFILE=1: each step between events, so each
# includes ~1 us of event floor) for the decoders and BERT, run THERE after tools/gpu/pack.sh.
# Each run writes the report livefuse-inspect reads; tools/gpu/profile_table.py makes the
# per-step table from it. Results in $OUT/profile.tgz.
# Usage (device tool): bash tools/gpu/profile.sh   [PROFILE_RUNS="gpt2:static gpt2:concat bert"
#   PROFILE=0 (plain runs: the report shows each plan's state and hits as they are without the
#   per-step events, which slow the sampled plan runs down) STEPS=64]
. "$(dirname "$0")/prelude.sh" lf-profile-out
for run in ${PROFILE_RUNS-gpt2:static gpt2:concat bert}; do
  name=$(echo "$run" | tr ':' '_')
  case "$run" in
    bert) cmd=("$B/tools/bert/livefuse-bert" --random 1 --preset base --dtype f16 --device cuda
               --iters 100 --warmup-ms 3000 --quiet) ;;
    *) cmd=("$B/tools/generate/livefuse-generate" --random 1 --preset "${run%%:*}" --dtype f16
            --device cuda --cache "${run##*:}" --prompt-len 32 --steps "${STEPS:-64}" --runs 3
            --json "$D/$name.timing.json" --quiet) ;;
  esac
  LIVEFUSE_PROFILE=${PROFILE:-1} LIVEFUSE_REPORT="$D/$name.json" timeout -k 5 120 "${cmd[@]}" > "$D/$name.log" 2>&1
  echo "$run rc=$? $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('step_median_ms', d.get('step_median_ms'), 'served_calls', d.get('served_calls'), 'active_plans', d.get('active_plans'))" "$D/$name.timing.json" 2>/dev/null)"
  python3 tools/gpu/profile_table.py "$D/$name.json" | tee "$D/$name.table" | head -${PROFILE_LINES:-40}
done
tar -czf "$REAL_OUT/profile.tgz" -C "$D" . 2>/dev/null
