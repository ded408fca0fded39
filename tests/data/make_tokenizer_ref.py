#!/usr/bin/env python3
"""Writes tests/data/tokenizer_gemma3_ref.jsonl: reference token ids of the Gemma 3 tokenizer for
the strings below, one JSON object a line: {"text": ..., "ids": [...]} (ids without BOS), and
a last line for a ~16K-token text (a paragraph repeated): {"repeat_text", "repeat", "sep",
"n_ids", "ids_fnv1a64"} (FNV-1a 64 over the ids as little-endian int32, hex).

Reference only: CI does not run this; tests/test_acc_tokenizer.c reads the .jsonl it wrote.

Reference tokenizer: Google's own SentencePiece library (pip `sentencepiece`), fed the vocabulary
of the GGUF (read with pip `gguf`): a BPE ModelProto with every piece, score and type of
tokenizer.ggml.tokens / scores / token_type, byte_fallback on, and Gemma's normalizer (identity,
no dummy prefix -- tokenizer.ggml.add_space_prefix is false --, whitespace kept, ' ' escaped to
U+2581). Two things the GGUF changed are undone so SentencePiece sees Gemma's own model:
  * llama.cpp's converter respells U+2581 in user-defined pieces as a real space ("  ") because
    llama.cpp matches user-defined pieces in the raw text; SentencePiece matches them after
    escaping, so they get their "\u2581\u2581" spelling back.
  * control tokens (<start_of_turn>, <bos>, ...) are not parsed from text by SentencePiece; like
    llama.cpp with parse_special and transformers' added tokens, the text is first cut at every
    control token (leftmost, longest), and each one becomes its id.
Where transformers can build its own tokenizer from the GGUF without torch
(transformers.integrations.gguf.gguf_tokenizer_mapping.convert_gguf_tokenizer), the ids are
cross-checked against it and any disagreement is printed.

  python3 -m venv /tmp/tokref && . /tmp/tokref/bin/activate
  pip install gguf sentencepiece protobuf  # optional cross-check: transformers tokenizers
  python3 tests/data/make_tokenizer_ref.py [models/gemma3-270m-q4_k_m.gguf]
"""
import json
import os
import re
import sys

import sentencepiece as spm
from gguf import GGUFReader
from sentencepiece import sentencepiece_model_pb2 as pb

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

PARAGRAPH = (
    "In the beginning of the twentieth century, physicists believed that the laws of motion "
    "discovered by Newton, together with Maxwell's equations of electromagnetism, described "
    "nearly everything. Two small clouds remained on the horizon: the failure to detect the "
    "ether, and the spectrum of black-body radiation. Within thirty years those clouds had "
    "become relativity and quantum mechanics -- theories that changed not only physics but "
    "chemistry, computing (think of transistors, lasers, GPS satellites), and the way we "
    "picture space, time and matter. Today, students learn both in their first years at "
    "university; researchers still argue about what the wave function 'really' is.\n\n"
    "Temperature: 23.5 \u00b0C at 10:45 on 2024-03-17, humidity 61 %, wind 12 km/h NNE."
)

STRINGS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "Hello, world! How's it going? (fine) [ok] {yes}; a:b",
    "1234567890 3.14159 -42 1e-9 0x1F",
    "a  b   c    d",
    "   leading spaces",
    "trailing spaces   ",
    " ",
    "x" + " " * 40 + "y",
    "line one\nline two\n\nline four\n\n\n",
    "tab\tseparated\t\tvalues\t",
    "\r\nwindows line endings\r\n",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00c5ngstr\u00f6m",
    "e\u0301 combining acute, a\u00a0non-breaking space, zero\u200bwidth",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002\u4e2d\u6587\u6587\u672c\u3002"
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
    "emoji \U0001F642\U0001F44D\U0001F3FD\U0001F389 and \U0001F468\u200d\U0001F469\u200d"
    "\U0001F467\u200d\U0001F466 family",
    "\U00013000\U00013050 hieroglyphs",
    "private use \ue000\uf8ff and controls \x01\x02\x7f",
    "\u2581 a literal lower one eighth block \u2581\u2581",
    "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n",
    "<bos>text<eos><pad><unk><mask>",
    "<start_of_turn partial <end_of_turn",
    "<unused0><unused99>",
    "<start_of_image><end_of_image>[multimodal]",
    "<table><tr><td>cell</td></tr></table> <b>bold</b>",
    "def f(x):\n    return x**2  # square\n\n\tpass\n",
    '{"key": [1, 2, 3], "nested": {"a": null, "b": true}}',
    "https://example.com/path?q=1&r=2 user@example.org",
    "ALL CAPS and MiXeD CaSe wOrDs",
    "\u2211 \u222b \u221a \u2264 \u2265 \u2260 \u221e \u03c0 \u03b1\u03b2\u03b3",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 "
    "\u05e9\u05dc\u05d5\u05dd",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u0401\u0436",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a",
    "Mr. O'Neil's dog didn't bark... !!!??? ---- ____ ====",
    "\n",
    "\n\n\n\n\n",
    "",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    PARAGRAPH,
]


def load_vocab(path):
    r = GGUFReader(path)
    f = r.fields
    return (f["tokenizer.ggml.tokens"].contents(), f["tokenizer.ggml.scores"].contents(),
            f["tokenizer.ggml.token_type"].contents())


def spm_processor(tokens, scores, types):
    m = pb.ModelProto()
    m.trainer_spec.model_type = pb.TrainerSpec.BPE
    m.trainer_spec.vocab_size = len(tokens)
    m.trainer_spec.byte_fallback = True
    m.trainer_spec.pad_id, m.trainer_spec.eos_id = 0, 1
    m.trainer_spec.bos_id, m.trainer_spec.unk_id = 2, 3
    m.normalizer_spec.name = "identity"
    m.normalizer_spec.add_dummy_prefix = False
    m.normalizer_spec.remove_extra_whitespaces = False
    m.normalizer_spec.escape_whitespaces = True
    for t, s, ty in zip(tokens, scores, types):
        if ty == 4:
            t = t.replace(" ", "\u2581")  # undo llama.cpp's respelling of user-defined pieces
        p = m.pieces.add()
        p.piece, p.score, p.type = t, s, ty
    return spm.SentencePieceProcessor(model_proto=m.SerializeToString())


def encode_ref(sp, tokens, types, text):
    control = sorted((t for t, ty in zip(tokens, types) if ty in (2, 3)), key=len, reverse=True)
    ids_of = {t: i for i, (t, ty) in enumerate(zip(tokens, types)) if ty in (2, 3)}
    pat = re.compile("|".join(re.escape(t) for t in control))  # longest first: leftmost-longest
    ids, pos = [], 0
    for mt in pat.finditer(text):
        if mt.start() > pos:
            ids += sp.encode(text[pos:mt.start()])
        ids.append(ids_of[mt.group(0)])
        pos = mt.end()
    if pos < len(text):
        ids += sp.encode(text[pos:])
    return ids


def hf_encoder(path, tokens, scores, types):
    """transformers' own GGUF tokenizer, or None when it cannot be built here."""
    try:
        from gguf import GGUFReader as R
        from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer
        f = R(path).fields
        d = {"tokenizer_type": "llama", "tokens": list(tokens), "scores": list(scores),
             "token_type": list(types), "add_prefix_space": False,
             "bos_token_id": f["tokenizer.ggml.bos_token_id"].contents(),
             "eos_token_id": f["tokenizer.ggml.eos_token_id"].contents(),
             "unk_token_id": f["tokenizer.ggml.unknown_token_id"].contents(),
             "pad_token_id": f["tokenizer.ggml.padding_token_id"].contents()}
        tok, _ = convert_gguf_tokenizer("gemma3", d)
        return lambda s: tok.encode(s, add_special_tokens=False).ids
    except Exception as e:  # noqa: BLE001 -- the cross-check is optional
        print(f"transformers cross-check skipped: {e}", file=sys.stderr)
        return None


LONG_REPEAT = 95  # PARAGRAPH repeated, joined by LONG_SEP: about 16K tokens
LONG_SEP = "\n\n"


def fnv1a64(ids):
    """FNV-1a over the ids as little-endian int32, as the C test computes it."""
    h = 0xCBF29CE484222325
    for i in ids:
        for b in int(i).to_bytes(4, "little", signed=True):
            h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "models",
                                                              "gemma3-270m-q4_k_m.gguf")
    tokens, scores, types = load_vocab(path)
    sp = spm_processor(tokens, scores, types)
    hf = hf_encoder(path, tokens, scores, types)
    out = os.path.join(HERE, "tokenizer_gemma3_ref.jsonl")
    agree = 0
    with open(out, "w", encoding="utf-8") as fh:
        for s in STRINGS:
            ids = encode_ref(sp, tokens, types, s)
            if hf is not None:
                h = hf(s)
                if h == ids:
                    agree += 1
                else:
                    print(f"transformers differs on {s!r}:\n  spm {ids}\n  hf  {h}", file=sys.stderr)
            fh.write(json.dumps({"text": s, "ids": ids}, ensure_ascii=True) + "\n")
        long_ids = encode_ref(sp, tokens, types, LONG_SEP.join([PARAGRAPH] * LONG_REPEAT))
        # the long text: only its length and a hash of its ids, to keep the file small
        fh.write(json.dumps({"repeat_text": PARAGRAPH, "repeat": LONG_REPEAT, "sep": LONG_SEP,
                             "n_ids": len(long_ids), "ids_fnv1a64": "%016x" % fnv1a64(long_ids)},
                            ensure_ascii=True) + "\n")
    print(f"wrote {len(STRINGS)} strings to {out}"
          + (f"; transformers agrees on {agree}" if hf is not None else ""))


if __name__ == "__main__":
    main()
