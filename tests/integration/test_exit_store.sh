#!/bin/bash
# Programs whose kernels never run before exit (issue 13 item 10, issue 16):
# their binaries are captured at exit within CLSHIM_CAPTURE_EXIT_BUDGET, so
# the next run is a hit; a budget of 0 stores nothing and says so. Output
# and exit code as without clshim, cold and warm.
source "$(dirname "$0")/lib.sh"
# The in-process paths: the capture helper (test_capture_proc) is off.
export CLSHIM_CAPTURE_PROCESS=0
NR=$PROGS/neverrun

for mode in one beside; do
    fresh_pocl; run_plain plain_$mode "$NR" $mode
    fresh_pocl; run_shim cold_$mode env CLSHIM_CACHE_DIR="$TMP/c_$mode" CLSHIM_LOG=info "$NR" $mode
    same_output plain_$mode cold_$mode "$mode: cold run as plain"
    grep -q "not used or released before exit: captured at exit" "$TMP/cold_$mode.err" ||
        fail "$mode: the exit line does not say the programs were captured: $(grep -i exit "$TMP/cold_$mode.err")"
    [ "$(count '^clshim: stored [0-9a-f]\{16\}:' "$TMP/cold_$mode.err")" -ge 1 ] || fail "$mode: nothing stored at exit"
    fresh_pocl; run_shim warm_$mode env CLSHIM_CACHE_DIR="$TMP/c_$mode" CLSHIM_LOG=info "$NR" $mode
    same_output plain_$mode warm_$mode "$mode: warm run as plain"
    want=1; [ $mode = beside ] && want=2
    [ "$(count '^clshim: hit [0-9a-f]* on .*(disk)' "$TMP/warm_$mode.err")" = $want ] ||
        fail "$mode: the never-run program was not a hit on the next run"
    [ "$(count '^clshim: miss ' "$TMP/warm_$mode.err")" = 0 ] || fail "$mode: a miss on the warm run"
    ok "$mode: a program built and never run is stored at exit and a hit on the next run"
done

# A budget of 0: nothing is read at exit, one line says so, the next run compiles.
fresh_pocl; run_shim zero env CLSHIM_CACHE_DIR="$TMP/c_zero" CLSHIM_CAPTURE_EXIT_BUDGET=0 CLSHIM_LOG=info "$NR" one
same_output plain_one zero "budget 0: as plain"
grep -q "miss .*not at exit: CLSHIM_CAPTURE_EXIT_BUDGET=0" "$TMP/zero.err" || fail "budget 0: the miss line promises a store at exit"
[ "$(count 'not used or released before exit: not stored (CLSHIM_CAPTURE_EXIT_BUDGET=0)' "$TMP/zero.err")" = 1 ] ||
    fail "budget 0: no single line says the program was not stored"
[ "$(count '^clshim: stored ' "$TMP/zero.err")" = 0 ] || fail "budget 0: something was stored"
fresh_pocl; run_shim zero2 env CLSHIM_CACHE_DIR="$TMP/c_zero" CLSHIM_LOG=info "$NR" one
[ "$(count '^clshim: hit ' "$TMP/zero2.err")" = 0 ] || fail "budget 0: the next run hit a program that was not stored"
ok "CLSHIM_CAPTURE_EXIT_BUDGET=0: nothing stored at exit, and the log says so"

# A read-only cache: nothing stored, and no line claims a capture.
fresh_pocl; run_shim ro env CLSHIM_CACHE_DIR="$TMP/c_one" CLSHIM_CACHE_READONLY=1 CLSHIM_LOG=info "$NR" beside
same_output plain_beside ro "read-only: as plain"
grep -q "captured at exit" "$TMP/ro.err" && fail "read-only: a capture at exit was claimed"
ok "read-only cache: nothing captured at exit"
finish
