#!/usr/bin/env bash
# GPT-2 small f16 decode processes (concat cache unless CACHE=static), run THERE after
# tools/gpu/pack.sh, each with its report: ms/token, calls served, and every plan that sampling
# rejected or that spans a layer (20+ ops), with its history -- to catch the process that now and
# then loses its layer plan and runs 3x slower. Usage: RUNS=8 bash tools/gpu/verdicts.sh
. "$(dirname "$0")/prelude.sh" lf-verdicts-out
for i in $(seq 1 "${RUNS:-8}"); do
  env ${VERDICT_ENV:-} LIVEFUSE_REPORT="$D/report_$i.json" timeout -s KILL 90 "${GPT2_DECODE[@]}" --cache "${CACHE:-concat}" \
    --json "$D/gen_$i.json" > "$D/gen_$i.log" 2>&1
  echo "process $i rc=$? $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('ms/token', round(d.get('step_median_ms', -1), 4), 'served', d.get('served_calls'))" "$D/gen_$i.json" 2>/dev/null)"
  python3 - "$D/report_$i.json" <<'PY'
import json, sys
try:
    plans = json.load(open(sys.argv[1]))["plans"]
except Exception as e:
    sys.exit(f"  no report: {e!r}")
for p in plans:
    if p["state"] == "rejected" or len(p["ops"]) >= 20:
        hist = " | ".join(f"{h['t_ms']:.0f}ms {h['reason']}" for h in p.get("history", []))
        print(f"  plan {p['id']} {len(p['ops'])} ops {p['state']} hits {p['hits']}: {hist[:700]}")
        for line in p.get("description", "").splitlines():
            if "observable" in line:
                print("    " + line.strip())
PY
done
tar -czf "${REAL_OUT}/verdicts.tgz" -C "$D" . 2>/dev/null
