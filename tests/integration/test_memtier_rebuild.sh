#!/bin/bash
# A program released and built again in the same process (issue 30): the
# in-process tier keeps its binary. With the capture helper (PoCL's
# default) the helper sends the bytes it stored back to the application:
# a rebuild after that is a memory hit, with no code generation in the
# application; a rebuild before it is built by the driver (from PoCL's own
# cache), is not handed to the helper a second time, and is captured in the
# process (it is built repeatedly), so the builds after it are memory hits.
# With the capture in the application, the bytes read at its first use
# serve the rebuilds.
# Results and exit codes as the plain run's, every time.
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info
P=$PROGS/rebuild
TOOL=$CLSHIM_BUILD/clshim-tool
fresh_pocl; run_plain ref "$P" 3
fresh_pocl; run_plain ref_idle "$P" 3 1500

# 1. The helper; the app idle 1.5 s after each release (the helper
#    captures while it is idle): rounds 2 and 3 are memory hits.
rm -rf "$CLSHIM_CACHE_DIR"; fresh_pocl
CLSHIM_CAPTURE_PROCESS=1 run_shim helper "$P" 3 1500
same_output ref_idle helper "helper, idle between rounds: plain results"
[ "$(count 'clshim: miss ' "$TMP/helper.err")" = 1 ] || { cat "$TMP/helper.err" >&2; fail "helper: not one miss"; }
[ "$(count 'clshim: hit .*(memory)' "$TMP/helper.err")" = 2 ] ||
    { cat "$TMP/helper.err" >&2; fail "helper: the rebuilds were not memory hits"; }
grep -q 'summary: 2 hits (2 from memory), 1 misses' "$TMP/helper.err" || fail "helper: the summary does not say 2 memory hits"
ok "capture helper: a released program built again is a memory hit (the helper's bytes)"
"$TOOL" cache wait --timeout 60 >/dev/null 2>&1 || fail "cache wait"

# 2. The helper, rebuilds right after each release (the helper still waits
#    for the busy app): round 2 is built by the driver (from PoCL's cache)
#    and, built again before the helper answered, captured in the process:
#    rounds 3 and 4 are memory hits. One capture is handed over, and the
#    next process hits.
fresh_pocl; run_plain ref4 "$P" 4
rm -rf "$CLSHIM_CACHE_DIR"; fresh_pocl
CLSHIM_CAPTURE_PROCESS=1 run_shim tight "$P" 4
same_output ref4 tight "helper, rebuilt at once: plain results"
[ "$(count 'capture of .* handed to the capture helper' "$TMP/tight.err")" = 1 ] ||
    { cat "$TMP/tight.err" >&2; fail "tight: the same key was handed to the helper more than once"; }
grep -q 'summary: 2 hits (2 from memory), 2 misses' "$TMP/tight.err" ||
    { cat "$TMP/tight.err" >&2; fail "tight: rounds 3 and 4 were not memory hits"; }
ok "rebuilt at once: handed over once; from the third build on, memory hits"
"$TOOL" cache wait --timeout 60 >/dev/null 2>&1 || fail "cache wait"
fresh_pocl; CLSHIM_CAPTURE_PROCESS=1 run_shim tight_warm "$P" 3
same_output ref tight_warm "helper, next process: plain results"
grep -q 'summary: 3 hits (2 from memory), 0 misses' "$TMP/tight_warm.err" ||
    { cat "$TMP/tight_warm.err" >&2; fail "next process: not one disk hit and two memory hits"; }
ok "the next process hits once on disk, then from memory"

# 3. The capture in the application: rounds 2 and 3 are memory hits too.
rm -rf "$CLSHIM_CACHE_DIR"; fresh_pocl
CLSHIM_CAPTURE_PROCESS=0 run_shim inproc "$P" 3
same_output ref inproc "in-process capture: plain results"
grep -q 'summary: 2 hits (2 from memory), 1 misses' "$TMP/inproc.err" ||
    { cat "$TMP/inproc.err" >&2; fail "in-process: the rebuilds were not memory hits"; }
ok "capture in the application: a released program built again is a memory hit"
finish
