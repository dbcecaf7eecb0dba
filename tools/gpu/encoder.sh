#!/usr/bin/env bash
# One GPU call for a change on the encoder path (issue: BERT fusion depth), run THERE after
# tools/gpu/pack.sh: chosen suites, the user programs, BERT-base f16 b1 with each fusion switched
# off in turn, the four configurations the issue measures against PyTorch (bench/bert/compare.py,
# peers in the same run: f16 b1 and b8 at seq 128, f32 b1, f16 b1 at seq 384), then the layer
# plan step by step (LIVEFUSE_PROFILE). Each part has its own limit and prints as it goes; logs
# in $OUT/encoder.tgz.
# Usage (device tool): bash tools/gpu/encoder.sh   [ENC_SUITES="test_planner test_bert ..."
#   (ENC_SUITES entries as test_x[:filter]; SUITE_S per binary, 150 s) ENC_USERS=1 ENC_SWITCHES=1
#   ENC_SWITCH_LIST="- LIVEFUSE_GEMM_SIBLINGS=0 ..." ENC_SWITCH_ROUNDS=1 ENC_SWITCH_BATCH=1
#   ENC_SWITCH_SEQ=128 ENC_ATTENTION=0 ENC_COMPARE="f16:1,8:128 f32:1:128 f16:1:384" ENC_PROFILE=1]
. "$(dirname "$0")/prelude.sh" lf-encoder-out
mkdir -p "$D/bench"
pack_out() { tar -czf "$REAL_OUT/encoder.tgz" -C "$D" . 2>/dev/null; }  # not lf-encoder-out.tgz

at "suites"
run_suites "${ENC_SUITES-test_planner test_bert test_replacement test_decoder}"
pack_out

if [ "${ENC_USERS:-1}" = 1 ]; then
  at "user programs, fusion on / off / unsampled"
  RUNS=${USERS_RUNS:-2} EXIT_RUNS=2 timeout -s KILL 200 bash tools/gpu/users.sh "$B" "$D"
  echo "  $(grep -c ' rc=0 0 failures' "$D/users.log") of $(grep -c ' run ' "$D/users.log") runs passed"
  grep ' run ' "$D/users.log" | grep -v ' rc=0 0 failures' | head
  grep -v ' run ' "$D/users.log" | head
  pack_out
fi

if [ "${ENC_SWITCHES:-1}" = 1 ]; then
  at "BERT-base f16 b${ENC_SWITCH_BATCH:-1} s${ENC_SWITCH_SEQ:-128} per fusion switch (one process each)"
  # ENC_SWITCH_LIST: the settings, "-" for none; each setting may be run several times
  # (ENC_SWITCH_ROUNDS, the list's order each round) to see a small difference over the spread.
  for sw in $(for r in $(seq 1 "${ENC_SWITCH_ROUNDS:-1}"); do echo ${ENC_SWITCH_LIST:-- LIVEFUSE_GEMM_SIBLINGS=0 LIVEFUSE_ATTENTION=0 LIVEFUSE_GRAPHS=0}; done); do
    [ "$sw" = "-" ] && sw=""
    name=$(echo "${sw:-all}" | tr -c 'A-Za-z0-9\n' '_')
    env $sw LIVEFUSE_REPORT="$D/bench/bert_switch_$name.report.json" timeout -k 5 90 \
      "$B/tools/bert/livefuse-bert" --random 1 --preset base --dtype f16 --device cuda \
      --batch "${ENC_SWITCH_BATCH:-1}" --seq "${ENC_SWITCH_SEQ:-128}" \
      --iters 200 --warmup-ms 3000 --quiet --json "$D/bench/bert_switch_$name.json" > /dev/null 2>&1
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); t=d['timing']; print(f\"  {sys.argv[2]:32} median {t['median_ms']:.4f} ms\", d.get('matcher', {}).get('served'))" \
      "$D/bench/bert_switch_$name.json" "${sw:-all fusions}" 2>&1 | tail -1
    # The layer plan's sampled medians (plans of 20+ ops): what the switch changed inside the layer.
    python3 -c "import json,sys; r=json.load(open(sys.argv[1]))
for p in r['plans']:
    s = p.get('sampling') or {}
    if len(p['ops']) >= 20 and s.get('fused_median_us'): print(f\"    plan {p['id']} {p['state']}: {s['fused_median_us']:.1f} us vs eager {s['eager_median_us']:.1f}\")" \
      "$D/bench/bert_switch_$name.report.json" 2>&1 | tail -3
  done
  pack_out
fi

if [ "${ENC_ATTENTION:-0}" = 1 ]; then
  at "the attention kernels alone (livefuse-bench-attention: fused as chosen, one / two key groups, general)"
  timeout -k 5 120 "$B/bench/livefuse-bench-attention" --json "$D/bench/attention_kernel.json" > "$D/attention_kernel.log" 2>&1
  echo "bench rc=$?"; cat "$D/attention_kernel.log"
  pack_out
fi

bert_compares "${ENC_COMPARE-f16:1,8:128 f32:1:128 f16:1:384}"

if [ "${ENC_PROFILE:-1}" = 1 ]; then
  at "the layer plan step by step (LIVEFUSE_PROFILE=1, f16 b1 s128)"
  LIVEFUSE_PROFILE=1 LIVEFUSE_REPORT="$D/bert_profile.json" timeout -k 5 90 "$B/tools/bert/livefuse-bert" \
    --random 1 --preset base --dtype f16 --device cuda --iters 100 --warmup-ms 3000 --quiet > "$D/bert_profile.log" 2>&1
  python3 tools/gpu/profile_table.py "$D/bert_profile.json" | tee "$D/bert_profile.table" | head -40
  pack_out
fi
at "done"
