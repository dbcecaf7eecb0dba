#!/usr/bin/env python3
"""Issue 20's warm-up from two livefuse-generate --json files of one model and cache (LIVEFUSE=off,
then on): the on process's first-run tokens until plans serve against the off process's same
tokens and its median; the slowest five by either ratio.
Usage: warmup_table.py OFF_JSON ON_JSON"""
import json
import statistics
import sys

off, on = (json.load(open(p)) for p in sys.argv[1:3])
a, b = on.get("first_run_step_ms") or [], off.get("first_run_step_ms") or []
served = on.get("first_run_first_served_step", -1)
n = min(len(a) if served is None or served < 0 else served + 1, len(b))
if not n:
    sys.exit("  no first-run tokens in the reports (a livefuse-generate before first_run_step_ms?)")
med = off.get("step_median_ms") or statistics.median(b)
print(f"  off: median {med:.3f} ms a token, its first run's slowest of tokens 0..{n - 1} {max(b[:n]):.3f};"
      f" on: first served at token {served} of run 1, median (last run) {on.get('step_median_ms', 0):.3f}")
print(f"  on's slowest until served {max(a[:n]):.3f} ms = {max(a[:n]) / med:.2f}x off's median;"
      f" token by token at most {max(a[k] / b[k] for k in range(n)):.2f}x off's same token")
first_prefill = lambda d: (d.get("runs") or [{}])[0].get("prefill_ms", -1)
print(f"  first run's prefill (the prompt's forward): on {first_prefill(on):.2f} ms, off {first_prefill(off):.2f} ms")
for k in sorted(range(n), key=lambda k: -a[k])[:5]:
    print(f"    token {k:3d}: on {a[k]:.3f} ms, off {b[k]:.3f} ms ({a[k] / b[k]:.2f}x; {a[k] / med:.2f}x off's median)")
