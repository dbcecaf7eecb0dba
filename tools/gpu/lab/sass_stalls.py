#!/usr/bin/env python3
"""The SASS instructions of one kernel where its warps were sampled most, from `ncu --page source
--print-source sass --csv` (tools/gpu/lab/ncu_detail.sh with ND_SOURCE=1): each with its share of
the samples, then the sums per opcode. Where a latency-bound kernel's warps wait.
Usage: sass_stalls.py FILE.csv [N=40]"""
import csv
import sys
from collections import Counter


def main(path, top):
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"') and not l.startswith('"Kernel Name"')]
    rows = list(csv.DictReader(lines))
    if not rows:
        print("no rows in", path)
        return
    keys = list(rows[0].keys())
    samp = next((k for k in keys if "Sampling" in k and "All" in k), None) or next(
        (k for k in keys if "Sampling" in k), None)
    src = next((k for k in keys if k.lower() == "source"), None)
    addr = next((k for k in keys if "Address" in k), None)
    if not samp or not src:
        print("columns:", keys)
        return
    vals = []
    for i, r in enumerate(rows):
        try:
            n = float(r[samp].replace(",", "") or 0)
        except ValueError:
            n = 0.0
        vals.append((n, i, r.get(addr, ""), r[src].strip()))
    total = sum(v[0] for v in vals) or 1.0
    print(f"{len(rows)} instructions, {total:.0f} samples ({samp})")
    for n, i, a, s in sorted(vals, reverse=True)[:top]:
        print(f"{100 * n / total:5.1f}%  #{i:<5} {a:>8}  {s[:90]}")
    ops = Counter()
    for n, _, _, s in vals:
        ops[s.split()[0] if s else "?"] += n
    print("by opcode:", ", ".join(f"{o} {100 * n / total:.1f}%" for o, n in ops.most_common(14)))
    ex = next((k for k in keys if k == "Instructions Executed"), None)
    if ex:
        cnt = Counter()
        for r in rows:
            s = r[src].strip()
            try:
                cnt[s.split()[0] if s else "?"] += float(r[ex].replace(",", "") or 0)
            except ValueError:
                pass
        tot = sum(cnt.values()) or 1.0
        print(f"executed (warp instructions {tot:.0f}):",
              ", ".join(f"{o} {100 * n / tot:.1f}%" for o, n in cnt.most_common(16)))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40)
