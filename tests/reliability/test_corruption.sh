#!/bin/bash
# Corruption, injected for real into the files of a populated cache: entries
# with a flipped bit, cut short, extended, with a forged size or key length
# (checksum recomputed, so only the decoder's checks can catch it), with
# their binaries swapped between keys (every record self-consistent, so only
# the binding of binary to key material catches it); data.mdb
# truncated, replaced by garbage, emptied; lock.mdb replaced by garbage; a
# reader and a writer that died holding their transactions while another
# process keeps the cache open. Every time: the app's results equal a plain
# run, a damaged entry is never served (reported, rebuilt), the cache is
# repaired (the next run hits) and `clshim cache verify` passes.
source "$CLSHIM_ROOT/tests/integration/lib.sh"
REL=$CLSHIM_BUILD/tests/rel
TOOL=$CLSHIM_BUILD/clshim-tool
MK=$PROGS/multikernel
C=$CLSHIM_CACHE_DIR
SCALES="2 3 4"
for s in $SCALES; do fresh_pocl; run_plain "ref$s" "$MK" --scale $s; done

populate() { rm -rf "$C"; for s in $SCALES; do run_shim "pop$s" "$MK" --scale $s; done; }
# Every program: plain results; `what` reported once per program; then a hit.
check_recovers() { # label grep-pattern-of-the-warning
    for s in $SCALES; do
        run_shim "bad$s" "$MK" --scale $s
        same_output "ref$s" "bad$s" "$1, scale $s: results of a plain run"
        [ "$(count 'clshim:' "$TMP/bad$s.err")" = 1 ] || { cat "$TMP/bad$s.err" >&2; fail "$1: expected one warning"; }
        grep -q -- "$2" "$TMP/bad$s.err" || { cat "$TMP/bad$s.err" >&2; fail "$1: warning does not say '$2'"; }
    done
    for s in $SCALES; do
        CLSHIM_LOG=info run_shim "good$s" "$MK" --scale $s
        same_output "ref$s" "good$s" "$1, scale $s, next run: same results"
        grep -q 'hit .*(disk)' "$TMP/good$s.err" || { cat "$TMP/good$s.err" >&2; fail "$1: entry not repaired"; }
    done
    ok "$1: every program rebuilt once, repaired, then served from the cache"
}

n=0
for mode in flip sizes keylen swap truncate extend; do
    populate
    "$REL/rel_forge" corrupt "$C" $mode >"$TMP/forge.out" || fail "rel_forge $mode"
    grep -q "corrupted 3 entries" "$TMP/forge.out" || fail "$mode: expected 3 entries damaged: $(cat "$TMP/forge.out")"
    # verify sees the damage before anything repairs it.
    set +e; "$TOOL" cache verify >"$TMP/v0.out" 2>&1; rc=$?; set -e
    [ $rc = 1 ] && grep -q "3 bad" "$TMP/v0.out" || { cat "$TMP/v0.out" >&2; fail "$mode: verify did not report 3 bad entries"; }
    check_recovers "entries damaged ($mode)" "corrupt"
    corrupt=$("$TOOL" cache stats --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["corrupt"])')
    [ "$corrupt" = 3 ] || fail "$mode: the corrupt counter is $corrupt, expected 3"
    if ! "$TOOL" cache verify >"$TMP/v1.out" 2>&1; then
        # A value whose size changed below the store leaves the totals off
        # (they count the damaged size): verify says so and --fix rebuilds them.
        case $mode in truncate|extend|swap) ;; *) cat "$TMP/v1.out" >&2; fail "$mode: verify fails after the repair" ;; esac
        "$TOOL" cache verify --fix >/dev/null 2>&1 || true
        "$TOOL" cache verify >"$TMP/v2.out" 2>&1 || { cat "$TMP/v2.out" >&2; fail "$mode: verify --fix did not repair"; }
        ok "$mode: totals off after a size-changing corruption; verify --fix repairs them"
    fi
    ok "entries damaged ($mode): verify passes after the repair"
    n=$((n + 3))
done

# The database file itself.
for kind in garbage truncated-meta truncated-data; do
    populate
    case $kind in
        garbage) head -c 1048576 /dev/urandom >"$C/data.mdb" ;;
        truncated-meta) truncate -s 100 "$C/data.mdb" ;;
        truncated-data) truncate -s 12288 "$C/data.mdb" ;;
    esac
    rm -f "$C"/data.mdb.corrupt-*
    run_shim first "$MK" --scale 2
    same_output ref2 first "data.mdb $kind: results of a plain run"
    [ "$(count 'clshim:' "$TMP/first.err")" = 1 ] || { cat "$TMP/first.err" >&2; fail "data.mdb $kind: expected one warning"; }
    ls "$C"/data.mdb.corrupt-* >/dev/null 2>&1 || fail "data.mdb $kind: not moved aside"
    CLSHIM_LOG=info run_shim second "$MK" --scale 2
    same_output ref2 second "data.mdb $kind, next run: same results"
    grep -q 'hit .*(disk)' "$TMP/second.err" || fail "data.mdb $kind: the new cache does not work"
    [ "$(count 'clshim: .*corrupt\|moved' "$TMP/second.err")" = 0 ] || fail "data.mdb $kind: warned again"
    "$TOOL" cache verify >/dev/null || fail "data.mdb $kind: verify"
    ok "data.mdb $kind: moved aside with one warning, a new cache made and used"
    n=$((n + 1))
done
populate
: >"$C/data.mdb"
run_shim empty "$MK" --scale 2
same_output ref2 empty "empty data.mdb: results of a plain run"
"$TOOL" cache verify >/dev/null || fail "empty data.mdb: verify"
ok "empty data.mdb: a new cache"

populate
head -c 8192 /dev/urandom >"$C/lock.mdb"
run_shim lockg "$MK" --scale 3
same_output ref3 lockg "lock.mdb garbage: results of a plain run"
CLSHIM_LOG=info run_shim lockg2 "$MK" --scale 3
grep -q 'hit .*(disk)' "$TMP/lockg2.err" || fail "lock.mdb garbage: cache not usable"
ok "lock.mdb replaced by garbage: the cache still works"

# Dead transactions while another process keeps the cache open (otherwise
# the next opener resets lock.mdb anyway).
populate
"$REL/rel_forge" hold "$C" >"$TMP/hold.out" &
holder=$!
for _ in $(seq 100); do [ -s "$TMP/hold.out" ] && break; sleep 0.05; done
"$REL/rel_forge" stale-reader "$C" >"$TMP/stale.out"
dead=$(sed -n 's/^pid \([0-9]*\) .*/\1/p' "$TMP/stale.out")
readers() { mdb_stat -r "$C" >"$TMP/readers.txt" 2>&1 || true; grep -qw "$dead" "$TMP/readers.txt"; }
readers || fail "no stale reader slot was left"
CLSHIM_LOG=info timeout 60 env LD_PRELOAD=$SHIM "$MK" --scale 4 >"$TMP/sr.out" 2>"$TMP/sr.err" || fail "stale reader: app failed or hung"
cmp -s "$TMP/ref4.out" "$TMP/sr.out" || fail "stale reader: results differ"
grep -q 'hit .*(disk)' "$TMP/sr.err" || fail "stale reader: no hit"
readers && fail "the dead reader's slot was not cleared"
ok "a reader killed inside its transaction: slot cleared at the next open, results right"
"$REL/rel_forge" stale-writer "$C" >/dev/null
CLSHIM_LOG=info timeout 60 env LD_PRELOAD=$SHIM "$MK" --scale 5 >"$TMP/sw.out" 2>"$TMP/sw.err" || fail "stale writer: app failed or hung"
fresh_pocl; run_plain ref5 "$MK" --scale 5
cmp -s "$TMP/ref5.out" "$TMP/sw.out" || fail "stale writer: results differ"
grep -q 'stored ' "$TMP/sw.err" || { cat "$TMP/sw.err" >&2; fail "stale writer: the write lock was not recovered (nothing stored)"; }
kill $holder; wait $holder 2>/dev/null || true
"$TOOL" cache verify >/dev/null || fail "after dead transactions: verify"
ok "a writer killed holding the write lock: the next writer recovers it and stores"
echo "corruptions injected: $n entries/files, plus lock.mdb garbage, empty data.mdb, 2 dead transactions"
finish
