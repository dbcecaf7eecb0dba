#!/usr/bin/env bash
# Run THERE. Session 50: f32 prefill attention on a kernel of its own (kernels/cuda/attention_f32.cu;
# f32 BERT left its attention unfused: the general kernel lost to the GEMMs and the softmax), the
# decode kernels' fold weight back on the one MUFU instruction (attention_fold.cuh), and 12-warp
# streaming blocks where 8-warp ones overfill one wave of the SMs (attention_decode_stream.cu).
# The base library carried as .gpu/base.so.xz is the tree before both.
# Parts (FA_PARTS, default "1 2 3"):
#  1. the suites that run the kernels (FA_SUITES);
#  2. livefuse-bench-attention (the prefill kernels: f32 cases on the new kernel, 1 / 2 / 4 rows a
#     warp forced, against the general one);
#  6. livefuse-bench-attention-decode with this build, its streaming kernel's blocks forced to 8,
#     12 and 16 warps (Llama's cases), and the base library;
#  3. BERT-base forwards, base library | this build alternating (lab/bert_ab.sh; FA_BERT configs,
#     FA_ROUNDS rounds), then one f32 b1 forward's report: the layer plan's sampled time;
#  4. bench/bert/compare.py for FA_COMPARE (PyTorch peers in the same run);
#  5. decode: Llama-1B bf16 concat processes base | new at prompts 128 and 4096 (the sweep's ends,
#     64 tokens x 3 runs), FA_ROUNDS rounds;
#  7. the f32 BERT layer plan step by step (LIVEFUSE_PROFILE=1, tools/gpu/profile_table.py).
. "$(dirname "$0")/../prelude.sh" f32_attention
parts=" ${FA_PARTS:-1 2 3} "
if [[ $parts == *" 1 "* ]]; then
  at suites
  run_suites "${FA_SUITES:-test_planner:*attention* test_ops:*pdl*,*attention* test_bert}"
fi
if [[ $parts == *" 3 "* || $parts == *" 5 "* || $parts == *" 6 "* ]]; then base_library "$B/tools/bert/livefuse-bert"; fi
if [[ $parts == *" 2 "* ]]; then
  at "prefill attention kernels"
  timeout -k 5 120 "$B/bench/livefuse-bench-attention" --json "$D/attention_kernel.json" > "$D/attention_kernel.log" 2>&1
  echo "bench rc=$?"; grep -E "kernel|f32|PASS|FAIL" "$D/attention_kernel.log" | head -40
fi
if [[ $parts == *" 6 "* ]]; then
  at "decode attention kernels, new then base"
  attention_bench
  for w in 8 12 16; do BENCH_NAME=attention_decode_w$w attention_bench --stream-warps $w --case "llama-gqa"; done
  BENCH_NAME=attention_decode_base BENCH_ENV="$BASE_LD" attention_bench
fi
if [[ $parts == *" 3 "* ]]; then
  at "BERT base | new"
  BAB_ROUNDS=${FA_ROUNDS:-2} BAB_CONFIGS=${FA_BERT:-"f32:1:128 f32:8:128 f16:1:128"} timeout -s KILL 240 \
    bash tools/gpu/lab/bert_ab.sh 2>&1 | grep round
  LIVEFUSE_REPORT="$D/bert_f32.report.json" timeout -k 5 90 "$B/tools/bert/livefuse-bert" --random 1 --preset base \
    --dtype f32 --device cuda --batch 1 --seq 128 --iters 100 --warmup-ms 3000 --quiet > "$D/bert_f32.log" 2>&1
  report_plans "$D/bert_f32.report.json" cuda.attention
fi
if [[ $parts == *" 4 "* ]]; then
  for cfg in ${FA_COMPARE:-f32:1:128}; do
    IFS=: read -r dt batch seq <<< "$cfg"
    at "BERT vs PyTorch: $dt batch $batch seq $seq"
    bert_compare "$dt" "$batch" "$seq"
  done
fi
if [[ $parts == *" 5 "* ]]; then
  at "Llama-1B decode base | new"
  for len in ${FA_LENS:-128 4096}; do
    for round in $(seq 1 "${FA_ROUNDS:-2}"); do
      line="llama prompt $len round $round:"
      for lib in base new; do
        ld=""; [ $lib = base ] && ld="$BASE_LD"
        env $ld timeout -s KILL 150 "$B/tools/generate/livefuse-generate" --random 1 --preset llama-1b --dtype bf16 \
          --device cuda --cache concat --prompt-len "$len" --steps 64 --runs 3 --quiet \
          --json "$D/llama_${len}_${lib}_$round.json" > "$D/llama_${len}_${lib}_$round.log" 2>&1
        line="$line $lib $(python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['step_median_ms'], 4))" \
          "$D/llama_${len}_${lib}_$round.json" 2>/dev/null || echo failed)"
      done
      echo "$line"
    done
  done
fi
if [[ $parts == *" 7 "* ]]; then
  at "the f32 layer plan step by step (LIVEFUSE_PROFILE=1, f32 b1 s128)"
  LIVEFUSE_PROFILE=1 LIVEFUSE_REPORT="$D/bert_f32_profile.json" timeout -k 5 90 "$B/tools/bert/livefuse-bert" \
    --random 1 --preset base --dtype f32 --device cuda --iters 100 --warmup-ms 3000 --quiet > "$D/bert_f32_profile.log" 2>&1
  python3 tools/gpu/profile_table.py "$D/bert_f32_profile.json" | tee "$D/bert_f32_profile.table" | head -30
fi
at done
tar -czf "$REAL_OUT/f32_attention.tgz" -C "$D" . 2>/dev/null
