#!/usr/bin/env python3
"""Static SASS size of kernels and of their largest loop bodies, from `cuobjdump -sass` output.

Usage (THERE, where cuobjdump is): cuobjdump -sass .gpu/build/liblivefuse.so |
    python3 tools/gpu/lab/sass_loops.py 'decode_kernel'
Prints, for each function whose mangled name contains the pattern: its instruction count and the
three largest loops (instructions between a backward branch and its target), with the commonest
opcodes of the largest.
"""
import collections
import re
import sys

pattern = sys.argv[1] if len(sys.argv) > 1 else ""
funcs, cur = {}, None
for line in sys.stdin:
    m = re.match(r"\s+Function : (\S+)", line)
    if m:
        cur = m.group(1) if pattern in m.group(1) else None
        if cur:
            funcs[cur] = []
        continue
    m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
    if m and cur:
        funcs[cur].append((int(m.group(1), 16), m.group(2).strip()))

for name, ins in funcs.items():
    addr = {a: i for i, (a, _) in enumerate(ins)}
    loops = []
    for i, (a, text) in enumerate(ins):
        b = re.search(r"BRA\s+(?:`\(\S+\)\s*)?0x([0-9a-f]+)", text)
        if b and int(b.group(1), 16) < a and int(b.group(1), 16) in addr:
            loops.append((i - addr[int(b.group(1), 16)] + 1, addr[int(b.group(1), 16)], i))
    loops.sort(reverse=True)
    short = re.sub(r"_ZN8livefuse4cuda\w*?decode_kernel", "decode_kernel", name)[:90]
    print(f"{short}: {len(ins)} instructions; loops {[n for n, _, _ in loops[:3]]}")
    if loops:
        _, lo, hi = loops[0]
        ops = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", t).split()[0].split(".")[0] for _, t in ins[lo:hi + 1])
        print("   largest:", ", ".join(f"{k} {v}" for k, v in ops.most_common(12)))
