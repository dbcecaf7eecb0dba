#!/usr/bin/env python3
"""Per-step GPU time of every plan in a livefuse report written with LIVEFUSE_PROFILE=1.

Usage: profile_table.py REPORT.json
Prints, per plan that served (most hits first): state, hits, launches, then each step (group)
with its kind, ops and mean GPU microseconds per run (each includes ~1 us of event floor)."""
import json
import sys


def main(path):
    r = json.load(open(path))
    plans = sorted(r.get("plans", []), key=lambda p: -p.get("hits", 0))
    total = 0.0
    for p in plans:
        if not p.get("hits"):
            continue
        groups = p.get("groups", [])
        us = [g.get("gpu_us") for g in groups]
        run_us = sum(u for u in us if u)
        total += run_us * p["hits"]
        print(f"plan {p['id']} {p['state']} hits={p['hits']} steps={len(groups)} "
              f"gpu_us/run={run_us:.1f}  {p['name'][:90]}")
        print(f"    {p.get('last_reason', '')[:150]}")
        for g, u in zip(groups, us):
            if g.get("kind") == "view":
                continue
            ops = ",".join(str(o) for o in g.get("ops", []))
            shown = f"{u:7.2f}" if u is not None else "      -"
            print(f"    {shown} us  {g.get('kind', '?'):10} ops {ops:14} {g.get('kernel', '')[:60]}")
    print(f"total gpu us over all runs: {total:.0f}")


if __name__ == "__main__":
    main(sys.argv[1])
