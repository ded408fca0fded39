"""The GQA test model's shape and its Hugging Face layout, shared by the trainer (train_gqa.py)
and the numpy-only export check (check_export.py): the tensor names and shapes, config.json,
and the writer of the checkpoint directory that both the suite (accuracy/model_load.c) and
transformers' Qwen3ForCausalLM load. Needs numpy alone (the safetensors
file is written here: a little-endian u64 header length, the JSON header, the data).

The model is a Qwen3 decoder: RMSNorm before attention and MLP, QK-norm on each head, RoPE
(rotating halves), grouped-query attention, a SwiGLU MLP, the LM head tied to the embedding
(no lm_head tensor: the suite and transformers take the embedding)."""
import hashlib
import json
import os
import shutil

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZER_DIR = os.path.join(HERE, "tokenizer")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
MAX_BYTES = 15 << 20  # model.safetensors must stay under this (one returned file, 16 MiB)

SHAPE = {
    "vocab_size": 4096,
    "hidden_size": 256,
    "num_hidden_layers": 6,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "intermediate_size": 768,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
}
EOS_ID, PAD_ID = 2, 0  # <|im_end|>, <|endoftext|> (accuracy/train/tokenizer)


def tensor_shapes(s=SHAPE):
    """Every tensor of the checkpoint: Hugging Face name -> shape (rows, cols) or (n,)."""
    H, V, F, hd = s["hidden_size"], s["vocab_size"], s["intermediate_size"], s["head_dim"]
    q, kv = s["num_attention_heads"] * hd, s["num_key_value_heads"] * hd
    t = {"model.embed_tokens.weight": (V, H)}
    for i in range(s["num_hidden_layers"]):
        p = "model.layers.%d." % i
        t.update({
            p + "input_layernorm.weight": (H,),
            p + "self_attn.q_proj.weight": (q, H),
            p + "self_attn.k_proj.weight": (kv, H),
            p + "self_attn.v_proj.weight": (kv, H),
            p + "self_attn.q_norm.weight": (hd,),
            p + "self_attn.k_norm.weight": (hd,),
            p + "self_attn.o_proj.weight": (H, q),
            p + "post_attention_layernorm.weight": (H,),
            p + "mlp.gate_proj.weight": (F, H),
            p + "mlp.up_proj.weight": (F, H),
            p + "mlp.down_proj.weight": (H, F),
        })
    t["model.norm.weight"] = (H,)
    return t


def param_count(s=SHAPE):
    return sum(int(np.prod(v)) for v in tensor_shapes(s).values())


def config(s=SHAPE):
    """config.json: model_type qwen3 with every field accuracy/safetensors.c reads, and the RoPE
    base both at the top (the suite, older transformers) and in rope_parameters (transformers 5)."""
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        **{k: s[k] for k in ("vocab_size", "hidden_size", "intermediate_size",
                             "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                             "head_dim", "rms_norm_eps", "rope_theta")},
        "rope_parameters": {"rope_type": "default", "rope_theta": s["rope_theta"]},
        "hidden_act": "silu",
        "max_position_embeddings": 32768,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "use_sliding_window": False,
        "sliding_window": None,
        "tie_word_embeddings": True,
        "bos_token_id": None,
        "eos_token_id": EOS_ID,
        "pad_token_id": PAD_ID,
        "dtype": "bfloat16",
        "use_cache": True,
    }


def bf16_bytes(a):
    """float32 array -> its bf16 values (round to nearest even) as little-endian bytes."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2").tobytes()


def write_checkpoint(out_dir, tensors, s=SHAPE):
    """Writes out_dir/model.safetensors (bf16), config.json and the tokenizer files. tensors maps
    each name of tensor_shapes(s) to (shape, bf16 bytes); a missing, extra or misshapen tensor
    is an error. Returns {file: bytes} and the safetensors file's sha256."""
    want = tensor_shapes(s)
    if set(tensors) != set(want):
        raise ValueError("tensors differ from the layout: missing %s, extra %s" % (
            sorted(set(want) - set(tensors))[:4], sorted(set(tensors) - set(want))[:4]))
    for name, (shape, data) in tensors.items():
        if tuple(shape) != want[name] or len(data) != 2 * int(np.prod(shape)):
            raise ValueError("%s: shape %s (%d bytes), the layout wants %s" % (
                name, tuple(shape), len(data), want[name]))
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "model.safetensors")
    header, at = {"__metadata__": {"format": "pt"}}, 0
    for name in sorted(tensors):
        shape, data = tensors[name]
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [at, at + len(data)]}
        at += len(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the data section starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(len(head).to_bytes(8, "little") + head)
        for name in sorted(tensors):
            f.write(tensors[name][1])
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config(s), f, indent=2)
        f.write("\n")
    for name in TOKENIZER_FILES:
        shutil.copyfile(os.path.join(TOKENIZER_DIR, name), os.path.join(out_dir, name))
    size = os.path.getsize(path)
    if size >= MAX_BYTES:
        raise ValueError("%s: %d bytes, over the %d limit" % (path, size, MAX_BYTES))
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    files = {n: os.path.getsize(os.path.join(out_dir, n)) for n in sorted(os.listdir(out_dir))}
    return files, digest
