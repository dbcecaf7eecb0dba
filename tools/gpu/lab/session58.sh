#!/usr/bin/env bash
# Run THERE. Session 58's calls. Parts (S58_PARTS, default "1 2"):
# 1 the served-call suites, the decoder and BERT suites, the user programs in the three modes;
# 2 where a served decode token's host time goes: tools/gpu/spread.sh for GPT-2 f16 and
#   Llama-1B bf16 concat (S58_SPREAD_N processes each, one under LIVEFUSE_PROFILE, one under
#   LIVEFUSE_TRACE read by tools/gpu/trace_host.py: the replays' spans, the calls' own time);
# 3 bench/gpt/compare.py; 4 bench/bert/compare.py (S58_BERT); 5 what the slowest warm-up tokens
#   of Llama-1B's static-cache decode wait on (tools/gpu/warmup.sh with its trace).
# Logs: $OUT/session58.tgz (and spread*.tgz).
. "$(dirname "$0")/../prelude.sh" session58
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
parts=" ${S58_PARTS:-1 2} "
if [[ $parts == *" 1 "* ]]; then
  at "suites"
  SUITE_S=240 run_suites "test_replacement:infer?memo*,*served*,*append*,*cuda*,*early*,*robust*,*family*"
  SUITE_S=200 run_suites "test_decoder test_bert"
  at "user programs"
  run_users | tail -6
  pack_out
fi
if [[ $parts == *" 2 "* ]]; then
  for m in ${S58_SPREAD_MODELS:-gpt2:f16:concat llama-1b:bf16:concat}; do
    at "spread $m"
    SPREAD_TAG=_${m%%:*} SPREAD_MODEL=$m SPREAD_N=${S58_SPREAD_N:-2} SPREAD_OFF=0 SPREAD_PROFILE=${S58_PROFILE:-1} \
      timeout -s KILL 400 bash tools/gpu/spread.sh 2>&1 | tee -a "$D/spread.log"
  done
  pack_out
fi
if [[ $parts == *" 3 "* ]]; then
  at "decoders vs PyTorch"
  gpt_compare
  pack_out
fi
if [[ $parts == *" 4 "* ]]; then
  bert_compares "${S58_BERT-f16:1,8:128}"
fi
if [[ $parts == *" 5 "* ]]; then
  at "warm-up, traced"
  WARM_MODELS=${S58_WARM:-llama-1b:bf16:static} WARM_TRACE=1 WARM_STEPS=64 timeout -s KILL 300 bash tools/gpu/warmup.sh 2>&1 |
    tee "$D/warmup.log" | tail -40
  pack_out
fi
at done
pack_out
