#!/usr/bin/env bash
# Run THERE. Session 57's calls. Parts (S57_PARTS, default "1 2"):
# 1 the suites the memo of a window's calls passes through (runtime/infer_memo.hpp: every served
#   call), the decode GEMV suites, the decoder suite, the user programs in the three modes;
# 2 LIVEFUSE_INFER_MEMO=1 | 0 alternating: the host time of a deferred call
#   (livefuse-bench-replacement --deferred-only, CPU and CUDA), then decode processes (GPT-2 f16
#   and Llama-1B bf16, tools/gpu/ab_generate.sh: ms a token and the step's host issue time);
# 3 bench/gpt/compare.py (GPT-2 f16, Llama-1B bf16, prompt 32, 256 tokens, PyTorch's peers in the
#   same run); 4 bench/bert/compare.py (issue 19's configurations, S57_BERT).
# Logs: $OUT/session57.tgz.
. "$(dirname "$0")/../prelude.sh" session57
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
parts=" ${S57_PARTS:-1 2} "
if [[ $parts == *" 1 "* ]]; then
  at "suites"
  SUITE_S=240 run_suites "test_replacement:infer?memo*,*served*,*append*,*cuda*,*early*,*robust*"
  SUITE_S=200 run_suites "test_planner:*rotary*,gpu*,*fold*,*norm*,*gemv*,*GEMV* test_ops:*gemv*,*GEMV*,*rotary*"
  SUITE_S=200 run_suites "test_decoder test_bert"
  at "user programs"
  run_users | tail -6
  pack_out
fi
if [[ $parts == *" 2 "* ]]; then
  at "an op call's host cost, LIVEFUSE_INFER_MEMO=1 | 0 alternating (livefuse-bench-replacement --deferred-only)"
  for r in 1 2 3; do
    for v in 1 0; do
      for dev in cpu cuda; do
        echo "memo=$v $dev $(LIVEFUSE_INFER_MEMO=$v timeout -s KILL 60 "$B/bench/livefuse-bench-replacement" --device $dev \
          --deferred-only 3000 2>&1 | grep -E 'deferred_host' | head -1)" | tee -a "$D/deferred.log"
      done
    done
  done
  for m in ${S57_AB_MODELS:-gpt2:f16 llama-1b:bf16}; do
    IFS=: read -r model dtype <<< "$m"
    at "$model $dtype concat, LIVEFUSE_INFER_MEMO=1 | 0"
    AB_A=LIVEFUSE_INFER_MEMO=1 AB_B=LIVEFUSE_INFER_MEMO=0 MODEL=$model DTYPE=$dtype ROUNDS=${S57_ROUNDS:-3} \
      STEPS=256 RUNS=3 timeout -s KILL ${S57_AB_S:-240} bash tools/gpu/ab_generate.sh 2>&1 | tee -a "$D/ab.log"
  done
  pack_out
fi
if [[ $parts == *" 3 "* ]]; then
  at "decoders vs PyTorch"
  gpt_compare
  pack_out
fi
if [[ $parts == *" 4 "* ]]; then
  bert_compares "${S57_BERT-f16:1,8:128 f32:1:128 f16:1:384}"
fi
at done
pack_out
