# Sourced first by the GPU scripts (run THERE): `. "$(dirname "$0")/prelude.sh" [NAME]`.
# Goes to the repo root, sets B (the carried build), the library path (env.sh) and the kernel
# cache; with NAME, also a fresh results folder D=/tmp/NAME and REAL_OUT (the device tool's
# $OUT, where the scripts put their archive).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
B=.gpu/build
. tools/gpu/env.sh
export LIVEFUSE_CACHE_DIR=/tmp/lf-kcache PYTHONUNBUFFERED=1
# One GPT-2 small f16 decode process as issue 20 measures it (random weights, prompt 32, 256 new
# tokens, 4 runs); the caller adds --cache and --json.
GPT2_DECODE=("$B/tools/generate/livefuse-generate" --random 1 --preset gpt2 --dtype f16 --device cuda
             --prompt-len 32 --steps 256 --runs 4 --quiet)
if [ -n "${1:-}" ]; then
  REAL_OUT=${OUT:-$PWD/gpu-out}
  D=/tmp/$1
  rm -rf "$D"; mkdir -p "$D" "$REAL_OUT"
fi
# run_suites "test_x[:filter] ...": each test binary (with a doctest -tc filter) under a
# SUITE_S (150 s) limit, its log in $D/<binary>.log, its case counts and first errors printed.
run_suites() {
  local s t filter
  for s in $1; do
    IFS=: read -r t filter <<< "$s"
    timeout -s KILL "${SUITE_S:-150}" "$B/tests/$t" ${filter:+-tc="$filter"} > "$D/$t.log" 2>&1
    echo "$t ${filter:+$filter }rc=$? $(grep 'test cases' "$D/$t.log")"
    grep -B2 -A8 "ERROR" "$D/$t.log" | head -30
  done
}
