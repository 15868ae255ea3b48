#!/bin/bash
# Keys as exact as the compiler, on real programs under LD_PRELOAD: for
# every spelling of an include that clang accepts (and computed includes,
# __has_include, #include_next, -I order, clCompileProgram + clLinkProgram
# as hashcat builds), a second run is a hit, and after the header changes
# the run misses and gives the new header's results, never a stale binary.
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info
SF=$PROGS/srcfile
INC=$TMP/inc
mkdir -p "$INC" "$TMP/first"
KBODY='__kernel void k(__global float *y) { size_t i = get_global_id(0); y[i] = V * (float)(i % 7); }'

# Reference outputs of the plain driver for V=1 and V=2.
printf '#include "h.h"\n%s\n' "$KBODY" >"$TMP/plain.cl"
echo '#define V 1.0f' >"$INC/h.h"
fresh_pocl; run_plain ref1 "$SF" "$TMP/plain.cl" --options "-I $INC"
echo '#define V 2.0f' >"$INC/h.h"
fresh_pocl; run_plain ref2 "$SF" "$TMP/plain.cl" --options "-I $INC"
[ "$(cat "$TMP/ref1.rc")" = 0 ] && ! cmp -s "$TMP/ref1.out" "$TMP/ref2.out" || fail "reference runs"

# check NAME OPTIONS [srcfile flags]: source in $TMP/NAME.cl
check() {
    local name=$1 opts=$2; shift 2
    echo '#define V 1.0f' >"$INC/h.h"
    fresh_pocl; run_shim "$name-cold" "$SF" "$TMP/$name.cl" --options "$opts" "$@"
    same_output ref1 "$name-cold" "$name: cold run, same results"
    grep -q 'not caching' "$TMP/$name-cold.err" && fail "$name: not cached: $(grep 'not caching' "$TMP/$name-cold.err")"
    fresh_pocl; run_shim "$name-warm" "$SF" "$TMP/$name.cl" --options "$opts" "$@"
    same_output ref1 "$name-warm" "$name: warm run, same results"
    [ "$(count 'hit ' "$TMP/$name-warm.err")" -ge 1 ] || fail "$name: warm run: expected a hit"
    [ "$(count 'miss ' "$TMP/$name-warm.err")" = 0 ] || fail "$name: warm run: unexpected miss"
    echo '#define V 2.0f' >"$INC/h.h"
    fresh_pocl; run_shim "$name-changed" "$SF" "$TMP/$name.cl" --options "$opts" "$@"
    same_output ref2 "$name-changed" "$name: changed header, results of the new header"
    [ "$(count 'miss ' "$TMP/$name-changed.err")" -ge 1 ] || fail "$name: changed header: expected a miss (stale binary)"
    ok "$name: hit when unchanged, miss when the header changed"
}

spell() { printf '%s\n%s\n' "$2" "$KBODY" >"$TMP/$1.cl"; }
spell comment_in_directive '#/**/include "h.h"'
spell line_splice $'#inc\\\nlude "h.h"'
spell digraph '%:include "h.h"'
spell import '#import "h.h"'
spell comment_before '/* c */ #include "h.h"'
for n in comment_in_directive line_splice digraph import comment_before; do check $n "-I $INC"; done

# hashcat's computed include: the path from -D options, quoted macro bodies
spell hashcat_macros '#include M2S(INCLUDE_PATH/h.h)'
HOPTS="-D INCLUDE_PATH=$INC -D \"XM2S(x)=#x\" -D \"M2S(x)=XM2S(x)\""
check hashcat_macros "$HOPTS"
cp "$TMP/hashcat_macros.cl" "$TMP/hashcat_compile_link.cl"
check hashcat_compile_link "$HOPTS" --compile-link
# the macro defined in the kernel file itself (#include COMPARE_M)
spell macro_in_source $'#define COMPARE_M "h.h"\n#include COMPARE_M'
check macro_in_source "-I $INC"
spell has_include $'#if __has_include("h.h")\n#include "h.h"\n#else\n#define V 0.0f\n#endif'
check has_include "-I $INC"
spell include_next '#include_next <h.h>'
check include_next "-I $INC"

# -I order: a header created earlier in the search path takes over
echo '#define V 1.0f' >"$INC/h.h"
spell order $'#define HDR <h.h>\n#include HDR'
fresh_pocl; run_shim order1 "$SF" "$TMP/order.cl" --options "-I $TMP/first -I $INC"
fresh_pocl; run_shim order2 "$SF" "$TMP/order.cl" --options "-I $TMP/first -I $INC"
[ "$(count 'hit ' "$TMP/order2.err")" -ge 1 ] || fail "-I order: expected a hit"
echo '#define V 2.0f' >"$TMP/first/h.h"
fresh_pocl; run_shim order3 "$SF" "$TMP/order.cl" --options "-I $TMP/first -I $INC"
same_output ref2 order3 "-I order: the new earlier header's results"
[ "$(count 'miss ' "$TMP/order3.err")" -ge 1 ] || fail "-I order: expected a miss"
ok "-I order: a header appearing earlier in the search path is a miss"

# Only a failing preprocessor makes a program uncacheable; stats count it.
printf '#define HDR "nothere.h"\n#include HDR\n%s\n' "$KBODY" >"$TMP/broken.cl"
fresh_pocl; run_shim broken "$SF" "$TMP/broken.cl"
fresh_pocl; run_plain broken_ref "$SF" "$TMP/broken.cl"
cmp -s "$TMP/broken.rc" "$TMP/broken_ref.rc" || fail "broken include: exit codes differ"
grep -q "not caching program .*computed #include HDR.*kernels: k" "$TMP/broken.err" ||
    fail "broken include: expected one line naming the include and the kernels"
"$CLSHIM_BUILD/clshim-tool" cache stats >"$TMP/stats.txt"
grep -q '^Uncacheable programs *1$' "$TMP/stats.txt" || { cat "$TMP/stats.txt" >&2; fail "stats: uncacheable not counted"; }
ok "preprocessor failure: uncacheable, logged with include and kernels, counted in cache stats"
finish
