#!/usr/bin/env bash
# Run THERE (device tool): builds and runs the persistent decode-step lab
# (tools/gpu/lab/decode_persistent.cu: a chain of GEMVs as one launch a product against one
# resident kernel with grid barriers), then prints the table; JSON under $OUT.
#   DP_REPS  replays a median is taken over (default 50)
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/lab}
mkdir -p "$OUT"
nvcc -O3 -arch=sm_90 -std=c++17 -lineinfo tools/gpu/lab/decode_persistent.cu -o "$OUT/decode_persistent"
timeout 300 "$OUT/decode_persistent" "${DP_REPS:-50}" --json "$OUT/decode_persistent.json"
