#!/usr/bin/env bash
# Installs what the build needs when it is missing: cmake, a C compiler, libjansson-dev.
# Where apt cannot reach a registry (the GPU machine), unpacks .deps/libjansson-dev_*.deb into
# .deps/prefix and prints the JANSSON_ROOT to give CMake.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

have_jansson() {
    [ -f /usr/include/jansson.h ] || [ -f "$root/.deps/prefix/usr/include/jansson.h" ]
}

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v cc >/dev/null || need+=(gcc)
[ -f /usr/include/jansson.h ] || need+=(libjansson-dev)
[ -n "${PULSE_EXTRA_PKGS:-}" ] && need+=(${PULSE_EXTRA_PKGS})

# a machine with no registry (the GPU machine) gets the carried .deb unpacked, apt untried
if [ ! -f /usr/include/jansson.h ] && ls "$root"/.deps/libjansson-dev_*.deb >/dev/null 2>&1 && \
    ! apt-get install --dry-run libjansson-dev >/dev/null 2>&1; then
    for deb in "$root"/.deps/libjansson*.deb; do dpkg -x "$deb" "$root/.deps/prefix"; done
    need=("${need[@]/libjansson-dev}")
fi
need=($(printf '%s\n' "${need[@]}" | grep -v '^$' || true))
if [ ${#need[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && sudo="sudo"
    if command -v apt-get >/dev/null && \
        { $sudo apt-get install -y --no-install-recommends "${need[@]}" >/dev/null 2>&1 || \
          { $sudo apt-get update >/dev/null 2>&1 && \
            $sudo apt-get install -y --no-install-recommends "${need[@]}" >/dev/null; }; }; then
        echo "setup-deps: installed ${need[*]}" >&2
    elif ls "$root"/.deps/libjansson-dev_*.deb >/dev/null 2>&1; then
        for deb in "$root"/.deps/libjansson*.deb; do dpkg -x "$deb" "$root/.deps/prefix"; done
        echo "setup-deps: unpacked libjansson-dev into .deps/prefix" >&2
    fi
fi
have_jansson || { echo "setup-deps: libjansson-dev is missing and could not be installed" >&2; exit 1; }
if [ ! -f /usr/include/jansson.h ]; then echo "$root/.deps/prefix"; fi
