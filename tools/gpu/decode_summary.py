#!/usr/bin/env python3
"""One decode process, from its livefuse-generate --json and its LIVEFUSE_REPORT: ms/token and
calls served, then every plan that sampling rejected or that spans a layer (20+ ops), with its
history and any attention left unfused because its probabilities looked observable.
Usage: decode_summary.py GEN_JSON REPORT_JSON [LABEL]   (used by decode.sh and verdicts.sh)"""
import json
import sys


def main():
    gen, report = sys.argv[1], sys.argv[2]
    label = sys.argv[3] if len(sys.argv) > 3 else ""
    try:
        d = json.load(open(gen))
        print(f"{label} ms/token {round(d.get('step_median_ms', -1), 4)} served {d.get('served_calls')}")
    except Exception as e:
        print(f"{label} (no json: {e!r})")
    try:
        plans = json.load(open(report))["plans"]
    except Exception as e:
        print(f"  no report: {e!r}")
        return
    for p in plans:
        if p["state"] == "rejected" or len(p["ops"]) >= 20:
            hist = " | ".join(f"{h['t_ms']:.0f}ms {h['reason']}" for h in p.get("history", []))
            print(f"  plan {p['id']} {len(p['ops'])} ops {p['state']} hits {p['hits']}: {hist[:700]}")
            for line in p.get("description", "").splitlines():
                if "observable" in line:
                    print("    " + line.strip())


if __name__ == "__main__":
    main()
