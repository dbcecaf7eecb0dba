#!/usr/bin/env bash
# One full GPU session, run THERE (repo root) after tools/gpu/pack.sh built .gpu/build HERE:
# every test binary and benchmark (tools/gpu/run.sh), the fusion bench and replacement suite
# through LIVEFUSE_JIT=nvrtc (every kernel from C++: the linked default's reference), the
# replacement benchmark with its
# PyTorch peers, the demo, and the BERT comparison against PyTorch. Everything lands in one
# archive, $OUT/gpu.tgz (the device tool brings back only a few files); the summary is printed.
# Usage (device tool): bash tools/gpu/session.sh    [RUN_BUDGET_S=300 BERT=1 BERT_DTYPE=f16,f32
#   BERT_BATCH=1,8 BERT_SEQ=128 BERT_TIMEOUT=240]
set -u
cd "$(dirname "$0")/../.."
REAL_OUT=${OUT:-$PWD/gpu-out}
export OUT=/tmp/lf-gpu-out
rm -rf "$OUT"
mkdir -p "$OUT/bench" "$REAL_OUT"
START=$(date +%s)
# The archive is refreshed after every stage: a run cut short still brings back what it did.
pack_out() { tar -czf "$REAL_OUT/gpu.tgz" -C "$OUT" . 2>/dev/null; }

BUDGET_S=${RUN_BUDGET_S:-300} bash tools/gpu/run.sh 2>&1 | tail -40
pack_out

B=.gpu/build
. tools/gpu/env.sh
export LIVEFUSE_CACHE_DIR=/tmp/lf-kcache

echo "== LIVEFUSE_JIT=nvrtc: NVRTC's kernels, the reference for the linked default's ($(( $(date +%s) - START )) s)"
# test_planner (above) already ran the bit-for-bit case; here the fused kernels' speed and the
# replacement suite with every kernel compiled from C++.
LIVEFUSE_JIT=nvrtc timeout -k 5 120 "$B/bench/livefuse-bench-fusion" --device cuda --json "$OUT/bench/fusion_nvrtc.json" \
  > "$OUT/bench/fusion_nvrtc.log" 2>&1
grep -E "^(fused_|nvrtc)" "$OUT/bench/fusion_nvrtc.log" | cut -c1-160
LIVEFUSE_JIT=nvrtc LIVEFUSE_CACHE_DIR=/tmp/lf-kcache-nvrtc timeout -k 5 150 "$B/tests/test_replacement" > "$OUT/test_replacement_nvrtc.log" 2>&1
echo "test_replacement with LIVEFUSE_JIT=nvrtc: rc=$? $(grep 'test cases' "$OUT/test_replacement_nvrtc.log")"
pack_out

echo "== user programs (tests/users): fusion on, off and unsampled ($(( $(date +%s) - START )) s)"
bash tools/gpu/users.sh "$B" "$OUT"
pack_out

echo "== exits while compiling (Note: exit while compiling, kernels/jit/kernel_compiler.cpp)"
# On a GPU host NVRTC's first use differs (it looks for the driver): a process returning from
# main with the warm-up or compile jobs in flight must exit with status 0, every time.
for i in 1 2 3 4 5; do
  for args in "--warm-up-only" ""; do
    for jit in lto nvrtc; do
      LIVEFUSE_JIT=$jit LIVEFUSE_CACHE_DIR=off timeout -k 5 60 "$B/tests/planner/exit_with_compiles" $args > /dev/null 2>> "$OUT/exit_checks.log"
      echo "jit=$jit args=${args:-none} rc=$?" >> "$OUT/exit_checks.log"
    done
  done
done
echo "exit checks: $(grep -c 'rc=0$' "$OUT/exit_checks.log") of 20 exited with 0"
pack_out

echo "== replacement benchmark ($(( $(date +%s) - START )) s)"
timeout -k 5 90 "$B/bench/livefuse-bench-replacement" --device cuda --json "$OUT/bench/replacement.json" 2>&1 | tail -8
pack_out
echo "== PyTorch chain peers"
timeout -k 5 120 python3 bench/peers/torch_chain.py 4096 "$OUT/bench/torch_chain.json" 2>&1 | tail -6
pack_out
echo "== demo"
timeout -k 5 60 "$B/examples/livefuse-demo" > "$OUT/demo.log" 2>&1
awk 'NR <= 8 || /summary/ || NR % 4 == 0' "$OUT/demo.log"
pack_out
if [ "${BERT:-1}" = 1 ]; then
  echo "== BERT vs PyTorch ($(( $(date +%s) - START )) s)"
  timeout -k 5 ${BERT_TIMEOUT:-240} python3 bench/bert/compare.py "$B/tools/bert/livefuse-bert" --dtype ${BERT_DTYPE:-f16} --batch ${BERT_BATCH:-1,8} \
    --seq ${BERT_SEQ:-128} --iters 100 --livefuse-warmup-ms 3000 --timeout 100 --workdir /tmp/lf-bert --json "$OUT/bench/bert_compare.json" \
    > "$OUT/bert.log" 2>&1
  echo "compare.py rc=$?"
  tail -30 "$OUT/bert.log"
  echo "== BERT-base f16 b1: weights owned by the runtime, wrapped and declared immutable, wrapped"
  # The same process order twice, so that a drift of the host's speed shows as a disagreement.
  for round in 1 2; do
    for wm in owned wrapped-immutable wrapped; do
      timeout -k 5 90 "$B/tools/bert/livefuse-bert" --random 1 --preset base --dtype f16 --device cuda \
        --iters 200 --warmup-ms 3000 --weights-memory $wm --quiet --json "$OUT/bench/bert_weights_${wm}_$round.json"
      python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], 'median_ms', round(d['timing']['median_ms'], 4), d['matcher'])" \
        "$OUT/bench/bert_weights_${wm}_$round.json" "$wm" 2>&1 | tail -1
    done
  done
fi
pack_out
cp "$OUT/summary.txt" "$REAL_OUT/" 2>/dev/null
echo "== done in $(( $(date +%s) - START )) s"
