#!/usr/bin/env bash
# The decode layer plan's own GPU time with the cache's append in the attention step and without
# (LIVEFUSE_ATTENTION_APPEND=1|0, alternating processes), run THERE after tools/gpu/pack.sh: each
# process's ms a token and issue time, its layer plan's sampled replay against eager (medians,
# CUDA events: the GPU's time for the layer, whatever the host's pace), and the appends done in
# place. Usage: bash tools/gpu/lab/append_layer.sh  [AL_MODELS="gpt2:f16 llama-1b:bf16" AL_ROUNDS=3]
. "$(dirname "$0")/../prelude.sh" lf-append-layer
for m in ${AL_MODELS:-gpt2:f16 llama-1b:bf16}; do
  for r in $(seq "${AL_ROUNDS:-3}"); do
    for ap in 1 0; do
      LIVEFUSE_ATTENTION_APPEND=$ap LIVEFUSE_REPORT="$D/r.json" timeout -k 5 120 "$B/tools/generate/livefuse-generate" \
        --random 1 --preset "${m%%:*}" --dtype "${m##*:}" --device cuda --cache concat --prompt-len 32 --steps 256 \
        --runs 3 --quiet --json "$D/g.json" > "$D/g.log" 2>&1 || { echo "$m append=$ap rc=$?"; tail -3 "$D/g.log"; continue; }
      python3 - "$m" "$ap" "$r" "$D" <<'PY'
import json, sys
m, ap, r, d = sys.argv[1:]
g = json.load(open(d + "/g.json")); rep = json.load(open(d + "/r.json"))
layer = max(rep["plans"], key=lambda p: len(p["ops"]))
s = layer.get("sampling", {})
c = rep["counters"]
print(f"{m} append={ap} round {r}: {g.get('step_median_ms', -1):.4f} ms/token, issued {g.get('step_issue_median_ms', -1):.4f}; "
      f"layer plan ({len(layer['ops'])} ops, {layer['state']}) sampled {s.get('fused_median_us')} us vs eager {s.get('eager_median_us')}; "
      f"appends in place {c.get('matcher', {}).get('appends_in_place')}; {layer['notes'].get('launches')}")
PY
    done
  done
done
