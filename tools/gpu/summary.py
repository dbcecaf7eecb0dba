#!/usr/bin/env python3
"""Summary of a tools/gpu/run.sh output folder: test counts per binary, then the eager
benchmark against its targets (issue 2) and against the PyTorch peer.
Usage: summary.py OUT_DIR"""
import glob
import json
import os
import re
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except Exception:
        return []


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "gpu-out"
    print(open(os.path.join(out, "gpu.txt")).read().strip() if os.path.exists(os.path.join(out, "gpu.txt")) else "(no gpu.txt)")
    print(f"\n{'test binary':<22} {'rc':>4} {'cases':>6} {'passed':>7} {'failed':>7} {'skipped':>8} {'asserts ok/fail':>16}")
    tot = [0, 0, 0, 0]
    rows = []
    tsv = os.path.join(out, "tests", "results.tsv")
    if os.path.exists(tsv):
        rows = [line.rstrip("\n").split("\t") for line in open(tsv) if line.strip()]
    for name, rc, _secs in rows:
        log = open(os.path.join(out, "tests", name + ".log"), errors="replace").read()
        m = re.findall(r"test cases:\s*(\d+) \|\s*(\d+) passed \|\s*(\d+) failed \|\s*(\d+) skipped", log)
        a = re.findall(r"assertions:\s*(\d+) \|\s*(\d+) passed \|\s*(\d+) failed", log)
        c = [int(x) for x in m[-1]] if m else [0, 0, 0, 0]
        asr = f"{a[-1][1]}/{a[-1][2]}" if a else "-"
        note = "" if m else "  (no doctest summary: crashed or timed out, see log)"
        print(f"{name:<22} {rc:>4} {c[0]:>6} {c[1]:>7} {c[2]:>7} {c[3]:>8} {asr:>16}{note}")
        tot = [t + x for t, x in zip(tot, c)]
    print(f"{'total':<22} {'':>4} {tot[0]:>6} {tot[1]:>7} {tot[2]:>7} {tot[3]:>8}")

    ours = load(os.path.join(out, "bench", "livefuse-bench-eager.json"))
    torch = load(os.path.join(out, "bench", "torch_eager.json"))
    if not ours:
        print("\n(no livefuse-bench-eager.json)")
        return
    print("\neager op overhead (host us per call, 4096 f32 add)")
    ov = {r["variant"]: r for r in ours if r["name"] == "eager_op_overhead"}
    if "overhead" in ov:
        d = ov["overhead"]["median_us"]
        print(f"  lf::add {ov['lf_add_f32']['median_us']:.2f}  bare launch {ov['bare_launch']['median_us']:.2f}"
              f"  difference {d:.2f}  (target <= 1.5: {'OK' if d <= 1.5 else 'MISSED'})")
        if "cuda_backend_only" in ov:
            o = ov["overhead"]
            print(f"  of which: CUDA backend (plan + launch) {o.get('backend_share_us', float('nan')):.2f},"
                  f" runtime (validate, allocate, free, bookkeeping) {o.get('runtime_share_us', float('nan')):.2f}")
    for r in torch:
        if r["name"] == "eager_op_overhead":
            print(f"  torch a + b {r['median_us']:.2f}")
    print("\nelementwise bandwidth (fraction of measured D2D copy; target >= 0.85 for contiguous ops)")
    for r in ours:
        if r["name"] == "copy_bw":
            print(f"  copy: {r['gbytes_per_s']:.0f} GB/s")
        if r["name"] in ("eager_elementwise_bw", "eager_row_bw"):
            print(f"  {r['variant']:<26} {r['median_us']:10.1f} us {r['gbytes_per_s']:7.0f} GB/s  {r['fraction_of_copy_bw']:.3f}")
    for r in torch:
        if r["name"] in ("copy_bw", "eager_elementwise_bw"):
            extra = f"  {r['fraction_of_copy_bw']:.3f}" if "fraction_of_copy_bw" in r else ""
            print(f"  torch {r['variant']:<20} {r['median_us']:10.1f} us {r['gbytes_per_s']:7.0f} GB/s{extra}")
    print("\nlinear (median us; ratio = livefuse / torch F.linear, target <= 1.10)")
    peer = {(r["variant"], r["size"]): r for r in torch if r["name"] == "linear"}
    print(f"  {'variant':<9} {'MxKxN':<16} {'livefuse':>9} {'torch':>9} {'ratio':>6} {'TFLOP/s':>8}")
    for r in ours:
        if r["name"] != "linear":
            continue
        p = peer.get((r["variant"], r["size"]))
        ratio = r["median_us"] / p["median_us"] if p else float("nan")
        flag = "" if not p else ("" if ratio <= 1.10 else "  MISSED")
        pt = f"{p['median_us']:9.1f}" if p else f"{'-':>9}"
        print(f"  {r['variant']:<9} {r['size']:<16} {r['median_us']:9.1f} {pt} {ratio:6.3f} {r['tflops']:8.1f}{flag}")


if __name__ == "__main__":
    main()
