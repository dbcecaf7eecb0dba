#!/usr/bin/env bash
# Why one build's decode runs at different speeds in different processes, run THERE (device tool)
# after tools/gpu/pack.sh: SPREAD_N processes of one model (GPT-2 f16 concat unless SPREAD_MODEL
# says preset:dtype:cache), each with its ms/token, the part of a token the program's thread spends
# issuing it (livefuse-generate's step_issue_median_ms: near the token's time, the host is the
# bound) and its plans' sampled medians; then one LIVEFUSE=off process, one under LIVEFUSE_PROFILE
# (each plan step on the GPU: tools/gpu/profile_table.py) and one under LIVEFUSE_TRACE
# (the served steps' host time: tools/gpu/trace_host.py). Logs in $OUT/spread.tgz.
# Usage: bash tools/gpu/spread.sh   [SPREAD_N=6 SPREAD_MODEL=gpt2:f16:concat SPREAD_STEPS=256
#   SPREAD_ENV="VAR=value ..." (set in every on process) SPREAD_OFF=1 SPREAD_PROFILE=1
#   SPREAD_AB="VAR=value ..." (each on process followed by one with these settings: ab1, ab2 ...)]
. "$(dirname "$0")/prelude.sh" "lf-spread${SPREAD_TAG:-}"
IFS=: read -r preset dtype cache <<< "${SPREAD_MODEL:-gpt2:f16:concat}"
gen=("$B/tools/generate/livefuse-generate" --random 1 --preset "$preset" --dtype "$dtype" --device cuda
     --prompt-len 32 --steps "${SPREAD_STEPS:-256}" --runs 2 --cache "$cache" --quiet)
read -r -a extra <<< "${SPREAD_ENV:-}"
one() {  # one process: TAG, then VAR=value settings
  local tag=$1; shift
  env "${extra[@]}" "$@" LIVEFUSE_REPORT="$D/report_$tag.json" timeout -s KILL 150 "${gen[@]}" \
    --json "$D/gen_$tag.json" > "$D/gen_$tag.log" 2>&1
  python3 tools/gpu/decode_summary.py "$D/gen_$tag.json" "$D/report_$tag.json" "  $(printf '%-8s' "$tag") rc=$?" 2>&1 | head -6
}
echo "== $preset $dtype $cache, ${SPREAD_N:-6} processes ${SPREAD_ENV:-}"
read -r -a ab <<< "${SPREAD_AB:-}"
for i in $(seq 1 "${SPREAD_N:-6}"); do
  one "on$i"
  [ -n "${SPREAD_AB:-}" ] && one "ab$i" "${ab[@]}"
done
if [ "${SPREAD_OFF:-1}" = 1 ]; then
  echo "== LIVEFUSE=off"
  one off LIVEFUSE=off
fi
if [ "${SPREAD_PROFILE:-1}" = 1 ]; then
  echo "== LIVEFUSE_PROFILE=1 (each plan step timed on the GPU)"
  one profile LIVEFUSE_PROFILE=1
  python3 tools/gpu/profile_table.py "$D/report_profile.json" 2>&1 | head -40
fi
echo "== LIVEFUSE_TRACE"
one trace LIVEFUSE_TRACE="$D/trace.json"
timeout -s KILL 60 python3 tools/gpu/trace_host.py "$D/trace.json" 100 2>&1 | head -24
tar -czf "$REAL_OUT/spread${SPREAD_TAG:-}.tgz" -C "$D" --exclude=trace.json . 2>/dev/null
