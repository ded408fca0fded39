#!/usr/bin/env python3
"""Trains the GQA test model of the accuracy table on one GPU, in minutes, and exports it as a
Hugging Face checkpoint that the suite and transformers both load (scripts/gpu-train.sh runs
it; README, "The GQA test model", says where the result goes).

  python3 accuracy/train/train_gqa.py --pulse build-train/pulse --out OUT [--work DIR]
      [--budget S] [--scale F] [--stages ...] [recipe flags: --help]
  python3 accuracy/train/train_gqa.py --pulse build/pulse --out OUT --device cpu --threads 1
      --size tiny --stages ind:128:600:16,320:1000:8 --tasks passkey --budget 540 ...

Model: a Qwen3 decoder (gqa_spec.py: 6 layers, hidden 256, 8 query heads sharing 4 KV heads of
64 dims, SwiGLU 768, RoPE base 1e6, QK-norm, tied embeddings, 4096-token BPE; 6.95M
parameters). Its modules carry the Hugging Face names, so the state dict is the checkpoint.
--size small/tiny/mid: smaller shapes of the same decoder (GQA kept, 2 query heads a KV head)
for the reduced-scale CPU runs (--device cpu: bf16 autocast, SDPA's CPU kernels, no export;
experiments/results/cpu-2026-12-04-s19/gqa_recipe/).

Data: the suite's own generator. Each task stage runs `pulse synth --format train --split train
--chat chatml --task T... --text N` (accuracy/synth_train.h) in parallel processes with this
stage's seeds (length * 1000 + process), counting tokens with the model's tokenizer; a thread
makes the next stages' data while the GPU trains. The mix (--tasks, --text-share): the four
retrieval tasks (passkey, multi-key needle, variable tracking, key-value retrieval) in equal
parts, 85% of the rows, and natural text from the same corpus, 15%. Rows hold one record each
(prompt + completion + end of turn), padded to the stage's length. The loss is LM_WEIGHT times
the mean next-token loss over prompt and text tokens plus ANSWER_WEIGHT times the mean over the
completion's tokens (the retrieval signal, a few tokens per row, weighted up). Induction
stages ('ind:L:steps:rows'; --induction-share adds such rows to the task stages) train on
repeated random token sequences (induction_rows: segments of 8-32 tokens that occur twice,
from the one-character tokens answers are spelled with, --induction-alphabet), the loss on the
second occurrences alone: the copy-from-context circuit the tasks need, without the tasks'
sparse answers.

Curriculum: STAGES (--stages), induction first, then the tasks from 512 to 16K tokens, most
steps at 512 in small batches (many optimizer steps); each stage stops early should it pass its
share of the --budget left (shares by the expected time, TOK_S; logged). AdamW, warm-up then
cosine decay over the run; bf16 autocast, PyTorch's SDPA (flash) attention. Fixed seeds
throughout. Every --watch-every steps the held-out test-split samples (--watch-lengths,
--watch-tasks) are evaluated as below: train_log.json's watch[] shows when retrieval forms.

Evaluation: the test split (seed 1, what `pulse synth` writes for `pulse accuracy`) at 4K, 8K
and 16K, every task: the share of samples whose whole completion greedy decoding reproduces
(teacher-forced argmax; exact match, stricter than the suite's containment score). Checked:
no evaluation (task, answer) pair or prompt occurs in the training data. Per head: the
attention mass the answer's first step puts on the needle's value (retrieval heads).

Export: OUT/gqa-tiny/ (model.safetensors in bf16, config.json, tokenizer files), loaded back
with transformers' Qwen3ForCausalLM and compared with this model's logits; its greedy tokens on
fixed prompts go to OUT/gqa-tiny/reference.json for tests/test_acc_gqa_tiny.c. OUT/train_log.json
holds the recipe, data, loss curve, times, evaluation, heads and export."""
import argparse
import contextlib
import glob
import hashlib
import json
import math
import os
import subprocess
import sys
import threading
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gqa_spec  # noqa: E402

TASKS = ["passkey", "niah_multikey", "variable_tracking", "kv_retrieval"]
# the curriculum (--stages): 'ind:L:steps:rows' an induction stage (repeated random tokens),
# 'L:steps:rows' the tasks. Recipe 3 (2026-12-04). Recipe 1 (1K-16K at ~128K tokens a step,
# 1388 steps in 270 s) stayed on the answer loss's plateau (answer-token accuracy 0.28: the
# format tokens right, the digits at chance); so did every CPU run of up to ~1200 steps
# (experiments/results/cpu-2026-12-04-s19/gqa_recipe/), where even the plain copy task only
# crept up (0.016 -> 0.063 in 1240 steps): retrieval needs the copy (induction) circuit, and
# that forms after thousands of optimizer steps, not tokens. So: an induction stage first (a
# dense copy signal: ~70 targets a row against ~10 answer tokens), then most steps at 512
# tokens in batches of 16K tokens (7,380 steps in all, 5.3x recipe 1's; ~170 s at TOK_S, the
# budget's shares cut them should small batches run slower), then every length up to 16K to
# carry it over
STAGES = ("ind:256:2000:64,512:4000:32,1024:800:16,2048:300:8,4096:150:8,8192:80:4,"
          "16384:50:2")
TASK_MIX = TASKS  # the tasks of the training rows (--tasks)
# tokens a second on the H200 (the first run's, 2026-12-04; 256's and 512's guessed)
TOK_S = {256: 0.6e6, 512: 0.8e6, 1024: 0.9e6, 2048: 0.95e6, 4096: 0.84e6, 8192: 0.67e6,
         16384: 0.48e6}
TEXT_SHARE = 0.15  # of the rows: natural text; the rest the tasks in equal parts
# induction rows' tokens: 0 any, N the first N one-character tokens (62: digits and letters,
# what the answers are spelled with)
INDUCTION_ALPHABET = 62
INDUCTION_SHARE = 0.0  # induction rows added to the task stages, a share of their rows
REUSE = 3  # each generated row is seen about this many times
ROOM = 64  # a stage of length L generates records for L - ROOM (ChatML markers, completion)
ANSWER_WEIGHT, LM_WEIGHT = 2.0, 1.0
QK_NORM_INIT = 1.0
LR, LR_MIN, WARMUP, WD, CLIP = 3e-3, 3e-4, 200, 0.1, 1.0
EVAL_LENGTHS, EVAL_SAMPLES, EVAL_SEED = (4096, 8192, 16384), 24, 1
# held-out test-split samples evaluated every WATCH_EVERY steps during training
WATCH_EVERY, WATCH_LENGTHS, WATCH_SAMPLES = 250, (1024, 4096), 16
WATCH_TASKS = ("passkey", "niah_multikey")
REF_NEW_TOKENS = 24
# the model's shapes: full is the shipped one (gqa_spec.SHAPE); small for the CPU runs
SIZES = {"full": gqa_spec.SHAPE,
         "small": dict(gqa_spec.SHAPE, hidden_size=128, num_hidden_layers=4,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                       intermediate_size=384),
         "tiny": dict(gqa_spec.SHAPE, hidden_size=128, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                      intermediate_size=256),
         "mid": dict(gqa_spec.SHAPE, hidden_size=192, num_hidden_layers=4,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=48,
                     intermediate_size=576)}
# bf16 attention in flash or memory-efficient kernels only: never the math one, whose T x T
# weights would not fit at 16K (a refusal is an error, not a silent fallback)
FAST_ATTENTION = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]


# ---------------------------------------------------------------- the model (HF names)

class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(n)), eps

    def forward(self, x):  # transformers' Qwen3RMSNorm
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Attention(nn.Module):
    def __init__(self, s):
        super().__init__()
        H, hd = s["hidden_size"], s["head_dim"]
        self.nq, self.nkv, self.hd = s["num_attention_heads"], s["num_key_value_heads"], hd
        self.q_proj = nn.Linear(H, self.nq * hd, bias=False)
        self.k_proj = nn.Linear(H, self.nkv * hd, bias=False)
        self.v_proj = nn.Linear(H, self.nkv * hd, bias=False)
        self.o_proj = nn.Linear(self.nq * hd, H, bias=False)
        self.q_norm = RMSNorm(hd, s["rms_norm_eps"])
        self.k_norm = RMSNorm(hd, s["rms_norm_eps"])
        self.keep = None  # set to a list to receive (q, k) after RoPE (head analysis)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(B, T, self.nq, self.hd)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(B, T, self.nkv, self.hd)).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.nkv, self.hd).transpose(1, 2)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        if self.keep is not None:
            self.keep.append((q.detach(), k.detach()))
        g = self.nq // self.nkv
        o = F.scaled_dot_product_attention(q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1),
                                           is_causal=True)
        return self.o_proj(o.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, s):
        super().__init__()
        H, Fd = s["hidden_size"], s["intermediate_size"]
        self.gate_proj = nn.Linear(H, Fd, bias=False)
        self.up_proj = nn.Linear(H, Fd, bias=False)
        self.down_proj = nn.Linear(Fd, H, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.input_layernorm = RMSNorm(s["hidden_size"], s["rms_norm_eps"])
        self.self_attn = Attention(s)
        self.post_attention_layernorm = RMSNorm(s["hidden_size"], s["rms_norm_eps"])
        self.mlp = MLP(s)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.embed_tokens = nn.Embedding(s["vocab_size"], s["hidden_size"])
        self.layers = nn.ModuleList(Layer(s) for _ in range(s["num_hidden_layers"]))
        self.norm = RMSNorm(s["hidden_size"], s["rms_norm_eps"])


class GQAModel(nn.Module):
    """Qwen3ForCausalLM's computation; state_dict() names are the checkpoint's (tied head)."""

    def __init__(self, s=gqa_spec.SHAPE):
        super().__init__()
        self.s, self.model = s, Decoder(s)
        hd = s["head_dim"]
        inv = 1.0 / (s["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, ids, hidden=False):
        with torch.autocast(ids.device.type, enabled=False):
            pos = torch.arange(ids.shape[1], device=ids.device, dtype=torch.float32)
            f = torch.outer(pos, self.inv_freq)
            emb = torch.cat((f, f), dim=-1)
            cos, sin = emb.cos(), emb.sin()
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        return x if hidden else self.logits(x)

    def logits(self, x):
        return F.linear(self.model.norm(x), self.model.embed_tokens.weight)


def init_weights(model, qk_norm=1.0):
    """Normal(0, 0.02) matrices (the residual outputs scaled down by the depth), norms at 1;
    the QK-norms' weights at qk_norm: with unit-RMS queries and keys a head's logit is at most
    sqrt(head_dim) * qk_norm^2, too flat at first to single out one token of thousands."""
    g = torch.Generator().manual_seed(0)
    n_layers = model.s["num_hidden_layers"]
    for name, p in model.named_parameters():
        if p.dim() == 1:
            nn.init.constant_(p, qk_norm if name.endswith(("q_norm.weight", "k_norm.weight"))
                              else 1.0)
        else:
            std = 0.02 / math.sqrt(2 * n_layers) if name.endswith(("o_proj.weight",
                                                                    "down_proj.weight")) else 0.02
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=g) * std)


# ---------------------------------------------------------------- data

def run_synth(args, length, seed, samples, text, out_dir, split="train", tasks=None):
    cmd = [args.pulse, "synth", "--format", "train", "--split", split, "--chat", "chatml",
           "--length", str(length), "--samples", str(samples), "--seed", str(seed),
           "--tokenizer", gqa_spec.TOKENIZER_DIR, "--out-dir", out_dir] + args.corpus_flags
    os.makedirs(out_dir, exist_ok=True)
    if samples:
        for t in tasks or ["all"]:
            cmd += ["--task", t]
    if text:
        cmd += ["--text", str(text)]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def read_records(pattern):
    out = []
    for path in sorted(glob.glob(pattern)):
        with open(path) as f:
            out += [json.loads(line) for line in f]
    return out


def encode(tok, records):
    """Per record: the ids and each token's role (1 prompt or text, 2 completion or end)."""
    firsts = [r["text"] if r["task"] == "text" else r["prompt"] for r in records]
    seconds = ["" if r["task"] == "text" else r["completion"] for r in records]
    a, b = tok.encode_batch_fast(firsts), tok.encode_batch_fast(seconds)
    out = []
    for r, x, y in zip(records, a, b):
        end = gqa_spec.PAD_ID if r["task"] == "text" else gqa_spec.EOS_ID
        kinds = [1] * len(x.ids) + [2] * (len(y.ids) + 1)
        if r["task"] == "text":
            kinds[-1] = 1
        out.append((x.ids + y.ids + [end], kinds))
    return out


def rows_of(encoded, length):
    ids = np.full((len(encoded), length), gqa_spec.PAD_ID, dtype=np.int16)
    kind = np.zeros((len(encoded), length), dtype=np.int8)
    for i, (x, k) in enumerate(encoded):
        if len(x) > length:
            raise ValueError("a record of %d tokens does not fit a %d row" % (len(x), length))
        ids[i, :len(x)], kind[i, :len(x)] = x, k
    return ids, kind


def induction_alphabet(tok, size):
    """The tokens of induction rows: the whole vocabulary (size 0), or the one-character tokens
    that answers are spelled with (digits, then letters), the first size of them."""
    if not size:
        return None
    chars = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    ids = [tok.token_to_id(c) for c in chars]
    return np.array([i for i in ids if i is not None][:size], dtype=np.int16)


def induction_rows(n, length, seed, vocab, alphabet=None):
    """Repeated random token sequences (the induction warm-up): each row is random tokens in
    which segments of 8-32 tokens occur twice, at random places; the second occurrence's tokens
    after its first are the row's answer tokens (kind 2: predictable only by finding the first
    occurrence and copying what followed it), the rest carry no loss (kind 0)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(3, vocab, size=(n, length), dtype=np.int64).astype(np.int16)
    if alphabet is not None:
        ids = alphabet[rng.integers(0, len(alphabet), size=(n, length))]
    kind = np.zeros((n, length), dtype=np.int8)
    for i in range(n):
        at = 0
        while True:
            m = int(rng.integers(8, 33))
            gap = int(rng.integers(0, max(1, length // 4)))
            a, b = at, at + m + gap
            if b + m > length:
                break
            ids[i, b:b + m] = ids[i, a:a + m]
            kind[i, b + 1:b + m] = 2
            at = b + m + int(rng.integers(0, 8))
    return ids, kind


class Producer(threading.Thread):
    """Makes each stage's rows in turn (pulse synth processes, then tokenization; or random
    token rows for the induction stage), keyed by the stage's index."""

    def __init__(self, args, tok, stages):
        super().__init__(daemon=True)
        self.args, self.tok, self.stages = args, tok, stages
        self.ready = {i: threading.Event() for i in range(len(stages))}
        self.rows, self.info, self.answers, self.prompts, self.error = {}, {}, set(), set(), None

    def run(self):
        try:
            for i, st in enumerate(self.stages):
                self.make(i, st)
        except Exception as e:  # reported by the trainer when it waits
            self.error = e
            for ev in self.ready.values():
                ev.set()

    def make(self, si, st):
        t0, a, jobs = time.time(), self.args, self.args.jobs
        L, n_rows = st["length"], st["steps"] * st["rows"]
        pool = math.ceil(n_rows / a.reuse)
        if st["kind"] == "induction":
            ids, kind = induction_rows(pool, L, 7000 + si, gqa_spec.SHAPE["vocab_size"],
                                       induction_alphabet(self.tok, a.induction_alphabet))
            self.rows[si] = (ids, kind)
            self.info[si] = {"length": L, "kind": "induction", "rows": pool,
                             "answer_tokens": int((kind == 2).sum())}
            print("data %5d: %d induction rows in %.1f s" % (L, pool, time.time() - t0),
                  flush=True)
            self.ready[si].set()
            return
        tasks = a.tasks
        n_text = math.ceil(pool * a.text_share / jobs) if a.text_share > 0 else 0
        n_task = math.ceil(pool * (1 - a.text_share) / len(tasks) / jobs)
        n_ind = int(pool * a.induction_share)
        d = os.path.join(a.work, "data", "%d-%d" % (si, L))
        procs = [run_synth(a, L - ROOM, L * 1000 + p, n_task, n_text, os.path.join(d, str(p)),
                           tasks=tasks) for p in range(jobs)]
        for p in procs:
            _, err = p.communicate()
            if p.returncode:
                raise RuntimeError("pulse synth exit %d: %s" % (p.returncode, err.strip()[-400:]))
        t1 = time.time()
        recs = read_records(os.path.join(d, "*", "*.jsonl"))
        for r in recs:
            if r["task"] != "text":
                self.answers.add((r["task"], tuple(r["answers"])))
                self.prompts.add(hashlib.sha1(r["prompt"].encode()).hexdigest())
        ids, kind = rows_of(encode(self.tok, recs), L)
        if n_ind:
            ii, ik = induction_rows(n_ind, L, 9000 + si, gqa_spec.SHAPE["vocab_size"],
                                    induction_alphabet(self.tok, a.induction_alphabet))
            ids, kind = np.concatenate([ids, ii]), np.concatenate([kind, ik])
        order = np.random.default_rng(L + si).permutation(len(ids))
        self.rows[si] = (ids[order], kind[order])
        by_task = {t: sum(r["task"] == t for r in recs) for t in TASKS + ["text"]}
        by_task["induction"] = n_ind
        self.info[si] = {"length": L, "records": len(recs), "by_task": by_task,
                         "generate_s": round(t1 - t0, 1), "tokenize_s": round(time.time() - t1, 1),
                         "tokens": int((kind > 0).sum()), "answer_tokens": int((kind == 2).sum())}
        print("data %5d: %d records %s, generated in %.1f s, tokenized in %.1f s" % (
            L, len(recs), by_task, t1 - t0, time.time() - t1), flush=True)
        self.ready[si].set()


# ---------------------------------------------------------------- training

def lr_at(args, step, total, time_frac):
    """Linear warm-up, then cosine decay over the run: by steps, or by the budget's time where
    that is further along (a slower GPU still ends at lr_min)."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    p = min(1.0, max((step - args.warmup) / max(1, total - args.warmup), time_frac))
    return args.lr_min + 0.5 * (args.lr - args.lr_min) * (1 + math.cos(math.pi * p))


def losses(model, ids, kind, lm_weight):
    """The mean next-token loss over prompt and text tokens (kind 1) and over answer tokens
    (kind 2), and the answer tokens' argmax hits. With lm_weight 0 only the answer positions'
    logits are computed (the LM head is most of a small model's work)."""
    h = model(ids[:, :-1], hidden=True)
    tgt, k = ids[:, 1:], kind[:, 1:]
    a = k == 2
    ha, ta = h[a], tgt[a]
    la = model.logits(ha).float()
    ans = F.cross_entropy(la, ta) if len(ta) else la.sum() * 0
    hits, n_ans = int((la.argmax(-1) == ta).sum()), len(ta)
    if lm_weight > 0:
        t = k == 1
        lm = F.cross_entropy(model.logits(h[t]).float(), tgt[t]) if t.any() else ans * 0
    else:
        lm = ans.detach() * 0
    return lm, ans, hits, n_ans


def autocast(dev):
    # bf16 on the CPU too: its AMX units run bf16 matmuls ~7x faster than float32
    return torch.autocast(dev.type, dtype=torch.bfloat16)


def attention_kernels(dev):
    # CPU: SDPA's own choice (its flash kernel or the math one; lengths here are short)
    return sdpa_kernel(FAST_ATTENTION) if dev.type == "cuda" else contextlib.nullcontext()


def watch(args, model, tok, recs, dev):
    """The held-out test-split samples' exact-answer share and answer-token accuracy, per
    task@length, during training."""
    out = {}
    model.eval()
    for key, rs in recs.items():
        em, tacc = evaluate(model, tok, rs, batch=max(1, 16384 // int(key.split("@")[1])),
                            dev=dev)
        out[key] = {"exact": round(em, 4), "token_acc": round(tacc, 4)}
    model.train()
    return out


def train(args, model, producer, log, tok, watch_recs):
    dev = args.dev
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and "embed" not in n]
    other = [p for n, p in model.named_parameters() if not (p.dim() == 2 and "embed" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                             {"params": other, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8,
                            fused=dev.type == "cuda")
    stages = producer.stages
    total = sum(st["steps"] for st in stages)
    planned = [st["steps"] * st["rows"] * st["length"] / TOK_S.get(st["length"], 0.8e6)
               for st in stages]  # expected seconds a stage (GPU)
    step, t_train, paused = 0, time.time(), 0.0
    gen = torch.Generator(device=dev).manual_seed(1)
    hits_acc, n_acc = 0, 0

    def elapsed():
        return time.time() - t_train - paused

    def look():
        nonlocal paused
        if not watch_recs:
            return
        tw = time.time()
        res = watch(args, model, tok, watch_recs, dev)
        paused += time.time() - tw
        log["watch"].append({"step": step, "t": round(elapsed(), 1), "eval_s":
                             round(time.time() - tw, 1), "results": res})
        print("watch step %5d  %6.1f s  %s" % (step, elapsed(), "  ".join(
            "%s %.2f/%.2f" % (k, v["exact"], v["token_acc"]) for k, v in res.items())),
            flush=True)

    for si, st in enumerate(stages):
        L, steps, rows = st["length"], st["steps"], st["rows"]
        tw = time.time()
        producer.ready[si].wait()
        if producer.error:
            raise producer.error
        ids_h, kind_h = producer.rows.pop(si)
        ids_d, kind_d = torch.from_numpy(ids_h).to(dev), torch.from_numpy(kind_h).to(dev)
        # this stage's part of the budget left: stages that ran fast leave more to the rest
        share = (args.budget - elapsed()) * planned[si] / sum(planned[si:])
        t0, done, cut, p0 = time.time(), 0, False, paused
        stage = {"kind": st["kind"], "length": L, "rows": rows, "steps_planned": steps,
                 "wait_s": round(t0 - tw, 1), "cap_s": round(share, 1)}
        for i in range(steps):
            if time.time() - t0 - (paused - p0) > share:
                cut = True
                break
            idx = torch.randint(0, len(ids_d), (rows,), device=dev, generator=gen)
            ids, kind = ids_d[idx].long(), kind_d[idx]
            lr = lr_at(args, step, total, elapsed() / args.budget)
            for g in opt.param_groups:
                g["lr"] = lr
            lm_w = args.lm_weight if st["kind"] == "tasks" else 0.0
            with autocast(dev), attention_kernels(dev):
                lm, ans, hits, n_ans = losses(model, ids, kind, lm_w)
                loss = lm_w * lm + args.answer_weight * ans
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            opt.step()
            step, done = step + 1, done + 1
            hits_acc, n_acc = hits_acc + hits, n_acc + n_ans
            if step % args.log_every == 0 or i == steps - 1:
                e = {"step": step, "kind": st["kind"], "length": L, "lm": round(lm.item(), 4),
                     "answer": round(ans.item(), 4),
                     "answer_acc": round(hits_acc / max(1, n_acc), 4),
                     "grad_norm": round(gn.item(), 3), "lr": round(lr, 6),
                     "t": round(elapsed(), 1),
                     "tok_s": round(done * rows * L / (time.time() - t0 - (paused - p0)))}
                hits_acc, n_acc = 0, 0
                log["curve"].append(e)
                print("step %5d  %-9s L %5d  lm %.3f  answer %.3f  answer-acc %.3f  gnorm %.2f  "
                      "lr %.2e  %6.1f s  %.1fK tok/s" % (step, st["kind"], L, e["lm"], e["answer"],
                      e["answer_acc"], e["grad_norm"], e["lr"], e["t"], e["tok_s"] / 1e3),
                      flush=True)
            if args.watch_every and step % args.watch_every == 0:
                look()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t_st = time.time() - t0 - (paused - p0)
        stage.update({"steps": done, "cut_by_budget": cut, "train_s": round(t_st, 1),
                      "tok_s": round(done * rows * L / max(1e-9, t_st))})
        log["stages"].append(stage)
        del ids_d, kind_d
    if args.watch_every and step % args.watch_every:
        look()
    log["train_s"] = round(elapsed(), 1)


# ---------------------------------------------------------------- evaluation

@torch.no_grad()
def evaluate(model, tok, recs, batch, dev):
    """Exact match: every completion token (and the end of turn) is the argmax after its prefix,
    i.e. greedy decoding writes the completion."""
    enc = encode(tok, recs)
    hits, tok_hits, toks = [], 0, 0
    for i in range(0, len(enc), batch):
        part = enc[i:i + batch]
        ids, kind = rows_of(part, max(len(x) for x, _ in part))
        ids = torch.from_numpy(ids).long().to(dev)
        kind = torch.from_numpy(kind).to(dev)
        with autocast(dev), attention_kernels(dev):
            pred = model(ids[:, :-1]).argmax(-1)
        ok = (pred == ids[:, 1:]) | (kind[:, 1:] != 2)
        hits += ok.all(-1).tolist()
        tok_hits += int(((pred == ids[:, 1:]) & (kind[:, 1:] == 2)).sum())
        toks += int((kind[:, 1:] == 2).sum())
    return sum(hits) / max(1, len(hits)), tok_hits / max(1, toks)


@torch.no_grad()
def head_mass(model, tok, recs, dev):
    """Mean attention mass, per layer and query head, that the step writing the answer's first
    digit puts on the needle's value in the context (digits are one token each)."""
    s = model.s
    mass, n = torch.zeros(s["num_hidden_layers"], s["num_attention_heads"]), 0
    attn = [layer.self_attn for layer in model.model.layers]
    for r in recs:
        p, c = tok.encode(r["prompt"]).ids, tok.encode(r["completion"]).ids
        v = tok.encode(r["answers"][0]).ids
        at = next((i for i in range(len(p) - len(v)) if p[i:i + len(v)] == v), None)
        if at is None or c[1:1 + len(v)] != v:
            continue
        for a in attn:
            a.keep = []
        with autocast(dev):
            model(torch.tensor([p + c[:1]], device=dev))  # the next token: the first digit
        for li, a in enumerate(attn):
            q, k = a.keep[0]  # [1, heads, T, hd], [1, kv heads, T, hd]
            k = k[0].repeat_interleave(a.nq // a.nkv, 0).float()
            w = torch.softmax((k @ q[0, :, -1].float().unsqueeze(-1)).squeeze(-1)
                              / math.sqrt(a.hd), dim=-1)
            mass[li] += w[:, at:at + len(v)].sum(-1).cpu()
            a.keep = None
        n += 1
    return (mass / max(1, n)).tolist(), n


# ---------------------------------------------------------------- export and reference

def export(model, out_dir):
    sd = model.state_dict()
    tensors = {name: (tuple(sd[name].shape),
                      sd[name].detach().to(torch.bfloat16).contiguous().view(torch.int16)
                      .cpu().numpy().tobytes())
               for name in gqa_spec.tensor_shapes(model.s)}
    return gqa_spec.write_checkpoint(out_dir, tensors, model.s)


@torch.no_grad()
def reference(model, out_dir, prompts, tok):
    """transformers' Qwen3ForCausalLM from out_dir, in float32 (no TF32): its logits against this
    model's (bf16-rounded weights, float32), and its greedy tokens on the prompts (argmax of its
    logits, step by step, not stopping at the end of turn) with each step's margin (top logit
    minus the second), for tests/test_acc_gqa_tiny.c."""
    from transformers import Qwen3ForCausalLM, __version__ as tf_version
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    hf = Qwen3ForCausalLM.from_pretrained(out_dir, dtype=torch.float32).cuda().eval()
    mine = GQAModel(model.s).cuda()
    mine.load_state_dict({k: v.to(torch.bfloat16).float() for k, v in model.state_dict().items()})
    refs, worst = [], 0.0
    for name, text in prompts:
        ids = tok.encode(text).ids
        x = torch.tensor([ids], device="cuda")
        worst = max(worst, (hf(x).logits - mine(x)).abs().max().item())
        gen, margins = [], []
        for _ in range(REF_NEW_TOKENS):
            top = hf(x).logits[0, -1].topk(2)
            gen.append(int(top.indices[0]))
            margins.append(round(float(top.values[0] - top.values[1]), 4))
            x = torch.cat([x, top.indices[:1].view(1, 1)], dim=1)
        refs.append({"name": name, "text": text, "prompt_ids": ids, "generated_ids": gen,
                     "generated_text": tok.decode(gen, skip_special_tokens=False),
                     "margins": margins})
    doc = {"model": "gqa-tiny", "transformers": tf_version, "torch": torch.__version__,
           "dtype": "float32", "max_abs_logit_diff": worst, "new_tokens": REF_NEW_TOKENS,
           "prompts": refs}
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump(doc, f, indent=1)
    torch.backends.cuda.matmul.allow_tf32 = True
    return worst, refs


# ---------------------------------------------------------------- main

def run(args, log, tok, stages):
    # the evaluation sets first (test split, seed 1), then the training data in the background
    dev = args.dev
    ev_dir, w_dir = os.path.join(args.work, "eval"), os.path.join(args.work, "watch")
    ev = [run_synth(args, L, EVAL_SEED, args.eval_samples, 0, ev_dir, split="test")
          for L in args.eval_lengths]
    wv = [run_synth(args, L, EVAL_SEED, args.watch_samples, 0, w_dir, split="test",
                    tasks=args.watch_tasks) for L in args.watch_lengths]
    producer = Producer(args, tok, stages)
    producer.start()
    model = GQAModel(args.shape).to(dev)
    init_weights(model, args.qk_norm_init)
    if args.init_from:  # a previous run's weights (--save): a curriculum run in parts
        model.load_state_dict(torch.load(args.init_from, map_location=dev))
    for p in wv:
        if p.wait():
            raise RuntimeError("pulse synth (watch set): " + p.stderr.read()[-400:])
    w_recs = read_records(os.path.join(w_dir, "*.jsonl"))
    watch_recs = {"%s@%d" % (t, L): [r for r in w_recs if r["task"] == t and
                                      r["target_tokens"] == L]
                  for L in args.watch_lengths for t in args.watch_tasks}
    watch_recs = {k: v for k, v in watch_recs.items() if v}
    try:
        train(args, model, producer, log, tok, watch_recs)
    finally:
        log["data"] = {str(k): v for k, v in producer.info.items()}
    if args.save:
        torch.save(model.state_dict(), args.save)
    for p in ev:
        if p.wait():
            raise RuntimeError("pulse synth (evaluation set): " + p.stderr.read()[-400:])
    with torch.no_grad():  # evaluate what is exported: bf16 weights
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    model.eval()
    t0, table = time.time(), {}
    ev_recs = read_records(os.path.join(ev_dir, "*.jsonl"))
    for L in args.eval_lengths:
        for t in TASKS:
            recs = [r for r in ev_recs if r["task"] == t and r["target_tokens"] == L]
            em, tacc = evaluate(model, tok, recs, batch=max(1, 65536 // L), dev=dev) \
                if recs else (0, 0)
            table["%s@%d" % (t, L)] = {"exact": round(em, 4), "token_acc": round(tacc, 4),
                                       "n": len(recs)}
    all_recs = ev_recs + w_recs
    seen = sum((r["task"], tuple(r["answers"])) in producer.answers for r in all_recs)
    same = sum(hashlib.sha1(r["prompt"].encode()).hexdigest() in producer.prompts
               for r in all_recs)
    at = [r for r in ev_recs if r["target_tokens"] == args.eval_lengths[0]]
    heads, n_heads = head_mass(model, tok, [r for r in at if r["task"] == "passkey"][:8] +
                               [r for r in at if r["task"] == "niah_multikey"][:8], dev)
    log["eval"] = {"table": table, "eval_s": round(time.time() - t0, 1),
                   "overlap": {"answers_seen_in_training": seen, "prompts_seen": same,
                               "eval_records": len(all_recs),
                               "training_records": len(producer.prompts)},
                   "head_mass": {"samples": n_heads, "length": args.eval_lengths[0],
                                 "per_layer_query_head": heads}}
    print("\n%-20s %8s %9s %4s" % ("task@length", "exact", "token-acc", "n"))
    for k, v in table.items():
        print("%-20s %8.3f %9.3f %4d" % (k, v["exact"], v["token_acc"], v["n"]))
    print("evaluation answers seen in training: %d, prompts: %d (of %d)" % (seen, same,
                                                                          len(all_recs)))
    g = model.s["num_attention_heads"] // model.s["num_key_value_heads"]
    print("attention mass on the needle's value (%d samples at %d), layer: query heads | KV "
          "heads" % (n_heads, args.eval_lengths[0]))
    for li, row in enumerate(heads):
        kv = [sum(row[j * g:(j + 1) * g]) / g for j in range(len(row) // g)]
        print("  %d: %s | %s" % (li, " ".join("%.2f" % x for x in row),
                                 " ".join("%.2f" % x for x in kv)))
    if not args.export:
        return
    out_dir = os.path.join(args.out, "gqa-tiny")
    files, digest = export(model, out_dir)
    short = [r for r in read_records(os.path.join(args.work, "data", "*-1024", "0", "*.jsonl"))
             if r["task"] != "text"]
    prompts = [("text", "Permission is hereby granted, free of charge, to any person")] + \
        [(t, next(r["prompt"] for r in short if r["task"] == t)) for t in TASKS[:3]]
    worst, refs = reference(model, out_dir, prompts, tok)
    log["export"] = {"dir": out_dir, "files": files, "sha256": digest,
                     "hf_max_abs_logit_diff": worst,
                     "reference": [{"name": r["name"], "prompt_tokens": len(r["prompt_ids"]),
                                    "text": r["generated_text"], "min_margin_first_8":
                                    min(r["margins"][:8])} for r in refs]}
    print("export: %s (%d bytes, sha256 %s); transformers max |logit diff| %.2e" % (
        out_dir, files["model.safetensors"], digest[:16], worst))
    for r in refs:
        print("reference %-18s %4d prompt tokens -> %r (min margin %.2f)" % (
            r["name"], len(r["prompt_ids"]), r["generated_text"][:60], min(r["margins"][:8])))


def parse_stages(text):
    """'ind:256:400:32,512:1600:128,...': [kind 'induction' when prefixed ind:] length:steps:rows"""
    out = []
    for part in text.split(","):
        f = part.strip().split(":")
        kind = "induction" if f[0] == "ind" else "tasks"
        L, steps, rows = (int(x) for x in (f[1:] if kind == "induction" else f))
        out.append({"kind": kind, "length": L, "steps": steps, "rows": rows})
    return out


def ints(text):
    return [int(x) for x in text.split(",") if x]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pulse", required=True, help="the pulse binary (CPU build is enough)")
    ap.add_argument("--out", required=True, help="OUT/gqa-tiny/ and OUT/train_log.json")
    ap.add_argument("--work", default="/tmp/gqa-train", help="generated data")
    ap.add_argument("--budget", type=float, default=300, help="training seconds, shared by "
                    "the stages by their expected times (TOK_S)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies every stage's steps")
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 4) - 2))
    ap.add_argument("--corpus", action="append", default=[], help="pulse synth --corpus")
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="cpu: bf16 autocast, SDPA's CPU kernels, no export (the reduced-scale "
                         "runs)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads on the CPU (0: torch's)")
    ap.add_argument("--size", default="full", choices=sorted(SIZES),
                    help="the model's shape: full (gqa_spec.SHAPE, the shipped model) or a "
                         "smaller one for CPU runs (GQA kept: 2 query heads a KV head)")
    ap.add_argument("--rope-theta", type=float, default=0,
                    help="RoPE base instead of the shape's (0: the shape's, 1e6)")
    ap.add_argument("--stages", default=STAGES, help="the curriculum, 'ind:L:steps:rows' for "
                    "the induction warm-up, 'L:steps:rows' for the tasks; comma-separated")
    ap.add_argument("--tasks", default=",".join(TASK_MIX), help="the training rows' tasks")
    ap.add_argument("--text-share", type=float, default=TEXT_SHARE)
    ap.add_argument("--induction-share", type=float, default=INDUCTION_SHARE,
                    help="share of induction rows (repeated random tokens) added to the task "
                         "stages' rows")
    ap.add_argument("--induction-alphabet", type=int, default=INDUCTION_ALPHABET,
                    help="induction rows' tokens: 0 the whole vocabulary, N the first N of the "
                         "one-character tokens (digits, letters)")
    ap.add_argument("--reuse", type=float, default=REUSE)
    ap.add_argument("--answer-weight", type=float, default=ANSWER_WEIGHT)
    ap.add_argument("--lm-weight", type=float, default=LM_WEIGHT)
    ap.add_argument("--qk-norm-init", type=float, default=QK_NORM_INIT,
                    help="the QK-norms' initial weights")
    ap.add_argument("--lr", type=float, default=LR)
    ap.add_argument("--lr-min", type=float, default=LR_MIN)
    ap.add_argument("--warmup", type=int, default=WARMUP)
    ap.add_argument("--eval-lengths", default=",".join(map(str, EVAL_LENGTHS)))
    ap.add_argument("--eval-samples", type=int, default=EVAL_SAMPLES)
    ap.add_argument("--watch-every", type=int, default=WATCH_EVERY,
                    help="steps between evaluations on held-out test-split samples (0: none)")
    ap.add_argument("--watch-lengths", default=",".join(map(str, WATCH_LENGTHS)))
    ap.add_argument("--watch-tasks", default=",".join(WATCH_TASKS))
    ap.add_argument("--watch-samples", type=int, default=WATCH_SAMPLES)
    ap.add_argument("--save", help="write the trained weights (a torch state dict) here")
    ap.add_argument("--init-from", help="start from these weights (--save's file)")
    ap.add_argument("--no-export", dest="export", action="store_false",
                    help="skip the export and transformers' reference (implied by --device cpu)")
    args = ap.parse_args()
    args.corpus_flags = sum((["--corpus", c] for c in args.corpus), [])
    args.dev = torch.device(args.device)
    if args.device == "cpu":
        args.export = False
        if args.threads:
            torch.set_num_threads(args.threads)
    args.shape = dict(SIZES[args.size])
    if args.rope_theta:
        args.shape["rope_theta"] = args.rope_theta
    args.tasks = [t for t in args.tasks.split(",") if t]
    args.watch_tasks = [t for t in args.watch_tasks.split(",") if t]
    args.eval_lengths, args.watch_lengths = ints(args.eval_lengths), ints(args.watch_lengths)
    t_start = time.time()
    torch.manual_seed(0)
    stages = parse_stages(args.stages)
    for st in stages:
        st["steps"] = max(1, round(st["steps"] * args.scale))
    tok = Tokenizer.from_file(os.path.join(gqa_spec.TOKENIZER_DIR, "tokenizer.json"))
    log = {"recipe": {"shape": args.shape, "size": args.size,
                      "params": gqa_spec.param_count(args.shape), "stages": stages,
                      "tasks": args.tasks, "text_share": args.text_share,
                      "induction_share": args.induction_share,
                      "induction_alphabet": args.induction_alphabet, "reuse": args.reuse,
                      "room": ROOM, "answer_weight": args.answer_weight,
                      "lm_weight": args.lm_weight, "qk_norm_init": args.qk_norm_init,
                      "lr": args.lr, "lr_min": args.lr_min,
                      "warmup": args.warmup, "weight_decay": WD, "clip": CLIP,
                      "budget_s": args.budget, "init_from": args.init_from,
                      "scale": args.scale, "jobs": args.jobs,
                      "device": args.device, "threads": torch.get_num_threads(),
                      "watch": {"every": args.watch_every, "lengths": args.watch_lengths,
                                "tasks": args.watch_tasks, "samples": args.watch_samples},
                      "eval": {"lengths": args.eval_lengths, "samples": args.eval_samples},
                      "seeds": "torch 0 (init 0, batches 1); data: train split, seed "
                               "length*1000+process; induction rows: numpy 7000/9000+stage; "
                               "evaluation: test split, seed 1",
                      "corpus": args.corpus or "pulse synth's default"},
           "env": {"torch": torch.__version__, "device": torch.cuda.get_device_name(0)
                   if args.device == "cuda" else "cpu (%d threads)" % torch.get_num_threads()},
           "curve": [], "watch": [], "stages": [], "status": "error"}
    print("recipe:", json.dumps(log["recipe"]), flush=True)
    os.makedirs(args.out, exist_ok=True)
    try:
        run(args, log, tok, stages)
        log["status"] = "ok"
    finally:  # a failed run still leaves its curve and times
        log["total_s"] = round(time.time() - t_start, 1)
        with open(os.path.join(args.out, "train_log.json"), "w") as f:
            json.dump(log, f, indent=1)
        print("%s: total %.1f s (training %s s)" % (log["status"], log["total_s"],
                                                    log.get("train_s")), flush=True)


if __name__ == "__main__":
    main()
