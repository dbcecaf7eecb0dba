#!/usr/bin/env bash
# Each kernel of one fused BERT forward, timed alone by Nsight Compute (gpu__time_duration;
# clocks left alone), run THERE after tools/gpu/pack.sh. livefuse-bert --profile-final puts
# the forward after its timing loop (plans serving, graphs replayed) in a profiler range, so
# the warm-up is not profiled. Prints the kernels in launch order and their sum; the raw CSV
# and the table land in $OUT/kernels.tgz.
# Also a decoder's kernels: one more generation of 2 tokens after its timed runs (prefill
# included; DECODE_LAST=N shows only the last N kernels).
# Usage (device tool): bash tools/gpu/kernels.sh   [KERNEL_RUNS="bert:f16:1:128 bert:f16:8:128
#   gpt2:f16:concat llama-1b:bf16:static:4096" KERNEL_LINES=60 DECODE_LAST=0
#   KERNEL_NCU_ARGS="--cache-control none" (warm caches, as inside the plan's graph; times under
#   "--graph-profiling graph" read 140-370 us for a ~38 us layer replay in session 45: not a measure)]
. "$(dirname "$0")/prelude.sh" lf-kernels-out
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "kernels.sh: no ncu on this machine"; exit 0; }
for run in ${KERNEL_RUNS-bert:f16:1:128 gpt2:f16:concat}; do
  IFS=: read -r model dtype a b <<< "$run"
  name="${model}_${dtype}_${a}_${b:-}"
  if [ "$model" = bert ]; then
    cmd=("$B/tools/bert/livefuse-bert" --random 1 --preset base --dtype "$dtype" --batch "$a" --seq "$b"
         --device cuda --iters 50 --warmup-ms 3000 --quiet --profile-final)
    last=0
  else  # a decoder preset (gpt2, llama-1b); a = the cache, b = the prompt's length (32); the
        # last step's kernels: DECODE_LAST
    cmd=("$B/tools/generate/livefuse-generate" --random 1 --preset "$model" --dtype "$dtype" --device cuda
         --cache "$a" --prompt-len "${b:-32}" --steps 128 --runs 3 --quiet --profile-final 2)
    last=${DECODE_LAST:-0}
  fi
  timeout -k 5 240 "$NCU" --clock-control none --profile-from-start off --metrics gpu__time_duration.sum ${KERNEL_NCU_ARGS:-} \
    --csv --print-units base "${cmd[@]}" > "$D/$name.csv" 2> "$D/$name.log"
  echo "== $name rc=$?"
  python3 tools/gpu/kernel_table.py "$D/$name.csv" > "$D/$name.table"
  if [ "$last" -gt 0 ]; then  # the last kernels, then the whole range grouped by kernel
    python3 tools/gpu/kernel_table.py "$D/$name.csv" --last "$last" > "$D/$name.last"
    head -${KERNEL_LINES:-60} "$D/$name.last"
    sed -n '/^count/,$p' "$D/$name.table" | head -25
  else
    head -${KERNEL_LINES:-60} "$D/$name.table"
  fi
done
tar -czf "$REAL_OUT/kernels.tgz" -C "$D" . 2>/dev/null
