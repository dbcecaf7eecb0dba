#!/usr/bin/env bash
# Run THERE. Session 52's second call, one budget: (1) the suites that run the f32 3xTF32 GEMM and
# f32 BERT with LIVEFUSE_GEMM_F32X3=0 | 1 (its tile rule after the lab); (2) the prefix rule for
# sampling plans (session 51, 7aca05a) by LIVEFUSE_GEMM_TUNE=0 | 1 on f32 BERT and the tuned
# report's plans; (3) Llama-1B decode with LIVEFUSE_GEMV_NORM=2 | 1 (its norms inside the GEMVs,
# last measured in session 25 on the H200, before the GEMV's early loads and PDL); (4) Llama's
# warm-up (the prefix rule's risk: a prefix aside while a longer plan samples); (5) f16 BERT b1's
# layer step by step (seq 128 and 384); (6) the user programs in the three modes. Logs: $OUT/*.tgz.
. "$(dirname "$0")/../prelude.sh" session52
parts=" ${S52_PARTS:-1 2 3 4 5 6} "
if [[ $parts == *" 1 "* ]]; then
  F3_PARTS="2 3" F3_BERT="f32:1" F3_ROUNDS=1 timeout -k 5 150 bash tools/gpu/lab/f32x3.sh 2>&1 | grep -v "^== done"
fi
if [[ $parts == *" 2 "* ]]; then
  GS_PARTS=6 GS_TUNE_BERT="f32:1" timeout -k 5 120 bash tools/gpu/lab/gemm_splits.sh 2>&1 | grep -v "^== done"
fi
if [[ $parts == *" 3 "* ]]; then
  at "Llama-1B bf16 concat, LIVEFUSE_GEMV_NORM=2 | 1"
  AB_A="LIVEFUSE_GEMV_NORM=2" AB_B="LIVEFUSE_GEMV_NORM=1" MODEL=llama-1b DTYPE=bf16 CACHE=concat STEPS=256 RUNS=3 \
    ROUNDS=2 timeout -s KILL 150 bash tools/gpu/ab_generate.sh 2>&1 | tail -10
  at "GPT-2 f16 concat, LIVEFUSE_GEMV_NORM=1 | 0"
  AB_A="LIVEFUSE_GEMV_NORM=1" AB_B="LIVEFUSE_GEMV_NORM=0" MODEL=gpt2 DTYPE=f16 CACHE=concat STEPS=256 RUNS=3 \
    ROUNDS=2 timeout -s KILL 100 bash tools/gpu/ab_generate.sh 2>&1 | tail -10
fi
if [[ $parts == *" 4 "* ]]; then
  at "warm-up, Llama-1B bf16 concat"
  WARM_MODELS="llama-1b:bf16:concat" timeout -s KILL 100 bash tools/gpu/warmup.sh 2>&1 | tail -14
fi
if [[ $parts == *" 5 "* ]]; then
  for seq in 128 384; do
    at "f16 BERT b1 seq $seq, the plans step by step"
    LIVEFUSE_PROFILE=1 LIVEFUSE_REPORT="$D/bert_f16_s$seq.json" timeout -k 5 90 "$B/tools/bert/livefuse-bert" --random 1 \
      --preset base --dtype f16 --device cuda --seq $seq --iters 100 --warmup-ms 3000 --quiet > "$D/bert_f16_s$seq.log" 2>&1
    python3 tools/gpu/profile_table.py "$D/bert_f16_s$seq.json" | tee "$D/bert_f16_s$seq.table" | head -30
  done
fi
if [[ $parts == *" 6 "* ]]; then
  at "user programs"
  run_users
fi
at done
tar -czf "$REAL_OUT/session52.tgz" -C "$D" . 2>/dev/null
