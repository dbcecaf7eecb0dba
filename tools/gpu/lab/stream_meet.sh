#!/usr/bin/env bash
# Run THERE. Where the streaming decode attention's splits meet (kernels/cuda/
# attention_decode_stream.cu, its note): in a thread-block cluster (distributed shared memory)
# against the stream's workspace, whose fold now asks for every split's max, sum and column at
# once. Parts (SM_PARTS, default "1 2 3"):
#  1. the suites that run the kernel (SM_SUITES);
#  2. livefuse-bench-attention-decode: every kernel in a graph of 20, the streaming one also with
#     its splits meeting in the workspace only (the last graph column); then the 4096-key cases
#     with 4-warp blocks;
#  3. the context sweep (Llama-1B bf16 concat, SM_LENS prompts, two processes each): from 2049
#     keys the streaming kernel's 9-16 splits meet in a cluster, past 4096 its 17 in the workspace.
. "$(dirname "$0")/../prelude.sh" stream_meet
parts=" ${SM_PARTS:-1 2 3} "
if [[ $parts == *" 1 "* ]]; then
  run_suites "${SM_SUITES:-test_planner:*attention*,*decode*,*family* test_ops:*pdl* test_decoder}"
fi
if [[ $parts == *" 2 "* ]]; then
  attention_bench
  # Past 4096 keys a head takes 17 splits of 256 keys: 136 blocks for 132 SMs. In 128-key splits
  # (4 warps) they are 264 blocks, two an SM.
  BENCH_NAME=attention_decode_w4 attention_bench --stream-warps 4 --case "bf16 4"
fi
if [[ $parts == *" 3 "* ]]; then
  for round in 1 2; do
    echo "== sweep, round $round"
    SWEEP_LENS="${SM_LENS:-128 2048 4096}" SWEEP_MODES="on:concat" timeout -s KILL 280 bash tools/gpu/sweep.sh 2>&1 \
      | tee -a "$D/sweep.log" | grep -E "^prompt"
  done
fi
cp "$D"/*.log "$D"/*.json "$REAL_OUT"/ 2>/dev/null || true
