#!/usr/bin/env bash
# One GPU call for questions a session left open, run THERE after tools/gpu/pack.sh: the CUDA
# sibling-GEMM cases one by one (a stuck one prints its stacks: stacks.sh), BERT's layer kernel
# by kernel (ncu), then the GPT-2 A/B of decode.sh (TRIAGE_AB, alternating order).
# Usage (device tool): bash tools/gpu/triage.sh   [TRIAGE_CASES="gemm?siblings?cuda:?merged*|..."
#   TRIAGE_AB="LIVEFUSE_SEAM=0" TRIAGE_PAIRS=3 TRIAGE_KERNELS=1]
. "$(dirname "$0")/prelude.sh" lf-triage-out
IFS='|' read -r -a cases <<< "${TRIAGE_CASES-gemm?siblings?cuda:?merged*|gemm?siblings?cuda:?Q/K/V?of?one?width*}"
for c in "${cases[@]}"; do
  [ -n "$c" ] || continue
  at "test_planner -tc=$c"
  log="$D/case_$(echo "$c" | tr -c 'a-zA-Z0-9' _ | cut -c1-40).log"
  AFTER_S=${CASE_S:-75} bash tools/gpu/stacks.sh "$log" "$B/tests/test_planner" -tc="$c" -d
  echo "  rc=$? $(grep 'test cases' "$log")"
  grep -E "^[0-9.]+ s:|ERROR|stacks.sh" "$log" | head -12
  grep -A30 "stacks.sh: still" "$log" | grep -E "^#|^Thread" | head -60
done
tar -czf "$REAL_OUT/triage.tgz" -C "$D" . 2>/dev/null
if [ "${TRIAGE_KERNELS:-1}" = 1 ]; then
  at "BERT f16 b1 s128, kernel by kernel"
  KERNEL_RUNS="bert:f16:1:128" KERNEL_LINES=40 timeout -s KILL 150 bash tools/gpu/kernels.sh
fi
at "GPT-2 A/B"
DECODE_SUITES="" DECODE_AB="${TRIAGE_AB-LIVEFUSE_SEAM=0}" DECODE_PAIRS=${TRIAGE_PAIRS:-3} DECODE_KERNELS=0 \
  DECODE_COMPARE="" bash tools/gpu/decode.sh
at "done"
