#!/usr/bin/env bash
# Each kernel of one fused BERT forward, timed alone by Nsight Compute (gpu__time_duration;
# clocks left alone), run THERE after tools/gpu/pack.sh. livefuse-bert --profile-final puts
# the forward after its timing loop (plans serving, graphs replayed) in a profiler range, so
# the warm-up is not profiled. Prints the kernels in launch order and their sum; the raw CSV
# and the table land in $OUT/kernels.tgz.
# Usage (device tool): bash tools/gpu/kernels.sh   [KERNEL_RUNS="f16:1:128 f16:8:128"]
set -u
cd "$(dirname "$0")/../.."
REAL_OUT=${OUT:-$PWD/gpu-out}
D=/tmp/lf-kernels-out
rm -rf "$D"; mkdir -p "$D" "$REAL_OUT"
B=.gpu/build
. tools/gpu/env.sh
export LIVEFUSE_CACHE_DIR=/tmp/lf-kcache
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "kernels.sh: no ncu on this machine"; exit 0; }
for run in ${KERNEL_RUNS-f16:1:128}; do
  IFS=: read -r dtype batch seq <<< "$run"
  name="bert_${dtype}_b${batch}_s${seq}"
  timeout -k 5 240 "$NCU" --clock-control none --profile-from-start off --metrics gpu__time_duration.sum \
    --csv --print-units base "$B/tools/bert/livefuse-bert" --random 1 --preset base --dtype "$dtype" \
    --batch "$batch" --seq "$seq" --device cuda --iters 50 --warmup-ms 3000 --quiet --profile-final \
    > "$D/$name.csv" 2> "$D/$name.log"
  echo "== $name rc=$?"
  python3 tools/gpu/kernel_table.py "$D/$name.csv" | tee "$D/$name.table" | head -${KERNEL_LINES:-60}
done
tar -czf "$REAL_OUT/kernels.tgz" -C "$D" . 2>/dev/null
