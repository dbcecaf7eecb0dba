#!/usr/bin/env python3
"""Fusion on against off for the demo's CPU loops, in alternating pairs.

This machine's speed moves by up to 2x between runs of one binary (shared hosts, no hardware
counters), so one run a mode says little. Each pair runs the demo with LIVEFUSE=off and with the
mode under test back to back (the order alternating), and the ratio of their steady medians is
taken within the pair; the table shows every pair and the median ratio.

  python3 bench/cpu_pairs.py [--pairs N] [--model encoder|decoder|bert] [--json PATH]
                             [--on VAR=VALUE ...] [--off VAR=VALUE ...] [-- extra demo arguments]

ratio = on / off: below 1 the mode under test is faster. Exit status 0 (a benchmark, not a test).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEMO = os.path.join(HERE, "..", os.environ.get("LIVEFUSE_BUILD_DIR", "build"), "examples", "livefuse-demo")


def run(env_extra, args):
    env = dict(os.environ)
    env.update(env_extra)
    out = subprocess.run([DEMO, "--quiet"] + args, env=env, capture_output=True, text=True, check=True).stdout
    m = re.search(r"steady_median=([0-9.]+)", out)
    if not m:
        sys.exit("cpu_pairs: no steady_median in the demo's output:\n" + out)
    kept = re.findall(r"^plan \d+ .*?: (kept|rejected)", out, re.M)
    return float(m.group(1)), kept


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--model", default="encoder")
    ap.add_argument("--iters", type=int, default=0, help="demo --iters (default: the demo's own for the model)")
    ap.add_argument("--on", action="append", default=[], help="VAR=VALUE for the mode under test (default LIVEFUSE=on)")
    ap.add_argument("--off", action="append", default=[], help="VAR=VALUE for the baseline (default LIVEFUSE=off)")
    ap.add_argument("--json")
    ap.add_argument("rest", nargs="*")
    a = ap.parse_args()
    on_env, off_env = {"LIVEFUSE": "on"}, {"LIVEFUSE": "off"}
    for env, given in ((on_env, a.on), (off_env, a.off)):
        for kv in given:
            k, _, v = kv.partition("=")
            env[k] = v
    args = ["--model", a.model] + (["--iters", str(a.iters)] if a.iters else []) + a.rest
    rows = []
    for i in range(a.pairs):
        order = ["off", "on"] if i % 2 == 0 else ["on", "off"]
        got = {}
        for mode in order:
            got[mode] = run(off_env if mode == "off" else on_env, args)
        ratio = got["on"][0] / got["off"][0]
        rows.append({"pair": i, "off_ms": got["off"][0], "on_ms": got["on"][0], "ratio": ratio,
                     "plans": " ".join(got["on"][1])})
    unit = "ms/token" if a.model == "decoder" else "ms"
    print(f"{'pair':>4}  {'off ' + unit:>12}  {'on ' + unit:>12}  {'on/off':>7}  plans (on)")
    for r in rows:
        print(f"{r['pair']:>4}  {r['off_ms']:>12.3f}  {r['on_ms']:>12.3f}  {r['ratio']:>7.3f}  {r['plans']}")
    med = statistics.median(r["ratio"] for r in rows)
    print(f"median on/off ratio over {len(rows)} pairs: {med:.3f} "
          f"(off median {statistics.median(r['off_ms'] for r in rows):.3f}, "
          f"on median {statistics.median(r['on_ms'] for r in rows):.3f} {unit}; on: {on_env}, off: {off_env})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": a.model, "args": args, "on_env": on_env, "off_env": off_env, "pairs": rows, "median_ratio": med}, f, indent=1)


if __name__ == "__main__":
    main()
