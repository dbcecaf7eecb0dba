"""Shared by the LIVEFUSE_TRACE readers (trace_host.py, trace_warmup.py, trace_stalls.py): the
program's thread (the one that called the most ops) and its complete spans in time order, and
where its decode steps end (each ends with the program's argmax)."""
import collections
import json


def program_spans(path):
    d = json.load(open(path))
    ev = d["traceEvents"] if isinstance(d, dict) else d
    xs = [e for e in ev if e.get("ph") == "X"]
    by_tid = collections.Counter(e["tid"] for e in xs if e.get("cat") == "op")
    main = by_tid.most_common(1)[0][0] if by_tid else None
    names = {e["tid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "thread_name"}
    return main, names.get(main), sorted([e for e in xs if e["tid"] == main], key=lambda e: e["ts"])


def step_ends(spans):
    return [e["ts"] + e.get("dur", 0) for e in spans if e.get("name") == "argmax"]
