#!/usr/bin/env bash
# Run THERE. Session 55's call: the rotary of q and k inside the one-row Q/K/V GEMV
# (planner/rotary_epilogue.cpp, LIVEFUSE_GEMV_ROTARY). (1) the suites that run it -- the GEMV's
# own cases, the rotary's, the planner's GEMV / norm cases, the decoder suite (Llama's tokens
# against fusion off, the decode fuzz); (2) Llama-1B bf16 decode processes alternating
# LIVEFUSE_GEMV_ROTARY=1 | 0, then the same with the norm chain folded too (LIVEFUSE_GEMV_NORM=2:
# norm, product and rotary in one GEMV); (3) GPT-2 (no rotary: unchanged) as a control.
# Logs: $OUT/session55.tgz.
. "$(dirname "$0")/../prelude.sh" session55
parts=" ${S55_PARTS:-1 2 3} "
if [[ $parts == *" 0 "* ]]; then  # the rotary suites alone
  at "suites"
  SUITE_S=150 run_suites "test_planner:*rotary*"
fi
if [[ $parts == *" 4 "* ]]; then  # Llama-1B bf16: the norm chain folded too (2) against the default (1), both rotating
  at "Llama-1B bf16 concat, LIVEFUSE_GEMV_NORM=2 | 1, rotary in the GEMV"
  AB_A="LIVEFUSE_GEMV_NORM=2" AB_B="LIVEFUSE_GEMV_NORM=1" MODEL=llama-1b DTYPE=bf16 ROUNDS=2 STEPS=256 RUNS=3 \
    timeout -s KILL 200 bash tools/gpu/ab_generate.sh 2>&1 | tee -a "$D/ab.log"
fi
if [[ $parts == *" 1 "* ]]; then
  at "suites"
  SUITE_S=200 run_suites "test_planner:*rotary*,gpu*,*fold*,*norm*,*gemv*,*GEMV* test_ops:*gemv*,*GEMV*"
  SUITE_S=200 run_suites "test_decoder"
  LIVEFUSE_GEMV_NORM=2 SUITE_S=200 run_suites "test_decoder"
fi
if [[ $parts == *" 2 "* ]]; then
  at "Llama-1B bf16 concat, LIVEFUSE_GEMV_ROTARY=1 | 0"
  AB_A="LIVEFUSE_GEMV_ROTARY=1" AB_B="LIVEFUSE_GEMV_ROTARY=0" MODEL=llama-1b DTYPE=bf16 ROUNDS=${S55_ROUNDS:-3} STEPS=256 RUNS=3 \
    timeout -s KILL 300 bash tools/gpu/ab_generate.sh 2>&1 | tee -a "$D/ab.log"
  at "Llama-1B bf16 concat, LIVEFUSE_GEMV_NORM=2 with LIVEFUSE_GEMV_ROTARY=1 | 0"
  AB_A="LIVEFUSE_GEMV_NORM=2 LIVEFUSE_GEMV_ROTARY=1" AB_B="LIVEFUSE_GEMV_NORM=2 LIVEFUSE_GEMV_ROTARY=0" MODEL=llama-1b \
    DTYPE=bf16 ROUNDS=2 STEPS=256 RUNS=3 timeout -s KILL 200 bash tools/gpu/ab_generate.sh 2>&1 | tee -a "$D/ab.log"
fi
if [[ $parts == *" 3 "* ]]; then
  at "GPT-2 f16 concat (control: no rotary), LIVEFUSE_GEMV_ROTARY=1 | 0"
  AB_A="LIVEFUSE_GEMV_ROTARY=1" AB_B="LIVEFUSE_GEMV_ROTARY=0" MODEL=gpt2 DTYPE=f16 ROUNDS=2 STEPS=256 RUNS=3 \
    timeout -s KILL 150 bash tools/gpu/ab_generate.sh 2>&1 | tee -a "$D/ab.log"
fi
at done
tar -czf "$REAL_OUT/session55.tgz" -C "$D" . 2>/dev/null
