#!/usr/bin/env bash
# Run THERE. Session 51: f32 BERT's GEMMs (SIMT, 128 rows) -- f32 sibling linears of one width as
# one wide GEMM and the split (planner/strategy_gemm.cpp), and what the GEMM tuning can find for
# them. Calls 1-2 also timed tile and split-K variants of the heuristic's algorithms in the tuning
# (no gain: reverted; bench/RESULTS.md session 51). The base library carried as
# .gpu/base.so.xz is the tree before.
# Parts (GS_PARTS, default "1 2 3"):
#  1. the suites that tune and run GEMMs (GS_SUITES);
#  2. livefuse-bench-gemm-tune --dtype f32, then f16: top-1 | tuned, cuBLASLt's K splits;
#  3. BERT-base forwards with LIVEFUSE_GEMM_TUNE=GS_TUNE (0), base | new alternating
#     (lab/bert_ab.sh; GS_BERT configs, GS_ROUNDS rounds);
#  6. this build with LIVEFUSE_GEMM_TUNE=0 | 1 alternating (GS_TUNE_BERT: f32 b1, b8), then one
#     f32 b1 report with tuning: its counters and the layer plan;
#  4. bench/bert/compare.py for GS_COMPARE (PyTorch peers in the same run; LIVEFUSE_GEMM_TUNE=GS_TUNE);
#  5. the f32 BERT layer plan step by step (LIVEFUSE_PROFILE=1, profile_table.py; LIVEFUSE_GEMM_TUNE=GS_TUNE);
#  7. the user programs in the three modes (tools/gpu/users.sh, RUNS=1, EXIT_RUNS=2).
. "$(dirname "$0")/../prelude.sh" gemm_splits
parts=" ${GS_PARTS:-1 2 3} "
if [[ $parts == *" 1 "* ]]; then
  at suites
  run_suites "${GS_SUITES:-test_planner:*gemm* test_bert test_replacement:*gemm*,*linear*}"
fi
if [[ $parts == *" 2 "* ]]; then
  for dt in f32 f16; do
    at "gemm tune bench $dt"
    timeout -k 5 150 "$B/bench/livefuse-bench-gemm-tune" --dtype $dt --json "$D/gemm_tune_$dt.json" > "$D/gemm_tune_$dt.log" 2>&1
    echo "bench rc=$?"; head -22 "$D/gemm_tune_$dt.log"
  done
fi
if [[ $parts == *" 3 "* ]]; then
  base_library "$B/tools/bert/livefuse-bert"
  at "BERT, LIVEFUSE_GEMM_TUNE=${GS_TUNE:-0}: base | new"
  LIVEFUSE_GEMM_TUNE=${GS_TUNE:-0} BAB_ROUNDS=${GS_ROUNDS:-2} BAB_CONFIGS=${GS_BERT:-"f32:1:128 f32:8:128 f16:1:128"} \
    timeout -s KILL 300 bash tools/gpu/lab/bert_ab.sh 2>&1 | grep round
fi
if [[ $parts == *" 6 "* ]]; then
  at "BERT, this build, LIVEFUSE_GEMM_TUNE=0 | 1"
  for cfg in ${GS_TUNE_BERT:-f32:1 f32:8}; do
    IFS=: read -r dt batch <<< "$cfg"
    for r in 1 2; do
      echo "$dt b$batch round $r: tune0 $(bert_median t0_${dt}_${batch}_$r $dt $batch LIVEFUSE_GEMM_TUNE=0) tune1 $(bert_median t1_${dt}_${batch}_$r $dt $batch LIVEFUSE_GEMM_TUNE=1)"
    done
  done
  LIVEFUSE_GEMM_TUNE=1 LIVEFUSE_REPORT="$D/bert_f32.report.json" bert_median report_f32 f32 1 >/dev/null
  report_plans "$D/bert_f32.report.json" gemm_tuning
fi
if [[ $parts == *" 4 "* ]]; then
  for cfg in ${GS_COMPARE:-f32:1:128}; do
    IFS=: read -r dt batch seq <<< "$cfg"
    at "BERT vs PyTorch: $dt batch $batch seq $seq, LIVEFUSE_GEMM_TUNE=${GS_TUNE:-0}"
    LIVEFUSE_GEMM_TUNE=${GS_TUNE:-0} bert_compare "$dt" "$batch" "$seq"
  done
fi
if [[ $parts == *" 5 "* ]]; then
  at "the f32 layer plan step by step (LIVEFUSE_PROFILE=1, f32 b1 s128)"
  LIVEFUSE_GEMM_TUNE=${GS_TUNE:-0} LIVEFUSE_PROFILE=1 LIVEFUSE_REPORT="$D/bert_f32_profile.json" timeout -k 5 90 "$B/tools/bert/livefuse-bert" \
    --random 1 --preset base --dtype f32 --device cuda --iters 100 --warmup-ms 3000 --quiet > "$D/bert_f32_profile.log" 2>&1
  python3 tools/gpu/profile_table.py "$D/bert_f32_profile.json" | tee "$D/bert_f32_profile.table" | head -30
fi
if [[ $parts == *" 7 "* ]]; then
  at "user programs"
  run_users
fi
at done
tar -czf "$REAL_OUT/gemm_splits.tgz" -C "$D" . 2>/dev/null
