#!/usr/bin/env bash
# One GPU call for the decode attention's splits meeting in a workspace, run THERE after
# tools/gpu/pack.sh: livefuse-bench-attention-decode with the workspace (default), without it
# (clusters only), and with shorter splits; the suites that run the decode attention (eager,
# plans, graphs); then Llama-1B bf16 concat at prompt 4096 alternating LIVEFUSE_DECODE_LEAN=1|0.
# Logs in $OUT/split_meet.tgz.
# Usage (device tool): bash tools/gpu/lab/split_meet.sh   [MEET_PARTS="bench suites lean"]
. "$(dirname "$0")/../prelude.sh" lf-meet-out
pack_out() { tar -czf "$REAL_OUT/split_meet.tgz" -C "$D" . 2>/dev/null; }
parts=${MEET_PARTS:-bench suites lean}

if [[ $parts == *bench* ]]; then
  for v in "" "--no-workspace" "--split-keys 64" "--split-keys 32"; do
    tag=$(echo "ws${v}" | tr -c 'A-Za-z0-9' _)
    at "bench attention-decode $v"
    timeout -s KILL 120 "$B/bench/livefuse-bench-attention-decode" --iters 100 $v --json "$D/$tag.json" \
      > "$D/$tag.log" 2>&1
    echo "rc=$?"; grep -v "^ *$" "$D/$tag.log" | tail -22
  done
  pack_out
fi
if [[ $parts == *suites* ]]; then
  at "suites"
  SUITE_S=200 run_suites "test_ops test_decoder test_replacement test_runtime"
  pack_out
fi
if [[ $parts == *lean* ]]; then
  for i in 1 2; do
    for lean in 1 0; do
      at "llama concat 4096 LIVEFUSE_DECODE_LEAN=$lean ($i)"
      tag="lean${lean}_$i"
      LIVEFUSE_DECODE_LEAN=$lean LIVEFUSE_REPORT="$D/report_$tag.json" timeout -s KILL 100 \
        "$B/tools/generate/livefuse-generate" --random 1 --preset llama-1b --dtype bf16 --device cuda \
        --cache concat --prompt-len 4096 --steps 64 --runs 3 --quiet --json "$D/gen_$tag.json" > "$D/gen_$tag.log" 2>&1
      python3 tools/gpu/decode_summary.py "$D/gen_$tag.json" "$D/report_$tag.json" "  lean=$lean rc=$?" 2>/dev/null | head -4
    done
  done
  pack_out
fi
at "done"
