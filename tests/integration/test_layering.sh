#!/bin/bash
# The rooms and the edges between them (HACKING.md, "Rooms"). Edges only go
# down: every room may use its own files and the rooms or headers the table
# names, nothing else. Checked twice: the #include lines of every .c/.h, and
# the symbols each room's objects leave undefined against the rooms that
# define them. An entry naming one header (program/origin.h) allows that
# header and the functions it declares, not the rest of its room.
source "$(dirname "$0")/lib.sh"
cd "$CLSHIM_ROOT"

# room           may use (rooms, or single headers; !header: not that one)
EDGES='
interpose        program fusion compiler cache common
tools            program/capture_proc.h fusion/plan.h fusion/frontend.h fusion/fuse_source.h fusion/fjob.h compiler cache common
program          compiler cache common !cache/memtier.h
fusion           program/origin.h compiler cache common
compiler         common
compiler/llvm    compiler/llvm_api.h compiler/fuse_ranges.h common/error.h common/spawn.h
cache            common
common
'
ROOMS=$(awk 'NF { print $1 }' <<<"$EDGES")

allowed() { awk -v r="$1" '$1 == r { for (i = 2; i <= NF; i++) if ($i !~ /^!/) print $i }' <<<"$EDGES" | xargs; }
denied() { awk -v r="$1" '$1 == r { for (i = 2; i <= NF; i++) if ($i ~ /^!/) print substr($i, 2) }' <<<"$EDGES" | xargs; }
# The room a header or object path belongs to: its longest room prefix.
room_of() {
    local best=
    for r in $ROOMS; do
        case $1 in "$r"/*) [ ${#r} -gt ${#best} ] && best=$r ;; esac
    done
    echo "$best"
}
# The files of a room, not of a room inside it (compiler/ vs compiler/llvm/).
files_of() { find "$1" -maxdepth 1 -type f \( -name '*.c' -o -name '*.h' -o -name '*.cpp' \) | sort; }
may_use() { # room target-path: 0 when the table allows room -> target
    local from=$1 path=$2 to
    to=$(room_of "$path")
    [ "$to" = "$from" ] && return 0
    for d in $(denied "$from"); do [ "$d" = "$path" ] && return 1; done
    for a in $(allowed "$from"); do
        [ "$a" = "$to" ] || [ "$a" = "$path" ] && return 0
    done
    return 1
}

# 1. Includes.
for r in $ROOMS; do
    bad=
    for f in $(files_of "$r"); do
        for h in $(sed -n 's/^#include *"\([a-z_]*\/[a-z_/]*\.h\)".*/\1/p' "$f"); do
            [ -n "$(room_of "$h")" ] || continue # include/CL/… and the like: not a room
            may_use "$r" "$h" || bad="$bad $f->$h"
        done
    done
    [ -z "$bad" ] || fail "an edge the table does not allow (tests/integration/test_layering.sh):$bad"
    ok "$r/ includes only its own files and: $(allowed "$r" | xargs)"
done

# 2. Symbols: objects built from the room's current sources (not stale
# objects of files that moved).
declares() { grep -qE "(^|[^a-z_0-9])$2 *\(" "$1"; } # header function
objs_of() { for f in $(files_of "$1" | grep -E '\.(c|cpp)$'); do echo "$CLSHIM_BUILD/obj/${f%.*}.o"; done; }
declare -A defined_in
for r in $ROOMS; do
    for o in $(objs_of "$r"); do
        [ -f "$o" ] || fail "$o is missing (was $CLSHIM_BUILD built?)"
        for s in $(nm --defined-only -g "$o" | awk 'NF == 3 && $2 ~ /[TDBRV]/ { print $3 }'); do
            defined_in[$s]=$r
        done
    done
done
[ ${#defined_in[@]} -gt 100 ] || fail "only ${#defined_in[@]} symbols found in the rooms' objects"
# interpose/files.c defines the C library's own file entry points (open,
# stat, ...) for cache/sandbox.h: a room that calls them calls libc.
declare -A libc_defines
LIBC=$(cc -print-file-name=libc.so.6)
for s in $(nm -D --defined-only "$LIBC" | awk '{ print $NF }' | sed 's/@.*//'); do libc_defines[$s]=1; done
[ -n "${libc_defines[open]:-}" ] || fail "cannot list the C library's symbols ($LIBC)"
for r in $ROOMS; do
    bad=
    objs=$(objs_of "$r")
    [ -n "$objs" ] || continue
    for s in $(nm --undefined-only $objs | awk '{ print $NF }' | sort -u); do
        to=${defined_in[$s]:-}
        [ -n "$to" ] && [ "$to" != "$r" ] && [ -z "${libc_defines[$s]:-}" ] || continue
        okay=0
        for d in $(denied "$r"); do
            declares "$d" "$s" && { bad="$bad $r->$d:$s"; continue 2; }
        done
        for a in $(allowed "$r"); do
            if [ "$a" = "$to" ]; then okay=1; break; fi
            # One header of a room: only the functions that header declares.
            case $a in "$to"/*.h) declares "$a" "$s" && { okay=1; break; } ;; esac
        done
        [ $okay = 1 ] || bad="$bad $r->$to:$s"
    done
    [ -z "$bad" ] || fail "a call the table does not allow:$bad"
    ok "$r/ calls only into what the table allows"
done

# The table is complete: every directory with C sources is a room.
for d in $(find interpose program fusion compiler cache common tools -name '*.c' -printf '%h\n' | sort -u); do
    grep -qx "$d" <<<"$ROOMS" || fail "$d/ holds C sources but is not a room of the table"
done
ok "every source directory is a room of the table"
# HACKING.md's room table is a copy of EDGES: the same edges, room by room.
for r in $ROOMS; do
    row=$(grep -F "| \`$r/\` |" HACKING.md | head -1)
    [ -n "$row" ] || fail "HACKING.md's room table has no row for $r/"
    doc=$(awk -F'|' '{ print $(NF - 1) }' <<<"$row" | tr -d '`,' | tr ' ' '\n' | { grep -v '^—\?$' || true; } | sort | xargs)
    want=$(allowed "$r" | tr ' ' '\n' | { grep . || true; } | sort | xargs)
    [ "$doc" = "$want" ] || fail "HACKING.md says $r/ may use '$doc', the table says '$want'"
done
ok "HACKING.md's room table matches the edge table"
finish
