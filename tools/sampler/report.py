#!/usr/bin/env python3
"""Table of a sampler.out (tools/sampler/sampler.c): functions by self and inclusive share of
the main thread's wall time. Addresses are named with addr2line from the binaries at the paths
the mappings give (ROOT=dir maps a path onto a copy: ROOT=/work/main maps /x/.gpu/build/...
when the run was made in /x). Frames in libraries that are not here stay library+offset.

Usage: report.py SAMPLER_OUT [--top N] [--root FROM=TO ...] [--under SUBSTRING]
  --under: only samples whose stack holds a function whose name contains SUBSTRING.
"""
import argparse
import bisect
import collections
import os
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--root", action="append", default=[])
    ap.add_argument("--under", default="")
    a = ap.parse_args()
    roots = [r.split("=", 1) for r in a.root]
    lines = open(a.path).read().split("\n")
    head = lines[0]
    at = lines.index("maps")
    stacks = [[int(x, 16) for x in l.split()] for l in lines[1:at] if l.strip()]
    maps = []
    for l in lines[at + 1:]:
        f = l.split()
        if len(f) < 6 or "x" not in f[1]:
            continue
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        path = f[5]
        for src, dst in roots:
            if path.startswith(src):
                path = dst + path[len(src):]
        maps.append((lo, hi, int(f[2], 16), path))
    maps.sort()
    starts = [m[0] for m in maps]

    def where(addr):
        i = bisect.bisect_right(starts, addr) - 1
        if i >= 0 and maps[i][0] <= addr < maps[i][1]:
            lo, _, off, path = maps[i]
            return path, addr - lo + off
        return "?", addr

    wanted = collections.defaultdict(set)
    for s in stacks:
        for k, addr in enumerate(s):
            path, v = where(addr if k == 0 else addr - 1)
            wanted[path].add(v)
    names = {}
    for path, vs in wanted.items():
        vs = sorted(vs)
        if os.path.isfile(path):
            out = subprocess.run(["addr2line", "-f", "-C", "-e", path] + [hex(v) for v in vs],
                                 capture_output=True, text=True).stdout.split("\n")
            for j, v in enumerate(vs):
                fn = out[2 * j] if 2 * j < len(out) else "??"
                names[(path, v)] = fn if fn != "??" else "%s+%x" % (os.path.basename(path), v)
        else:
            for v in vs:
                names[(path, v)] = "%s+%x" % (os.path.basename(path), v)

    def short(fn):
        # Drop argument lists and template arguments: one row per function.
        out, depth = [], 0
        for ch in fn:
            if ch in "(<":
                depth += 1
            elif ch in ")>":
                depth -= 1
            elif depth == 0:
                out.append(ch)
        return "".join(out)[:110]

    named = []
    for s in stacks:
        named.append([short(names[where(addr if k == 0 else addr - 1)]) for k, addr in enumerate(s)])
    if a.under:
        named = [s for s in named if any(a.under in f for f in s)]
    n = len(named)
    self_c = collections.Counter(s[0] for s in named if s)
    incl = collections.Counter()
    for s in named:
        for f in set(s):
            incl[f] += 1
    print("%s; %d samples%s" % (head, n, " under " + a.under if a.under else ""))
    print("\nself %:")
    for f, c in self_c.most_common(a.top):
        print("  %5.1f  %s" % (100.0 * c / n, f))
    print("\ninclusive %:")
    for f, c in incl.most_common(a.top):
        print("  %5.1f  %s" % (100.0 * c / n, f))


if __name__ == "__main__":
    sys.exit(main())
