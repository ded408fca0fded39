#!/usr/bin/env python3
"""Writes tests/data/python_unicode.txt: what CPython's str methods and re say of every code point,
the reference the accuracy metrics' Unicode handling (accuracy/metrics.c over utf8proc) is tested
against (tests/test_acc_metrics.c).

usage: python3 scripts/make_unicode_ref.py [OUT]   (default tests/data/python_unicode.txt)

Lines: "assigned LO HI" (hex, inclusive runs of code points not Cn in this Python's Unicode),
"word LO HI" (re's \\w of a str pattern), "digit LO HI" (\\d), "space LO HI" (str.isspace()),
and "lower CP L1 [L2 ...]" for every code point whose str.lower() is not itself (U+03A3 left
out: its lowercase depends on the context, the final-sigma rule)."""
import os
import re
import sys
import unicodedata

W, D = re.compile(r"\w"), re.compile(r"\d")


def runs(pred):
    out, start = [], None
    for c in range(0x110000):
        if pred(c):
            if start is None:
                start = c
        elif start is not None:
            out.append((start, c - 1))
            start = None
    if start is not None:
        out.append((start, 0x10FFFF))
    return out


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "python_unicode.txt")
    ch = [chr(c) for c in range(0x110000)]
    with open(path, "w") as f:
        f.write("# CPython %s, Unicode %s; made by scripts/make_unicode_ref.py\n" % (
            sys.version.split()[0], unicodedata.unidata_version))
        for name, pred in (("assigned", lambda c: unicodedata.category(ch[c]) != "Cn"),
                           ("word", lambda c: W.match(ch[c]) is not None),
                           ("digit", lambda c: D.match(ch[c]) is not None),
                           ("space", lambda c: ch[c].isspace())):
            for lo, hi in runs(pred):
                f.write("%s %X %X\n" % (name, lo, hi))
        for c in range(0x110000):
            if c == 0x3A3 or 0xD800 <= c <= 0xDFFF:
                continue
            lo = ch[c].lower()
            if lo != ch[c]:
                f.write("lower %X %s\n" % (c, " ".join("%X" % ord(x) for x in lo)))


if __name__ == "__main__":
    main()
