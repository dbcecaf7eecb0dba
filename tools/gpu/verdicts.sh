#!/usr/bin/env bash
# GPT-2 small f16 decode processes (concat cache unless CACHE=static), run THERE after
# tools/gpu/pack.sh, each summed up with its report by tools/gpu/decode_summary.py -- to catch
# the process that now and then loses its layer plan and runs 3x slower.
# Usage: RUNS=8 bash tools/gpu/verdicts.sh
. "$(dirname "$0")/prelude.sh" lf-verdicts-out
for i in $(seq 1 "${RUNS:-8}"); do
  env ${VERDICT_ENV:-} LIVEFUSE_REPORT="$D/report_$i.json" timeout -s KILL 90 "${GPT2_DECODE[@]}" --cache "${CACHE:-concat}" \
    --json "$D/gen_$i.json" > "$D/gen_$i.log" 2>&1
  rc=$?
  python3 tools/gpu/decode_summary.py "$D/gen_$i.json" "$D/report_$i.json" "process $i rc=$rc"
done
tar -czf "${REAL_OUT}/verdicts.tgz" -C "$D" . 2>/dev/null
