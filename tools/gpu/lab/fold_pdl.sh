#!/usr/bin/env bash
# Run THERE. Session 49: the decode kernels' folds as one (kernels/cuda/attention_fold.cuh: every
# split's max, sum and column asked for at once, one arrival a block -- the FMA kernel's cluster
# and workspace folds took them split by split), the streaming kernel's 16-warp blocks
# (512-key splits: past 4096 keys a Llama head's 17 eight-warp splits overfill 132 SMs), and PDL
# for generated kernels and the prefill attention (BERT's layer had no PDL launch at all).
# Parts (FW_PARTS, default "1 2 3"):
#  1. the suites that run the kernels (FW_SUITES);
#  2. livefuse-bench-attention-decode with this build, with its 16-warp blocks, and with the base
#     library carried as .gpu/base.so.xz (the tree before the fold) -- same machine;
#  3. GPT-2 f16 and Llama-1B bf16 concat decode processes, base library | this build alternating
#     (FW_ROUNDS rounds, 256 tokens x 3 runs);
#  4. BERT-base forwards, base library | this build alternating (lab/bert_ab.sh; BAB_CONFIGS,
#     BAB_ROUNDS), then this build with LIVEFUSE_PDL=0 | 1 at f16 b1 s128 (FW_ROUNDS rounds);
#  5. the user programs (tools/gpu/users.sh: fusion on, off and unsampled).
. "$(dirname "$0")/../prelude.sh" fold_pdl
parts=" ${FW_PARTS:-1 2 3} "
if [[ $parts == *" 1 "* ]]; then
  run_suites "${FW_SUITES:-test_planner:*attention*,*decode*,*family* test_ops:*pdl* test_decoder}"
fi
if [[ $parts == *" 2 "* || $parts == *" 3 "* ]]; then base_library "$B/tools/bert/livefuse-bert"; fi
if [[ $parts == *" 2 "* ]]; then
  attention_bench
  BENCH_NAME=attention_decode_w16 attention_bench --stream-warps 16 --case "llama-gqa"
  BENCH_NAME=attention_decode_base BENCH_ENV="$BASE_LD" attention_bench
fi
if [[ $parts == *" 3 "* ]]; then
  for m in gpt2:f16 llama-1b:bf16; do
    for round in $(seq 1 "${FW_ROUNDS:-2}"); do
      for lib in base new; do
        ld=""; [ $lib = base ] && ld="$BASE_LD"
        env $ld timeout -s KILL 120 "$B/tools/generate/livefuse-generate" --random 1 --preset "${m%%:*}" \
          --dtype "${m##*:}" --device cuda --cache concat --prompt-len 32 --steps 256 --runs 3 --quiet \
          --json "$D/gen_${m%%:*}_${lib}_$round.json" > "$D/gen_${m%%:*}_${lib}_$round.log" 2>&1
        python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], 'ms/token', round(d['step_median_ms'], 4), 'served', d.get('served_calls'))" \
          "$D/gen_${m%%:*}_${lib}_$round.json" "$m $lib round $round" 2>&1 | tail -1
      done
    done
  done
fi
if [[ $parts == *" 4 "* ]]; then
  BAB_ROUNDS=${BAB_ROUNDS:-2} BAB_CONFIGS=${BAB_CONFIGS:-"f16:1:128 f16:1:384 f16:8:128"} timeout -s KILL 200 \
    bash tools/gpu/lab/bert_ab.sh 2>&1 | grep round
  for round in $(seq 1 "${FW_ROUNDS:-2}"); do
    line="f16 b1 s128 round $round:"
    for pdl in 0 1; do
      LIVEFUSE_PDL=$pdl timeout -k 5 90 "$B/tools/bert/livefuse-bert" --random 1 --preset base --dtype f16 \
        --device cuda --batch 1 --seq 128 --iters 200 --warmup-ms 3000 --quiet --json "$D/bert_pdl${pdl}_$round.json" \
        > "$D/bert_pdl${pdl}_$round.log" 2>&1
      line="$line PDL=$pdl $(python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['timing']['median_ms'], 4))" \
        "$D/bert_pdl${pdl}_$round.json" 2>/dev/null || echo failed)"
    done
    echo "$line"
  done
fi
if [[ $parts == *" 5 "* ]]; then
  RUNS=1 EXIT_RUNS=2 timeout -s KILL 200 bash tools/gpu/users.sh "$B" "$D"
  echo "users: $(grep -c ' rc=0 0 failures' "$D/users.log") of $(grep -c ' run ' "$D/users.log") runs passed"
  grep ' run ' "$D/users.log" | grep -v ' rc=0 0 failures' | head
fi
cp "$D"/*.log "$D"/*.json "$REAL_OUT"/ 2>/dev/null || true
