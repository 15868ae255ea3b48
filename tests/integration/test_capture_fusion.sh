#!/bin/bash
# Fusion armed (a plan, CLSHIM_FUSION=auto, the extension API) stores
# exactly what it stores disarmed (issue 30): armed, clshim builds programs
# with -cl-kernel-arg-info added, and the capture helper once got the
# application's options, computed another key and dropped every capture.
# Each way, with the helper (PoCL's default): a cold run, `cache wait`,
# then a run on an empty PoCL cache that misses nothing.
source "$(dirname "$0")/lib.sh"
export CLSHIM_CAPTURE_PROCESS=1 CLSHIM_LOG=info
TOOL=$CLSHIM_BUILD/clshim-tool
APP=$CLSHIM_BUILD/examples/pipeline
stat_of() { "$TOOL" cache stats --json | python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }

# way TAG CMD...: cold, wait, warm; prints the captures stored.
way() {
    local tag=$1; shift
    rm -rf "$CLSHIM_CACHE_DIR"; mkdir -p "$CLSHIM_CACHE_DIR"
    fresh_pocl; run_shim "$tag-cold" "$@"
    [ "$(cat "$TMP/$tag-cold.rc")" = 0 ] || { cat "$TMP/$tag-cold.err" >&2; fail "$tag: cold run failed"; }
    "$TOOL" cache wait --timeout 120 >/dev/null 2>&1 || fail "$tag: cache wait"
    fresh_pocl; run_shim "$tag-warm" "$@"
    [ "$(count 'clshim: miss ' "$TMP/$tag-warm.err")" = 0 ] ||
        { grep 'clshim: miss ' "$TMP/$tag-warm.err" >&2; fail "$tag: the warm run missed"; }
    [ "$(count 'clshim: hit ' "$TMP/$tag-warm.err")" -ge 1 ] || fail "$tag: the warm run hit nothing"
    [ "$(stat_of captures_lost)" = 0 ] || { "$TOOL" cache stats >&2; fail "$tag: captures not made"; }
    stat_of captures_stored
}

plain=$(way off "$APP")
[ "$plain" -ge 1 ] || fail "disarmed: nothing captured"
plan=$(way plan env CLSHIM_FUSION_PLAN="$CLSHIM_ROOT/examples/pipeline.plan" "$APP")
grep -q 'into one launch' "$TMP/plan-warm.err" || fail "plan: nothing fused"
auto=$(way auto env CLSHIM_FUSION=auto "$APP")
[ "$plan" = "$plain" ] && [ "$auto" = "$plain" ] ||
    fail "captures stored: disarmed $plain, plan $plan, auto $auto"
ok "a plan and automatic fusion store what a disarmed run stores ($plain captures), and the next run misses nothing"
ext=$(way ext "$PROGS/fusion_ext")
[ "$ext" -ge 1 ] || fail "extension API: nothing captured"
ok "the extension API: every program stored ($ext captures), the next run misses nothing"
finish
