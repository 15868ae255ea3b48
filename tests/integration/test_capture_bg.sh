#!/bin/bash
# run-all: alone (times clFinish against a plain run)
# The background capture (program/capture.h, issue 16): binaries are read
# and stored on a worker thread, not at the application's synchronisation.
# A slow binary read (faultlib/clfault.c: CLFAULT_SLOW_BINARIES_MS, standing
# for PoCL's code generation of a large program) makes the cases
# deterministic: the app's clFinish does not wait for it; exit with
# captures queued (within the budget, then one line); fork with captures
# queued; programs released while queued or being captured; a full disk
# during the background stores. Results always those of the plain run.
source "$CLSHIM_ROOT/tests/integration/lib.sh"
# The in-process paths: the capture helper (test_capture_proc) is off.
export CLSHIM_CAPTURE_PROCESS=0
P=$PROGS/capture_bg
TOOL=$CLSHIM_BUILD/clshim-tool
FAULT=$TMP/libclfault.so
cc -shared -fPIC -O1 -Wall -Werror -o "$FAULT" "$CLSHIM_ROOT/tests/reliability/faultlib/clfault.c" || fail "cannot build clfault"
plain_f() { local tag=$1; shift; set +e; LD_PRELOAD=$FAULT "$@" >"$TMP/$tag.out" 2>"$TMP/$tag.err"; echo $? >"$TMP/$tag.rc"; set -e; }
shim_f() { local tag=$1; shift; set +e; LD_PRELOAD="$SHIM $FAULT" "$@" >"$TMP/$tag.out" 2>"$TMP/$tag.err"; echo $? >"$TMP/$tag.rc"; set -e; }
summary() { grep -o "[0-9]* $1" "$TMP/$2.err" | tail -1 | cut -d' ' -f1; } # field tag
sync_ms() { sed -n 's/^sync_ms=//p' "$TMP/$1.err"; }
entries() { "$TOOL" cache stats --json | python3 -c "import json,sys; print(json.load(sys.stdin)['entries'])"; }
N=4
export CLFAULT_SLOW_BINARIES_MS=1500

# 1. The app's synchronisation does not wait for the capture; exit with
#    captures queued waits at most the budget, then says in one line what
#    was dropped; what was stored is served by the next run.
#    The longest clFinish (it includes PoCL's code generation at first
#    enqueue) is compared with the plain run's: a capture on the app's
#    thread would add 3000 ms to it.
fresh_pocl; CLFAULT_SLOW_BINARIES_MS=3000 plain_f ref "$P" exit $N
fresh_pocl; CLFAULT_SLOW_BINARIES_MS=3000 CLSHIM_STATS=1 CLSHIM_CAPTURE_EXIT_BUDGET=500 shim_f exit1 "$P" exit $N
same_output ref exit1 "exit with captures queued: results of a plain run"
[ "$(sync_ms exit1)" -lt $(($(sync_ms ref) + 1500)) ] ||
    { cat "$TMP/exit1.err" >&2; fail "clFinish waited for the capture ($(sync_ms exit1) ms, plain $(sync_ms ref) ms)"; }
ok "clFinish does not wait for the capture ($(sync_ms exit1) ms, plain $(sync_ms ref) ms, a read takes 3000 ms)"
dropped=$(sed -n 's/^clshim: \([0-9]*\) binar.* not stored: the capture did not finish within the exit budget.*/\1/p' "$TMP/exit1.err")
[ "$(count 'exit budget' "$TMP/exit1.err")" = 1 ] && [ -n "$dropped" ] ||
    { cat "$TMP/exit1.err" >&2; fail "no one line saying what the exit budget dropped"; }
stored=$(summary stored exit1)
[ $((stored + dropped)) = $N ] || { cat "$TMP/exit1.err" >&2; fail "stored $stored + dropped $dropped != $N"; }
[ "$(entries)" = "$stored" ] || fail "the cache holds $(entries) entries, the summary says $stored stored"
ok "exit budget: $stored stored, $dropped dropped, said in one line"
fresh_pocl; CLSHIM_STATS=1 shim_f exit1b "$P" exit $N
same_output ref exit1b "the run after: results of a plain run"
[ "$(summary hits exit1b)" = "$stored" ] || { cat "$TMP/exit1b.err" >&2; fail "the stored entries are not served"; }
ok "what was stored before exit is served ($stored hits)"

# An empty cache, the plain run and the shim run (long exit budget) of
# `capture_bg MODE N`, with the same results.
long_budget_case() { # tag mode what
    rm -rf "$CLSHIM_CACHE_DIR"; mkdir -p "$CLSHIM_CACHE_DIR"
    fresh_pocl; plain_f "$1-ref" "$P" "$2" $N
    fresh_pocl; CLSHIM_STATS=1 CLSHIM_CAPTURE_EXIT_BUDGET=20000 shim_f "$1" "$P" "$2" $N
    same_output "$1-ref" "$1" "$3: results of a plain run"
}

# 2. A budget long enough: everything queued is stored, no line.
long_budget_case exit2 exit "exit, long budget"
[ "$(summary stored exit2)" = $N ] && [ "$(count 'exit budget' "$TMP/exit2.err")" = 0 ] ||
    { cat "$TMP/exit2.err" >&2; fail "a long exit budget did not store all $N"; }
ok "a long exit budget: all $N stored before exit"

# 3. fork() with captures queued: the child (which exits at once) neither
#    waits for the parent's worker nor stores the parent's programs.
long_budget_case fork fork "fork with captures queued"
[ "$(count 'summary:' "$TMP/fork.err")" = 1 ] && [ "$(summary stored fork)" = $N ] ||
    { cat "$TMP/fork.err" >&2; fail "fork: the parent did not store its $N programs (or the child reported)"; }
ok "fork: the child exits at once, the parent stores all $N"

# 4. Programs released while queued or being captured (each release comes
#    right after the synchronisation that queued it), then variant 0 again.
long_budget_case rel release "released during capture"
[ "$(summary stored rel)" -ge $N ] || { cat "$TMP/rel.err" >&2; fail "released programs were not stored"; }
[ "$(count 'clshim:' "$TMP/rel.err")" = 1 ] || { cat "$TMP/rel.err" >&2; fail "unexpected clshim lines"; }
ok "programs released during their capture: stored ($(summary stored rel)), no other line"

# 5. A full disk during background stores: results unchanged, one line.
unset CLFAULT_SLOW_BINARIES_MS
full_disk_cache "$P" exit 1
fresh_pocl; run_plain fullref "$P" release $N
fresh_pocl; run_shim full "$P" release $N
same_output fullref full "full disk during background stores: results of a plain run"
[ "$(count 'clshim:' "$TMP/full.err")" = 1 ] && [ "$(count 'cannot store' "$TMP/full.err")" = 1 ] ||
    { cat "$TMP/full.err" >&2; fail "full disk: not one 'cannot store' line"; }
ok "full disk during background stores: one line, same results"
finish
