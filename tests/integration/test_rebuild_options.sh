#!/bin/bash
# A program object built, queried, then built again with other options
# before its first use (a conformance test does this): the first build's
# capture was dropped with it, silently, and it missed on every warm run.
# Now it is captured before the rebuild replaces it: the next run hits
# both builds, with the capture helper and with the capture in the app.
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info
P=$PROGS/rebuild_options
TOOL=$CLSHIM_BUILD/clshim-tool
fresh_pocl; run_plain ref "$P"
[ "$(cat "$TMP/ref.rc")" = 0 ] || fail "plain run: exit $(cat "$TMP/ref.rc")"
for helper in 1 0; do
    export CLSHIM_CACHE_DIR=$TMP/cache-$helper
    fresh_pocl; CLSHIM_CAPTURE_PROCESS=$helper run_shim cold$helper "$P"
    same_output ref cold$helper "capture process $helper, cold: plain results"
    [ "$(count '^clshim: miss ' "$TMP/cold$helper.err")" = 2 ] || { cat "$TMP/cold$helper.err" >&2; fail "cold: not two misses"; }
    "$TOOL" cache wait --timeout 120 >"$TMP/wait$helper.out" 2>&1 || { cat "$TMP/wait$helper.out" >&2; fail "cache wait"; }
    fresh_pocl; CLSHIM_CAPTURE_PROCESS=$helper run_shim warm$helper "$P"
    same_output ref warm$helper "capture process $helper, warm: plain results"
    grep -q 'summary: 2 hits (0 from memory), 0 misses' "$TMP/warm$helper.err" ||
        { cat "$TMP/cold$helper.err" "$TMP/warm$helper.err" >&2; fail "capture process $helper: the warm run did not hit both builds"; }
    ok "capture process $helper: both builds of one program object are stored and hit"
done
finish
