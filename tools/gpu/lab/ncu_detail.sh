#!/usr/bin/env bash
# Nsight Compute's full sections for chosen kernels of one fused BERT forward or decode step
# (after the timing loop: plans serving, graphs replayed): throughput, occupancy, warp stalls,
# memory. Run THERE after tools/gpu/pack.sh. Logs in $OUT/ncu_detail.tgz.
# Usage (device tool): bash tools/gpu/lab/ncu_detail.sh  [ND_KERNELS="attention_mma vcache"
#   (regexes of kernel names; the first launch of each in the profiled range)
#   ND_RUN="bert:f16:1:128" (or a decoder: "gpt2:f16:concat") ND_SET=full
#   ND_SOURCE=1: also the SASS lines with the most warp samples and the stall reasons,
#   tools/gpu/lab/sass_stalls.py)]
. "$(dirname "$0")/../prelude.sh" lf-ncu-detail
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "ncu_detail.sh: no ncu on this machine"; exit 0; }
IFS=: read -r model dtype a b <<< "${ND_RUN:-bert:f16:1:128}"
if [ "$model" = bert ]; then
  cmd=("$B/tools/bert/livefuse-bert" --random 1 --preset base --dtype "$dtype" --batch "$a" --seq "$b"
       --device cuda --iters 50 --warmup-ms 3000 --quiet --profile-final)
else
  cmd=("$B/tools/generate/livefuse-generate" --random 1 --preset "$model" --dtype "$dtype" --device cuda
       --cache "$a" --prompt-len "${b:-32}" --steps 128 --runs 3 --quiet --profile-final 2)
fi
for k in ${ND_KERNELS:-attention_mma vcache}; do
  timeout -k 5 200 "$NCU" --clock-control none --profile-from-start off --cache-control none \
    --set "${ND_SET:-full}" -k "regex:$k" -s "${ND_SKIP:-0}" -c 1 --page details --print-units base \
    "${cmd[@]}" > "$D/$k.txt" 2>&1
  echo "== $k rc=$?"
  grep -E '^  [a-z].*\(|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issued Ipc|DRAM Throughput|L2 Hit|Warp Cycles Per Issued|Static Shared|Dynamic Shared|Executed Instructions  |SM Active Cycles|Elapsed Cycles' "$D/$k.txt" | head -20
  if [ "${ND_SOURCE:-0}" = 1 ]; then
    timeout -k 5 200 "$NCU" --clock-control none --profile-from-start off --cache-control none \
      --section SourceCounters --section WarpStateStats -k "regex:$k" -s "${ND_SKIP:-0}" -c 1 \
      --page source --print-source sass --csv "${cmd[@]}" > "$D/$k.sass.csv" 2> "$D/$k.sass.log"
    python3 tools/gpu/lab/sass_stalls.py "$D/$k.sass.csv" "${ND_TOP:-40}"
    timeout -k 5 200 "$NCU" --clock-control none --profile-from-start off --cache-control none \
      --section WarpStateStats -k "regex:$k" -s "${ND_SKIP:-0}" -c 1 --page raw --print-units base \
      "${cmd[@]}" 2>&1 | grep -E 'smsp__average_warps_issue_stalled_[a-z_]+_per_issue_active.ratio' \
      | sort -k3 -g -r | head -12
  fi
done
tar -czf "$REAL_OUT/ncu_detail.tgz" -C "$D" . 2>/dev/null
