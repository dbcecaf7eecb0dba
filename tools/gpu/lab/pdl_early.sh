#!/usr/bin/env bash
# Run THERE. PDL with each plan GEMV's first weights loaded before its wait (planner/plan.cpp,
# weights_early): the suites under LIVEFUSE_PDL=1, then decode processes alternating
# LIVEFUSE_PDL=1 | 0 (tools/gpu/ab_generate.sh: each process's tokens checked against the
# first's). PE_SUITES: run_suites' list; PE_ROUNDS: rounds of the A/B (2).
. "$(dirname "$0")/../prelude.sh" pdl_early
LIVEFUSE_PDL=1 run_suites "${PE_SUITES:-test_ops test_decoder test_planner:*gemv*,*GEMV*,*family*,*decode*}"
setting_ab LIVEFUSE_PDL "${PE_ROUNDS:-2}"
cp "$D"/*.log "$REAL_OUT"/ 2>/dev/null || true
