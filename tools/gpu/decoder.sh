#!/usr/bin/env bash
# The decoder models on the GPU machine, run THERE after tools/gpu/pack.sh: the decoder suite
# and the new ops' cases on CUDA, then bench/gpt/compare.py (livefuse against HF and PyTorch,
# random-weight GPT-2 small and a Llama-3.2-1B-shaped model). Results in $OUT/decoder.tgz.
# Usage (device tool): bash tools/gpu/decoder.sh   [GPT_MODELS=gpt2,llama GPT_STEPS=64 GPT_BUDGET_S=420
#   GPT_ARGS="--skip ..." DECODER_TESTS="test_decoder"]
. "$(dirname "$0")/prelude.sh" lf-decoder-out
pack_out() { tar -czf "$REAL_OUT/decoder.tgz" -C "$D" . 2>/dev/null; }
for t in ${DECODER_TESTS-test_decoder test_ops}; do
  timeout -k 5 150 "$B/tests/$t" > "$D/$t.log" 2>&1
  echo "$t rc=$? $(grep 'test cases' "$D/$t.log")"
  grep -B2 -A6 "ERROR" "$D/$t.log" | head -30
done
pack_out
timeout -k 5 "${GPT_BUDGET_S:-420}" python3 bench/gpt/compare.py "$B/tools/generate/livefuse-generate" \
  --models "${GPT_MODELS:-gpt2,llama}" --prompt 32 --steps "${GPT_STEPS:-64}" --timeout 200 \
  --hf-iters 1 --livefuse-runs 4 --workdir /tmp/lf-gpt --json "$D/gpt_compare.json" ${GPT_ARGS:-} > "$D/gpt_compare.log" 2>&1
echo "compare.py rc=$?"
tail -45 "$D/gpt_compare.log"
pack_out
