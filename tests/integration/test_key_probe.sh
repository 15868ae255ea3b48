#!/bin/bash
# Every hit exact (issue 30, items 4a and 5), on PoCL under LD_PRELOAD:
# - a name probed by __has_include while absent is in the key, so creating
#   it later misses and gives the plain driver's result, then hits again
#   (also with the capture helper, CLSHIM_CAPTURE_PROCESS=1);
# - a source or header using __DATE__, __TIME__ or __TIMESTAMP__ is never
#   served from the cache, and `cache stats --json` counts why.
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info
SF=$PROGS/srcfile
TOOL=$CLSHIM_BUILD/clshim
INC=$TMP/inc
mkdir -p "$INC"
KBODY='__kernel void k(__global float *y) { size_t i = get_global_id(0); y[i] = V * (float)(i % 7); }'

# ---- __has_include of a file that appears later ----------------------------
printf '#if __has_include("opt.h")\n#include "opt.h"\n#else\n#define V 1.0f\n#endif\n%s\n' "$KBODY" >"$TMP/probe.cl"
rm -f "$INC/opt.h"
fresh_pocl; run_plain ref1 "$SF" "$TMP/probe.cl" --options "-I $INC"
echo '#define V 2.0f' >"$INC/opt.h"
fresh_pocl; run_plain ref2 "$SF" "$TMP/probe.cl" --options "-I $INC"
[ "$(cat "$TMP/ref1.rc")" = 0 ] && ! cmp -s "$TMP/ref1.out" "$TMP/ref2.out" || fail "reference runs: opt.h does not change the plain result"

probe_scenario() { # tag: cold without opt.h, then with it, then warm
    local t=$1
    rm -f "$INC/opt.h"
    fresh_pocl; run_shim "$t-cold" "$SF" "$TMP/probe.cl" --options "-I $INC"
    same_output ref1 "$t-cold" "$t: opt.h absent, cold run as plain"
    [ -n "${WAIT_HELPER:-}" ] && { "$TOOL" cache wait --timeout 120 || fail "$t: cache wait"; }
    echo '#define V 2.0f' >"$INC/opt.h"
    fresh_pocl; run_shim "$t-created" "$SF" "$TMP/probe.cl" --options "-I $INC"
    same_output ref2 "$t-created" "$t: opt.h created, the plain driver's result (not the stored binary)"
    [ "$(count 'miss ' "$TMP/$t-created.err")" -ge 1 ] || fail "$t: opt.h created: expected a miss"
    [ "$(count 'hit ' "$TMP/$t-created.err")" = 0 ] || fail "$t: opt.h created: served a stored binary"
    [ -n "${WAIT_HELPER:-}" ] && { "$TOOL" cache wait --timeout 120 || fail "$t: cache wait"; }
    fresh_pocl; run_shim "$t-warm" "$SF" "$TMP/probe.cl" --options "-I $INC"
    same_output ref2 "$t-warm" "$t: third run as plain"
    [ "$(count 'hit ' "$TMP/$t-warm.err")" -ge 1 ] || fail "$t: third run: expected a hit"
    ok "$t: a probed name that appears later misses once, then hits"
}
probe_scenario probe
# with the capture helper storing in the background
export CLSHIM_CACHE_DIR=$TMP/cache-capture
CLSHIM_CAPTURE_PROCESS=1 WAIT_HELPER=1 probe_scenario probe-capture
export CLSHIM_CAPTURE_PROCESS=0

# the manifest route: a computed include sends the program to the
# preprocessor, whose -M list does not name absent probed files
export CLSHIM_CACHE_DIR=$TMP/cache-pp
printf '#define HX "hx.h"\n#include HX\n#if __has_include("opt.h")\n#include "opt.h"\n#else\n#define V 1.0f\n#endif\n%s\n' \
    "$KBODY" >"$TMP/probe.cl"
echo '/* nothing */' >"$INC/hx.h"
probe_scenario probe-manifest
grep -q 'headers from its manifest (direct mode)' "$TMP/probe-manifest-warm.err" ||
    fail "probe-manifest: the third run did not use its manifest: $(grep 'headers from' "$TMP/probe-manifest-warm.err")"

# ---- time macros: never a hit, counted with the reason ---------------------
export CLSHIM_CACHE_DIR=$TMP/cache-time
tm() { printf '%s\n__kernel void k(__global float *y) { size_t i = get_global_id(0); y[i] = (float)(W[i %% 4]); }\n' "$2" >"$TMP/$1.cl"; }
tm date '__constant char W[] = __DATE__;'
tm time '__constant char W[] = __TIME__;'
tm stamp '__constant char W[] = __TIMESTAMP__;'
echo '#define WHEN __TIME__' >"$INC/when.h"
tm header $'#include "when.h"\n__constant char W[] = WHEN;'
n=0
for name in date time stamp header; do
    for run in 1 2; do
        fresh_pocl; run_shim "$name-$run" "$SF" "$TMP/$name.cl" --options "-I $INC"
        [ "$(cat "$TMP/$name-$run.rc")" = 0 ] || fail "$name: run $run failed: $(tail -3 "$TMP/$name-$run.err")"
        [ "$(count 'hit ' "$TMP/$name-$run.err")" = 0 ] || fail "$name: run $run served a stored binary"
        [ "$(count 'not caching program .*uses __' "$TMP/$name-$run.err")" = 1 ] ||
            fail "$name: run $run: no single info line names the reason: $(grep clshim: "$TMP/$name-$run.err" | head -5)"
        n=$((n + 1))
    done
    ok "$name: never served from the cache, the reason logged"
done
grep -q 'the program source uses __DATE__' "$TMP/date-1.err" || fail "date: reason not named"
grep -q 'a header it reads uses __TIME__' "$TMP/header-1.err" || fail "header: reason not named"
json=$("$TOOL" cache stats --json)
val() { python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])" <<<"$json"; }
[ "$(val uncacheable_time_macros)" = $n ] || fail "stats: uncacheable_time_macros $(val uncacheable_time_macros), want $n: $json"
[ "$(val uncacheable)" = $n ] || fail "stats: uncacheable $(val uncacheable), want $n"
[ "$(val uncacheable_headers)" = 0 ] || fail "stats: uncacheable_headers $(val uncacheable_headers), want 0"
"$TOOL" cache stats | grep -q "^  time macros  *$n\$" || fail "stats text: $("$TOOL" cache stats)"
ok "stats: $n uncacheable programs, all for time macros"
finish
