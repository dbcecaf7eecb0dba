#!/usr/bin/env bash
# Runs THERE, on the GPU machine, from the repo root, after tools/gpu/pack.sh built .gpu/build
# here. Writes everything under $OUT:
#   $OUT/tests/<binary>.log     every test binary of .gpu/build/tests (test_*)
#   $OUT/bench/<name>.json      every benchmark binary (livefuse-bench-*), plus the PyTorch
#                               peer timings (bench/peers/torch_eager.py)
#   $OUT/summary.txt            the summary table printed last
# One failing or hanging binary never stops the rest (each runs under a timeout); the whole
# run stays well under 10 minutes (BUDGET_S, default 480 s, is shared out as it goes).
set -u
cd "$(dirname "$0")/../.."
B=.gpu/build
OUT=${OUT:-$PWD/gpu-out}
BUDGET_S=${BUDGET_S:-480}
mkdir -p "$OUT/tests" "$OUT/bench"
START=$(date +%s)
left() { echo $((BUDGET_S - ($(date +%s) - START))); }
# timeout for the next step: its wish, capped by what is left (minus a reserve for the rest)
cap() {
  local want=$1 reserve=${2:-60} l
  l=$(( $(left) - reserve ))
  [ "$l" -lt 10 ] && l=10
  [ "$want" -lt "$l" ] && echo "$want" || echo "$l"
}

. tools/gpu/env.sh
# Kernel cache outside $OUT: only a few files come back from a run, keep them the useful ones.
export LIVEFUSE_CACHE_DIR="${TMPDIR:-/tmp}/livefuse-kcache-$$"

echo "== GPU"
nvidia-smi -L || echo "run.sh: nvidia-smi failed"
nvidia-smi -L > "$OUT/gpu.txt" 2>&1

echo "== tests"
: > "$OUT/tests/results.tsv"
for t in "$B"/tests/test_*; do
  [ -f "$t" ] && [ -x "$t" ] || continue
  name=$(basename "$t")
  s0=$(date +%s)
  timeout -k 5 "$(cap 240 120)" "$t" --duration=false > "$OUT/tests/$name.log" 2>&1
  rc=$?
  echo -e "$name\t$rc\t$(( $(date +%s) - s0 ))" >> "$OUT/tests/results.tsv"
  echo "$name: rc=$rc ($(( $(date +%s) - s0 )) s) $(grep -E '^\[doctest\] test cases' "$OUT/tests/$name.log" | tail -1)"
done

echo "== benchmarks"
for b in "$B"/bench/livefuse-bench-*; do
  [ -f "$b" ] && [ -x "$b" ] || continue
  name=$(basename "$b")
  s0=$(date +%s)
  # The eager benchmark measures plain eager execution; the others measure fusion at work and
  # keep the environment's mode.
  envs=()
  [ "$name" = livefuse-bench-eager ] && envs=(LIVEFUSE=off)
  env "${envs[@]}" timeout -k 5 "$(cap 150 60)" "$b" --json "$OUT/bench/$name.json" > "$OUT/bench/$name.log" 2>&1
  echo "$name: rc=$? ($(( $(date +%s) - s0 )) s)"
done

echo "== PyTorch peers"
s0=$(date +%s)
timeout -k 5 "$(cap 120 15)" python3 bench/peers/torch_eager.py --json "$OUT/bench/torch_eager.json" \
  > "$OUT/bench/torch_eager.log" 2>&1
echo "torch_eager.py: rc=$? ($(( $(date +%s) - s0 )) s)"

echo "== summary ($(( $(date +%s) - START )) s total)"
python3 tools/gpu/summary.py "$OUT" | tee "$OUT/summary.txt"
# Everything in one archive as well (a few top-level files are what reliably comes back).
tar -czf "$OUT/logs.tgz" -C "$OUT" tests bench 2>/dev/null
rm -rf "$LIVEFUSE_CACHE_DIR"
