#!/usr/bin/env python3
"""Resolves the frames of a pulse watchdog dump (runtime/sched/watchdog.h) with addr2line: each frame
of a mapped file that has symbols becomes 'function at file:line'. Usage: stacks.py DUMP.txt"""
import re
import subprocess
import sys

maps = []  # (start, end, file offset, path)
frames = []
text = open(sys.argv[1], errors="replace").read().splitlines()
for line in text:
    m = re.match(r"([0-9a-f]+)-([0-9a-f]+) r-xp ([0-9a-f]+) \S+ \S+\s+(\S+)$", line)
    if m:
        maps.append((int(m[1], 16), int(m[2], 16), int(m[3], 16), m[4]))


def resolve(addr):
    for start, end, off, path in maps:
        if start <= addr < end:
            rel = addr - start + off
            try:
                out = subprocess.run(["addr2line", "-f", "-C", "-e", path, hex(rel - 1)],
                                     capture_output=True, text=True, timeout=10).stdout.split("\n")
            except (OSError, subprocess.SubprocessError):
                return None
            if len(out) >= 2 and out[0] != "??":
                return f"{out[0]} at {out[1].split('/')[-1]}"
            return f"{path.split('/')[-1]}+{hex(rel)}"
    return None


for line in text:
    if line.startswith("---") or line.startswith("==="):
        print(line)
        continue
    m = re.search(r"\[0x([0-9a-f]+)\]", line)
    if not m:
        continue
    r = resolve(int(m[1], 16))
    print("   ", r if r else line.strip())
