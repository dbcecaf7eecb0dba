#!/usr/bin/env python3
"""PyTorch peer timings for livefuse-bench-eager, same shapes, same method (CUDA events around
batches of calls, medians), same record format:
  linear            torch.nn.functional.linear(x, w, b) on the BERT-like shapes, f16/bf16/f32
                    (f32: TF32 off; f32_tf32: TF32 on)
  eager_elementwise_bw  a + b on 2^26 f32 elements
  copy_bw           dst.copy_(src) device to device, counted read + write
  eager_op_overhead host time per a + b on 4096 f32 elements
Usage: torch_eager.py [--json PATH] [--quick]"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

LINEAR_SHAPES = [(4096, 768, 2304), (4096, 768, 768), (4096, 768, 3072), (4096, 3072, 768), (128, 768, 3072)]
VARIANTS = [("f16", torch.float16, False), ("bf16", torch.bfloat16, False),
            ("f32", torch.float32, False), ("f32_tf32", torch.float32, True)]


def device_us(fn, reps, batch=10):
    fn()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        e0.record()
        for _ in range(batch):
            fn()
        e1.record()
        e1.synchronize()
        times.append(1000.0 * e0.elapsed_time(e1) / batch)
    return statistics.median(times)


def host_us(fn, reps, batch=200):
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        times.append((time.perf_counter() - t0) * 1e6 / batch)
    torch.cuda.synchronize()
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    reps = 5 if args.quick else 20
    dev = torch.device("cuda")
    recs = []

    def add(name, variant, size, us, **derived):
        r = {"name": name, "variant": variant, "size": size, "median_us": us, **derived,
             "peer": "torch", "torch": torch.__version__, "device": torch.cuda.get_device_name()}
        recs.append(r)
        extra = " ".join(f"{k}={v:.4g}" for k, v in derived.items())
        print(f"{name:<22} {variant:<22} {size:<18} {us:12.3f}  {extra}", flush=True)

    g = torch.Generator(device=dev).manual_seed(0)
    for vname, dt, tf32 in VARIANTS:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        for m, k, n in LINEAR_SHAPES:
            x = torch.rand(m, k, device=dev, generator=g).to(dt) * 2 - 1
            w = (torch.rand(n, k, device=dev, generator=g).to(dt) - 0.5) * 0.1
            b = torch.rand(n, device=dev, generator=g).to(dt) * 2 - 1
            us = device_us(lambda: F.linear(x, w, b), reps)
            add("linear", vname, f"{m}x{k}x{n}", us, tflops=2.0 * m * k * n / (us * 1e6), m=m, k=k, n=n)
    torch.backends.cuda.matmul.allow_tf32 = False

    nel = 1 << 26
    a = torch.rand(nel, device=dev, generator=g)
    bb = torch.rand(nel, device=dev, generator=g)
    dst = torch.empty_like(a)
    copy_us = device_us(lambda: dst.copy_(a), reps, batch=5)
    copy_gbs = 2.0 * nel * 4 / (copy_us * 1e3)
    add("copy_bw", "torch_copy_d2d", str(nel * 4), copy_us, gbytes_per_s=copy_gbs)
    add_us = device_us(lambda: a + bb, reps)
    add_gbs = 3.0 * nel * 4 / (add_us * 1e3)
    add("eager_elementwise_bw", "add_f32", str(nel), add_us, gbytes_per_s=add_gbs,
        fraction_of_copy_bw=add_gbs / copy_gbs)

    sa = torch.rand(4096, device=dev, generator=g)
    sb = torch.rand(4096, device=dev, generator=g)
    add("eager_op_overhead", "torch_add_f32", "4096", host_us(lambda: sa + sb, 10 if args.quick else 50))

    if args.json:
        with open(args.json, "w") as f:
            json.dump(recs, f, indent=1)
        print(f"wrote {len(recs)} records to {args.json}")


if __name__ == "__main__":
    main()
