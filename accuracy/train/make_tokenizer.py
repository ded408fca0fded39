#!/usr/bin/env python3
"""Trains the byte-level BPE of the GQA test model (accuracy/train/tokenizer/, checked in) on
records that `pulse synth --format train` wrote, in the layout the suite's tokenizer.json loader
reads (accuracy/tokenizer.h): Qwen's pre-tokenizer pattern and NFC, GPT-2's byte alphabet, ids
in merge order (the loader merges by id, tiktoken's way), no BOS, and three special tokens:
<|endoftext|> (0, ends natural text, pads), <|im_start|> and <|im_end|> (1, 2: ChatML turns; the
end of turn is the EOS).

  ./build/pulse synth --format train --split train --chat chatml --task all --text 48 \\
      --length 4096 --samples 12 --seed 7 --out-dir /tmp/tokdata
  python3 accuracy/train/make_tokenizer.py /tmp/tokdata/*.jsonl   (needs: pip install tokenizers)

The vocabulary depends on the corpus the records came from (this machine's /usr/share/doc), so
the files are checked in rather than made again; tests/test_acc_gqa_tokenizer.c checks that the
suite encodes like `tokenizers` with them (reference: tests/data/make_gqa_tokenizer_ref.py)."""
import json
import os
import sys

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from tokenizers import processors, trainers

QWEN = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB = 4096
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tokenizer")

CONFIG = {
    "tokenizer_class": "PreTrainedTokenizerFast",
    "bos_token": None,
    "eos_token": "<|im_end|>",
    "pad_token": "<|endoftext|>",
    "unk_token": None,
    "add_bos_token": False,
    "add_eos_token": False,
    "clean_up_tokenization_spaces": False,
    "model_max_length": 32768,
    "chat_template": "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
}


def texts(paths):
    for p in paths:
        with open(p, encoding="utf-8") as f:
            for line in f:
                r = json.loads(line)
                yield r["text"] if r["task"] == "text" else r["prompt"] + r["completion"]


def main(paths):
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False,
                                              use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, min_frequency=2, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts(paths), trainer)
    os.makedirs(OUT, exist_ok=True)
    tok.save(os.path.join(OUT, "tokenizer.json"))
    with open(os.path.join(OUT, "tokenizer_config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
        f.write("\n")
    print("wrote %s: %d tokens" % (OUT, tok.get_vocab_size()))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
