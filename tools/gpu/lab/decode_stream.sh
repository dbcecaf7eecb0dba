#!/usr/bin/env bash
# One GPU call for the streaming decode attention (kernels/cuda/attention_decode_stream.cu), run
# THERE after tools/gpu/pack.sh: the suites that run it, livefuse-bench-attention-decode (the
# kernel's own choice of block, then 8-warp blocks on Llama's shapes), decode processes alternating
# LIVEFUSE_DECODE_STREAM_KEYS=0 with the default (DS_MODELS, preset:dtype:prompt; concat cache, 64
# tokens x 3 runs), and the user programs once per mode. Logs in $OUT/decode_stream.tgz.
# Usage (device tool): bash tools/gpu/lab/decode_stream.sh   [DS_PARTS="suites bench ab users"
#   DS_ROUNDS=2 DS_SUITES="test_planner:*attention* test_decoder test_replacement"
#   DS_MODELS="llama-1b:bf16:32 llama-1b:bf16:4096 gpt2:f16:32"]
. "$(dirname "$0")/../prelude.sh" lf-ds-out
pack_out() { tar -czf "$REAL_OUT/decode_stream.tgz" -C "$D" . 2>/dev/null; }
parts=${DS_PARTS:-suites bench ab users}

if [[ $parts == *suites* ]]; then
  at "suites"
  SUITE_S=200 run_suites "${DS_SUITES:-test_planner:*attention* test_decoder test_replacement}"
  pack_out
fi
if [[ $parts == *bench* ]]; then
  at "bench attention-decode"
  timeout -s KILL 120 "$B/bench/livefuse-bench-attention-decode" --iters 100 --json "$D/bench.json" > "$D/bench.log" 2>&1
  echo "rc=$?"; grep -v "^ *$" "$D/bench.log" | grep -v "f32\|strided\|masked\|mask \|view" | tail -16
  at "bench, 8-warp blocks (Llama)"
  timeout -s KILL 60 "$B/bench/livefuse-bench-attention-decode" --iters 100 --stream-warps 8 --case "llama-gqa bf16" \
    --json "$D/bench_w8.json" > "$D/bench_w8.log" 2>&1
  echo "rc=$?"; grep "llama" "$D/bench_w8.log"
  pack_out
fi
if [[ $parts == *ab* ]]; then
  for r in $(seq 1 "${DS_ROUNDS:-2}"); do
    for setting in LIVEFUSE_DECODE_STREAM_KEYS=0 default; do
      for m in ${DS_MODELS:-llama-1b:bf16:32 llama-1b:bf16:4096 gpt2:f16:32}; do
        IFS=: read -r preset dtype len <<< "$m"
        name="${preset}_${len}_${setting//[^A-Za-z0-9_]/_}_$r"
        env_args=()
        [[ $setting != default ]] && env_args=("$setting")
        env "${env_args[@]}" LIVEFUSE_REPORT="$D/$name.report.json" timeout -s KILL 120 \
          "$B/tools/generate/livefuse-generate" --random 1 --preset "$preset" --dtype "$dtype" --device cuda \
          --cache concat --prompt-len "$len" --steps 64 --runs 3 --json "$D/$name.json" --quiet > "$D/$name.log" 2>&1
        rc=$?
        python3 - "$D/$name.json" "$D/$name.report.json" "$name" "$rc" <<'PY'
import json, sys
path, report, name, rc = sys.argv[1:]
try:
    d = json.load(open(path))
    att = json.load(open(report))['counters'].get('cuda.attention', {})
    att = " ".join(f"{k} {v}" for k, v in att.items() if v)
    print(f"{name:<48} ms/token {d.get('step_median_ms', -1):8.4f}  p99 {d.get('step_p99_ms', -1):8.4f}  {att}")
except Exception as e:
    print(f"{name:<48} rc={rc} ({e})")
PY
      done
    done
  done
  pack_out
fi
if [[ $parts == *users* ]]; then
  at "user programs"
  RUNS=1 EXIT_RUNS=2 EXIT_GDB=0 timeout -s KILL 150 bash tools/gpu/users.sh "$B" "$D/users" > /dev/null 2>&1
  cat "$D/users/users.log" 2>/dev/null | tail -12
  pack_out
fi
at "done"
