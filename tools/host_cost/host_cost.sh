#!/usr/bin/env bash
# The runtime's own instructions per op call in a CPU decode (README, "An op call's own cost"):
# builds livefuse-generate without CUDA into build-host-cost (AVX2 at most: valgrind does not
# decode AVX-512), runs it under callgrind and prints host_cost.py's line. Arguments go to
# livefuse-generate (default: gpt2-tiny, 200 tokens, 3 runs). Needs valgrind.
# LIVEFUSE_SAMPLE=0 unless set: under valgrind's slow, serialised threads live sampling keeps
# or rejects plans by chance (0 to 2 active from one build), and the count follows that; unsampled,
# every run serves the same calls with the same plans.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${HOST_COST_BUILD:-build-host-cost}
if [ ! -f "$BUILD/build.ninja" ]; then
  meson setup "$BUILD" --buildtype=debugoptimized -Dcuda=disabled -Dcpu_arch=x86-64-v3 >/dev/null
fi
ninja -C "$BUILD" tools/generate/livefuse-generate >/dev/null
args=("$@")
((${#args[@]})) || args=(--random 1 --preset gpt2-tiny --steps 200 --runs 3)
out=$(mktemp)
export LIVEFUSE_SAMPLE=${LIVEFUSE_SAMPLE:-0}
valgrind --tool=callgrind --callgrind-out-file="$out" "$BUILD/tools/generate/livefuse-generate" \
  --device cpu "${args[@]}" 2>&1 | grep -oE "plans served.*" || true
python3 tools/host_cost/host_cost.py "$out"
rm -f "$out"
