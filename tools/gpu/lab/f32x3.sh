#!/usr/bin/env bash
# Run THERE. Session 52: f32 linears on livefuse's tensor-core GEMM at f32's accuracy (three TF32
# products: kernels/cuda/gemm_tc_f32.cuh, LIVEFUSE_GEMM_F32X3). Parts (F3_PARTS, default "1 2 3 4"):
#  1. tools/gpu/lab/f32_emulation.sh: BERT's f32 GEMMs on cuBLASLt (SIMT, BF16x9, TF32) and on
#     the kernel over its tiles and K splits (us in a graph of 20, error against f64, same bits);
#  2. the suites that run it (F3_SUITES), then test_bert with LIVEFUSE_GEMM_F32X3=1;
#  3. livefuse-bert f32 b1 / b8 (and f16 b1, which it must not move), LIVEFUSE_GEMM_F32X3=0 | 1
#     alternating (F3_ROUNDS rounds), then one f32 b1 report with it on: the layer plan;
#  4. bench/bert/compare.py f32 b1 s128 with LIVEFUSE_GEMM_F32X3=1 (HF parity, PyTorch peers).
. "$(dirname "$0")/../prelude.sh" f32x3
parts=" ${F3_PARTS:-1 2 3 4} "
if [[ $parts == *" 1 "* ]]; then
  at "lab: cuBLASLt f32 kinds and the 3xTF32 kernel"
  OUT=$D timeout -k 5 200 bash tools/gpu/lab/f32_emulation.sh 2>&1 | tee "$D/emulation.txt"
fi
if [[ $parts == *" 2 "* ]]; then
  at suites
  run_suites "${F3_SUITES:-test_ops:gemm_tc* test_planner:*gemm*,*BiasAct* test_bert}"
  LIVEFUSE_GEMM_F32X3=1 timeout -s KILL 150 "$B/tests/test_bert" > "$D/test_bert_f32x3.log" 2>&1
  echo "test_bert LIVEFUSE_GEMM_F32X3=1 rc=$? $(grep 'test cases' "$D/test_bert_f32x3.log")"
  grep -B2 -A8 "ERROR" "$D/test_bert_f32x3.log" | head -30
fi
if [[ $parts == *" 3 "* ]]; then
  at "BERT, LIVEFUSE_GEMM_F32X3=0 | 1"
  for cfg in ${F3_BERT:-f32:1 f32:8 f16:1}; do
    IFS=: read -r dt batch <<< "$cfg"
    for r in $(seq 1 "${F3_ROUNDS:-2}"); do
      echo "$dt b$batch round $r: off $(bert_median off_${dt}_${batch}_$r $dt $batch LIVEFUSE_GEMM_F32X3=0) on $(bert_median on_${dt}_${batch}_$r $dt $batch LIVEFUSE_GEMM_F32X3=1)"
    done
  done
  LIVEFUSE_GEMM_F32X3=1 LIVEFUSE_REPORT="$D/bert_f32.report.json" bert_median report_f32 f32 1 >/dev/null
  report_plans "$D/bert_f32.report.json"
  python3 -c "import json,sys; r=json.load(open(sys.argv[1]))
for p in r['plans']:
    if len(p['ops']) >= 10: print(p['id'], p['state'], {k: p[k] for k in ('launches', 'kernels') if k in p})" "$D/bert_f32.report.json" 2>&1 | head -5
fi
if [[ $parts == *" 4 "* ]]; then
  at "BERT vs PyTorch: f32 b1 s128, LIVEFUSE_GEMM_F32X3=1"
  LIVEFUSE_GEMM_F32X3=1 bert_compare f32 1 128
fi
at done
tar -czf "$REAL_OUT/f32x3.tgz" -C "$D" --exclude='*.trace.json' . 2>/dev/null
