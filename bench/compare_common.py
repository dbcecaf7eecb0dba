"""What bench/bert/compare.py and bench/gpt/compare.py share: logging, error records, timing
summaries and the per-call timing loop. Imported by path (the scripts run as files):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
"""
import statistics
import time
import traceback


def log(*a):
    print(*a, flush=True)


def error_record(e):
    """An exception as data: the scripts record a failed stage and go on."""
    return {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=8)}


def summary(times):
    """Median, mean, min, p90 and p99 of a list of milliseconds ({} when empty)."""
    s = sorted(times)
    if not s:
        return {}
    def pct(q):
        return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]
    return {"median_ms": statistics.median(s), "mean_ms": statistics.fmean(s), "min_ms": s[0],
            "p90_ms": pct(0.9), "p99_ms": pct(0.99), "iters": len(s)}


def fmt(r, key="median_ms"):
    """A table cell: the value to 3 decimals, 'failed' for an error record, '-' when absent."""
    if not isinstance(r, dict) or r.get(key) is None:
        return "failed" if isinstance(r, dict) and "error" in r else "-"
    return f"{r[key]:.3f}"


def time_loop(step, iters, warmup, before=None):
    """Per-call times of step() in ms, each call followed by a device sync; before() runs ahead
    of each call, outside the timed region. The caller sets the autograd mode."""
    import torch
    for _ in range(warmup):
        if before:
            before()
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        if before:
            before()
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return summary(times)
