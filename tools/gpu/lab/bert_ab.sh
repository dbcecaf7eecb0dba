#!/usr/bin/env bash
# BERT-base forwards, this build's library against a base library carried beside it as
# .gpu/base.so.xz or .gz (xz or gzip of another tree's liblivefuse.so, loaded first through LD_LIBRARY_PATH),
# alternating processes: ms a forward (livefuse-bert's median). Run THERE after tools/gpu/pack.sh.
# Usage (device tool): bash tools/gpu/lab/bert_ab.sh  [BAB_CONFIGS="f16:1:128 f16:8:128" BAB_ROUNDS=3]
. "$(dirname "$0")/../prelude.sh" lf-bert-ab
base_library "$B/tools/bert/livefuse-bert"
for cfg in ${BAB_CONFIGS:-f16:1:128 f16:8:128}; do
  IFS=: read -r dt batch seq <<< "$cfg"
  for r in $(seq 1 "${BAB_ROUNDS:-3}"); do
    line="$dt b$batch s$seq round $r:"
    order="new base"; [ $((r % 2)) = 0 ] && order="base new"
    for v in $order; do
      envs=(); [ $v = base ] && envs=("$BASE_LD")
      env "${envs[@]}" timeout -k 5 90 "$B/tools/bert/livefuse-bert" --random 1 --preset base --dtype "$dt" \
        --device cuda --batch "$batch" --seq "$seq" --iters 200 --warmup-ms 3000 --quiet \
        --json "$D/bert_${v}_${dt}_${batch}_${seq}_$r.json" > "$D/bert_${v}_$r.log" 2>&1
      ms=$(python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['timing']['median_ms'], 4))" \
        "$D/bert_${v}_${dt}_${batch}_${seq}_$r.json" 2>/dev/null)
      line="$line $v ${ms:-failed}"
    done
    echo "$line"
  done
done | tee "$D/bert_ab.log"
tar -czf "$REAL_OUT/bert_ab.tgz" -C "$D" . 2>/dev/null
