#!/usr/bin/env bash
# One GPU call for a change on the decode path, run THERE after tools/gpu/pack.sh: the suites that
# cover it, GPT-2 small f16 ms/token (processes alternating between the default and each
# DECODE_AB setting), the decode layer kernel by kernel (ncu), then bench/gpt/compare.py with
# its PyTorch peers. Each part has its own limit and prints as it goes; logs in $OUT/decode.tgz.
# Usage (device tool): bash tools/gpu/decode.sh   [DECODE_SUITES="test_ops:linear* ..."
#   DECODE_PAIRS=2 DECODE_AB="LIVEFUSE_GEMV=0" DECODE_USERS=0 DECODE_KERNELS=1 DECODE_COMPARE="gpt2"
#   COMPARE_S=240 COMPARE_SKIP=hf_generate]
. "$(dirname "$0")/prelude.sh" lf-decode-out
pack_out() { tar -czf "$REAL_OUT/decode.tgz" -C "$D" . 2>/dev/null; }

at "suites"
run_suites "${DECODE_SUITES-test_ops:linear* test_planner:gpu* test_decoder}"
pack_out

if [ "${DECODE_USERS:-0}" = 1 ]; then
  at "user programs, fusion on / off / unsampled"
  RUNS=1 EXIT_RUNS=2 timeout -s KILL 150 bash tools/gpu/users.sh "$B" "$D"
  echo "  $(grep -c ' rc=0 0 failures' "$D/users.log") of $(grep -c ' run ' "$D/users.log") runs passed"
  grep ' run ' "$D/users.log" | grep -v ' rc=0 0 failures' | head
  grep -v ' run ' "$D/users.log" | head
  pack_out
fi

at "GPT-2 small f16 concat, 32 + 256 tokens x 4 runs, one process each"
for i in $(seq 1 "${DECODE_PAIRS:-2}"); do
  # Which side runs first alternates: session 17's A/B always ran the new side first, and its
  # slower figures could not be told from an order effect.
  modes=(default ${DECODE_AB-LIVEFUSE_GEMV=0})
  [ $((i % 2)) = 0 ] && [ ${#modes[@]} = 2 ] && modes=("${modes[1]}" "${modes[0]}")
  for mode in "${modes[@]}"; do
    envs=(); [ "$mode" != default ] && envs=("$mode")
    env "${envs[@]}" LIVEFUSE_REPORT="$D/report_${i}_${mode%%=*}.json" timeout -s KILL 90 \
      "${GPT2_DECODE[@]}" --cache concat --json "$D/gen_${i}_$mode.json" > "$D/gen_${i}_$mode.log" 2>&1
    rc=$?
    python3 tools/gpu/decode_summary.py "$D/gen_${i}_$mode.json" "$D/report_${i}_${mode%%=*}.json" \
      "  $(printf '%-24s' "$mode") rc=$rc"
  done
done
pack_out

if [ "${DECODE_KERNELS:-1}" = 1 ]; then
  at "kernels"
  KERNEL_RUNS="gpt2:f16:concat" DECODE_LAST=${DECODE_LAST:-40} KERNEL_LINES=45 timeout -s KILL 200 bash tools/gpu/kernels.sh
  cp "$REAL_OUT/kernels.tgz" "$D/" 2>/dev/null
  pack_out
fi

if [ -n "${DECODE_COMPARE-gpt2}" ]; then
  at "compare.py ${DECODE_COMPARE-gpt2}"
  timeout -s KILL "${COMPARE_S:-240}" python3 bench/gpt/compare.py "$B/tools/generate/livefuse-generate" \
    --models "${DECODE_COMPARE-gpt2}" --dtype gpt2:f16,llama:bf16 --skip "${COMPARE_SKIP-hf_generate}" --prompt 32 --steps 256 --timeout 120 --hf-iters 1 --livefuse-runs 4 \
    --workdir /tmp/lf-gpt --json "$D/gpt_compare.json" > "$D/gpt_compare.log" 2>&1
  echo "compare.py rc=$?"
  tail -30 "$D/gpt_compare.log"
  pack_out
fi
at "done"
