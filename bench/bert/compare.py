#!/usr/bin/env python3
"""BERT encoder: livefuse against PyTorch, on a GPU machine with torch + transformers.

Builds nothing. Given a built `livefuse-bert` binary it
  1. creates a Hugging Face BertModel (random init from --seed, biases and LayerNorm
     parameters perturbed so they matter), saves it as safetensors + config.json,
  2. writes input ids and an attention mask (.npy) for each batch size,
  3. runs livefuse-bert on the same weights and ids (LIVEFUSE=off and on) and compares its
     last_hidden_state with PyTorch's (max abs and relative error; f32 <= 1e-4, f16 <= 2e-2,
     bf16 <= 5e-2 relative to max |reference|),
  4. times in one run: PyTorch eager, a CUDA graph of PyTorch eager,
     torch.compile(mode="reduce-overhead"), livefuse with LIVEFUSE=off and livefuse on
     (steady state, via livefuse-bert --iters/--json), and livefuse's time to steady state,
  5. prints a table and writes everything (with livefuse's LIVEFUSE_REPORT snapshot, the
     per-plan breakdown, when the runtime writes one) as JSON.

Every timing is per forward pass including a device synchronize, the same loop on both
sides (see examples/bert/run.cpp). A variant that fails (torch.compile, graph capture) is
recorded with its error; the script goes on.

  python3 bench/bert/compare.py build/tools/bert/livefuse-bert --preset base --dtype f16 \
      --batch 1,8 --seq 128 --json bert_compare.json
"""
import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from compare_common import error_record, fmt, log, time_loop  # noqa: E402

PRESETS = {
    "tiny": dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=256, max_position_embeddings=128),
    "base": dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, max_position_embeddings=512),
    "large": dict(vocab_size=30522, hidden_size=1024, num_hidden_layers=24,
                  num_attention_heads=16, intermediate_size=4096, max_position_embeddings=512),
}
TORCH_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
TOLERANCE = {"f32": 1e-4, "f16": 2e-2, "bf16": 5e-2}


# ---- model, weights, inputs ------------------------------------------------------------------

def make_model(preset, seed, workdir):
    from transformers import BertConfig, BertModel
    from safetensors.torch import save_file

    cfg = BertConfig(**PRESETS[preset], hidden_act="gelu", layer_norm_eps=1e-12)
    torch.manual_seed(seed)
    model = BertModel(cfg).eval()
    # HF initialises biases to 0 and LayerNorm to (1, 0): perturb them so a bias or a norm
    # parameter wired wrongly in livefuse shows up as an error instead of a no-op.
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias") or "LayerNorm" in name:
                p.add_(torch.randn(p.shape, generator=g) * 0.05)
    weights = os.path.join(workdir, "model.safetensors")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, weights)
    config = os.path.join(workdir, "config.json")
    cfg.to_json_file(config)
    return model, weights, config


def padding_mask(batch, seq):
    """Row r keeps its first seq - r*seq/(2*batch) tokens (as examples/bert/run.cpp)."""
    m = np.zeros((batch, seq), dtype=np.int64)
    for r in range(batch):
        m[r, :max(1, seq - r * seq // (2 * batch))] = 1
    return m


def make_inputs(batch, seq, vocab, seed, workdir):
    g = torch.Generator().manual_seed(seed + 2)
    ids = torch.randint(0, vocab, (batch, seq), generator=g, dtype=torch.int64)
    mask = torch.from_numpy(padding_mask(batch, seq))
    ids_path = os.path.join(workdir, f"ids_b{batch}_s{seq}.npy")
    mask_path = os.path.join(workdir, f"mask_b{batch}_s{seq}.npy")
    np.save(ids_path, ids.numpy())
    np.save(mask_path, mask.numpy())
    return ids, mask, ids_path, mask_path


def errors(got, want):
    d = np.abs(got.astype(np.float64) - want.astype(np.float64))
    scale = float(np.abs(want).max())
    return {
        "max_abs": float(d.max()),
        "rel": float(d.max() / scale) if scale > 0 else float("inf"),
        "rel_l2": float(np.linalg.norm(d) / max(np.linalg.norm(want.astype(np.float64)), 1e-30)),
        "finite": bool(np.isfinite(got).all()),
    }


# ---- timing PyTorch ----------------------------------------------------------------------------

def torch_eager(model, ids, mask, iters, warmup):
    with torch.inference_mode():
        return time_loop(lambda: model(input_ids=ids, attention_mask=mask), iters, warmup)


def torch_cuda_graph(model, ids, mask, iters, warmup):
    with torch.inference_mode():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                model(input_ids=ids, attention_mask=mask)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            model(input_ids=ids, attention_mask=mask)
        return time_loop(graph.replay, iters, warmup)


def torch_compiled(model, ids, mask, iters, warmup):
    compiled = torch.compile(model, mode="reduce-overhead")
    mark = getattr(torch.compiler, "cudagraph_mark_step_begin", lambda: None)

    def step():
        mark()
        compiled(input_ids=ids, attention_mask=mask)

    with torch.inference_mode():
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        first_ms = (time.perf_counter() - t0) * 1e3
        r = time_loop(step, iters, warmup)
    r["first_call_ms"] = first_ms  # compilation included
    return r


# ---- livefuse ------------------------------------------------------------------------------------

def run_livefuse(binary, mode, weights, config, dtype, ids_path, mask_path, out_path, json_path,
                 iters, warmup_ms, report_path, timeout, extra_env=None):
    env = dict(os.environ)
    env["LIVEFUSE"] = mode
    env.update(extra_env or {})
    if report_path:
        env["LIVEFUSE_REPORT"] = report_path
    cmd = [binary, "--weights", weights, "--config", config, "--dtype", dtype, "--device", "cuda",
           "--ids", ids_path, "--mask", mask_path, "--out", out_path, "--iters", str(iters),
           "--warmup-ms", str(warmup_ms), "--max-warmup-ms", str(max(warmup_ms, 60000)),
           "--json", json_path]
    log("  $", f"LIVEFUSE={mode}", " ".join(cmd))
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return {"error": f"timed out after {timeout} s", "stdout": (e.stdout or "")[-4000:]}
    rec = {"rc": p.returncode, "wall_s": time.perf_counter() - t0,
           "stdout": p.stdout[-4000:], "stderr": p.stderr[-4000:]}
    if p.returncode != 0:
        rec["error"] = f"livefuse-bert exited {p.returncode}: {p.stderr.strip()[-800:]}"
        return rec
    with open(json_path) as f:
        rec["result"] = json.load(f)
    if report_path and os.path.exists(report_path):
        try:
            with open(report_path) as f:
                rec["report"] = json.load(f)
        except Exception as e:  # a half-written or non-JSON report is data, not a crash
            rec["report_error"] = repr(e)
    return rec


# ---- main ------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("binary", help="path of the livefuse-bert executable")
    ap.add_argument("--preset", default="base", choices=sorted(PRESETS))
    ap.add_argument("--dtype", default="f16", help="comma list of f32, f16, bf16")
    ap.add_argument("--batch", default="1,8", help="comma list of batch sizes")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20, help="PyTorch warm-up iterations")
    ap.add_argument("--livefuse-warmup-ms", type=float, default=10000,
                    help="livefuse-bert --warmup-ms with fusion on (background compilation)")
    ap.add_argument("--skip", default="", help="comma list of variants to skip: "
                    "eager,cuda_graph,compile,livefuse_off,livefuse_on,livefuse_profile")
    ap.add_argument("--workdir", default=None, help="where weights, inputs, outputs go")
    ap.add_argument("--timeout", type=int, default=900, help="per livefuse-bert run, seconds")
    ap.add_argument("--json", default="bert_compare.json", help="results file")
    args = ap.parse_args()

    if not torch.cuda.is_available():
        sys.exit("compare.py: needs a CUDA GPU (torch.cuda.is_available() is False)")
    if not os.access(args.binary, os.X_OK):
        sys.exit(f"compare.py: {args.binary} is not an executable livefuse-bert")
    dtypes = [d.strip() for d in args.dtype.split(",") if d.strip()]
    for d in dtypes:
        if d not in TORCH_DTYPES:
            sys.exit(f"compare.py: --dtype {d}: expected f32, f16 or bf16")
    batches = [int(b) for b in args.batch.split(",") if b.strip()]
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    workdir = args.workdir or tempfile.mkdtemp(prefix="lf_bert_")
    os.makedirs(workdir, exist_ok=True)
    binary = os.path.abspath(args.binary)
    # The f32 check (1e-4) compares against true f32 matmuls, not TF32.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    import transformers
    results = {"preset": args.preset, "seq": args.seq, "seed": args.seed, "iters": args.iters,
               "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
               "transformers": transformers.__version__, "binary": binary, "workdir": workdir,
               "runs": []}
    log(f"building bert-{args.preset} (seed {args.seed}) in {workdir}")
    model32, weights, config = make_model(args.preset, args.seed, workdir)
    results["attn_implementation"] = getattr(model32.config, "_attn_implementation", None)
    vocab = PRESETS[args.preset]["vocab_size"]
    all_ok = True

    # The f32 model on the GPU is the ground truth for every dtype; each dtype gets a copy
    # (nn.Module.to converts in place).
    ref32 = copy.deepcopy(model32).to("cuda").eval()
    for dt in dtypes:
        m = copy.deepcopy(model32).to(device="cuda", dtype=TORCH_DTYPES[dt]).eval()
        for b in batches:
            run = {"dtype": dt, "batch": b, "seq": args.seq}
            log(f"\n== bert-{args.preset} {dt} batch {b} seq {args.seq}")
            ids, mask, ids_path, mask_path = make_inputs(b, args.seq, vocab, args.seed, workdir)
            ids, mask = ids.cuda(), mask.cuda()
            with torch.inference_mode():
                want = m(input_ids=ids, attention_mask=mask).last_hidden_state.float().cpu().numpy()
                want32 = ref32(input_ids=ids, attention_mask=mask).last_hidden_state.cpu().numpy()
            tol = TOLERANCE[dt]
            # How far PyTorch itself is from f32 in this dtype: the scale for livefuse's error.
            run["torch_vs_f32"] = errors(want, want32)

            for mode in ("off", "on"):
                key = f"livefuse_{mode}"
                if key in skip:
                    continue
                out = os.path.join(workdir, f"out_{dt}_b{b}_{mode}.npy")
                rec = run_livefuse(binary, mode, weights, config, dt, ids_path, mask_path, out,
                                   os.path.join(workdir, f"lf_{dt}_b{b}_{mode}.json"),
                                   args.iters, 2000 if mode == "off" else args.livefuse_warmup_ms,
                                   os.path.join(workdir, f"report_{dt}_b{b}.json")
                                   if mode == "on" else None, args.timeout)
                if "result" in rec:
                    err = errors(np.load(out), want)
                    err["tolerance"] = tol
                    err["ok"] = err["finite"] and err["rel"] <= tol
                    all_ok &= err["ok"]
                    rec["vs_torch"] = err
                    rec["vs_torch_f32"] = errors(np.load(out), want32)
                    t = rec["result"].get("timing", {})
                    rec["timing"] = {k: t.get(k) for k in ("median_ms", "mean_ms", "min_ms",
                                                          "p90_ms", "iters", "iters_to_steady",
                                                          "time_to_steady_ms")}
                    log(f"  livefuse {mode}: median {fmt(t)} ms; vs torch max_abs "
                        f"{err['max_abs']:.3g} rel {err['rel']:.3g} "
                        f"({'ok' if err['ok'] else 'FAIL'} at {tol})")
                else:
                    all_ok = False
                    log(f"  livefuse {mode}: {rec.get('error')}")
                run[key] = rec

            if "livefuse_profile" not in skip and "result" in run.get("livefuse_on", {}):
                # Where the GPU time goes: the fused run again with LIVEFUSE_PROFILE=1 (plans run
                # step by step between events; its timing is not the steady state).
                rec = run_livefuse(binary, "on", weights, config, dt, ids_path, mask_path,
                                   os.path.join(workdir, f"out_{dt}_b{b}_profile.npy"),
                                   os.path.join(workdir, f"lf_{dt}_b{b}_profile.json"),
                                   min(args.iters, 30), args.livefuse_warmup_ms,
                                   os.path.join(workdir, f"report_{dt}_b{b}_profile.json"),
                                   args.timeout, {"LIVEFUSE_PROFILE": "1"})
                run["livefuse_profile"] = {k: rec[k] for k in ("report", "error") if k in rec}

            variants = [("eager", torch_eager), ("cuda_graph", torch_cuda_graph),
                        ("compile", torch_compiled)]
            for name, fn in variants:
                if name in skip:
                    continue
                try:
                    run[f"torch_{name}"] = fn(m, ids, mask, args.iters, args.warmup)
                    log(f"  torch {name}: median {fmt(run[f'torch_{name}'])} ms")
                except Exception as e:  # recorded, never fatal (torch.compile may fail)
                    run[f"torch_{name}"] = error_record(e)
                    log(f"  torch {name}: FAILED: {run[f'torch_{name}']['error'][:300]}")
                torch.cuda.synchronize()
            results["runs"].append(run)
        del m
        torch.cuda.empty_cache()

    results["all_within_tolerance"] = all_ok
    print_table(results)
    print_breakdown(results)
    print_gpu_profile(results)
    with open(args.json, "w") as f:
        json.dump(results, f, indent=2)
    log(f"\nwrote {args.json}")
    return 0 if all_ok else 1


def print_table(results):
    cols = [("torch eager", "torch_eager"), ("torch graph", "torch_cuda_graph"),
            ("compile r-o", "torch_compile"), ("lf off", "livefuse_off"), ("lf on", "livefuse_on")]
    log(f"\nbert-{results['preset']} seq {results['seq']} on {results['gpu']} "
        f"(median ms per forward, sync included)")
    head = f"{'dtype':>5} {'batch':>5} " + " ".join(f"{c:>12}" for c, _ in cols)
    head += f" {'lf steady':>12} {'lf rel err':>11}"
    log(head)
    for r in results["runs"]:
        cells = []
        for _, k in cols:
            v = r.get(k)
            if isinstance(v, dict) and "timing" in v:
                v = v["timing"]
            cells.append(f"{fmt(v):>12}")
        on = r.get("livefuse_on", {})
        steady = on.get("timing", {}).get("time_to_steady_ms")
        err = on.get("vs_torch", {}).get("rel")
        log(f"{r['dtype']:>5} {r['batch']:>5} " + " ".join(cells) +
            f" {(f'{steady:.0f} ms' if steady is not None else '-'):>12}"
            f" {(f'{err:.2e}' if err is not None else '-'):>11}")


def print_breakdown(results):
    """Per plan, from livefuse's own report (LIVEFUSE_REPORT) of each fused run: what was
    fused, how often it served, and what sampling measured fused against eager."""
    for r in results["runs"]:
        rep = r.get("livefuse_on", {}).get("report")
        if not isinstance(rep, dict):
            continue
        plans = rep.get("plans") or []
        log(f"\nlivefuse plans, {r['dtype']} batch {r['batch']}: {len(plans)} "
            f"(mode {rep.get('mode')})")
        log(f"{'id':>4} {'state':>9} {'ops':>4} {'kernels':>7} {'hits':>7} {'fused us':>9} "
            f"{'eager us':>9} {'speedup':>7}  name")
        for p in plans:
            smp = p.get("sampling") or {}
            f = smp.get("fused_median_us")
            e = smp.get("eager_median_us")
            sp = smp.get("speedup")
            log(f"{p.get('id', '?'):>4} {p.get('state', '?'):>9} {len(p.get('ops') or []):>4} "
                f"{len(p.get('kernels') or []):>7} {p.get('hits', 0):>7} "
                f"{(f'{f:.1f}' if f is not None else '-'):>9} "
                f"{(f'{e:.1f}' if e is not None else '-'):>9} "
                f"{(f'{sp:.2f}' if sp is not None else '-'):>7}  {p.get('name', '')}")


def print_gpu_profile(results):
    """Per fusion group of every plan that served, its mean GPU time per replay, from the
    LIVEFUSE_PROFILE=1 run's report: the per-kernel view of where a forward's time goes."""
    for r in results["runs"]:
        rep = r.get("livefuse_profile", {}).get("report")
        if not isinstance(rep, dict):
            continue
        plans = [p for p in rep.get("plans") or [] if p.get("hits", 0) > 0]
        log(f"\nGPU time per fusion group (LIVEFUSE_PROFILE=1), {r['dtype']} batch {r['batch']}")
        by_kind = {}
        for p in plans:
            ops = p.get("ops") or []
            groups = (p.get("details") or p).get("groups") or []
            timed = [g for g in groups if g.get("gpu_us") is not None]
            if not timed:
                continue
            total = sum(g["gpu_us"] for g in timed)
            log(f"  plan {p.get('id')} ({p.get('state')}, {p.get('hits')} hits): "
                f"{total:.1f} us per replay, {len(timed)} steps")
            for g in timed:
                names = ",".join(ops[i].get("op", "?") for i in g.get("ops", []) if i < len(ops))
                log(f"    {g['gpu_us']:8.2f} us  {g.get('kind', ''):14} {names}")
                k = g.get("kind", "")
                by_kind[k] = by_kind.get(k, 0.0) + g["gpu_us"]
        if by_kind:
            log("  by kind, summed over the plans' steps: " +
                ", ".join(f"{k} {v:.1f} us" for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])))


if __name__ == "__main__":
    sys.exit(main())
