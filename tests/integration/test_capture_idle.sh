#!/bin/bash
# run-all: alone (the capture waits for the app's own busy loop)
# A capture in the application (CLSHIM_CAPTURE_PROCESS=0, the fallback when
# no helper can run) never runs beside the application's own work (issue
# 30): it takes PoCL's code generation lock, and a kernel latency loop
# right after a cold build read 455-812 us per launch instead of 5-19 us.
# The worker waits while the application is busy: the binary is stored
# after the loop ends (the stderr order shows it), at exit at the latest;
# with CLSHIM_CAPTURE_DEFER_MAX=0 it captures at once, during the loop.
source "$(dirname "$0")/lib.sh"
export CLSHIM_CAPTURE_PROCESS=0 CLSHIM_LOG=info
P=$PROGS/klatency
N=30000
fresh_pocl; run_plain ref "$P" 200
order() { grep -n -e 'loop done' -e 'clshim: stored ' "$TMP/$1.err" | sed 's/:.*\(loop done\|stored\).*/ \1/' | awk '{print $2}' | paste -sd' '; }

empty_cache() { rm -rf "$CLSHIM_CACHE_DIR"; mkdir -p "$CLSHIM_CACHE_DIR"; }
empty_cache; fresh_pocl; run_shim idle "$P" "$N" 1500
[ "$(cat "$TMP/idle.rc")" = 0 ] || { cat "$TMP/idle.err" >&2; fail "the program failed"; }
[ "$(order idle)" = "loop stored" ] || { cat "$TMP/idle.err" >&2; fail "stored during the loop (order: $(order idle))"; }
ok "the capture waits for the busy loop, then stores while the application is idle"

empty_cache; fresh_pocl; run_shim exit "$P" "$N" 0
[ "$(order exit)" = "loop stored" ] || { cat "$TMP/exit.err" >&2; fail "not stored after the loop, at exit (order: $(order exit))"; }
ok "an application that exits right after its loop: stored at exit"

empty_cache; fresh_pocl; CLSHIM_CAPTURE_DEFER_MAX=0 run_shim now "$P" "$N" 0
[ "$(order now)" = "stored loop" ] || { cat "$TMP/now.err" >&2; fail "CLSHIM_CAPTURE_DEFER_MAX=0: not captured during the loop (order: $(order now))"; }
ok "CLSHIM_CAPTURE_DEFER_MAX=0: captured at once, as before"
finish
