#!/usr/bin/env bash
# Run THERE. Session 53's call after the GEMM lab (tools/gpu/lab/gemm_epilogue.sh): (1) the suites
# that run livefuse's tensor-core GEMM -- now launched with PDL, its first weight tiles loaded
# before the wait inside a plan, K split only where K is long -- and test_bert with and without
# the switch;
# (2) BERT-base f16 b1 / b8 and f32 b1 (LIVEFUSE_GEMM_F32X3) with the switches 0 | 1, processes
# alternating; (3) the user programs in the three modes. Logs: $OUT/session53.tgz.
. "$(dirname "$0")/../prelude.sh" session53
parts=" ${S53_PARTS:-1 2 3} "
if [[ $parts == *" 1 "* ]]; then
  at "suites"
  SUITE_S=150 run_suites "test_ops:gemm_tc*,*split* test_planner:*gemm*,*sibling*,*BiasAct*,*split* test_bert"
  LIVEFUSE_GEMM_TC=1 SUITE_S=150 run_suites "test_bert"
fi
if [[ $parts == *" 2 "* ]]; then
  for round in 1 2; do
    at "BERT-base f16 b1, LIVEFUSE_GEMM_TC=0 | 1, round $round"
    echo "off $(bert_median f16b1_off_$round f16 1 LIVEFUSE_GEMM_TC=0)  on $(bert_median f16b1_on_$round f16 1 LIVEFUSE_GEMM_TC=1)"
  done
  at "BERT-base f16 b8, LIVEFUSE_GEMM_TC=0 | 1"
  echo "off $(bert_median f16b8_off f16 8 LIVEFUSE_GEMM_TC=0)  on $(bert_median f16b8_on f16 8 LIVEFUSE_GEMM_TC=1)"
  at "BERT-base f32 b1, LIVEFUSE_GEMM_F32X3=0 | 1"
  echo "off $(bert_median f32b1_off f32 1 LIVEFUSE_GEMM_F32X3=0)  on $(bert_median f32b1_on f32 1 LIVEFUSE_GEMM_F32X3=1)"
  for f in "$D"/f16b1_on_1.json; do
    python3 - "$f" <<'PY' 2>/dev/null
import json, sys
r = json.load(open(sys.argv[1]))
c = r.get("counters", {})
print("counters:", {k: v for k, v in c.items() if "gemv" in k or "gemm" in k})
PY
  done
fi
if [[ $parts == *" 3 "* ]]; then
  at "user programs"
  USERS_S=150 run_users
fi
at done
tar -czf "$REAL_OUT/session53.tgz" -C "$D" . 2>/dev/null
