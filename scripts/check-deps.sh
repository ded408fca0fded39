#!/usr/bin/env bash
# The dependency rules of DESIGN.md section 2, checked on the sources and, given the libraries,
# on their symbols (ctest runs it as test_deps):
#   runtime/    includes only runtime/ headers, by name (no path, no ..); its library uses no
#               symbol of another folder's (a policy through its table, the locality model
#               through query_source.h);
#   workloads/, baselines/, accuracy/
#               include their own headers and the runtime's public ones: not another folder's,
#               not the runtime's internals (runtime/*_impl.h); their libraries use only their
#               own and the runtime's symbols;
#   experiments/, tests/, dev/  anything.
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

# Every include of folder $1's sources as "file:line:<path" or "file:line:\"path".
includes() {
    local f
    for f in "$src/$1"/*.c "$src/$1"/*.h "$src/$1"/*.cu; do
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
        [ -e "$src/$dir/$path" ] && continue # its own folder's header
        if [ "$dir" = runtime ]; then
            bad "$where: includes \"$path\", not a runtime/ header"
        elif [ -e "$src/runtime/$path" ]; then
            check_runtime_header "$where" "$dir" "$path"
        else
            bad "$where: includes \"$path\", not a header of $dir/ or runtime/"
        fi
    done < <(includes "$dir")
}

check_runtime_header() {
    case $3 in
    *_impl.h) bad "$1: includes the runtime's internal $3 ($2/ may use its public headers)" ;;
    esac
}

for dir in runtime workloads baselines accuracy; do
    check_folder "$dir"
done

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
