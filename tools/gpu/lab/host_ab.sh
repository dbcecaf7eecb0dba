#!/usr/bin/env bash
# One GPU call for a change of the runtime's own host cost (session 37: handles from a per-thread
# list, TLS descriptors), run THERE: the carried build against a base library carried beside it
# as .gpu/base.so.xz or .gz (xz or gzip of another tree's liblivefuse.so; the binaries load it first through
# LD_LIBRARY_PATH, their RUNPATH giving way). Alternating processes: the deferred-call benchmark,
# then GPT-2 f16 and Llama-1B bf16 concat decodes (ms a token and the time it was issued in).
# Logs in $OUT/host_ab.tgz. Usage: bash tools/gpu/lab/host_ab.sh   [HAB_ROUNDS=3 HAB_PARTS="bench gpt2 llama"]
. "$(dirname "$0")/../prelude.sh" lf-host-ab
pack_out() { tar -czf "$REAL_OUT/host_ab.tgz" -C "$D" . 2>/dev/null; }
# The base library must be the one loaded, and load at all (its symbols against today's binaries).
base_library "$B/tools/generate/livefuse-generate"
parts=${HAB_PARTS:-bench gpt2 llama}
rounds=${HAB_ROUNDS:-3}
if [[ $parts == *bench* ]]; then
  at "livefuse-bench-replacement --deferred-only 3000, new | base alternating"
  for r in $(seq 1 "$rounds"); do
    for v in new base; do
      envs=(); [ $v = base ] && envs=("$BASE_LD")
      echo "$v round $r: $(env "${envs[@]}" timeout -k 5 60 "$B/bench/livefuse-bench-replacement" --device cuda \
        --deferred-only 3000 2>&1 | tail -1)"
    done
  done | tee "$D/deferred.log"
fi
for m in gpt2:f16 llama-1b:bf16; do
  name=${m%%:*}; [ "$name" = llama-1b ] && name=llama
  [[ $parts == *$name* ]] || continue
  at "$m concat, new | base alternating"
  AB_A="LIVEFUSE=on" AB_B="$BASE_LD" MODEL=${m%%:*} DTYPE=${m##*:} ROUNDS=$rounds STEPS=256 RUNS=3 \
    timeout -s KILL 330 bash tools/gpu/ab_generate.sh 2>&1 | tee -a "$D/ab.log"
  pack_out
done
pack_out
at "done"
