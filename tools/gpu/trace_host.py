#!/usr/bin/env python3
"""Where a served decode step's time goes on the program's thread, from a LIVEFUSE_TRACE file:
per step (the program's argmax ends one) its wall time, ops called and the time inside them,
for the last N steps; then the op kinds and other spans by total time over those steps. A step
whose op time is most of its wall time is bound by the host, not the GPU. Also the replays' part
and what is left for the deferred calls (they emit no span).
Usage: trace_host.py TRACE.json [N=100]"""
import collections
import sys

from trace_steps import program_spans, step_ends

last = int(sys.argv[2]) if len(sys.argv) > 2 else 100
_, _, m = program_spans(sys.argv[1])
ends = step_ends(m)
if len(ends) < 3:
    sys.exit("fewer than 3 steps in the trace")
ends = ends[-(last + 1):]
rows, kinds, other = [], collections.Counter(), collections.Counter()
kcount = collections.Counter()
for a, b in zip(ends, ends[1:]):
    ops = [e for e in m if a <= e["ts"] < b]
    op_spans = [e for e in ops if e.get("cat") == "op"]
    op_ms = sum(e.get("dur", 0) for e in op_spans) / 1000
    replay_ms = sum(e.get("dur", 0) for e in ops if e.get("cat") == "plan" and e["name"].startswith("replay")) / 1000
    # Deferred calls emit no span: what neither a replay nor an eager call's span covers is theirs
    # (and the program's own code between calls).
    rows.append(((b - a) / 1000, len(op_spans), op_ms, replay_ms, (b - a) / 1000 - op_ms - replay_ms))
    for e in ops:
        key = e.get("cat") + "/" + e.get("name")
        (kinds if e.get("cat") == "op" else other)[key] += e.get("dur", 0)
        kcount[key] += 1
n = len(rows)


def median(i):
    return sorted(r[i] for r in rows)[n // 2]


wall, opms = median(0), median(2)
print(f"last {n} steps: median wall {wall:.3f} ms, {rows[-1][1]} ops a step, median time inside ops {opms:.3f} ms"
      f" ({100 * opms / wall:.0f}% of the step)")
print(f"  medians a step: plan replays {median(3):.4f} ms, eager calls {opms:.4f}, the rest (deferred calls, "
      f"the program) {median(4):.4f}")
for k, v in (kinds + other).most_common(14):
    print(f"  {k:<28} {v / 1000 / n:8.4f} ms a step  {kcount[k] / n:6.1f} calls  {v / max(kcount[k], 1):7.2f} us each")
