#!/usr/bin/env bash
# Run THERE. Session 56's calls. Parts (S56_PARTS, default "1 2 3"):
# 1 the suites over the decode GEMV (its norm, rotary, fold cases), the decoder suite, the user
#   programs in the three modes; 2 bench/gpt/compare.py (GPT-2 f16, Llama-1B bf16, prompt 32, 256
#   tokens, PyTorch's peers in the same run); 3 bench/bert/compare.py (issue 19's four
#   configurations); 4 decode processes alternating S56_AB_A | S56_AB_B (GPT-2 f16 and Llama-1B
#   bf16, tools/gpu/ab_generate.sh); 5 livefuse-bench-gemv-chain (GPT-2's and Llama's decode
#   GEMVs in a graph: a norm's product paired past a wave -- pdl_early -- against early_nopair /
#   early_pairall). Logs: $OUT/session56.tgz.
. "$(dirname "$0")/../prelude.sh" session56
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
parts=" ${S56_PARTS:-1 2 3} "
if [[ $parts == *" 1 "* ]]; then
  at "suites"
  SUITE_S=200 run_suites "test_planner:*rotary*,gpu*,*fold*,*norm*,*gemv*,*GEMV* test_ops:*gemv*,*GEMV*,*rotary*"
  SUITE_S=200 run_suites "test_decoder"
  at "user programs"
  run_users | tail -6
  pack_out
fi
if [[ $parts == *" 4 "* ]]; then
  for m in ${S56_AB_MODELS:-gpt2:f16 llama-1b:bf16}; do
    IFS=: read -r model dtype <<< "$m"
    at "$model $dtype concat, ${S56_AB_A} | ${S56_AB_B}"
    AB_A="$S56_AB_A" AB_B="$S56_AB_B" MODEL=$model DTYPE=$dtype ROUNDS=${S56_ROUNDS:-2} STEPS=256 RUNS=3 \
      timeout -s KILL ${S56_AB_S:-200} bash tools/gpu/ab_generate.sh 2>&1 | tee -a "$D/ab.log"
  done
  pack_out
fi
if [[ $parts == *" 5 "* ]]; then
  at "GEMV chains"
  timeout -s KILL 200 "$B/bench/livefuse-bench-gemv-chain" --bw "${S56_BW:-3350}" --json "$D/gemv_chain.json" \
    > "$D/gemv_chain.log" 2>&1
  echo "gemv chain rc=$?"
  grep -E "^gpt2\S* +(pdl_early|early_nopair|early_pairall|pdl_early/layers) " "$D/gemv_chain.log"
  grep -E "^llama\S* +(pdl_early|early_nopair) " "$D/gemv_chain.log" | head -12
  pack_out
fi
if [[ $parts == *" 2 "* ]]; then
  at "decoders vs PyTorch"
  gpt_compare
  pack_out
fi
if [[ $parts == *" 3 "* ]]; then
  bert_compares "${S56_BERT-f16:1,8:128 f32:1:128 f16:1:384}"
fi
at done
pack_out
