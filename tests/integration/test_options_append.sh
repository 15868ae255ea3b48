#!/bin/bash
# CLSHIM_BUILD_OPTIONS_APPEND / CLSHIM_LINK_OPTIONS_APPEND (issue 36): the
# options reach the driver after the application's, on every build, compile
# and link; results, error codes and CL_PROGRAM_BUILD_OPTIONS are those of
# the plain driver given the combined options, on a miss and on a hit; the
# appended options are part of the key (`clshim cache show` has them).
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info CLSHIM_CAPTURE_PROCESS=0 CLSHIM_CAPTURE_BACKGROUND=0
P=$PROGS/appendopts
TOOL=$CLSHIM_BUILD/clshim-tool

fresh_pocl; run_plain app "$P" "-DW=1" ""
fresh_pocl; run_plain lib "$P" "-DW=1 -DV=2" "-create-library"
fresh_pocl; run_plain bad "$P" "-DW=1 -DV=2" "-cl-fast-relaxed-math"
cmp -s "$TMP/app.out" "$TMP/lib.out" && fail "the plain driver: -DV=2 changes nothing (test is void)"
grep -q "^link: no kernel" "$TMP/lib.out" || fail "the plain driver: -create-library made no library"
grep -q "^link: error -67" "$TMP/bad.out" || fail "the plain driver: the bad link option did not fail"

# 1. A miss: the app passes -DW=1 and no link options; the rest is appended.
rm -rf "$CLSHIM_CACHE_DIR"; fresh_pocl
CLSHIM_BUILD_OPTIONS_APPEND=-DV=2 CLSHIM_LINK_OPTIONS_APPEND=-create-library run_shim miss "$P" "-DW=1" ""
same_output lib miss "appended options, a miss: the plain driver's results, errors and options answers"
[ "$(count 'clshim: miss ' "$TMP/miss.err")" = 3 ] || { cat "$TMP/miss.err" >&2; fail "not three misses"; }

# 2. The appended options are in the key: without them, the same app misses
#    (and gets the plain results); with them, it hits.
fresh_pocl; run_shim noappend "$P" "-DW=1" ""
same_output app noappend "no options appended: the plain results"
[ "$(count 'clshim: hit ' "$TMP/noappend.err")" = 0 ] || { cat "$TMP/noappend.err" >&2; fail "a hit on the appended key"; }
fresh_pocl
CLSHIM_BUILD_OPTIONS_APPEND=-DV=2 CLSHIM_LINK_OPTIONS_APPEND=-cl-fast-relaxed-math run_shim hit "$P" "-DW=1" ""
same_output bad hit "appended options, a hit: the plain driver's results and options answers; the link's error"
[ "$(count 'clshim: hit .*(disk' "$TMP/hit.err")" = 2 ] || { cat "$TMP/hit.err" >&2; fail "build and compile did not hit"; }
[ "$(count 'clshim: the link fails only because of CLSHIM_LINK_OPTIONS_APPEND="-cl-fast-relaxed-math": without it, it succeeds' "$TMP/hit.err")" = 1 ] ||
    { cat "$TMP/hit.err" >&2; fail "the link that failed only because of the appended option: not one line saying so"; }
[ "$(count 'fails only because of' "$TMP/miss.err")" = 0 ] || fail "a blame line where nothing failed"
ok "the appended options change the key; a link they alone break says so"

# 3. `clshim cache show` has the combined options in the key material.
key=$(sed -n 's/^clshim: miss \([0-9a-f]*\) .*compiled object.*/\1/p' "$TMP/miss.err")
[ -n "$key" ] || fail "no compile key in the log"
"$TOOL" cache show "$key" >"$TMP/show.out" || fail "cache show $key"
grep -qx '    options=-DW=1 -DV=2' "$TMP/show.out" || { cat "$TMP/show.out" >&2; fail "cache show lacks the options"; }
ok "clshim cache show: options=-DW=1 -DV=2"

# 4. CL_PROGRAM_BUILD_OPTIONS is the driver's answer on a hit too: PoCL
#    collapses spaces and drops -create-library, which a hit used to answer
#    as the application wrote them (build, compile and link alike). With
#    fusion armed (-cl-kernel-arg-info added) the same.
for run in "off|-DV=2   -DX=1 |-DX=1  -create-library " "off|  -DV=2|" "auto|-DV=2   -DX=1 |"; do
    armed=${run%%|*} opts=${run#*|}
    b=${opts%%|*} l=${opts#*|}
    fresh_pocl; run_plain o_plain "$P" "$b" "$l"
    rm -rf "$CLSHIM_CACHE_DIR"; fresh_pocl
    CLSHIM_FUSION=$armed run_shim o_miss "$P" "$b" "$l"
    fresh_pocl; CLSHIM_FUSION=$armed run_shim o_hit "$P" "$b" "$l"
    [ "$(count 'clshim: hit ' "$TMP/o_hit.err")" = 3 ] || { cat "$TMP/o_hit.err" >&2; fail "'$b' / '$l': not three hits"; }
    same_output o_plain o_miss "fusion $armed, '$b' / '$l', a miss: the driver's options answers"
    same_output o_plain o_hit "fusion $armed, '$b' / '$l', hits: the driver's options answers"
done
# 4. A build the appended option alone breaks says so in one line; a build
#    that fails by itself blames nothing.
fresh_pocl; run_plain badopt "$P" "-DW=1 -cl-no-such-option" ""
fresh_pocl; CLSHIM_BUILD_OPTIONS_APPEND=-cl-no-such-option run_shim blamed "$P" "-DW=1" ""
same_output badopt blamed "a build the appended option breaks: the plain driver's errors"
[ "$(count 'clshim: the build fails only because of CLSHIM_BUILD_OPTIONS_APPEND="-cl-no-such-option"' "$TMP/blamed.err")" -ge 1 ] ||
    { cat "$TMP/blamed.err" >&2; fail "no line blaming CLSHIM_BUILD_OPTIONS_APPEND"; }
fresh_pocl; CLSHIM_BUILD_OPTIONS_APPEND=-DV=2 run_shim own "$P" "-DW=1 -cl-no-such-option" ""
[ "$(count 'fails only because of' "$TMP/own.err")" = 0 ] || { cat "$TMP/own.err" >&2; fail "blamed the knob for the app's own bad option"; }
ok "a build the appended options alone break says so; the app's own failure blames nothing"
finish
