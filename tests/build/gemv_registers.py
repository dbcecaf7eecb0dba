#!/usr/bin/env python3
"""The one-row GEMV's plain pair kernels fit 8 blocks an SM: ptxas gives each of them at most 64
registers a thread (kernels/cuda/gemv.cu, nvcc -cubin -Xptxas -v, sm_90).

Why: 8 blocks of 128 threads at <= 64 registers fill an SM's 65,536; Llama-1B's down projection
(2048 x 8192, four warps a row, two weight rows a warp) is 1,024 blocks, one wave on 132 SMs at
8 an SM and two at 7. Session 55's rotary code, carried by every pair instantiation, took them
to 69-71 registers: the down projection went from 12.5 to 16.1 us a launch (H100, session 56)
and no test of values could see it. Now only the rotating instantiations (kRope) carry it.
The counts depend on nvcc's version; a failure here says which kernel grew, and by how much.
Usage: gemv_registers.py SOURCE_ROOT NVCC
(exit status 0: within the bound; 1: a kernel above it or nvcc failed; 77: no nvcc, skipped)"""
import os
import re
import subprocess
import sys
import tempfile

from kernel_compile import find_nvcc, kernel_flags

LIMIT = 64  # registers a thread: 65,536 / (8 blocks x 128 threads)

# gemv_kernel<S, kRows, kSplit, kNorm, kGate, kPair, kRope> as the Itanium ABI mangles it.
ENTRY = re.compile(r"Compiling entry function '(\S*gemv_kernel\S*?INS0_\d+(\w+?)E"
                   r"Li(\d+)ELi(\d+)ELb([01])ELb([01])ELb([01])ELb([01])E\S*)'")
USED = re.compile(r"Used (\d+) registers")
SPILL = re.compile(r"(\d+) bytes spill stores")


def kernels(log):
    """{(dtype, rows, split, norm, gate, pair, rope): (registers, spill store bytes)}"""
    out, key, spill = {}, None, 0
    for line in log.split("\n"):
        m = ENTRY.search(line)
        if m:
            key = (m.group(2), int(m.group(3)), int(m.group(4))) + tuple(m.group(i) == "1" for i in range(5, 9))
            spill = 0
            continue
        s = SPILL.search(line)
        if s:
            spill = int(s.group(1))
        u = USED.search(line)
        if u and key:
            out[key] = (int(u.group(1)), spill)
            key = None
    return out


def main():
    root, nvcc = sys.argv[1], find_nvcc(sys.argv[2])
    if not nvcc:
        print("no nvcc: skipped")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([nvcc, "-cubin", "-Xptxas", "-v"] + kernel_flags(root) +
                           [os.path.join(root, "kernels", "cuda", "gemv.cu"), "-o", os.path.join(tmp, "gemv.cubin")],
                           capture_output=True, text=True)
    if r.returncode != 0:
        print(f"gemv.cu: nvcc failed\n{r.stderr[-2000:]}")
        return 1
    found = kernels(r.stderr)
    pairs = {k: v for k, v in found.items() if k[1] == 1 and not k[3] and not k[4] and k[5] and not k[6]}
    if len(pairs) < 9:  # f32, f16, bf16 x splits 1, 2, 4
        print(f"expected the 9 plain pair kernels in ptxas's output, found {len(pairs)} "
              f"(of {len(found)} gemv kernels): the parser or the instantiations changed")
        return 1
    bad = 0
    for (dt, _, split, *_), (regs, spill) in sorted(pairs.items()):
        ok = regs <= LIMIT
        bad += not ok
        print(f"pair kernel {dt:4} split {split}: {regs} registers, {spill} bytes spilled"
              f"{'' if ok else f'  ABOVE {LIMIT}: 7 or fewer blocks an SM'}")
    for k, (regs, spill) in sorted(found.items()):  # for the record: the others with two rows a warp
        if k[1] == 1 and k[5] and k not in pairs:
            print(f"  (also: {k[0]} split {k[2]} norm {int(k[3])} rope {int(k[6])}: {regs} registers)")
    print(f"{len(pairs) - bad} of {len(pairs)} plain pair kernels within {LIMIT} registers")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
