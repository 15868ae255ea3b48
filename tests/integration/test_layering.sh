#!/bin/bash
# The direction of the layers: cache/ (keys, tiers, store) knows nothing of
# program/ (the app-visible records) or fusion/: no include of their headers,
# no call into their symbols. program/ and fusion/ may use cache/; fusion/
# uses program/ through origin.h and route_a.h only.
source "$(dirname "$0")/lib.sh"
cd "$CLSHIM_ROOT"
bad=$(grep -n '#include *"\(program\|fusion\|interpose\)/' cache/*.c cache/*.h || true)
[ -z "$bad" ] || fail "cache/ includes an upper layer: $bad"
ok "cache/ includes nothing from program/, fusion/ or interpose/"

# Symbols: what cache/ objects leave undefined must not be defined above it.
upper=$(nm --defined-only -g "$CLSHIM_BUILD"/obj/program/*.o "$CLSHIM_BUILD"/obj/fusion/*.o \
        "$CLSHIM_BUILD"/obj/interpose/*.o 2>/dev/null | awk 'NF == 3 { print $3 }' | sort -u)
[ -n "$upper" ] || fail "no symbols found in the upper layers' objects (was $CLSHIM_BUILD built?)"
objs=(); for c in cache/*.c; do objs+=("$CLSHIM_BUILD/obj/${c%.c}.o"); done # not stale objects of moved files
used=$(nm --undefined-only "${objs[@]}" | awk '{ print $NF }' | sort -u)
calls=$(comm -12 <(echo "$upper") <(echo "$used"))
[ -z "$calls" ] || fail "cache/ calls into an upper layer: $calls"
ok "cache/ calls nothing defined in program/, fusion/ or interpose/"

# fusion/ sees the program layer through two headers only (README.md,
# "Layout"): the origin of a kernel and route (a).
bad=$(grep -rn '#include *"program/' fusion | grep -v '"program/\(origin\|route_a\)\.h"' || true)
[ -z "$bad" ] || fail "fusion/ includes more of program/ than origin.h and route_a.h: $bad"
ok "fusion/ includes only program/origin.h and program/route_a.h of program/"
finish
