#!/bin/bash
# data.mdb truncated while an application has the cache open (issue 17):
# the next lookups touch pages past the end of the mapped file, which raises
# SIGBUS. The application must not die: its output equals the plain run, one
# warning says the cache was set aside, and the next run moves the short
# file aside and works. An application's own SIGBUS handler still gets the
# faults that are not clshim's.
source "$CLSHIM_ROOT/tests/integration/lib.sh"
APP=$CLSHIM_BUILD/tests/rel/rel_shrink
C=$CLSHIM_CACHE_DIR
fresh_pocl; run_plain ref "$APP" "$TMP/absent" 8192
[ "$(cat "$TMP/ref.rc")" = 0 ] || fail "the plain run failed"

for size in 8192 0 4096; do
    rm -rf "$C"
    run_shim fill "$APP" "$TMP/absent" 8192
    same_output ref fill "truncate to $size: the run that fills the cache"
    run_shim shrink$size "$APP" "$C/data.mdb" $size
    same_output ref shrink$size "data.mdb truncated to $size bytes mid-run: results and exit code of a plain run"
    [ "$(count 'clshim:' "$TMP/shrink$size.err")" = 1 ] || { cat "$TMP/shrink$size.err" >&2; fail "truncated to $size: expected one warning"; }
    grep -q 'clshim: cache .*: data.mdb changed under this process (truncated or shrunk); the cache is set aside' \
        "$TMP/shrink$size.err" || { cat "$TMP/shrink$size.err" >&2; fail "truncated to $size: the warning does not say so"; }
    CLSHIM_LOG=info run_shim after$size "$APP" "$TMP/absent" 8192
    same_output ref after$size "truncated to $size, next run: results of a plain run"
    [ "$size" = 0 ] || ls "$C"/data.mdb.corrupt-* >/dev/null 2>&1 || fail "truncated to $size: the short file was not moved aside"
    CLSHIM_LOG=info run_shim again$size "$APP" "$TMP/absent" 8192
    grep -q 'hit .*(disk)' "$TMP/again$size.err" || { cat "$TMP/again$size.err" >&2; fail "truncated to $size: the new cache is not used"; }
    ok "data.mdb truncated to $size bytes under a running app: it goes on, one warning, the cache is rebuilt"
done

# The app's own faults are still the app's: its handler runs (clshim's
# handler, installed later, chains to it), or without one it dies of SIGBUS,
# exactly as in the plain run.
for how in handler default; do
    fresh_pocl; run_plain own$how "$APP" "$TMP/absent" 8192 $how
    rm -rf "$C"
    run_shim fill "$APP" "$TMP/absent" 8192
    run_shim own$how.shim "$APP" "$C/data.mdb" 8192 $how
    same_output own$how own$how.shim "an app's own SIGBUS ($how) after clshim set its cache aside: as in the plain run"
done
[ "$(cat "$TMP/ownhandler.rc")" = 7 ] && grep -q "own SIGBUS handler ran" "$TMP/ownhandler.shim.out" || fail "the app's handler did not run"
# (Sanitized builds: the sanitizer's runtime handles SIGBUS in the app itself
# and aborts; same_output above still holds it to the plain run.)
[ "$(cat "$TMP/owndefault.rc")" = $((128 + 7)) ] || [ -n "${CLSHIM_SANITIZED:-}" ] ||
    fail "without a handler the app did not die of SIGBUS (rc $(cat "$TMP/owndefault.rc"))"
ok "the app's own SIGBUS goes to its handler, or kills it, as without clshim"
finish
