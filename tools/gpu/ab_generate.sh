#!/usr/bin/env bash
# A/B of livefuse-generate on the GPU machine, run THERE: alternating processes, each variant's
# env in AB_A / AB_B, the median ms/token of each process printed (same model, dtype, cache,
# steps). The weights: those bench/gpt/compare.py built in /tmp/lf-gpt when it ran first, else
# the preset's random ones (--random 1 --preset MODEL; a prompt of 32). Usage:
#   AB_A="LIVEFUSE_FAMILY_GRAPH=1" AB_B="LIVEFUSE_FAMILY_GRAPH=0" MODEL=gpt2 DTYPE=f16 \
#     CACHE=concat STEPS=256 ROUNDS=3 bash tools/gpu/ab_generate.sh
set -u
cd "$(dirname "$0")/../.."
B=.gpu/build
. tools/gpu/env.sh
W=/tmp/lf-gpt
M=${MODEL:-gpt2}
if [ -f "$W/$M.safetensors" ]; then
  model=(--weights "$W/$M.safetensors" --config "$W/$M-config/config.json" --ids "$W/prompt_${M}_b1_t32.npy")
else
  model=(--random 1 --preset "$M" --prompt-len 32)
fi
rm -f /tmp/ab_ids_first.npy  # the first process's tokens: every later one's are compared
for r in $(seq 1 "${ROUNDS:-3}"); do
  for v in A B; do
    envs=AB_$v
    env ${!envs} LIVEFUSE=on LIVEFUSE_REPORT=/tmp/ab_report.json timeout -k 5 120 "$B/tools/generate/livefuse-generate" "${model[@]}" \
      --dtype "${DTYPE:-f16}" --device cuda --steps "${STEPS:-256}" --cache "${CACHE:-concat}" --runs "${RUNS:-4}" --out /tmp/ab_ids.npy --json /tmp/ab.json --quiet \
      > /tmp/ab.log 2>&1
    rc=$?
    python3 -c "import json,sys; d=json.load(open('/tmp/ab.json')); print(sys.argv[1], 'round', sys.argv[2], 'ms/token', round(d.get('step_median_ms', -1), 4), 'issued in', round(d.get('step_issue_median_ms', -1), 4), 'served_calls', d.get('served_calls', '?'))" \
      "$v(${!envs})" "$r" 2>/dev/null || { echo "$v round $r rc=$rc"; tail -5 /tmp/ab.log; }
    if [ ! -f /tmp/ab_ids_first.npy ]; then cp /tmp/ab_ids.npy /tmp/ab_ids_first.npy 2>/dev/null
    elif cmp -s /tmp/ab_ids.npy /tmp/ab_ids_first.npy; then echo "  tokens: the first process's"
    else echo "  tokens: DIFFER from the first process's"; fi
    python3 -c "
import json, collections
report = json.load(open('/tmp/ab_report.json'))
plans = report['plans']
print('  plans by state:', dict(collections.Counter(p['state'] for p in plans)),
      '| attention launches:', report['counters'].get('cuda.attention'), '| gemv:', report['counters'].get('cuda.gemv'))
for p in plans:
    if p['state'] == 'active':
        for k, v in p.get('notes', {}).items():
            if k.startswith('family'): print('  plan', p['id'], len(p['ops']), 'ops', k + ':', v[:240])
    elif p['state'] in ('rejected', 'failed'):
        print('  plan', p['id'], len(p['ops']), 'ops', p['state'] + ':', p['last_reason'][:200])
" 2>&1 | head -14
  done
done
