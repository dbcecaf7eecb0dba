#!/usr/bin/env bash
# The encoder fuzz's open GPU failure (bench/RESULTS.md, session 39: program 1233 fails only after
# programs 1000-1232 ran in the process), run THERE after tools/gpu/pack.sh: the sequence once or
# more (a failing program is run again by the fuzz itself, as it ran and with one switch off at a
# time: tests/fuzz_util.hpp, diagnose), its reports under $OUT/fr, then the GPU suites.
# Usage (device tool): bash tools/gpu/lab/bert_fuzz_repro.sh
#   [FR_TAG=run FR_RUNS=1 FR_SEEDS="" (LIVEFUSE_FUZZ_BERT_SEEDS) FR_PROGRAMS=234 FR_ENV=""
#    FR_SUITES=1 FR_SANITIZE="" (a compute-sanitizer tool: memcheck, initcheck, racecheck)]
. "$(dirname "$0")/../prelude.sh" lf-fuzz-repro
mkdir -p "$REAL_OUT/fr"
export LIVEFUSE_FUZZ_REPORT_DIR=$REAL_OUT/fr/${FR_TAG:-run}
mkdir -p "$LIVEFUSE_FUZZ_REPORT_DIR"
nvidia-smi -L
for i in $(seq "${FR_RUNS:-1}"); do
  at "bert fuzz run $i: ${FR_SEEDS:-${FR_PROGRAMS:-234} programs from 1000} ${FR_ENV:-}"
  log=$REAL_OUT/fuzz_${FR_TAG:-run}_$i.log
  san=()
  [ -n "${FR_SANITIZE:-}" ] && san=(compute-sanitizer --tool "$FR_SANITIZE" --print-limit 20)
  env ${FR_ENV:-} ${FR_SEEDS:+LIVEFUSE_FUZZ_BERT_SEEDS=$FR_SEEDS} \
    LIVEFUSE_FUZZ_BERT_PROGRAMS=${FR_PROGRAMS:-234} timeout -s KILL "${FR_S:-300}" \
    "${san[@]}" "$B/tests/test_bert" -tc="bert fuzz on the GPU*" > "$log" 2>&1
  echo "rc=$? $(grep 'test cases' "$log")"
  grep -E "MESSAGE|ERROR|CHECK|========= [A-Z]" "$log" | grep -v "logged:" | cut -c1-400 | head -60
done
if [ "${FR_SUITES:-1}" = 1 ]; then
  at "GPU suites"
  run_suites "test_ops test_planner test_bert test_decoder test_replacement test_runtime test_monitor test_inspect"
fi
cp "$D"/*.log "$REAL_OUT/" 2>/dev/null
at done
