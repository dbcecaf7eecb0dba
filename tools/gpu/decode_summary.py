#!/usr/bin/env python3
"""One decode process, from its livefuse-generate --json and its LIVEFUSE_REPORT: ms/token and
calls served; plans made in all (and their states), the share of calls served over the process
and in its last run (every run is the same program: a run's calls are the process's / runs),
device memory in use and cached; then every plan that sampling rejected or that spans a layer (20+ ops), with its
history and any attention left unfused because its probabilities looked observable.
Usage: decode_summary.py GEN_JSON REPORT_JSON [LABEL]   (used by decode.sh and verdicts.sh)"""
import json
import sys


def main():
    gen, report = sys.argv[1], sys.argv[2]
    label = sys.argv[3] if len(sys.argv) > 3 else ""
    try:
        d = json.load(open(gen))
        print(f"{label} ms/token {round(d.get('step_median_ms', -1), 4)}"
              f" (issued in {round(d.get('step_issue_median_ms', -1), 4)}) served {d.get('served_calls')};"
              f" warm-up: served after {round(d.get('warmup_to_served_ms', -1), 1)} ms,"
              f" slowest token until then {round(d.get('warmup_max_step_ms', -1), 3)} ms")
    except Exception as e:
        print(f"{label} (no json: {e!r})")
    try:
        r = json.load(open(report))
        plans = r["plans"]
    except Exception as e:
        print(f"  no report: {e!r}")
        return
    c = r.get("counters", {})
    pc, mc = c.get("plans", {}), c.get("matcher", {})
    states = ", ".join(f"{k} {pc[k]}" for k in ("active", "sampling", "rejected", "retired", "failed") if pc.get(k))
    calls, served = mc.get("calls", 0), mc.get("served", 0)
    line = f"  plans {pc.get('total')} ({states}); served {served} of {calls} calls ({100.0 * served / max(calls, 1):.1f}%)"
    try:
        runs = d.get("runs", [])
        if len(runs) > 1 and calls:
            line += f", last of {len(runs)} runs {100.0 * runs[-1]['served_calls'] * len(runs) / calls:.1f}%"
    except Exception:
        pass
    print(line)
    g = c.get("gemm_tuning", {})
    if g.get("family_algos") is not None:
        print(f"  cuBLASLt few-row families: {g.get('family_algos')} shapes took a family's algorithm,"
              f" {g.get('family_representatives')} representatives asked")
    for dev, m in c.items():
        if dev.startswith("memory.") and m.get("peak_bytes_in_use"):
            print(f"  {dev}: in use {m['bytes_in_use'] / 2**20:.1f} MiB, cached {m['bytes_cached'] / 2**20:.1f} MiB,"
                  f" peak {m['peak_bytes_in_use'] / 2**20:.1f} MiB")
    for p in plans:
        if p["state"] == "rejected" or len(p["ops"]) >= 20:
            hist = " | ".join(f"{h['t_ms']:.0f}ms {h['reason']}" for h in p.get("history", []))
            print(f"  plan {p['id']} {len(p['ops'])} ops {p['state']} hits {p['hits']}: {hist[:700]}")
            for line in p.get("description", "").splitlines():
                if "observable" in line:
                    print("    " + line.strip())
            esc = (p.get("notes") or {}).get("escaping values")
            if esc:
                print("    escaping values: " + esc[:600])


if __name__ == "__main__":
    main()
