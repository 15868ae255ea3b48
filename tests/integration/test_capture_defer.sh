#!/bin/bash
# run-all: alone (the helper's wait depends on how busy the machine is)
# When the capture helper (program/capture_proc.h, issue 16) captures:
# a capture is a second code generation that slows the application it runs
# beside, so the helper waits while the application is busy
# (CLSHIM_CAPTURE_DEFER_MAX). test_capture_proc tests the helper itself.
source "$CLSHIM_ROOT/tests/integration/lib.sh"
P=$PROGS/capture_bg
export CLSHIM_CAPTURE_PROCESS=1 # run-all.sh turns it off for the other tests
TOOL=$CLSHIM_BUILD/clshim-tool
summary() { grep -o "[0-9]* $1" "$TMP/$2.err" | tail -1 | cut -d' ' -f1; } # field tag
entries() { "$TOOL" cache stats --json | python3 -c "import json,sys; print(json.load(sys.stdin)['entries'])"; }
# A lost capture makes `cache wait` exit 1 too (saying so): only "still
# outstanding" is the helper not finishing.
wait_helper() {
    "$TOOL" cache wait --timeout 120 2>"$TMP/wait.err" || ! grep -q "captures still outstanding in" "$TMP/wait.err" ||
        fail "clshim cache wait: the helper did not finish"
}
empty_cache() { rm -rf "$CLSHIM_CACHE_DIR"; mkdir -p "$CLSHIM_CACHE_DIR"; }
N=4

# Not while the application is busy; once it is idle; once it has exited;
# beside it once a request waited the maximum. Each app runs in the
# background after its N programs were handed over; the helper's lines
# (info) and the app's go to CLSHIM_LOG_FILE. What is asserted is the
# helper's decision, made while the app still runs, and what the cache holds
# then: not how fast the helper works (at nice 19 on a loaded machine it may
# barely run).
start_app() { # tag busy|idle seconds [VAR=value...]
    local tag=$1 mode=$2 secs=$3; shift 3
    empty_cache; fresh_pocl; rm -f "$TMP/$tag.log"
    env "$@" LD_PRELOAD="$SHIM" CLSHIM_LOG=info CLSHIM_LOG_FILE="$TMP/$tag.log" "$P" "$mode" $N "$secs" \
        >"$TMP/$tag.out" 2>"$TMP/$tag.err" &
    APP=$!
    for _ in $(seq 1200); do
        grep -q "handed over" "$TMP/$tag.err" && return 0
        kill -0 $APP 2>/dev/null || break
        sleep 0.1
    done
    cat "$TMP/$tag.err" >&2; fail "$tag: the app did not hand its programs over"
}
alive() { kill -0 $APP 2>/dev/null; }
end_app() { set +e; wait $APP; echo $? >"$TMP/$1.rc"; set -e; wait_helper; }
# The helper writes this line after its last capture let `cache wait` go:
# on a loaded machine a moment later.
summary_line() {
    local line="capture helper: .* captured while the application was idle"
    for _ in $(seq 100); do grep -q "$line" "$TMP/$1.log" && break; sleep 0.1; done
    grep "$line" "$TMP/$1.log" || true
}
fresh_pocl; run_plain bref "$P" exit $N

# 1. Busy for 8 s with a maximum of 600 s: nothing captured while it is
#     busy, nor handed to the helper (the hand-off is background work too:
#     it waits with the capture), so `clshim cache wait` does not wait for
#     the application; its exit hands them over and `cache wait` waits for
#     them; the next run is N hits.
start_app busy busy 8 CLSHIM_CAPTURE_DEFER_MAX=600
sleep 3
alive || fail "busy: the app ended before the check"
[ "$(entries)" = 0 ] || { cat "$TMP/busy.log" >&2; fail "busy: $(entries) captures stored while the app was busy"; }
! grep -q "capture of .* handed to the capture helper" "$TMP/busy.log" ||
    { cat "$TMP/busy.log" >&2; fail "busy: captures handed to the helper while the app was busy"; }
set +e; "$TOOL" cache wait --timeout 1 2>"$TMP/wait-busy.err"; rc=$?; set -e
[ $rc = 0 ] || { cat "$TMP/wait-busy.err" >&2; fail "busy: clshim cache wait waited ($rc) for a running app"; }
alive || fail "busy: the app ended before the checks were done"
end_app busy
[ "$(grep -c "capture of .* handed to the capture helper" "$TMP/busy.log")" = $N ] ||
    { cat "$TMP/busy.log" >&2; fail "busy: the exit did not hand the $N captures over"; }
same_output bref busy "busy app: results of a plain run"
# Handed over at the exit, a request can reach the helper before the end of
# file does, from a process it can no longer watch: "without waiting".
counts() { # tag -> "idle beside after now"
    summary_line "$1" | sed -n 's/.*: \([0-9]*\) captured while the application was idle, \([0-9]*\) beside it, \([0-9]*\) after it exited, \([0-9]*\) without waiting.*/\1 \2 \3 \4/p'
}
read -r idle beside after now <<<"$(counts busy)"
[ "${idle:-x}" = 0 ] && [ "${beside:-x}" = 0 ] && [ $((after + now)) = $N ] ||
    { cat "$TMP/busy.log" >&2; fail "busy: the helper did not wait for the app's exit"; }
[ "$(entries)" = $N ] || fail "busy: $(entries) entries after the exit, not $N"
fresh_pocl; CLSHIM_STATS=1 run_shim bwarm "$P" exit $N
[ "$(summary hits bwarm)" = $N ] && [ "$(summary misses bwarm)" = 0 ] ||
    { cat "$TMP/bwarm.err" >&2; fail "busy: the next run is not $N hits"; }
ok "busy app: nothing captured nor handed over while busy, the exit hands them over, cache wait waits, then $N hits"

# 2. and 3. The helper starts while the app still runs: LINE in the log
#    before the app ended, then a capture counted as COUNTED, N entries.
starts_while_running() { # tag busy|idle seconds defer_max line counted what
    local tag=$1 line=$5 counted=$6 what=$7
    start_app "$tag" "$2" "$3" CLSHIM_CAPTURE_DEFER_MAX="$4"
    for _ in $(seq 100); do grep -q "$line" "$TMP/$tag.log" && break; sleep 0.1; done
    alive && grep -q "$line" "$TMP/$tag.log" ||
        { cat "$TMP/$tag.log" >&2; fail "$what: the helper did not start while the app ran"; }
    end_app "$tag"
    same_output bref "$tag" "$what: results of a plain run"
    summary_line "$tag" | grep -q "$counted" || { cat "$TMP/$tag.log" >&2; fail "$what: no capture counted so"; }
    [ "$(entries)" = $N ] || fail "$what: $(entries) entries, not $N"
    ok "$what: the helper captures while the app runs ($N entries)"
}
# 2. Idle (asleep) for 12 s: the helper starts capturing while it sleeps.
starts_while_running idle idle 12 600 "the application is idle: capturing" \
    " [1-9][0-9]* captured while the application was idle" "an idle app"
# 3. Busy for 12 s with a maximum of 2 s: the helper captures beside it.
starts_while_running beside busy 12 2 "capturing beside it" " [1-9][0-9]* beside it" \
    "a busy app past CLSHIM_CAPTURE_DEFER_MAX"

# 4. The budget after the exit is the helper's CPU time: 0 stores nothing
#    after the exit, says so in one line, and the app's results are
#    unchanged. (On a loaded machine the busy app can look idle for a moment
#    and the helper capture one or two then: those count, and are stored.)
#    Handed over at the first synchronisation (CLSHIM_CAPTURE_BACKGROUND=0),
#    as in 5, so that the requests wait in the helper for the exit.
start_app budget busy 2 CLSHIM_CAPTURE_DEFER_MAX=600 CLSHIM_CAPTURE_HELPER_BUDGET=0 CLSHIM_CAPTURE_BACKGROUND=0
end_app budget
same_output bref budget "budget 0: results of a plain run"
before=$(counts budget)
read -r idle beside after now <<<"$before"
[ "${after:-x}" = 0 ] || { cat "$TMP/budget.log" >&2; fail "budget 0: captures after the exit: '$before'"; }
idle=$((idle + now)) # before the end of file all the same
left=$((N - idle - beside))
[ $left -ge 1 ] || fail "budget 0: every binary was captured before the exit; the test is void"
grep -q "capture helper: $left binar[a-z]* not stored: CLSHIM_CAPTURE_HELPER_BUDGET=0 s (CPU) spent" "$TMP/budget.log" ||
    { cat "$TMP/budget.log" >&2; fail "budget 0: no line saying the $left not stored"; }
[ "$(entries)" = $((idle + beside)) ] || fail "budget 0: $(entries) entries stored, not $((idle + beside))"
grep -q "cache wait: $left of $N captures not stored ($left helper_budget)" "$TMP/wait.err" ||
    { cat "$TMP/wait.err" >&2; fail "budget 0: cache wait did not say the $left not stored"; }
ok "budget 0: nothing stored after the exit ($left of $N), one line says so, and cache wait"

# 5. ... and not wall time: a helper stopped (SIGSTOP, as a starved one)
#    once it has seen the app's exit (it lets go of the app's stderr then)
#    for longer than its 2 s budget still stores everything. Without the
#    capture thread (CLSHIM_CAPTURE_BACKGROUND=0) the app hands its
#    captures over at its first synchronisation: the helper is there to
#    find while the app still runs.
helper_pid() { # the capture helper serving this test's cache directory (no pgrep: procps may be absent)
    local d
    for d in /proc/[0-9]*; do
        tr '\0' ' ' <"$d/cmdline" 2>/dev/null | grep -q "capture-helper" || continue
        tr '\0' '\n' <"$d/environ" 2>/dev/null | grep -qx "CLSHIM_CACHE_DIR=$CLSHIM_CACHE_DIR" && { echo "${d#/proc/}"; return; }
    done
}
start_app starved busy 2 CLSHIM_CAPTURE_DEFER_MAX=600 CLSHIM_CAPTURE_HELPER_BUDGET=2 CLSHIM_CAPTURE_BACKGROUND=0
H=$(helper_pid)
[ -n "$H" ] || fail "starved: no capture helper found for this cache"
set +e; wait $APP; set -e
for _ in $(seq 200); do [ "$(readlink "/proc/$H/fd/2")" = /dev/null ] && break; sleep 0.05; done
kill -STOP "$H"
sleep 5
kill -CONT "$H"
wait_helper
[ "$(entries)" = $N ] || { cat "$TMP/starved.log" >&2; fail "starved: $(entries) entries, not $N: wall time counted"; }
ok "a helper starved past its budget's wall time still stores what its CPU budget allows"

finish
