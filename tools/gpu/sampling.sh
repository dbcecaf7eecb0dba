#!/usr/bin/env bash
# How often the GPT-2 decode layer plan is kept, run THERE after tools/gpu/pack.sh: N processes
# of livefuse-generate (random GPT-2 small, f16, concat cache, 256 tokens x 4 runs), each
# printing its median ms/token, its plans by state and the sampling verdict of its largest plans.
# Usage (device tool): bash tools/gpu/sampling.sh   [SAMPLING_PROCS=5 SAMPLING_CACHE=concat]
. "$(dirname "$0")/prelude.sh"
for i in $(seq 1 "${SAMPLING_PROCS:-5}"); do
  LIVEFUSE_REPORT=/tmp/sampling_report.json timeout -s KILL "${SAMPLING_TIMEOUT:-90}" "${GPT2_DECODE[@]}" \
    --cache "${SAMPLING_CACHE:-concat}" --json /tmp/sampling.json > /tmp/sampling.log 2>&1
  echo "process $i rc=$?"
  python3 - <<'PY'
import collections, json
d = json.load(open('/tmp/sampling.json'))
plans = json.load(open('/tmp/sampling_report.json'))['plans']
print('  ms/token', round(d.get('step_median_ms', -1), 4), 'served_calls', d.get('served_calls'),
      'plans by state', dict(collections.Counter(p['state'] for p in plans)))
for p in sorted(plans, key=lambda p: -len(p['ops']))[:3]:
    why = [t.get('reason', '') for t in p.get('history', []) if 'sampled' in t.get('reason', '')]
    print('  plan', p['id'], len(p['ops']), 'ops', p['state'], (why[-1] if why else p.get('last_reason', ''))[:150])
PY
done
