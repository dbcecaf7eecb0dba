#!/usr/bin/env bash
# A short GPU call, run THERE after tools/gpu/pack.sh (when session.sh's full run does not fit
# the device time left): chosen suites, BERT-base with each fusion switched off in turn (the
# gain of each, one process each), the crash-prone user program RUNS times per mode, and the
# BERT comparison against PyTorch for one dtype and batch. Results in $OUT/quick.tgz.
# Usage (device tool): bash tools/gpu/quick.sh   [SUITES="test_planner test_replacement"
#   RUNS=20 BERT_DTYPE=f16 BERT_BATCH=1 BERT_SEQ=128 COMPARE=1 SWITCHES=1 BENCH_ATTN=1 BENCH_GEMM_TUNE=1]
. "$(dirname "$0")/prelude.sh" lf-quick-out
mkdir -p "$D/bench"
pack_out() { tar -czf "$REAL_OUT/quick.tgz" -C "$D" . 2>/dev/null; }

if [ "${BENCH_ATTN:-1}" = 1 ] && [ -x "$B/bench/livefuse-bench-attention" ]; then
  echo "== attention kernels ($(( $(date +%s) - START )) s)"
  timeout -k 5 120 "$B/bench/livefuse-bench-attention" --json "$D/bench/attention.json" > "$D/attention.log" 2>&1
  echo "livefuse-bench-attention rc=$?"; tail -40 "$D/attention.log"
fi
if [ "${BENCH_GEMM_TUNE:-1}" = 1 ] && [ -x "$B/bench/livefuse-bench-gemm-tune" ]; then
  echo "== GEMM algorithm choice ($(( $(date +%s) - START )) s)"
  timeout -k 5 120 "$B/bench/livefuse-bench-gemm-tune" --json "$D/bench/gemm_tune.json" > "$D/gemm_tune.log" 2>&1
  echo "livefuse-bench-gemm-tune rc=$?"; tail -30 "$D/gemm_tune.log"
fi
for t in ${SUITES-test_planner test_replacement test_bert}; do
  timeout -k 5 150 "$B/tests/$t" > "$D/$t.log" 2>&1
  echo "$t rc=$? $(grep 'test cases' "$D/$t.log")"
  grep -B2 -A8 "ERROR" "$D/$t.log" | head -40
done
pack_out

[ "${SWITCHES:-1}" = 1 ] && echo "== BERT-base f16 b1 per fusion switch ($(( $(date +%s) - START )) s)"
[ "${SWITCHES:-1}" = 1 ] && for sw in "" LIVEFUSE_ATTENTION=1 LIVEFUSE_ATTENTION=0 LIVEFUSE_GEMM_SIBLINGS=0 LIVEFUSE_GEMM_TUNE=1; do
  name=$(echo "${sw:-all}" | tr -c 'A-Za-z0-9\n' '_')
  env $sw timeout -k 5 90 "$B/tools/bert/livefuse-bert" --random 1 --preset base --dtype f16 --device cuda \
    --iters 200 --warmup-ms 3000 --quiet --json "$D/bench/bert_switch_$name.json" > /dev/null 2>&1
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); t=d['timing']; print(f\"{sys.argv[2]:50} median {t['median_ms']:.4f} ms\", d.get('matcher', {}).get('served'))" \
    "$D/bench/bert_switch_$name.json" "${sw:-all fusions}" 2>&1 | tail -1
done
pack_out

echo "== user programs: threads_and_exits x${RUNS:-20} per mode ($(( $(date +%s) - START )) s)"
PROGS=threads_and_exits RUNS=${RUNS:-20} EXIT_RUNS=${RUNS:-20} bash tools/gpu/users.sh "$B" "$D"
awk '{print $1, $2, $3, $4}' "$D/users.log" | sort | uniq -c | head -20
grep "exit-pending" "$D/users.log"
grep -v " rc=0 0 failures" "$D/users.log" | grep -v "exit-pending" | head
[ -f "$D/exit_failures.log" ] && head -40 "$D/exit_failures.log"
pack_out

if [ "${COMPARE:-1}" = 1 ]; then
  echo "== BERT vs PyTorch ($(( $(date +%s) - START )) s)"
  timeout -k 5 200 python3 bench/bert/compare.py "$B/tools/bert/livefuse-bert" --dtype "${BERT_DTYPE:-f16}" \
    --batch "${BERT_BATCH:-1}" --seq "${BERT_SEQ:-128}" --iters 100 --livefuse-warmup-ms 3000 --timeout 100 --workdir /tmp/lf-bert \
    --json "$D/bench/bert_compare.json" > "$D/bert.log" 2>&1
  echo "compare.py rc=$?"
  grep -E "livefuse (off|on):|torch |^ *f(16|32)|by kind" "$D/bert.log" | head -20
fi
pack_out
echo "== done in $(( $(date +%s) - START )) s"
