#!/usr/bin/env bash
# The dependency rules of DESIGN.md section 2, checked on the sources and, given the libraries,
# on their symbols (ctest runs it as test_deps):
#   runtime/    includes only runtime/ headers, by name (no path, no ..); its library uses no
#               symbol of another folder's (a policy through its table, the locality model
#               through query_source.h); inside it, a file of the top or of a subfolder includes
#               the top's headers and those of the subfolders before its own in RUNTIME_ORDER
#               (CMakeLists.txt's PULSE_RUNTIME_DIRS), never one after;
#   workloads/, baselines/, accuracy/
#               include their own headers and the runtime's public ones: not another folder's,
#               not the runtime's internals (runtime/*_impl.h); their libraries use only their
#               own and the runtime's symbols;
#   experiments/, tests/, dev/  anything;
# and runtime/, workloads/, baselines/, accuracy/ read no environment variable but through the
# diagnostics' table of runtime/common.c (common.h): the tuning is the params structs', filled
# from the command line (experiments/runtime_opts.h).
# usage: check-deps.sh SRC [LIB_RUNTIME LIB_WORKLOADS LIB_BASELINES LIB_ACCURACY]
# (NM names nm). Exit 0, or 1 after one line per violation.
set -euo pipefail
src=${1:?usage: check-deps.sh SRC [LIB_RUNTIME LIB_WORKLOADS LIB_BASELINES LIB_ACCURACY]}
shift
nm=${NM:-nm}
fail=0
bad() {
    echo "check-deps: $*" >&2
    fail=1
}
project="runtime workloads baselines accuracy experiments tests dev plots"
# the runtime's subfolders in order, as CMakeLists.txt lists them (one place)
RUNTIME_ORDER=$(sed -n 's/^set(PULSE_RUNTIME_DIRS \(.*\))$/\1/p' "$src/CMakeLists.txt")
[ -n "$RUNTIME_ORDER" ] || { echo "check-deps: no PULSE_RUNTIME_DIRS in $src/CMakeLists.txt" >&2; exit 2; }

# The runtime's subfolder holding header $1 ("" for the top), or "-" when no runtime header has
# that name.
runtime_home() {
    local d
    [ -e "$src/runtime/$1" ] && { echo ""; return; }
    for d in $RUNTIME_ORDER; do
        [ -e "$src/runtime/$d/$1" ] && { echo "$d"; return; }
    done
    echo "-"
}

# Position of runtime subfolder $1 in RUNTIME_ORDER (0 for the top).
runtime_rank() {
    local d i=1
    [ -z "$1" ] && { echo 0; return; }
    for d in $RUNTIME_ORDER; do
        [ "$d" = "$1" ] && { echo "$i"; return; }
        i=$((i + 1))
    done
    echo 99
}

# Every include of folder $1's sources as "file:line:<path" or "file:line:\"path" (the
# runtime's subfolders' too).
includes() {
    local f sub=()
    [ "$1" = runtime ] && for d in $RUNTIME_ORDER; do sub+=("$src/runtime/$d"/*.c "$src/runtime/$d"/*.h "$src/runtime/$d"/*.cu); done
    for f in "$src/$1"/*.c "$src/$1"/*.h "$src/$1"/*.cu "${sub[@]}"; do
        [ -e "$f" ] || continue
        awk -v f="${f#"$src"/}" '
            /^[ \t]*#[ \t]*include[ \t]*[<"]/ {
                s = $0
                sub(/^[ \t]*#[ \t]*include[ \t]*/, "", s)
                q = substr(s, 1, 1)
                s = substr(s, 2)
                sub(/[">].*$/, "", s)
                print f ":" FNR ":" q s
            }' "$f"
    done
}

check_folder() {
    local dir=$1 rec where kind path top
    while IFS= read -r rec; do
        where=${rec%:*}
        kind=${rec##*:}
        path=${kind:1}
        kind=${kind:0:1}
        case $path in *..*) bad "$where: includes $path (a relative path out of $dir/)"; continue ;; esac
        if [[ $path == */* ]]; then
            top=${path%%/*}
            [[ " $project " == *" $top "* ]] || continue # a system header such as <sys/wait.h>
            if [ "$dir" = runtime ]; then
                bad "$where: includes $path (runtime/ includes runtime/ headers only, by name)"
            elif [ "$top" = runtime ]; then
                check_runtime_header "$where" "$dir" "${path#runtime/}"
            elif [ "$top" != "$dir" ]; then
                bad "$where: includes $path ($dir/ may include its own and runtime/ headers)"
            fi
            continue
        fi
        [ "$kind" = '"' ] || continue # <name.h>: a system header
        if [ "$dir" = runtime ]; then
            check_runtime_layer "$where" "$path"
            continue
        fi
        [ -e "$src/$dir/$path" ] && continue # its own folder's header
        if [ "$(runtime_home "$path")" != - ]; then
            check_runtime_header "$where" "$dir" "$path"
        else
            bad "$where: includes \"$path\", not a header of $dir/ or runtime/"
        fi
    done < <(includes "$dir")
}

# A runtime file ($1 = "runtime/SUB/file:line") including runtime header $2: the top's, its own
# subfolder's or an earlier one's.
check_runtime_layer() {
    local file=${1%%:*} home own
    home=$(runtime_home "$2")
    if [ "$home" = - ]; then
        bad "$1: includes \"$2\", not a runtime/ header"
        return
    fi
    own=${file#runtime/}
    [[ $own == */* ]] && own=${own%%/*} || own=""
    if [ "$(runtime_rank "$home")" -gt "$(runtime_rank "$own")" ]; then
        bad "$1: includes $2 of runtime/$home/ (runtime/${own:-.}/ comes before it: $RUNTIME_ORDER)"
    fi
}

check_runtime_header() {
    case $3 in
    *_impl.h) bad "$1: includes the runtime's internal $3 ($2/ may use its public headers)" ;;
    esac
}

for dir in runtime workloads baselines accuracy; do
    check_folder "$dir"
done

# The environment, read in one place.
while IFS=: read -r file line _; do
    bad "$file:$line: reads the environment (only runtime/common.c's diagnostics may: common.h)"
done < <(cd "$src" && grep -rnE '\b(secure_)?getenv\b|\benviron\b' --include='*.c' --include='*.h' \
    --include='*.cu' runtime workloads baselines accuracy | grep -v '^runtime/common\.c:' || true)

# Symbols: what each library leaves undefined (less what it defines itself) against what the
# libraries it may not use define.
if [ $# -gt 0 ]; then
    [ $# -eq 4 ] || { echo "check-deps: give the four libraries or none" >&2; exit 2; }
    names=(runtime workloads baselines accuracy)
    libs=("$@")
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    for i in 0 1 2 3; do
        "$nm" -g --defined-only "${libs[$i]}" 2>/dev/null |
            awk 'NF >= 3 && $2 ~ /^[A-TV-Z]$/ {print $3}' | sort -u >"$tmp/def.${names[$i]}"
        "$nm" -u "${libs[$i]}" 2>/dev/null | awk '$1 == "U" {print $2}' | sort -u |
            comm -23 - "$tmp/def.${names[$i]}" >"$tmp/und.${names[$i]}"
    done
    for i in 0 1 2 3; do
        for j in 0 1 2 3; do
            [ "$i" -eq "$j" ] && continue
            [ "$i" -ne 0 ] && [ "$j" -eq 0 ] && continue # every other library may use the runtime
            used=$(comm -12 "$tmp/und.${names[$i]}" "$tmp/def.${names[$j]}" | tr '\n' ' ')
            [ -z "$used" ] ||
                bad "the ${names[$i]} library uses the ${names[$j]} library's $used"
        done
    done
fi
[ "$fail" -eq 0 ] && echo "check-deps: the dependency rules hold"
exit "$fail"
