#!/usr/bin/env python3
"""GPT-2 and Llama decoders: livefuse against PyTorch, on a GPU machine with torch + transformers.

Builds nothing. Given a built `livefuse-generate` binary it, for each model and dtype,
  1. creates a random-weight Hugging Face model (GPT2LMHeadModel: GPT-2 small; LlamaForCausalLM
     of Llama-3.2-1B's shape: hidden 2048, 16 layers, 32 heads, 8 KV heads, ffn 8192, vocab
     128256, tied), biases and norm weights perturbed so they matter, and saves it as
     safetensors + config.json,
  2. writes a random prompt (.npy),
  3. runs livefuse-generate on the same weights and prompt (LIVEFUSE=off and on, both KV-cache
     styles) and checks its tokens and the logits it chose them from against Hugging Face's
     forward over the same sequence (teacher forcing): f32 greedy tokens identical, logits
     relative error <= 1e-4 (f32) / 2e-2 (f16, bf16), relative to max |reference logit|;
     also against HF's own greedy `generate`; an f16/bf16 run beyond 2e-2 still passes when it
     is as close to HF's f32 logits as HF in that dtype is (within 25%: both are rounding),
  4. times in the same run: HF eager `generate`, one static-cache decode step in PyTorch eager,
     that step captured as one CUDA graph, livefuse off and livefuse on (per-token medians),
     and the floor: weight bytes / measured device copy bandwidth (read + write),
  5. prints a table and writes everything as JSON.

Every stage that fails (a timeout, a capture error, an API that this transformers lacks) is
recorded with its error and the script goes on; the exit status is 1 when a check failed or a
livefuse run did not complete.

  python3 bench/gpt/compare.py build/tools/generate/livefuse-generate \
      --models gpt2,llama --prompt 32 --steps 64 --json gpt_compare.json
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

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from compare_common import error_record, fmt, log, summary, time_loop  # noqa: E402

MODELS = {
    # GPT-2 small.
    "gpt2": dict(arch="gpt2", config=dict(vocab_size=50257, n_embd=768, n_layer=12, n_head=12,
                                          n_positions=1024, activation_function="gelu_new",
                                          resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
                 dtypes="f32,f16"),
    # Llama-3.2-1B's shape (no rope_scaling: its frequencies are the plain rope_theta ones).
    "llama": dict(arch="llama", config=dict(vocab_size=128256, hidden_size=2048, num_hidden_layers=16,
                                            num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                                            intermediate_size=8192, max_position_embeddings=131072,
                                            rms_norm_eps=1e-5, rope_theta=500000.0,
                                            tie_word_embeddings=True, hidden_act="silu",
                                            attention_bias=False, mlp_bias=False),
                  dtypes="f32,bf16"),
    # Tiny versions of both, for a quick check of the script itself.
    "gpt2-tiny": dict(arch="gpt2", config=dict(vocab_size=512, n_embd=64, n_layer=2, n_head=4,
                                               n_positions=256, activation_function="gelu_new",
                                               resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
                      dtypes="f32"),
    "llama-tiny": dict(arch="llama", config=dict(vocab_size=512, hidden_size=64, num_hidden_layers=2,
                                                 num_attention_heads=4, num_key_value_heads=2,
                                                 head_dim=16, intermediate_size=160,
                                                 max_position_embeddings=512, rms_norm_eps=1e-5,
                                                 rope_theta=10000.0, tie_word_embeddings=False,
                                                 hidden_act="silu"),
                       dtypes="f32"),
}
TOLERANCE = {"f32": 1e-4, "f16": 2e-2, "bf16": 2e-2}
CACHES = ("concat", "static")


def rel_error(got, want):
    """max |got - want| / max |want| (per step rows flattened), and whether got is finite."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    d = np.abs(got - want)
    scale = float(np.abs(want).max())
    return {"max_abs": float(d.max()), "rel": float(d.max() / scale) if scale > 0 else float("inf"),
            "finite": bool(np.isfinite(got).all())}


def first_difference(a, b):
    """Index of the first differing token between two [batch, steps] lists (None: equal)."""
    for r, (x, y) in enumerate(zip(a, b)):
        for i, (p, q) in enumerate(zip(x, y)):
            if p != q:
                return [r, i]
    return None


# ---- model, weights, prompt ------------------------------------------------------------------

def make_model(name, seed, workdir):
    import torch
    from safetensors.torch import save_file
    spec = MODELS[name]
    if spec["arch"] == "gpt2":
        from transformers import GPT2Config as Cfg, GPT2LMHeadModel as Model
    else:
        from transformers import LlamaConfig as Cfg, LlamaForCausalLM as Model
    cfg = Cfg(**spec["config"])
    torch.manual_seed(seed)
    model = Model(cfg).eval()
    # HF initialises biases to 0 and norms to 1: perturb them so a bias or a norm parameter
    # wired wrongly in livefuse shows up as an error instead of a no-op.
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith(".bias") or "ln_" in pname or "norm" in pname:
                p.add_(torch.randn(p.shape, generator=g) * 0.05)
    sd = model.state_dict()
    tied = getattr(cfg, "tie_word_embeddings", True)
    if tied:
        sd.pop("lm_head.weight", None)  # shares the embedding's memory; livefuse ties it back
    weights = os.path.join(workdir, f"{name}.safetensors")
    save_file({k: v.detach().contiguous().clone() for k, v in sd.items()}, weights)
    cdir = os.path.join(workdir, f"{name}-config")
    os.makedirs(cdir, exist_ok=True)
    cfg.save_pretrained(cdir)
    return model, weights, os.path.join(cdir, "config.json")


def make_prompt(batch, length, vocab, seed, workdir, name):
    rng = np.random.default_rng(seed + 2)
    ids = rng.integers(0, vocab, size=(batch, length), dtype=np.int64)
    path = os.path.join(workdir, f"prompt_{name}_b{batch}_t{length}.npy")
    np.save(path, ids)
    return ids, path


def copy_bandwidth():
    """Device copy bandwidth, bytes read + written per second, of a 1 GiB copy."""
    import torch
    n = 1 << 28
    a = torch.empty(n, dtype=torch.float32, device="cuda")
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        t0 = time.perf_counter()
        b.copy_(a)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return 2 * a.numel() * a.element_size() / min(times)


# ---- checks against Hugging Face ------------------------------------------------------------

def hf_logits_along(model, prompt, tokens):
    """HF's logits for every new token of `tokens` ([batch, steps]) given the prompt, by one
    forward over prompt + tokens[:-1] (teacher forcing): [steps, batch, vocab] float32."""
    import torch
    T = prompt.shape[1]
    seq = np.concatenate([prompt, np.asarray(tokens)[:, :-1]], axis=1)
    with torch.inference_mode():
        out = model(input_ids=torch.from_numpy(seq).cuda(), use_cache=False).logits
    return out[:, T - 1:, :].float().transpose(0, 1).cpu().numpy()


def no_eos(model):
    """Generation runs its full length: no EOS stop (min_new_tokens would instead change the
    logits, masking EOS, which livefuse does not)."""
    gc = getattr(model, "generation_config", None)
    if gc is not None:
        gc.eos_token_id = None
        gc.pad_token_id = 0


def hf_greedy(model, prompt, steps):
    import torch
    with torch.inference_mode():
        out = model.generate(torch.from_numpy(prompt).cuda(), max_new_tokens=steps,
                             do_sample=False, num_beams=1)
    return out[:, prompt.shape[1]:].cpu().tolist()


# ---- timing PyTorch ---------------------------------------------------------------------------

def time_hf_generate(model, prompt, steps, iters):
    import torch
    ids = torch.from_numpy(prompt).cuda()
    times = []
    with torch.inference_mode():
        for i in range(iters + 1):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            model.generate(ids, max_new_tokens=steps, do_sample=False, num_beams=1)
            torch.cuda.synchronize()
            if i > 0:  # the first call warms up
                times.append((time.perf_counter() - t0) * 1e3 / steps)
    r = summary(times)
    r["what"] = "generate() wall time / new tokens (prefill included)"
    return r


def static_step(model, prompt, steps):
    """A StaticCache prefilled with the prompt, a decode-step closure at position T and a reset
    that puts the cache back at length T, so that every timed step writes the same slot (the
    time of one step, not of a generation). Since transformers 5.x each StaticLayer counts its
    own length on the device (`cumulative_length`, advanced by every update and ignoring
    cache_position): without the reset, the 65th repeated step writes past max_cache_len."""
    import torch
    from transformers import StaticCache
    B, T = prompt.shape
    try:
        cache = StaticCache(config=model.config, max_cache_len=T + steps)
    except TypeError:  # transformers 4.x signature
        cache = StaticCache(config=model.config, max_batch_size=B, max_cache_len=T + steps,
                            device="cuda", dtype=model.dtype)
    ids = torch.from_numpy(prompt).cuda()
    with torch.inference_mode():
        out = model(input_ids=ids, past_key_values=cache, cache_position=torch.arange(T, device="cuda"),
                    use_cache=True)
    nxt = out.logits[:, -1:].argmax(-1).clone()
    pos = torch.tensor([T], device="cuda")
    counters = [layer.cumulative_length for layer in getattr(cache, "layers", [])
                if isinstance(getattr(layer, "cumulative_length", None), torch.Tensor)]

    def step():
        return model(input_ids=nxt, past_key_values=cache, cache_position=pos, use_cache=True).logits

    def reset():
        for c in counters:
            c.fill_(T)

    return step, reset


def time_static_eager(model, prompt, steps, iters, warmup):
    import torch
    step, reset = static_step(model, prompt, steps)
    with torch.inference_mode():
        return time_loop(step, iters, warmup, reset)


def time_static_graph(model, prompt, steps, iters, warmup):
    import torch
    step, reset = static_step(model, prompt, steps)
    with torch.inference_mode():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                reset()
                step()
        torch.cuda.current_stream().wait_stream(side)
        reset()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        return time_loop(graph.replay, iters, warmup, reset)


# ---- livefuse ------------------------------------------------------------------------------------

def run_livefuse(binary, mode, weights, config, dtype, cache, prompt_path, steps, runs, workdir,
                 tag, timeout, logits):
    env = dict(os.environ)
    env["LIVEFUSE"] = mode
    # The report of every run with fusion on: which plans sampling kept or rejected, and why
    # (a GPT-2 process now and then loses its layer plan and runs 3x slower).
    report = os.path.join(workdir, f"report_{tag}.json")
    if mode != "off":
        env["LIVEFUSE_REPORT"] = report
    out = os.path.join(workdir, f"ids_{tag}.npy")
    js = os.path.join(workdir, f"lf_{tag}.json")
    cmd = [binary, "--weights", weights, "--config", config, "--dtype", dtype, "--device", "cuda",
           "--ids", prompt_path, "--steps", str(steps), "--cache", cache, "--runs", str(runs),
           "--out", out, "--json", js, "--quiet"]
    lg = os.path.join(workdir, f"logits_{tag}.npy")
    for stale in (out, js, lg, report):  # never read a previous run's output as this one's
        if os.path.exists(stale):
            os.remove(stale)
    if logits:
        cmd += ["--logits", lg]
    log("  $", f"LIVEFUSE={mode}", " ".join(cmd))
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return {"error": f"timed out after {timeout} s", "stdout": str(e.stdout or "")[-4000:]}
    rec = {"rc": p.returncode, "wall_s": time.perf_counter() - t0, "stderr": p.stderr[-4000:]}
    if p.returncode != 0:
        rec["error"] = f"livefuse-generate exited {p.returncode}: {p.stderr.strip()[-800:]}"
    try:
        with open(js) as f:
            rec["result"] = json.load(f)
        rec["tokens"] = np.load(out).tolist()
        if logits:
            rec["logits_path"] = lg
    except Exception as e:  # a missing output is data, not a crash
        rec.setdefault("error", f"no output: {e!r}")
    rec["plans"] = layer_plans(report)
    for pl in rec["plans"]:
        if pl["state"] == "rejected":
            log(f"  plan {pl['id']} ({pl['ops']} ops) rejected: {' | '.join(pl['sampling'])}")
    return rec


def layer_plans(report):
    """Plans of 20+ ops (a layer) in a livefuse report: state, hits and the sampling verdicts."""
    try:
        with open(report) as f:
            plans = json.load(f)["plans"]
    except Exception:
        return []
    return [{"id": p["id"], "ops": len(p["ops"]), "state": p["state"], "hits": p["hits"],
             "sampling": [h["reason"] for h in p.get("history", []) if "sampl" in h["reason"]]}
            for p in plans if len(p["ops"]) >= 20]


def check_run(rec, want_logits, hf_tokens, dtype, ref32=None):
    """Tokens and logits of one livefuse run against HF (want_logits: HF in the run's dtype along
    livefuse's own tokens; hf_tokens: HF's greedy generate; ref32: HF in f32 along the same
    tokens, for f16/bf16 runs: what both low-precision results are trying to compute)."""
    got = np.load(rec["logits_path"])
    err = rel_error(got, want_logits)
    err["tolerance"] = TOLERANCE[dtype]
    hf_argmax = want_logits.argmax(-1).T.tolist()  # [batch, steps]
    err["tokens_equal_hf_argmax"] = hf_argmax == rec["tokens"]
    err["tokens_equal_hf_generate"] = hf_tokens == rec["tokens"] if hf_tokens is not None else None
    err["first_difference_vs_hf_generate"] = (first_difference(rec["tokens"], hf_tokens)
                                              if hf_tokens is not None else None)
    err["within_tolerance"] = err["finite"] and err["rel"] <= TOLERANCE[dtype]
    if ref32 is not None:
        # Two low-precision results differ by the rounding of both; against the f32 result,
        # livefuse must be as close as HF itself is (within 25%): then a gap to HF beyond the
        # tolerance is HF's rounding as much as livefuse's, and is reported, not hidden.
        err["hf_vs_f32"] = rel_error(want_logits, ref32)["rel"]
        err["livefuse_vs_f32"] = rel_error(got, ref32)["rel"]
        err["as_close_to_f32_as_hf"] = err["livefuse_vs_f32"] <= 1.25 * err["hf_vs_f32"]
    # Greedy tokens must be HF's exactly in f32; in f16/bf16 rounding may legitimately pick
    # another token at a near-tie, so only the logits (along livefuse's tokens) are checked.
    tokens_ok = err["tokens_equal_hf_argmax"] and err["tokens_equal_hf_generate"] is not False
    close = err["within_tolerance"] or (err["finite"] and err.get("as_close_to_f32_as_hf", False))
    err["ok"] = close and (dtype != "f32" or tokens_ok)
    return err


# ---- main ------------------------------------------------------------------------------------------

def bench_model(args, name, binary, workdir, bw, skip):
    import torch
    spec = MODELS[name]
    runs = []
    log(f"\n==== {name}: building random weights (seed {args.seed}) in {workdir}")
    model32, weights, config = make_model(name, args.seed, workdir)
    nparams = sum(p.numel() for p in model32.parameters())  # unique: a tied head counts once
    vocab = spec["config"]["vocab_size"]
    prompt, prompt_path = make_prompt(args.batch, args.prompt, vocab, args.seed, workdir, name)
    # "f16" applies to every model; "gpt2:f16" to the one named.
    dtypes = []
    for item in (args.dtype or spec["dtypes"]).split(","):
        m, _, d = item.rpartition(":")
        if d and (not m or m == name):
            dtypes.append(d)
    for dt in dtypes:
        tdt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dt]
        run = {"model": name, "dtype": dt, "batch": args.batch, "prompt": args.prompt,
               "steps": args.steps, "parameters": nparams,
               "weight_bytes": nparams * torch.finfo(tdt).bits // 8}
        run["floor_ms"] = run["weight_bytes"] / bw * 1e3 if bw else None
        log(f"\n== {name} {dt}: {nparams / 1e6:.1f} M parameters, floor "
            f"{fmt(run, 'floor_ms')} ms/token")
        try:
            # A copy per dtype (nn.Module.to converts in place): every dtype from the f32 weights.
            m = copy.deepcopy(model32).to(device="cuda", dtype=tdt).eval()
            no_eos(m)
        except Exception as e:
            run["error"] = error_record(e)
            runs.append(run)
            continue
        try:
            hf_tokens = hf_greedy(m, prompt, args.steps)
            run["hf_tokens"] = hf_tokens
        except Exception as e:
            hf_tokens = None
            run["hf_generate_check"] = error_record(e)
            log(f"  hf generate (check): FAILED {run['hf_generate_check']['error'][:300]}")
        m32 = None  # HF in f32 on the GPU, made when a low-precision check needs it
        for mode in ("off", "on"):
            for cache in CACHES:
                key = f"livefuse_{mode}_{cache}"
                if key in skip or f"livefuse_{mode}" in skip:
                    continue
                tag = f"{name}_{dt}_{mode}_{cache}"
                # Check run (the last of its runs, fused when on, records the logits) ...
                rec = run_livefuse(binary, mode, weights, config, dt, cache, prompt_path,
                                   args.steps, 1 if mode == "off" else args.livefuse_runs,
                                   workdir, tag + "_check", args.timeout, True)
                if "logits_path" in rec:
                    try:
                        want = hf_logits_along(m, prompt, rec["tokens"])
                        ref32 = None
                        if dt != "f32":
                            if m32 is None:
                                m32 = copy.deepcopy(model32).to(device="cuda").eval()
                            ref32 = hf_logits_along(m32, prompt, rec["tokens"])
                        rec["vs_hf"] = check_run(rec, want, hf_tokens, dt, ref32)
                    except Exception as e:
                        rec["vs_hf"] = dict(error_record(e), ok=False)
                # ... and a timing run without the logits' copies to the host.
                t = run_livefuse(binary, mode, weights, config, dt, cache, prompt_path, args.steps,
                                 args.livefuse_runs, workdir, tag, args.timeout, False)
                res = t.get("result", {})
                rec["timing"] = {k: res.get(k) for k in ("prefill_ms", "step_median_ms", "step_p99_ms",
                                                        "tokens_per_s", "served_calls", "active_plans",
                                                        "warmup_to_served_ms", "warmup_max_step_ms",
                                                        "first_run_step_ms", "first_run_first_served_step")}
                rec["timing"]["median_ms"] = res.get("step_median_ms")
                if "error" in t:
                    rec["timing_error"] = t["error"]
                v = rec.get("vs_hf", {})
                vs32 = (f" (vs HF f32: livefuse {v['livefuse_vs_f32']:.3g}, HF {dt} {v['hf_vs_f32']:.3g})"
                        if "hf_vs_f32" in v else "")
                log(f"  livefuse {mode} {cache}: {fmt(rec['timing'])} ms/token, served "
                    f"{rec['timing'].get('served_calls')}; vs HF rel {v.get('rel', float('nan')):.3g}{vs32}, "
                    f"tokens = HF {v.get('tokens_equal_hf_generate')} "
                    f"({'ok' if v.get('ok') else 'FAIL'}){' ' + rec['error'] if 'error' in rec else ''}")
                rec.pop("logits_path", None)
                run[key] = rec
        del m32
        torch.cuda.empty_cache()
        variants = [("hf_generate", lambda: time_hf_generate(m, prompt, args.steps, args.hf_iters)),
                    ("torch_static_eager", lambda: time_static_eager(m, prompt, args.steps, args.iters, args.warmup)),
                    ("torch_static_graph", lambda: time_static_graph(m, prompt, args.steps, args.iters, args.warmup))]
        for vname, fn in variants:
            if vname in skip:
                continue
            try:
                run[vname] = fn()
                log(f"  {vname}: {fmt(run[vname])} ms/token")
            except Exception as e:  # recorded, never fatal
                run[vname] = error_record(e)
                log(f"  {vname}: FAILED {run[vname]['error'][:300]}")
            torch.cuda.synchronize()
        runs.append(run)
        del m
        torch.cuda.empty_cache()
    return runs


def run_ok(run):
    ok = "error" not in run
    for k, v in run.items():
        if k.startswith("livefuse_") and isinstance(v, dict):
            ok &= "error" not in v and v.get("vs_hf", {}).get("ok", False)
    return ok


def print_table(results):
    cols = [("HF generate", "hf_generate"), ("static eager", "torch_static_eager"),
            ("static graph", "torch_static_graph")]
    cols += [(f"lf {m} {c}", f"livefuse_{m}_{c}") for m in ("off", "on") for c in CACHES]
    log(f"\nms per token, batch {results['batch']}, prompt {results['prompt']}, "
        f"{results['steps']} new tokens, greedy, on {results['gpu']} "
        f"(copy bandwidth {results.get('copy_bandwidth_gbs') or 0:.0f} GB/s)")
    head = f"{'model':>10} {'dtype':>5} {'floor':>7} " + " ".join(f"{c:>15}" for c, _ in cols) + "  check"
    log(head)
    for r in results["runs"]:
        cells = []
        for _, k in cols:
            v = r.get(k)
            if isinstance(v, dict) and "timing" in v:
                v = v["timing"]
            cells.append(f"{fmt(v):>15}")
        log(f"{r['model']:>10} {r['dtype']:>5} {fmt(r, 'floor_ms'):>7} " + " ".join(cells) +
            f"  {'ok' if run_ok(r) else 'FAIL'}")
    # Warm-up (issue targets: first fused token <= 1 s; no warm-up token over 2x an eager one):
    # from the start of each livefuse process's first run, against the off run's median.
    for r in results["runs"]:
        for c in CACHES:
            on = (r.get(f"livefuse_on_{c}") or {}).get("timing") or {}
            off = (r.get(f"livefuse_off_{c}") or {}).get("timing") or {}
            if not on:
                continue
            first, worst, eager = (on.get("warmup_to_served_ms"), on.get("warmup_max_step_ms"),
                                   off.get("median_ms"))
            ratio = worst / eager if worst and eager else None
            served = ("no plan served in any run" if first is None or first < 0
                      else f"plans serving {first:.0f} ms into the first run (decode + prefill time)")
            slowest = "-" if not worst else f"{worst:.3f} ms"
            vs = f" = {ratio:.2f}x lf off's median" if ratio else ""
            # The same tokens of the off process's first run: eager pays its own cold start there.
            on_steps, off_steps = on.get("first_run_step_ms") or [], off.get("first_run_step_ms") or []
            upto = on.get("first_run_first_served_step")
            upto = len(on_steps) if upto is None or upto < 0 else upto + 1
            if on_steps and off_steps:
                n = min(upto, len(off_steps))
                worst_k = max(range(n), key=lambda k: on_steps[k] / off_steps[k]) if n else None
                if worst_k is not None:
                    vs += (f"; against off's first run token by token, at most "
                           f"{on_steps[worst_k] / off_steps[worst_k]:.2f}x (token {worst_k}: "
                           f"{on_steps[worst_k]:.3f} vs {off_steps[worst_k]:.3f} ms), off's own "
                           f"slowest of those {max(off_steps[:n]):.3f} ms")
            log(f"  warm-up {r['model']} {r['dtype']} {c}: {served}; slowest token until then {slowest}{vs}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("binary", help="path of the livefuse-generate executable")
    ap.add_argument("--models", default="gpt2,llama", help=f"comma list of {', '.join(MODELS)}")
    ap.add_argument("--dtype", default=None, help="comma list, MODEL:DTYPE for one model (default: gpt2 f32,f16; llama f32,bf16)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--iters", type=int, default=100, help="timed static-cache steps")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--hf-iters", type=int, default=3, help="timed HF generate calls")
    ap.add_argument("--livefuse-runs", type=int, default=6,
                    help="generations per fused livefuse run (plans form in the first ones)")
    ap.add_argument("--skip", default="", help="comma list: hf_generate, torch_static_eager, "
                    "torch_static_graph, livefuse_off, livefuse_on, livefuse_on_static, ...")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--timeout", type=int, default=900, help="per livefuse-generate run, seconds")
    ap.add_argument("--json", default="gpt_compare.json")
    args = ap.parse_args()

    import torch
    if not torch.cuda.is_available():
        sys.exit("compare.py: needs a CUDA GPU (torch.cuda.is_available() is False)")
    if not os.access(args.binary, os.X_OK):
        sys.exit(f"compare.py: {args.binary} is not an executable livefuse-generate")
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    for n in names:
        if n not in MODELS:
            sys.exit(f"compare.py: unknown model {n} ({', '.join(MODELS)})")
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    workdir = args.workdir or tempfile.mkdtemp(prefix="lf_gpt_")
    os.makedirs(workdir, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False  # the f32 check is against true f32 matmuls
    torch.backends.cudnn.allow_tf32 = False
    import transformers
    results = {"batch": args.batch, "prompt": args.prompt, "steps": args.steps, "seed": args.seed,
               "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
               "transformers": transformers.__version__, "binary": os.path.abspath(args.binary),
               "workdir": workdir, "runs": []}
    try:
        bw = copy_bandwidth()
        results["copy_bandwidth_gbs"] = bw / 1e9
    except Exception as e:
        bw = None
        results["copy_bandwidth"] = error_record(e)
    for n in names:
        try:
            results["runs"] += bench_model(args, n, os.path.abspath(args.binary), workdir, bw, skip)
        except Exception as e:  # one model failing leaves the other's results
            results["runs"].append({"model": n, "dtype": "-", "error": error_record(e)})
            log(f"{n}: FAILED {results['runs'][-1]['error']['error'][:300]}")
        with open(args.json, "w") as f:  # partial results survive a later crash
            json.dump(results, f, indent=2)
    results["all_ok"] = all(run_ok(r) for r in results["runs"])
    print_table(results)
    with open(args.json, "w") as f:
        json.dump(results, f, indent=2)
    log(f"\nwrote {args.json}")
    return 0 if results["all_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
