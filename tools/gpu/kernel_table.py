#!/usr/bin/env python3
"""The per-kernel table of an `ncu --csv --metrics gpu__time_duration.sum` run (kernels.sh):
each kernel in launch order with its time, then the same kernels grouped by name.
Usage: kernel_table.py FILE.csv [--last N]   (--last: only the last N kernels, e.g. one decode step)"""
import csv
import sys
from collections import OrderedDict


def short(name, width=70):
    name = name.split("(")[0] if "(" in name and not name.startswith("void") else name
    return name if len(name) <= width else name[: width - 3] + "..."


def main(path, last=0):
    rows = []
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # ncu's own messages start with ==PROF==
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        ns = float(r["Metric Value"].replace(",", ""))
        rows.append((r.get("Kernel Name", "?"), r.get("Grid Size", ""), r.get("Block Size", ""), ns / 1e3))
    if last > 0:
        rows = rows[-last:]
    if not rows:
        print("no kernels in", path)
        return
    total = sum(us for *_, us in rows)
    print(f"{'#':>4} {'us':>8}  {'grid':>14} {'block':>12}  kernel")
    for i, (name, grid, block, us) in enumerate(rows):
        print(f"{i:>4} {us:8.2f}  {grid:>14} {block:>12}  {short(name)}")
    print(f"kernels {len(rows)}, sum {total:.1f} us")
    groups = OrderedDict()
    for name, _, _, us in rows:
        g = groups.setdefault(short(name), [0, 0.0])
        g[0] += 1
        g[1] += us
    print(f"\n{'count':>5} {'sum us':>9} {'share':>6}  kernel")
    for name, (n, us) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        print(f"{n:>5} {us:9.1f} {100 * us / total:5.1f}%  {name}")


if __name__ == "__main__":
    last = int(sys.argv[sys.argv.index("--last") + 1]) if "--last" in sys.argv else 0
    main(sys.argv[1], last)
