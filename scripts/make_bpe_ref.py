#!/usr/bin/env python3
"""Writes tests/data/qwen_bpe_ref.txt: token ids that tiktoken gives for test texts over Qwen's
ranks (models/qwen.tiktoken, scripts/setup-vocab.sh), with Qwen's pattern and special tokens
and NFC first as Qwen's tokenizer does, and with Llama 3's pattern (digit runs of up to three,
no normaliser) over the same ranks; the reference accuracy/bpe.c is tested against (tests/test_acc_bpe.c).

usage: python3 scripts/make_bpe_ref.py [RANKS] [OUT]   (needs: pip install tiktoken)

Lines: "PATTERN HEX_OF_UTF8_TEXT ID ID ...", PATTERN qwen or llama3."""
import base64
import os
import sys
import unicodedata

import tiktoken

QWEN = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
LLAMA3 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + ["<|extra_%d|>" % i for i in range(205)]

TEXTS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure they'll say it's fine; we've DONE it, HE'S right, you'D know.",
    "don\u2019t stop: ain't, 'tis, O'Neil's",
    "1234567890 3.14159 -42 1e10 0x1F 2026-12-01",
    "a   b\t\tc\n\nd \n \n  e   \r\n f",
    "   leading and trailing   ",
    "\n\n\n",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u8fd9\u662f\u4e00\u4e2a\u6d4b\u8bd5\u3002",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 \u0939\u093f\u0928\u094d\u0926\u0940 \u092d\u093e\u0937\u093e",
    "emoji \U0001F600\U0001F680 and \u2764\ufe0f family \U0001F468\u200d\U0001F469\u200d\U0001F467",
    "cafe\u0301 na\u0308ive re\u0301sume\u0301",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|><|extra_7|>text<|extra_204|>",
    "def f(x):\n    return x ** 2  # square\n\n\tif x != 0:\n\t\tpass\n",
    "!!!??? ... --- ***  ((( ))) [[ ]] {{}}",
    "\u00bd \u00b2 \u2460 \u2167 \u0661\u0662\u0663 \uff11\uff12\uff13",
    "path/to/file.txt C:\\Users\\x http://example.com/a?b=c&d=e#f",
    "The passkey is 68193. Remember it. 68193 is the passkey.",
]


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    ranks_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "models", "qwen.tiktoken")
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(root, "tests", "data", "qwen_bpe_ref.txt")
    with open(ranks_path, "rb") as f:
        ranks = {base64.b64decode(t): int(r) for t, r in (l.split() for l in f.read().splitlines() if l)}
    specials = {s: 151643 + i for i, s in enumerate(SPECIALS)}
    texts = TEXTS + [" ".join(TEXTS) * 8]  # a long input
    with open(out, "w") as f:
        f.write("# tiktoken %s over qwen.tiktoken; made by scripts/make_bpe_ref.py\n" % tiktoken.__version__)
        for name, pat in (("qwen", QWEN), ("llama3", LLAMA3)):
            enc = tiktoken.Encoding("ref-" + name, pat_str=pat, mergeable_ranks=ranks,
                                    special_tokens=specials)
            for t in texts:
                # Qwen's tokenizer normalises to NFC first, Llama 3's does not
                src = unicodedata.normalize("NFC", t) if name == "qwen" else t
                ids = enc.encode(src, allowed_special="all")
                f.write("%s %s %s\n" % (name, t.encode().hex(), " ".join(map(str, ids))))


if __name__ == "__main__":
    main()
