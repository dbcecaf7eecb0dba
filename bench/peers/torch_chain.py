#!/usr/bin/env python3
"""PyTorch peers for livefuse-bench-replacement's chain10_call: the same 10-op pointwise chain
on the same size, wall time per call (chain + synchronize), in eager mode, as a CUDA graph
replay, and through torch.compile (default and reduce-overhead); and chain10_pipelined (200
calls back to back, one synchronize) for eager and the CUDA graph. Writes a JSON list of records."""
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F


def chain10(x):
    y = x * 1.5
    y = y + 0.25
    y = torch.tanh(y)
    y = y * x
    y = torch.sigmoid(y)
    y = y + x
    y = F.gelu(y)
    y = y * 0.5
    y = y - x
    return torch.relu(y)


def per_call_us(fn, n=2000, warm=200):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    t = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        t.append((time.perf_counter() - t0) * 1e6)
    t.sort()
    return statistics.median(t), t[int(0.99 * len(t))]


def pipelined_us(fn, reps=20, batch=200):
    for _ in range(batch):
        fn()
    torch.cuda.synchronize()
    per = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        torch.cuda.synchronize()
        per.append((time.perf_counter() - t0) * 1e6 / batch)
    return statistics.median(per)


def main():
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
    out = sys.argv[2] if len(sys.argv) > 2 else None
    x = torch.empty(size, device="cuda").uniform_(-1, 1)
    recs = []

    def add(variant, fn):
        try:
            med, p99 = per_call_us(fn)
            recs.append({"name": "chain10_call", "variant": variant, "size": str(size), "median_us": med, "p99_us": p99})
        except Exception as e:  # record, never crash the run
            recs.append({"name": "chain10_call", "variant": variant, "size": str(size), "error": repr(e)[:300]})

    add("torch_eager", lambda: chain10(x))
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            chain10(x)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        yg = chain10(x)
    add("torch_cuda_graph", lambda: g.replay())
    for variant, fn in (("torch_eager", lambda: chain10(x)), ("torch_cuda_graph", lambda: g.replay())):
        recs.append({"name": "chain10_pipelined", "variant": variant, "size": str(size), "median_us": pipelined_us(fn)})
    try:
        c1 = torch.compile(chain10)
        add("torch_compile", lambda: c1(x))
        c2 = torch.compile(chain10, mode="reduce-overhead")
        add("torch_compile_reduce_overhead", lambda: c2(x))
    except Exception as e:
        recs.append({"name": "chain10_call", "variant": "torch_compile", "error": repr(e)[:300]})
    for r in recs:
        print(f"{r['name']:18} {r['variant']:32} {r.get('median_us', float('nan')):10.2f} us  {r.get('error', '')}")
    if out:
        json.dump(recs, open(out, "w"), indent=1)


if __name__ == "__main__":
    main()
