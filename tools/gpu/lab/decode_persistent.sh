#!/usr/bin/env bash
# Run THERE (device tool): builds and runs the persistent decode labs, JSON under $OUT --
#   decode_persistent.cu  a chain of GEMVs (GPT-2's 48, Llama-1B's 64) as one launch a product
#                         against one resident kernel with grid barriers
#   decode_step.cu        GPT-2- and Llama-1B-shaped decode steps (norms, Q/K/V + cache append,
#                         attention -- grouped-query and rotary for Llama --, residuals, the MLP,
#                         head + argmax) as one launch a phase against one resident kernel;
#                         checked against a host reference
#   DP_REPS  replays a median is taken over (default 50; decode_step takes at most 300)
set -uo pipefail
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/lab}
mkdir -p "$OUT"
rc=0
for lab in decode_persistent decode_step; do
  echo "== $lab"
  if ! nvcc -O3 -arch=sm_90 -std=c++17 -lineinfo "tools/gpu/lab/$lab.cu" -o "$OUT/$lab"; then
    rc=1
    continue
  fi
  timeout 300 "$OUT/$lab" "${DP_REPS:-50}" --json "$OUT/$lab.json" || { echo "$lab: exit $?"; rc=1; }
  rm -f "$OUT/$lab"
done
exit $rc
