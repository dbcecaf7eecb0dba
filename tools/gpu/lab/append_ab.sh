#!/usr/bin/env bash
# The concat cache grown in place (runtime/append.hpp) against LIVEFUSE_APPEND=0 (every concat a
# full copy into dense storage), run THERE after tools/gpu/pack.sh: one livefuse-generate process
# per (prompt, mode, append), the two append settings alternating, with the appends counted from
# each process's report. Results in $OUT/append_ab.tgz; the table is printed.
# Usage (device tool): bash tools/gpu/lab/append_ab.sh   [AB_LENS="128 4096" AB_MODES="on off"
#   AB_PRESET=llama-1b AB_DTYPE=bf16 AB_STEPS=64 AB_RUNS=3 AB_ROUNDS=1 AB_TIMEOUT=150
#   AB_ORDER="1 0" (the append settings' order in each round) AB_COLD=0 (1: each process starts
#   with an empty kernel cache, as a fresh machine's first one does)]
. "$(dirname "$0")/../prelude.sh" lf-append-ab
for round in $(seq "${AB_ROUNDS:-1}"); do
  for len in ${AB_LENS:-128 4096}; do
    for mode in ${AB_MODES:-on off}; do
      for append in ${AB_ORDER:-1 0}; do
        [ "${AB_COLD:-0}" = 1 ] && rm -rf "$LIVEFUSE_CACHE_DIR"
        name="${len}_${mode}_append${append}_r${round}"
        LIVEFUSE=$mode LIVEFUSE_APPEND=$append LIVEFUSE_REPORT="$D/$name.report.json" \
          timeout -s KILL "${AB_TIMEOUT:-150}" "$B/tools/generate/livefuse-generate" --random 1 \
          --preset "${AB_PRESET:-llama-1b}" --dtype "${AB_DTYPE:-bf16}" --device cuda --cache concat \
          --prompt-len "$len" --steps "${AB_STEPS:-64}" --runs "${AB_RUNS:-3}" \
          --json "$D/$name.json" --quiet > "$D/$name.log" 2>&1
        rc=$?
        python3 - "$D/$name.json" "$D/$name.report.json" "$name" "$rc" <<'PY'
import json, sys
path, report, name, rc = sys.argv[1:]
try:
    d = json.load(open(path))
except Exception:
    print(f"{name:<28} rc={rc} (no timings)")
    sys.exit()
appends = put_off = inst = evict = "?"
try:
    c = json.load(open(report))["counters"]
    appends = c["matcher"].get("appends_in_place", "?")
    put_off = c["matcher"].get("samples_put_off", "?")
    inst, evict = c["graphs"].get("instantiations", "?"), c["graphs"].get("evictions", "?")
except Exception:
    pass
print(f"{name:<28} ms/token {d.get('step_median_ms', -1):8.4f}  p99 {d.get('step_p99_ms', -1):8.4f}"
      f"  served_calls {d.get('served_calls', '?')}  appends_in_place {appends}"
      f"  samples_put_off {put_off}  graphs instantiated {inst} evicted {evict}")
PY
      done
    done
  done
done
tar -czf "$REAL_OUT/append_ab.tgz" -C "$D" . 2>/dev/null
