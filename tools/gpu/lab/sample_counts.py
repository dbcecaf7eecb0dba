import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + '/report_*.json')):
    d = json.load(open(f))
    m = d['counters']['matcher']
    print(f.split('/')[-1], {k: m[k] for k in m if k.startswith('samples') or k in ('served', 'completions')})
    for p in d['plans']:
        s = p['sampling']
        if p['hits'] > 0 or p['state'] == 'sampling':
            print('   plan', p['id'], p['state'], 'hits', p['hits'], 'samples', len(s['fused_us']), len(s['eager_us']), p['last_reason'][:70])
