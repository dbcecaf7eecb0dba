#!/usr/bin/env python3
"""The long spans on the program's thread of a LIVEFUSE_TRACE file (warm-up stalls), with what ran
inside each, and the totals of graph captures, module loads and new GEMM shapes there.
Usage: trace_stalls.py TRACE.json"""
import collections
import sys
from trace_steps import program_spans

main, name, m = program_spans(sys.argv[1])
print("main thread", main, name)
long = [e for e in m if e.get("dur", 0) > 2000]
print("spans over 2 ms on the program's thread:", len(long))
for e in long[:40]:
    kids = [k for k in m if k is not e and k["ts"] >= e["ts"] and k["ts"] + k.get("dur", 0) <= e["ts"] + e["dur"] and k.get("dur", 0) > 500]
    print(f"  {e['ts']/1000:10.1f} ms {e['dur']/1000:7.2f} ms {e.get('cat')}/{e.get('name')} {str(e.get('args',''))[:80]}")
    for k in kids[:6]:
        print(f"      {k['dur']/1000:7.2f} ms {k.get('cat')}/{k.get('name')} {str(k.get('args',''))[:60]}")
tot = collections.defaultdict(float); cnt = collections.Counter()
for e in m:
    if e.get("cat") in ("graph", "jit", "gemm"):
        tot[e["cat"] + "/" + e["name"]] += e.get("dur", 0); cnt[e["cat"] + "/" + e["name"]] += 1
for k in tot: print(f"  total {k}: {cnt[k]} spans, {tot[k]/1000:.2f} ms")
