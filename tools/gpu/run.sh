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

export LD_LIBRARY_PATH="$PWD/$B/lib:$PWD/$B${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# CUDA libraries the loader cannot find (no system toolkit): take them from pip's nvidia
# packages (what PyTorch itself uses).
missing=$(ldd "$B/liblivefuse.so" 2>/dev/null | awk '/not found/ { print $1 }' | sort -u)
if [ -n "$missing" ]; then
  echo "run.sh: not found by the loader: $(echo $missing)"
  extra=$(python3 - $missing <<'PY' 2>/dev/null
import os, sys
roots = []
try:
    import nvidia.cublas as c
    roots += [os.path.join(p, "lib") for p in c.__path__]
except Exception:
    pass
try:
    import nvidia
    roots += list(nvidia.__path__)
except Exception:
    pass
dirs = []
for want in sys.argv[1:]:
    for root in roots:
        hit = None
        for d, _, files in os.walk(root):
            if want in files:
                hit = d
                break
        if hit:
            if hit not in dirs:
                dirs.append(hit)
            break
print(":".join(dirs))
PY
)
  if [ -n "$extra" ]; then
    export LD_LIBRARY_PATH="$extra:$LD_LIBRARY_PATH"
    echo "run.sh: added pip CUDA library dirs: $extra"
  fi
  still=$(ldd "$B/liblivefuse.so" 2>/dev/null | awk '/not found/ { print $1 }' | sort -u)
  [ -n "$still" ] && echo "run.sh: WARNING still missing: $(echo $still)"
fi
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
