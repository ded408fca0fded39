#!/usr/bin/env bash
# Installs what the build needs when it is missing: cmake, a C compiler, libjansson-dev,
# libutf8proc-dev, libnuma-dev. Where apt cannot reach a registry (the GPU machine), unpacks the
# carried .deps/*.deb (apt-get download libjansson-dev libjansson4 libutf8proc-dev libutf8proc2
# libnuma-dev libnuma1) into
# .deps/prefix and prints that prefix to give CMake (JANSSON_ROOT: every library's).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
libs=(libjansson-dev:jansson.h libutf8proc-dev:utf8proc.h libnuma-dev:numa.h)

missing() { # the -dev packages whose header is neither installed nor unpacked under the prefix
    for l in "${libs[@]}"; do
        [ -f "/usr/include/${l#*:}" ] || [ -f "$root/.deps/prefix/usr/include/${l#*:}" ] ||
            echo "${l%%:*}"
    done
}
unpack() { # the carried .debs of the packages named
    for p in "$@"; do
        for deb in "$root"/.deps/"${p%-dev}"*.deb; do
            [ -f "$deb" ] && dpkg -x "$deb" "$root/.deps/prefix"
        done
    done
}

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v cc >/dev/null || need+=(gcc)
for l in "${libs[@]}"; do [ -f "/usr/include/${l#*:}" ] || need+=("${l%%:*}"); done
[ -n "${PULSE_EXTRA_PKGS:-}" ] && need+=(${PULSE_EXTRA_PKGS})

# a machine with no registry (the GPU machine) gets the carried .debs unpacked, apt untried
if ls "$root"/.deps/*.deb >/dev/null 2>&1 && ! apt-get install --dry-run libjansson-dev >/dev/null 2>&1; then
    for l in "${libs[@]}"; do
        p=${l%%:*}
        [ -f "/usr/include/${l#*:}" ] && continue
        unpack "$p"
        need=("${need[@]/$p}")
    done
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
    else
        unpack $(missing)
        echo "setup-deps: unpacked the carried .debs into .deps/prefix" >&2
    fi
fi
left=$(missing)
[ -z "$left" ] || { echo "setup-deps: $(echo $left) missing and could not be installed" >&2; exit 1; }
for l in "${libs[@]}"; do
    [ -f "/usr/include/${l#*:}" ] || { echo "$root/.deps/prefix"; break; }
done
