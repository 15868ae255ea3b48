#!/bin/bash
# run-all: alone (counts what the busy app's capture did by then)
# A program released and built again in the same process (issue 30): the
# in-process tier keeps its binary. With the capture helper (PoCL's
# default) the helper sends the bytes it stored back to the application:
# a rebuild after that is a memory hit, with no code generation in the
# application; a rebuild before it is built by the driver (from PoCL's own
# cache) and asks the helper to capture it at once, even while the app is
# busy, so the builds after the helper's answer are memory hits.
# With the capture in the application, the bytes read at its first use
# serve the rebuilds.
# Results and exit codes as the plain run's, every time.
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info
P=$PROGS/rebuild
TOOL=$CLSHIM_BUILD/clshim-tool
fresh_pocl; run_plain ref "$P" 3
fresh_pocl; run_plain ref_idle "$P" 3 3000

# 1. The helper; the app idle 3 s after each release (the helper
#    captures while it is idle): rounds 2 and 3 are memory hits.
rm -rf "$CLSHIM_CACHE_DIR"; fresh_pocl
CLSHIM_CAPTURE_PROCESS=1 run_shim helper "$P" 3 3000
same_output ref_idle helper "helper, idle between rounds: plain results"
[ "$(count 'clshim: miss ' "$TMP/helper.err")" = 1 ] || { cat "$TMP/helper.err" >&2; fail "helper: not one miss"; }
[ "$(count 'clshim: hit .*(memory)' "$TMP/helper.err")" = 2 ] ||
    { cat "$TMP/helper.err" >&2; fail "helper: the rebuilds were not memory hits"; }
grep -q 'summary: 2 hits (2 from memory), 1 misses' "$TMP/helper.err" || fail "helper: the summary does not say 2 memory hits"
ok "capture helper: a released program built again is a memory hit (the helper's bytes)"
"$TOOL" cache wait --timeout 60 >/dev/null 2>&1 || fail "cache wait"

# 2. The helper, the app busy between rounds (the helper waits for a busy
#    app): round 2 is built by the driver (from PoCL's cache); built again
#    before the helper answered, it is not captured in the application
#    (that is code generation for every kernel of the program, in the app)
#    but the helper is asked to capture it at once, beside the busy app:
#    the rounds after its answer are memory hits (rounds 3 to 5 on a quiet
#    machine; at nice 19 beside other load, later). One capture is handed
#    over, nothing is stored by the app itself, and the next process hits.
fresh_pocl; run_plain ref5 "$P" 5
rm -rf "$CLSHIM_CACHE_DIR"; fresh_pocl
CLSHIM_CAPTURE_PROCESS=1 run_shim busy "$P" 5 2500 busy
same_output ref5 busy "helper, busy app: plain results"
[ "$(count 'capture of .* handed to the capture helper' "$TMP/busy.err")" = 1 ] ||
    { cat "$TMP/busy.err" >&2; fail "busy: the same key was handed to the helper more than once"; }
[ "$(count 'built again before the capture helper stored it: the helper captures it now' "$TMP/busy.err")" -ge 1 ] ||
    { cat "$TMP/busy.err" >&2; fail "busy: the rebuild did not ask the helper to capture at once"; }
grep -q 'summary: [1-3] hits ([1-3] from memory), .* 0 stored, 1 handed' "$TMP/busy.err" ||
    { cat "$TMP/busy.err" >&2; fail "busy: no memory hit of the helper's capture while the app stayed busy"; }
grep -q 'summary: 3 hits' "$TMP/busy.err" || echo "note: the helper answered late: $(grep summary: "$TMP/busy.err")"
ok "rebuilt while busy: handed over once, captured by the helper beside the busy app; then memory hits"
"$TOOL" cache wait --timeout 60 >/dev/null 2>&1 || fail "cache wait"
fresh_pocl; CLSHIM_CAPTURE_PROCESS=1 run_shim busy_warm "$P" 3
same_output ref busy_warm "helper, next process: plain results"
grep -q 'summary: 3 hits (2 from memory), 0 misses' "$TMP/busy_warm.err" ||
    { cat "$TMP/busy_warm.err" >&2; fail "next process: not one disk hit and two memory hits"; }
ok "the next process hits once on disk, then from memory"

# 3. The capture in the application: rounds 2 and 3 are memory hits too.
rm -rf "$CLSHIM_CACHE_DIR"; fresh_pocl
CLSHIM_CAPTURE_PROCESS=0 run_shim inproc "$P" 3
same_output ref inproc "in-process capture: plain results"
grep -q 'summary: 2 hits (2 from memory), 1 misses' "$TMP/inproc.err" ||
    { cat "$TMP/inproc.err" >&2; fail "in-process: the rebuilds were not memory hits"; }
ok "capture in the application: a released program built again is a memory hit"
finish
