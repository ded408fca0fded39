#!/usr/bin/env python3
"""Writes tests/data/gqa_tokenizer_ref.jsonl: the ids that the `tokenizers` library gives with
the GQA test model's tokenizer (accuracy/train/tokenizer/tokenizer.json) for the strings below
and for the training records given, one JSON object a line: {"text", "ids"} for the short ones,
{"text", "n_ids", "ids_fnv1a64", "tail"} for long ones (FNV-1a 64 over the ids as little-endian
int32, hex; tail: the last 32 ids). No BOS (the tokenizer has none).

Reference only: CI does not run this; tests/test_acc_gqa_tokenizer.c reads the .jsonl.

  pip install tokenizers
  ./build/pulse synth --format train --split train --chat chatml --task all --text 2 \\
      --length 1024 --samples 2 --seed 11 --out-dir /tmp/gqaref
  python3 tests/data/make_gqa_tokenizer_ref.py /tmp/gqaref/*.jsonl [--out FILE]"""
import json
import os
import struct
import sys
import unicodedata

from tokenizers import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TOKENIZER = os.path.join(ROOT, "accuracy", "train", "tokenizer", "tokenizer.json")

STRINGS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure they'll say it's fine; we've DONE it, HE'S right, you'D know.",
    "The pass key is 68121. Remember it. 68121 is the pass key.",
    "One of the special magic numbers for brave-lantern is: 4724387.",
    "VAR QXKZT = 54573. VAR ABCDE = VAR QXKZT.",
    '{"6596e58c-5a8f-4f76-b2c3-5ed4df5e9dd9": "b980bec4-510f-483e-b8ca-449779d7014f"}',
    "a   b\t\tc\n\nd \n \n  e   \r\n f",
    "   leading and trailing   ",
    "\n\n\n",
    "caf\u00e9 cafe\u0301 na\u0308ive \u00bd \u2460 \uff11\uff12",
    "\u4f60\u597d\uff0c\u4e16\u754c emoji \U0001F600 \u041f\u0440\u0438\u0432\u0435\u0442",
    "<|im_start|>user\nWhat is the pass key?<|im_end|>\n<|im_start|>assistant\n The pass key is",
    "text<|endoftext|>more text<|im_end|><|im_start|>",
    "path/to/file.txt C:\\Users\\x http://example.com/a?b=c&d=e#f",
    "!!!??? ... --- ***  ((( ))) [[ ]] {{}}",
]


def fnv1a64(ids):
    h = 0xCBF29CE484222325
    for b in b"".join(struct.pack("<i", i) for i in ids):
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def main(argv):
    out = os.path.join(HERE, "gqa_tokenizer_ref.jsonl")
    if "--out" in argv:
        k = argv.index("--out")
        out = argv[k + 1]
        argv = argv[:k] + argv[k + 2:]
    tok = Tokenizer.from_file(TOKENIZER)
    texts = list(STRINGS)
    for p in argv:
        with open(p, encoding="utf-8") as f:
            for line in f:
                r = json.loads(line)
                texts.append(r["text"] if r["task"] == "text" else r["prompt"] + r["completion"])
    with open(out, "w") as f:
        for t in texts:
            ids = tok.encode(t, add_special_tokens=True).ids
            assert tok.decode(ids, skip_special_tokens=False) == unicodedata.normalize("NFC", t)
            if len(ids) <= 64:
                r = {"text": t, "ids": ids}
            else:
                r = {"text": t, "n_ids": len(ids), "ids_fnv1a64": fnv1a64(ids), "tail": ids[-32:]}
            f.write(json.dumps(r) + "\n")
    print("wrote %s: %d texts" % (out, len(texts)))


if __name__ == "__main__":
    main(sys.argv[1:])
