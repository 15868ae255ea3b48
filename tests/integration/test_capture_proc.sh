#!/bin/bash
# run-all: alone (times the app's exit against a plain run)
# Captures done by the capture helper process (program/capture_proc.h,
# issue 16): on PoCL with its kernel cache on, the binary of a program built
# from source is read and stored by `clshim-tool capture-helper`, a detached
# process that builds the program again from PoCL's cache. The app never
# waits for that code generation; `clshim cache wait` waits for the helper;
# the next run is a hit with no compile. Exit right after queueing, fork,
# release during capture, a full disk, a helper that cannot be started:
# results and exit codes of the plain run, every time. When the helper
# captures (the app busy, idle, exited): test_capture_defer.
source "$CLSHIM_ROOT/tests/integration/lib.sh"
P=$PROGS/capture_bg
export CLSHIM_CAPTURE_PROCESS=1 # run-all.sh turns it off for the other tests
NR=$PROGS/neverrun
TOOL=$CLSHIM_BUILD/clshim-tool
FAULT=$TMP/libclfault.so
cc -shared -fPIC -O1 -Wall -Werror -o "$FAULT" "$CLSHIM_ROOT/tests/reliability/faultlib/clfault.c" || fail "cannot build clfault"
summary() { grep -o "[0-9]* $1" "$TMP/$2.err" | tail -1 | cut -d' ' -f1; } # field tag
entries() { "$TOOL" cache stats --json | python3 -c "import json,sys; print(json.load(sys.stdin)['entries'])"; }
wait_helper() { "$TOOL" cache wait --timeout 120 || fail "clshim cache wait: the helper did not finish"; }
empty_cache() { rm -rf "$CLSHIM_CACHE_DIR"; mkdir -p "$CLSHIM_CACHE_DIR"; }
now_ms() { date +%s%3N; }
N=4

# 1. A cold run: the helper stores every program (the app itself stores
#    none), and the app does not wait for the capture: PoCL's binary read is
#    made slow (3 s each, in the helper too: clfault is in its LD_PRELOAD),
#    and the app exits as fast as the plain run. After `clshim cache wait`
#    the next run is N hits, no compile, same results.
fresh_pocl; t0=$(now_ms); LD_PRELOAD=$FAULT CLFAULT_SLOW_BINARIES_MS=3000 run_plain ref "$P" exit $N
plain_ms=$(($(now_ms) - t0))
fresh_pocl; t0=$(now_ms)
LD_PRELOAD="$SHIM $FAULT" CLFAULT_SLOW_BINARIES_MS=3000 CLSHIM_STATS=1 CLSHIM_LOG=info run_plain cold "$P" exit $N
cold_ms=$(($(now_ms) - t0))
same_output ref cold "cold run, captures by the helper: results of a plain run"
[ "$(summary stored cold)" = 0 ] || { cat "$TMP/cold.err" >&2; fail "the app stored binaries itself"; }
[ "$(count 'capture of .* handed to the capture helper' "$TMP/cold.err")" = $N ] ||
    { cat "$TMP/cold.err" >&2; fail "not $N captures handed to the helper"; }
grep -q "summary: .* 0 stored, $N handed to the capture helper," "$TMP/cold.err" ||
    { cat "$TMP/cold.err" >&2; fail "the summary does not say that $N captures were handed over"; }
[ $cold_ms -lt $((plain_ms + 2500)) ] ||
    { cat "$TMP/cold.err" >&2; fail "the app waited for the captures ($cold_ms ms, plain $plain_ms ms, a read takes 3000 ms)"; }
ok "the app does not wait for the helper's captures ($cold_ms ms, plain $plain_ms ms, $N reads of 3000 ms)"
t0=$(now_ms); wait_helper; waited=$(($(now_ms) - t0))
[ "$(entries)" = $N ] || fail "after cache wait the cache holds $(entries) entries, not $N"
[ $waited -ge 1000 ] || fail "cache wait returned at once ($waited ms) while the helper was still reading"
ok "clshim cache wait waits for the helper ($waited ms): $N entries"
fresh_pocl; CLSHIM_STATS=1 CLSHIM_LOG=info run_shim warm "$P" exit $N
same_output ref warm "the run after: results of a plain run"
[ "$(summary hits warm)" = $N ] && [ "$(summary misses warm)" = 0 ] ||
    { cat "$TMP/warm.err" >&2; fail "the next run is not $N hits and no miss"; }
"$TOOL" cache verify >/dev/null || fail "cache verify found bad entries"
ok "the next run: $N hits, no compile; the entries verify"

# 2. Programs never run (stored at exit): handed over at exit, a hit next.
for mode in one beside; do
    empty_cache
    fresh_pocl; run_plain nref_$mode "$NR" $mode
    fresh_pocl; CLSHIM_LOG=info run_shim ncold_$mode "$NR" $mode
    same_output nref_$mode ncold_$mode "$mode: never-run cold run as plain"
    wait_helper
    fresh_pocl; CLSHIM_LOG=info run_shim nwarm_$mode "$NR" $mode
    same_output nref_$mode nwarm_$mode "$mode: never-run warm run as plain"
    [ "$(count '^clshim: miss ' "$TMP/nwarm_$mode.err")" = 0 ] ||
        { cat "$TMP/nwarm_$mode.err" >&2; fail "$mode: a never-run program was not stored by the helper"; }
    ok "$mode: programs never run are stored by the helper, hits on the next run"
done

# 3. fork() with captures queued: the child (which exits at once) does not
#    hold the parent's socket (the helper sees the end when the parent
#    exits), and the entries are neither duplicated nor corrupt.
empty_cache
fresh_pocl; run_plain fref "$P" fork $N
fresh_pocl; CLSHIM_STATS=1 run_shim fork "$P" fork $N
same_output fref fork "fork with captures queued: results of a plain run"
wait_helper
[ "$(entries)" = $N ] || fail "fork: $(entries) entries, not $N"
"$TOOL" cache verify >/dev/null || fail "fork: cache verify found bad entries"
[ "$(count 'clshim:' "$TMP/fork.err")" = 1 ] || { cat "$TMP/fork.err" >&2; fail "fork: unexpected clshim lines"; }
ok "fork: $N entries, all verify, one summary"

# 4. Programs released right after the synchronisation that handed them over
#    (and variant 0 built again): stored, no other line.
empty_cache
fresh_pocl; run_plain rref "$P" release $N
fresh_pocl; CLSHIM_STATS=1 run_shim rel "$P" release $N
same_output rref rel "released during capture: results of a plain run"
[ "$(count 'clshim:' "$TMP/rel.err")" = 1 ] || { cat "$TMP/rel.err" >&2; fail "release: unexpected clshim lines"; }
wait_helper
[ "$(entries)" = $N ] || fail "release: $(entries) entries, not $N"
ok "programs released during their capture: $N stored by the helper, no other line"

# 4b. `clshim run --wait`: the command, then the helper's stores; the
#     command's exit status is kept.
empty_cache
fresh_pocl; run_plain wrun "$CLSHIM_BUILD/clshim" run --wait -- "$P" exit $N
same_output ref wrun "clshim run --wait: results of a plain run"
[ "$(entries)" = $N ] || fail "clshim run --wait returned before the helper stored ($(entries) of $N)"
set +e; "$CLSHIM_BUILD/clshim" run --wait -- sh -c 'exit 3'; rc=$?; set -e
[ $rc = 3 ] || fail "clshim run --wait: exit status $rc, not the command's 3"
ok "clshim run --wait: $N entries when it returns, the command's exit status kept"

# 4c. `clshim cache export` right after a cold run waits for the helper's
#     stores (reads made slow in the helper: at least 4 s of them), with one
#     line; with --wait 1 it exports what is stored by then (at most one),
#     one line more.
empty_cache
fresh_pocl; LD_PRELOAD="$SHIM $FAULT" CLFAULT_SLOW_BINARIES_MS=1000 run_plain xcold "$P" exit $N
same_output ref xcold "cold run before an export: results of a plain run"
"$TOOL" cache export "$TMP/x.clshim" >"$TMP/x.out" 2>"$TMP/x.err" || { cat "$TMP/x.err" >&2; fail "export failed"; }
grep -q "^Exported $N entries" "$TMP/x.out" || { cat "$TMP/x.out" "$TMP/x.err" >&2; fail "export did not wait for the helper"; }
[ "$(count 'waiting for the capture helpers' "$TMP/x.err")" = 1 ] && [ "$(wc -l <"$TMP/x.err")" = 1 ] ||
    { cat "$TMP/x.err" >&2; fail "export: not one line while it waited"; }
empty_cache
fresh_pocl; LD_PRELOAD="$SHIM $FAULT" CLFAULT_SLOW_BINARIES_MS=1000 run_plain ycold "$P" exit $N
"$TOOL" cache export --wait 1 "$TMP/y.clshim" >"$TMP/y.out" 2>"$TMP/y.err" ||
    { cat "$TMP/y.err" >&2; fail "export --wait 1 failed"; }
grep -q "^Exported [01] entr" "$TMP/y.out" || { cat "$TMP/y.out" >&2; fail "export --wait 1: not a partial export"; }
[ "$(count 'exporting what is stored' "$TMP/y.err")" = 1 ] && [ "$(wc -l <"$TMP/y.err")" = 2 ] ||
    { cat "$TMP/y.err" >&2; fail "export --wait 1: not one line more after the timeout"; }
wait_helper
ok "clshim cache export waits for the helper ($N entries, one line); --wait 1 exports what is stored then"

# 5. No helper to start: captures stay in the app, one line.
for helper in "$TMP/no-such-tool" /bin/false; do
    empty_cache
    fresh_pocl; CLSHIM_CAPTURE_HELPER=$helper CLSHIM_STATS=1 run_shim nohelp "$P" exit $N
    same_output ref nohelp "helper $helper: results of a plain run"
    [ "$(count 'capture helper' "$TMP/nohelp.err")" = 1 ] && [ "$(count 'clshim:' "$TMP/nohelp.err")" = 2 ] ||
        { cat "$TMP/nohelp.err" >&2; fail "helper $helper: not one line"; }
    [ "$(summary stored nohelp)" = $N ] || { cat "$TMP/nohelp.err" >&2; fail "helper $helper: not stored in the app"; }
    ok "helper $helper: one line, the app stores all $N itself"
done

# 6. A full disk during the helper's stores: the app's results and exit
#    code unchanged, one line from the helper (in CLSHIM_LOG_FILE: the app
#    has exited by then), the next run compiles and gives the same results.
full_disk_cache "$P" exit 1
fresh_pocl; CLSHIM_LOG_FILE=$TMP/full.log run_shim full "$P" release $N
same_output rref full "full disk during the helper's stores: results of a plain run"
! "$TOOL" cache wait --timeout 120 2>"$TMP/fullwait.err" ||
    { cat "$TMP/fullwait.err" >&2; fail "full disk: cache wait exited 0 with captures not stored"; }
grep -q "clshim: cache wait: [1-9][0-9]* of [1-9][0-9]* captures not stored ([1-9][0-9]* store_failed)" "$TMP/fullwait.err" ||
    { cat "$TMP/fullwait.err" >&2; fail "full disk: cache wait did not say how many were not stored and why"; }
[ "$(count 'cannot store' "$TMP/full.log")" = 1 ] ||
    { cat "$TMP/full.log" >&2; fail "full disk: not one 'cannot store' line from the helper"; }
fresh_pocl; run_shim full2 "$P" release $N
same_output rref full2 "full disk: the next run as plain"
# Its helper holds the lock file on the tmpfs; its captures fail as well.
"$TOOL" cache wait --timeout 120 2>"$TMP/fullwait2.err" || ! grep -q "captures still outstanding in" "$TMP/fullwait2.err" ||
    fail "full disk: the second run's helper did not finish"
ok "full disk during the helper's stores: one line, same results; cache wait exits 1 naming how many and why"
finish
