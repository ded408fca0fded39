#!/usr/bin/env python3
"""The peer a user would pick for plain decoding: a decode step in plain PyTorch.

One greedy decode step of a Qwen3-14B-shaped model (or qwen3-8b, llama-3.1-8b, tiny) for a batch
whose requests all sit at the same context length, written the way a PyTorch user would write it:
bf16 weights (fused QKV and fused gate/up), a static KV cache per layer
[batch, n_kv, ctx+1, head_dim], F.scaled_dot_product_attention with enable_gqa=True, and the whole
step captured in one torch.cuda.CUDAGraph. Weights and KV are random (speed does not depend on
the values).

For each (batch, context) point it reports the median ms/step over N graph replays and compares it
with the memory floor measured in the same run:

    floor = (weight bytes read per step + KV bytes read per step) / device-to-device copy bandwidth

where the weight bytes are every weight except the embedding table (only `batch` rows of it are
read) and the KV bytes are batch*(ctx+1)*layers*n_kv*head_dim*2 (K and V)*2 (bf16 bytes).

Usage (GPU):   python3 torch_decode_step.py --out peer.json
Quick check:   python3 torch_decode_step.py --device cpu --model tiny --points 2x64 --iters 3 --check
"""

import argparse
import functools
import gc
import json
import math
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
import warnings

import torch
import torch.nn.functional as F

SCHEMA_VERSION = 1

# Real shapes; rope scaling (llama-3.1's "llama3" frequency scaling) is left out: it changes the
# values of the RoPE table, not the work of a step.
MODELS = {
    "qwen3-14b": dict(layers=40, hidden=5120, n_q=40, n_kv=8, head_dim=128, mlp=17408,
                      vocab=151936, qk_norm=True, rope_theta=1e6, eps=1e-6),
    "qwen3-8b": dict(layers=36, hidden=4096, n_q=32, n_kv=8, head_dim=128, mlp=12288,
                     vocab=151936, qk_norm=True, rope_theta=1e6, eps=1e-6),
    "llama-3.1-8b": dict(layers=32, hidden=4096, n_q=32, n_kv=8, head_dim=128, mlp=14336,
                         vocab=128256, qk_norm=False, rope_theta=5e5, eps=1e-5),
    "tiny": dict(layers=4, hidden=256, n_q=4, n_kv=2, head_dim=64, mlp=512,
                 vocab=1024, qk_norm=True, rope_theta=1e4, eps=1e-6),
}

# The grid: batch {1,8,32} at 4K and {1,8,16} at 32K.
DEFAULT_POINTS = "1x4096,8x4096,32x4096,1x32768,8x32768,16x32768"

_OOM_TYPES = tuple(t for t in (getattr(torch, "OutOfMemoryError", None),
                               getattr(torch.cuda, "OutOfMemoryError", None)) if t is not None)


def is_oom(exc):
    if _OOM_TYPES and isinstance(exc, _OOM_TYPES):
        return True
    msg = str(exc)
    return "out of memory" in msg or "CUBLAS_STATUS_ALLOC_FAILED" in msg


# ---------------------------------------------------------------------------------------------
# Model

# "fused": F.rms_norm (PyTorch >= 2.4); "manual": the Hugging Face Qwen3RMSNorm/LlamaRMSNorm code.
RMSNORM_IMPL = "fused"


def rms_norm(x, w, eps):
    if RMSNORM_IMPL == "fused" and hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), w, eps)
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return xf.to(x.dtype) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Weights:
    """Random weights, N(0,1) scaled by 1/sqrt(fan_in); norm weights are ones."""

    def __init__(self, cfg, device, dtype, seed):
        gen = torch.Generator(device=device)
        gen.manual_seed(seed)
        H, hd, nq, nkv = cfg["hidden"], cfg["head_dim"], cfg["n_q"], cfg["n_kv"]

        def rand(shape, fan_in=None):
            t = torch.randn(shape, device=device, dtype=dtype, generator=gen)
            if fan_in:
                t.mul_(1.0 / math.sqrt(fan_in))
            return t

        def ones(n):
            return torch.ones(n, device=device, dtype=dtype)

        self.embed = rand((cfg["vocab"], H))
        self.layers = []
        for _ in range(cfg["layers"]):
            lw = dict(
                attn_norm=ones(H),
                wqkv=rand(((nq + 2 * nkv) * hd, H), H),      # fused [q; k; v]
                wo=rand((H, nq * hd), nq * hd),
                mlp_norm=ones(H),
                wgu=rand((2 * cfg["mlp"], H), H),           # fused [gate; up]
                wdown=rand((H, cfg["mlp"]), cfg["mlp"]),
            )
            if cfg["qk_norm"]:
                lw["q_norm"] = ones(hd)
                lw["k_norm"] = ones(hd)
            self.layers.append(lw)
        self.final_norm = ones(H)
        self.lm_head = rand((cfg["vocab"], H), H)          # untied

    def tensors(self, include_embed=True):
        out = [self.embed] if include_embed else []
        for lw in self.layers:
            out.extend(lw.values())
        out += [self.final_norm, self.lm_head]
        return out

    def bytes_read_per_step(self):
        """Every weight except the embedding table (a step reads only `batch` rows of it)."""
        return sum(t.numel() * t.element_size() for t in self.tensors(include_embed=False))

    def total_bytes(self):
        return sum(t.numel() * t.element_size() for t in self.tensors())


class DecodeStep:
    """Static buffers for one (batch, context) point; step() is graph-capturable."""

    def __init__(self, cfg, w, batch, ctx, device, dtype, seed):
        self.cfg, self.w, self.batch, self.ctx = cfg, w, batch, ctx
        self.attn_len = ctx + 1                  # attend positions [0, ctx]; fixed per graph
        gen = torch.Generator(device=device)
        gen.manual_seed(seed + 1000003 * batch + ctx)
        shape = (batch, cfg["n_kv"], self.attn_len, cfg["head_dim"])
        # Allocated for this point only: max_len = ctx + 1. Positions [0, ctx) hold the prompt's
        # (random) KV; position ctx is written by the step.
        self.k_cache, self.v_cache = [], []
        for _ in range(cfg["layers"]):
            self.k_cache.append(torch.randn(shape, device=device, dtype=dtype, generator=gen))
            self.v_cache.append(torch.randn(shape, device=device, dtype=dtype, generator=gen))
        self.tokens = torch.randint(0, cfg["vocab"], (batch,), device=device, generator=gen)
        self.pos = torch.tensor([ctx], device=device, dtype=torch.long)
        hd = cfg["head_dim"]
        self.inv_freq = 1.0 / (cfg["rope_theta"] ** (
            torch.arange(0, hd, 2, device=device, dtype=torch.float32) / hd))
        self.dtype = dtype

    def kv_bytes_read_per_step(self):
        c = self.cfg
        return (self.batch * self.attn_len * c["layers"] * c["n_kv"] * c["head_dim"] * 2
                * (torch.finfo(self.dtype).bits // 8))

    def step(self):
        c, w, B = self.cfg, self.w, self.batch
        nq, nkv, hd, eps = c["n_q"], c["n_kv"], c["head_dim"], c["eps"]
        L = self.attn_len
        x = F.embedding(self.tokens, w.embed)                                  # [B, H]
        freqs = self.pos.to(torch.float32).unsqueeze(-1) * self.inv_freq       # [1, hd/2]
        emb = torch.cat((freqs, freqs), dim=-1)                                # [1, hd]
        cos, sin = emb.cos().to(self.dtype), emb.sin().to(self.dtype)
        for i, lw in enumerate(w.layers):
            h = rms_norm(x, lw["attn_norm"], eps)
            qkv = F.linear(h, lw["wqkv"])
            q, k, v = qkv.split([nq * hd, nkv * hd, nkv * hd], dim=-1)
            q = q.view(B, nq, hd)
            k = k.view(B, nkv, hd)
            v = v.view(B, nkv, hd)
            if c["qk_norm"]:
                q = rms_norm(q, lw["q_norm"], eps)
                k = rms_norm(k, lw["k_norm"], eps)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            kc, vc = self.k_cache[i], self.v_cache[i]
            kc.index_copy_(2, self.pos, k.unsqueeze(2))                        # graph-safe append
            vc.index_copy_(2, self.pos, v.unsqueeze(2))
            o = F.scaled_dot_product_attention(q.unsqueeze(2), kc[:, :, :L], vc[:, :, :L],
                                               enable_gqa=True)                 # [B, nq, 1, hd]
            x = x + F.linear(o.reshape(B, nq * hd), lw["wo"])
            h = rms_norm(x, lw["mlp_norm"], eps)
            gate, up = F.linear(h, lw["wgu"]).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, lw["wdown"])
        x = rms_norm(x, w.final_norm, eps)
        logits = F.linear(x, w.lm_head)                                        # [B, vocab]
        return logits, logits.argmax(dim=-1)

    def sdpa_backend(self):
        """Which fused SDPA kernel PyTorch picks for this point's shapes (best effort)."""
        try:
            c = self.cfg
            q = torch.empty((self.batch, c["n_q"], 1, c["head_dim"]),
                            device=self.pos.device, dtype=self.dtype)
            kv = self.k_cache[0][:, :, :self.attn_len]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                choice = torch._fused_sdp_choice(q, kv, kv, None, 0.0, False, scale=None,
                                                 enable_gqa=True)
            try:
                from torch.nn.attention import SDPBackend
                return SDPBackend(choice).name
            except Exception:
                return str(choice)
        except Exception as e:  # noqa: BLE001 - informational only
            return "unknown (%s)" % type(e).__name__


def reference_step(ds):
    """Independent float64 reference of one step (explicit per-head loops) for --check.

    Works on copies of the caches; returns logits [B, vocab] as float64 on the CPU."""
    c, w, B, ctx = ds.cfg, ds.w, ds.batch, ds.ctx
    nq, nkv, hd, eps = c["n_q"], c["n_kv"], c["head_dim"], c["eps"]
    f = lambda t: t.detach().to("cpu", torch.float64)  # noqa: E731

    def norm(x, wt):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * f(wt)

    half = hd // 2
    inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    ang = ctx * inv
    cs, sn = torch.cos(ang), torch.sin(ang)

    def rope(x):  # rotate-half convention, written per element pair (j, j + hd/2)
        a, b = x[..., :half], x[..., half:]
        return torch.cat((a * cs - b * sn, b * cs + a * sn), dim=-1)

    x = f(w.embed)[ds.tokens.cpu()]
    group = nq // nkv
    for i, lw in enumerate(w.layers):
        h = norm(x, lw["attn_norm"])
        Wq, Wk, Wv = f(lw["wqkv"]).split([nq * hd, nkv * hd, nkv * hd], dim=0)
        q = (h @ Wq.T).view(B, nq, hd)
        k = (h @ Wk.T).view(B, nkv, hd)
        v = (h @ Wv.T).view(B, nkv, hd)
        if c["qk_norm"]:
            q, k = norm(q, lw["q_norm"]), norm(k, lw["k_norm"])
        q, k = rope(q), rope(k)
        K = f(ds.k_cache[i]).clone()
        V = f(ds.v_cache[i]).clone()
        K[:, :, ctx] = k
        V[:, :, ctx] = v
        o = torch.empty(B, nq, hd, dtype=torch.float64)
        for b in range(B):
            for hq in range(nq):
                kvh = hq // group
                s = (K[b, kvh, :ctx + 1] @ q[b, hq]) / math.sqrt(hd)
                p = torch.softmax(s, dim=0)
                o[b, hq] = p @ V[b, kvh, :ctx + 1]
        x = x + o.reshape(B, nq * hd) @ f(lw["wo"]).T
        h = norm(x, lw["mlp_norm"])
        gate, up = (h @ f(lw["wgu"]).T).chunk(2, dim=-1)
        x = x + (gate * torch.sigmoid(gate) * up) @ f(lw["wdown"]).T
    return norm(x, w.final_norm) @ f(w.lm_head).T


# ---------------------------------------------------------------------------------------------
# Timing

def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_calls(fn, iters, device):
    """Per-call times in ms: CUDA events around each call on the GPU, perf_counter on the CPU."""
    if device.type == "cuda":
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        for i in range(iters):
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize(device)
        return [s.elapsed_time(e) for s, e in zip(starts, ends)]
    out = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def copy_bandwidth(device, nbytes, reps):
    """Device-to-device copy of an nbytes tensor; bytes read + written over time, GB/s (1e9)."""
    n = nbytes // 2
    src = torch.empty(n, device=device, dtype=torch.bfloat16)
    src.fill_(1.0)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    sync(device)
    copy = functools.partial(dst.copy_, src)
    ms = time_calls(copy, reps, device)
    moved = 2 * n * 2
    del copy, src, dst
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    med = statistics.median(ms)
    return moved / (med * 1e-3) / 1e9, moved, ms


def free_device_memory(device):
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def run_point(cfg, w, batch, ctx, args, device, dtype, copy_bw_GBps, weight_bytes):
    rec = dict(batch=batch, context=ctx, status="ok",
               cuda_graph=device.type == "cuda" and not args.no_graph)
    try:
        _measure_point(rec, cfg, w, batch, ctx, args, device, dtype, copy_bw_GBps, weight_bytes)
    except Exception as e:  # noqa: BLE001 - an OOM (or any failure) at a point is data
        rec["status"] = "oom" if is_oom(e) else "error"
        msg = str(e).strip()
        rec["error"] = "%s: %s" % (type(e).__name__, msg.splitlines()[0][:500] if msg else "")
    # The point's cache, graph and graph pool are unreferenced once _measure_point's frame (and
    # any traceback holding it) is gone: give the memory back before the next point.
    free_device_memory(device)
    return rec


def sdpa_context(name):
    """Context that restricts SDPA to one backend; a no-op for "auto" (PyTorch's own choice)."""
    import contextlib
    if name == "auto":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel({"flash": SDPBackend.FLASH_ATTENTION,
                        "efficient": SDPBackend.EFFICIENT_ATTENTION,
                        "cudnn": SDPBackend.CUDNN_ATTENTION,
                        "math": SDPBackend.MATH}[name])


def _measure_point(rec, cfg, w, batch, ctx, args, device, dtype, copy_bw_GBps, weight_bytes):
    with sdpa_context(args.sdpa_backend):
        _measure_point_inner(rec, cfg, w, batch, ctx, args, device, dtype, copy_bw_GBps,
                             weight_bytes)


def _measure_point_inner(rec, cfg, w, batch, ctx, args, device, dtype, copy_bw_GBps,
                         weight_bytes):
    use_graph = rec["cuda_graph"]
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    ds = DecodeStep(cfg, w, batch, ctx, device, dtype, args.seed)
    kv_bytes = ds.kv_bytes_read_per_step()
    rec["weight_bytes"] = weight_bytes
    rec["kv_bytes"] = kv_bytes
    rec["kv_cache_bytes_allocated"] = sum(t.numel() * t.element_size()
                                          for t in ds.k_cache + ds.v_cache)
    rec["sdpa_backend"] = ds.sdpa_backend()
    sync(device)

    warmup = max(1, args.warmup)
    if device.type == "cuda":
        # Warm up on a side stream (cuBLAS handles/workspaces, kernel selection), then capture.
        s = torch.cuda.Stream(device)
        s.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(s):
            for _ in range(warmup):
                eager_logits, eager_tokens = ds.step()
        torch.cuda.current_stream(device).wait_stream(s)
        torch.cuda.synchronize(device)
    else:
        for _ in range(warmup):
            eager_logits, eager_tokens = ds.step()

    if use_graph:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_logits, static_tokens = ds.step()
        g.replay()
        torch.cuda.synchronize(device)
        # Same inputs, same cache state: the replay should reproduce the eager step up to
        # bf16 rounding (cuBLAS/cuDNN may pick other kernels under capture; with random weights
        # a near-tie in the argmax can then flip a token now and then).
        rec["graph_vs_eager_token_agreement"] = float(
            (static_tokens == eager_tokens).double().mean())
        rec["graph_vs_eager_max_abs_logit_diff"] = float(
            (static_logits.float() - eager_logits.float()).abs().max())
        fn = g.replay
    else:
        fn = ds.step

    for _ in range(args.replay_warmup):
        fn()
    sync(device)
    ms = time_calls(fn, args.iters, device)

    med = statistics.median(ms)
    floor_ms = (weight_bytes + kv_bytes) / (copy_bw_GBps * 1e9) * 1e3
    rec.update(
        ms_per_step_median=med,
        ms_per_step_min=min(ms),
        ms_per_step_mean=statistics.fmean(ms),
        ms_samples=[round(x, 5) for x in ms],
        floor_ms=floor_ms,
        ratio_to_floor=med / floor_ms,
        output_tokens_per_s=batch / (med * 1e-3),
        achieved_GBps=(weight_bytes + kv_bytes) / (med * 1e-3) / 1e9,
    )
    if device.type == "cuda":
        rec["peak_memory_allocated_bytes"] = torch.cuda.max_memory_allocated(device)

    if args.check:
        ref = reference_step(ds)
        got = eager_logits.detach().to("cpu", torch.float64)
        err = (got - ref).abs().max().item()
        rec["check_max_abs_err"] = err
        rec["check_rel_err"] = err / max(ref.abs().max().item(), 1e-30)
        rec["check_argmax_agree"] = float((eager_tokens.cpu() == ref.argmax(-1)).double().mean())


# ---------------------------------------------------------------------------------------------
# Environment

def git_info():
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        r = subprocess.run(["git", "-C", here, "rev-parse", "--verify", "-q", "HEAD"],
                           capture_output=True, text=True, timeout=10)
        commit = r.stdout.strip()
        if r.returncode != 0 or len(commit) != 40:
            return None, None
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain"], capture_output=True,
                               text=True, timeout=10)
        return commit, (bool(dirty.stdout.strip()) if dirty.returncode == 0 else None)
    except Exception:  # noqa: BLE001
        return None, None


def env_info(device):
    env = dict(hostname=socket.gethostname(), python=platform.python_version(),
               platform=platform.platform(), device=str(device))
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        env.update(gpu=p.name, compute_capability="%d.%d" % (p.major, p.minor),
                   sm_count=p.multi_processor_count, gpu_memory_bytes=p.total_memory)
        try:
            env["cudnn"] = torch.backends.cudnn.version()
        except Exception:  # noqa: BLE001
            pass
        try:
            r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                                "--format=csv,noheader"], capture_output=True, text=True,
                               timeout=20)
            if r.returncode == 0:
                env["driver"] = r.stdout.strip().splitlines()[0]
        except Exception:  # noqa: BLE001
            pass
    else:
        env["gpu"] = None
        env["cpu_threads"] = torch.get_num_threads()
    return env


def parse_points(s):
    pts = []
    for item in s.split(","):
        item = item.strip().lower()
        if not item:
            continue
        b, c = item.split("x")
        c = c.strip()
        mult = 1
        if c.endswith("k"):
            c, mult = c[:-1], 1024
        pts.append((int(b), int(c) * mult))
    if not pts:
        raise ValueError("no points in %r" % s)
    return pts


def print_table(result):
    print()
    c = result["config"]
    print("%s on %s, copy bandwidth %.0f GB/s, weights read/step %.2f GB, cuda graph %s, "
          "sdpa %s, rmsnorm %s" % (
              c["model"], result["env"].get("gpu") or "cpu", result["copy_bandwidth_GBps"],
              c.get("weight_bytes_read_per_step", 0) / 1e9, c["cuda_graph"],
              c["sdpa_backend_requested"], c["rmsnorm"]))
    hdr = "| batch | context | status | ms/step | floor ms | ratio | tokens/s | sdpa |"
    print(hdr)
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for p in result["points"]:
        if p["status"] == "ok":
            print("| %d | %d | ok | %.2f | %.2f | %.2f | %.0f | %s |" % (
                p["batch"], p["context"], p["ms_per_step_median"], p["floor_ms"],
                p["ratio_to_floor"], p["output_tokens_per_s"], p.get("sdpa_backend", "")))
        else:
            print("| %d | %d | %s | - | - | - | - | %s |" % (
                p["batch"], p["context"], p["status"], p.get("error", "")[:60]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="qwen3-14b", choices=sorted(MODELS))
    ap.add_argument("--points", default=DEFAULT_POINTS,
                    help="comma-separated BATCHxCONTEXT (context may end in k), default: %(default)s")
    ap.add_argument("--iters", type=int, default=100, help="timed steps per point")
    ap.add_argument("--warmup", type=int, default=3, help="eager steps before capture")
    ap.add_argument("--replay-warmup", type=int, default=10, help="untimed replays before timing")
    ap.add_argument("--no-graph", action="store_true", help="time eager steps, no CUDA graph")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sdpa-backend", default="auto",
                    choices=["auto", "flash", "efficient", "cudnn", "math"],
                    help="restrict SDPA to one backend (default: PyTorch's own choice)")
    ap.add_argument("--rmsnorm", default="fused", choices=["fused", "manual"],
                    help="F.rms_norm, or the Hugging Face float32 RMSNorm code")
    ap.add_argument("--copy-bytes", type=float, default=None,
                    help="size of the copied tensor for the bandwidth measurement "
                         "(default 4 GiB on cuda, 256 MiB on cpu)")
    ap.add_argument("--copy-reps", type=int, default=20)
    ap.add_argument("--check", action="store_true",
                    help="also compare each point's eager step against a float64 reference "
                         "(slow; for small configs)")
    ap.add_argument("--out", default=None, help="JSON file (rewritten after every point)")
    args = ap.parse_args(argv)

    device = torch.device(args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            sys.exit("CUDA is not available; use --device cpu")
        device = torch.device("cuda", torch.cuda.current_device())
    dtype = getattr(torch, args.dtype)
    global RMSNORM_IMPL
    RMSNORM_IMPL = args.rmsnorm
    cfg = dict(MODELS[args.model])
    try:
        points = parse_points(args.points)
    except ValueError as e:
        ap.error("--points: %s (expected e.g. 1x4096,8x32k)" % e)
    torch.manual_seed(args.seed)

    commit, dirty = git_info()
    copy_bytes = int(args.copy_bytes) if args.copy_bytes else \
        (4 << 30 if device.type == "cuda" else 256 << 20)
    bw, moved, bw_samples = copy_bandwidth(device, copy_bytes, args.copy_reps)
    print("copy bandwidth: %.1f GB/s (%.2f GB tensor, %.2f GB moved per copy, median of %d)" % (
        bw, copy_bytes / 1e9, moved / 1e9, args.copy_reps), flush=True)

    result = dict(
        schema_version=SCHEMA_VERSION,
        tool=dict(name="torch_decode_step", torch=torch.__version__, cuda=torch.version.cuda,
                  git_commit=commit, git_dirty=dirty),
        env=env_info(device),
        config=dict(model=args.model, shape=cfg, dtype=args.dtype, device=args.device,
                    points=[dict(batch=b, context=c) for b, c in points], iters=args.iters,
                    warmup=args.warmup, replay_warmup=args.replay_warmup,
                    cuda_graph=device.type == "cuda" and not args.no_graph, seed=args.seed,
                    copy_bytes=copy_bytes, copy_reps=args.copy_reps,
                    attention="F.scaled_dot_product_attention(enable_gqa=True), static cache "
                              "[batch, n_kv, ctx+1, head_dim]",
                    sdpa_backend_requested=args.sdpa_backend, rmsnorm=args.rmsnorm,
                    floor="(weight_bytes + kv_bytes) / copy_bandwidth"),
        copy_bandwidth_GBps=bw,
        copy_bandwidth_ms_samples=[round(x, 5) for x in bw_samples],
        status="ok",
        points=[],
    )

    def write():
        if args.out:
            tmp = args.out + ".tmp"
            with open(tmp, "w") as fh:
                json.dump(result, fh, indent=1)
                fh.write("\n")
            os.replace(tmp, args.out)

    try:
        w = Weights(cfg, device, dtype, args.seed)
    except Exception as e:  # noqa: BLE001
        result["status"] = "oom" if is_oom(e) else "error"
        result["error"] = "weights: %s: %s" % (type(e).__name__, str(e).strip()[:500])
        for b, c in points:
            result["points"].append(dict(batch=b, context=c, status=result["status"],
                                         error=result["error"]))
        write()
        print_table(result)
        return 1
    weight_bytes = w.bytes_read_per_step()
    result["config"]["weight_bytes_read_per_step"] = weight_bytes
    result["config"]["weight_bytes_total"] = w.total_bytes()
    print("weights: %.2f GB total, %.2f GB read per step" % (w.total_bytes() / 1e9,
                                                              weight_bytes / 1e9), flush=True)
    write()

    for b, c in points:
        rec = run_point(cfg, w, b, c, args, device, dtype, bw, weight_bytes)
        result["points"].append(rec)
        if rec["status"] == "ok":
            extra = ""
            if "check_rel_err" in rec:
                extra = ", check rel err %.2e, argmax agree %.2f" % (rec["check_rel_err"],
                                                                     rec["check_argmax_agree"])
            print("batch %d ctx %d: %.3f ms/step (floor %.3f, x%.2f), %.0f tok/s%s" % (
                b, c, rec["ms_per_step_median"], rec["floor_ms"], rec["ratio_to_floor"],
                rec["output_tokens_per_s"], extra), flush=True)
        else:
            print("batch %d ctx %d: %s (%s)" % (b, c, rec["status"], rec.get("error", "")),
                  flush=True)
        write()

    if any(p["status"] != "ok" for p in result["points"]):
        result["status"] = "partial"
    write()
    print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
