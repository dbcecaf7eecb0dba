#!/usr/bin/env python3
"""The slowest decode steps before plans serve, from a LIVEFUSE_TRACE file: per step (the
program's argmax ends one) of the first run's first N steps, its wall time and the longest spans
inside it on the program's thread (ops, graph captures, compiles, waits), so a warm-up token
slower than eager says what it waited on.
Usage: trace_warmup.py TRACE.json [N=60] [TOP=6]"""
import collections
import sys

from trace_steps import program_spans, step_ends

first = int(sys.argv[2]) if len(sys.argv) > 2 else 60
top = int(sys.argv[3]) if len(sys.argv) > 3 else 6
_, _, m = program_spans(sys.argv[1])
ends = step_ends(m)
if len(ends) < 3:
    sys.exit("fewer than 3 steps in the trace")
steps = []
for k, (a, b) in enumerate(zip(ends, ends[1:first + 1])):
    inside = [e for e in m if a <= e["ts"] < b]
    steps.append((k + 1, (b - a) / 1000, inside))
walls = sorted(s[1] for s in steps)
print(f"first {len(steps)} decode steps: median {walls[len(walls) // 2]:.3f} ms, "
      f"max {walls[-1]:.3f} ms")
for k, wall, inside in sorted(steps, key=lambda s: -s[1])[:top]:
    print(f"  step {k:3d}: {wall:7.3f} ms, {sum(e.get('cat') == 'op' for e in inside)} ops")
    for e in sorted(inside, key=lambda e: -e.get("dur", 0))[:6]:
        print(f"      {e.get('dur', 0) / 1000:7.3f} ms {e.get('cat')}/{e.get('name')} {str(e.get('args', ''))[:70]}")
    kinds = collections.Counter()
    for e in inside:
        if e.get("cat") != "op":
            kinds[e.get("cat") + "/" + e.get("name")] += e.get("dur", 0)
    if kinds:
        print("      not ops: " + ", ".join(f"{k} {v / 1000:.3f}" for k, v in kinds.most_common(5)))
