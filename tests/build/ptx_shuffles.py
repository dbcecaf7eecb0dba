#!/usr/bin/env python3
"""No warp-wide shuffle that some lanes may skip: the .cu kernels' PTX (nvcc -ptx, sm_90) has no
full-warp `shfl.sync` in the fall-through of a branch whose predicate comes straight from a float
compare.

Why: __shfl_xor_sync(0xffffffff, ...) needs every lane of the warp to execute it. Inside
`x == -inf ? 0 : quad_sum(y)` the compiler may keep the branch, and lanes whose x differs (rows
of a warp where one row's keys were all -inf) then leave the others waiting -- undefined
behaviour, a hang on an H100 (the tensor-core attention's merge of key groups, session 36: 8 such
shuffles in attention_mma.cu's PTX before the fix, 0 after).

The check is a heuristic over the PTX text: a float compare of a value every lane holds alike (a
butterfly's result) is safe but looks the same, so files whose only such branches are of that
kind are left out below, with the reason.
Usage: ptx_shuffles.py SOURCE_ROOT NVCC
(exit status 0: none found; 1: found, each listed; 77: no nvcc, skipped)"""
import os
import re
import subprocess
import sys
import tempfile

from kernel_compile import find_nvcc, kernel_flags

# The kernels checked (kernels/cuda/), and those left out.
CHECKED = ["attention_mma.cu", "attention_mma_decode.cu", "attention_decode.cu", "softmax.cu",
           "norm.cu", "reduce.cu", "rotary.cu", "gemv_cols.cu", "topk.cu", "gather.cu", "layout.cu",
           "split_columns.cu"]
LEFT_OUT = {
    # The general kernel skips a row step when max(m, warp_max(s)) is -inf: a butterfly's result,
    # the same in every lane (the branch is uniform).
    "attention.cu": "its -inf branch tests a warp-uniform value",
    # ~12 MB of PTX (every GEMV form): minutes on a 2-core machine; its sums never sit in a branch.
    "gemv.cu": "too slow to compile here",
}


def suspects(ptx):
    """(line, compare) of each branch on a float compare whose fall-through holds a shfl.sync."""
    lines = ptx.split("\n")
    last = {}  # predicate -> (line of its definition, defined by a float compare)
    found = []
    for i, line in enumerate(lines):
        m = re.search(r"\b(setp|and\.pred|or\.pred|not\.pred|mov\.pred)\S*\s+(%p\d+)", line)
        if m:
            last[m.group(2)] = (i, bool(re.search(r"setp\.\w+\.f(32|64)", line)))
        b = re.search(r"@!?(%p\d+) bra\s+(\$L__BB\d+_\d+)", line)
        if not b or not last.get(b.group(1), (0, False))[1]:
            continue
        label = b.group(2) + ":"
        for k in range(i + 1, min(len(lines), i + 400)):
            t = lines[k].strip()
            if t.startswith(label) or re.match(r"(bra(\.uni)?|ret|exit)\b", t):
                break  # the fall-through ends
            if "shfl.sync" in t:
                found.append((i + 1, lines[last[b.group(1)][0]].strip()))
                break
    return found


def main():
    root, nvcc = sys.argv[1], find_nvcc(sys.argv[2])
    if not nvcc:
        print("no nvcc: skipped")
        return 77
    flags = ["-ptx"] + kernel_flags(root)
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in CHECKED:
            src = os.path.join(root, "kernels", "cuda", name)
            if not os.path.exists(src):
                continue
            out = os.path.join(tmp, name + ".ptx")
            r = subprocess.run([nvcc] + flags + [src, "-o", out], capture_output=True, text=True)
            if r.returncode != 0:
                print(f"{name}: nvcc failed\n{r.stderr[-2000:]}")
                bad += 1
                continue
            hits = suspects(open(out).read())
            print(f"{name}: {len(hits)} shuffle(s) behind a float-compare branch")
            for line, cmp in hits[:5]:
                print(f"  PTX line {line}: branch on `{cmp}`")
            bad += len(hits)
    for name, why in LEFT_OUT.items():
        print(f"{name}: not checked ({why})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
