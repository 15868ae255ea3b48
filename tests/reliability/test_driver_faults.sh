#!/bin/bash
# Driver faults, from a real misbehaving layer under the shim
# (faultlib/clfault.c, preloaded after libclshim.so so the shim's calls to
# "the driver" reach it): a cached binary the driver refuses (a garbage
# binary with valid checksums, written through the store API; and a driver
# that refuses every binary), errors from clGetProgramInfo for binaries, a
# build that fails (injected, and a real compile error). The app must see
# exactly what it sees without clshim over the same driver: same output,
# same error codes, same exit status.
source "$CLSHIM_ROOT/tests/integration/lib.sh"
MK=$PROGS/multikernel
TOOL=$CLSHIM_BUILD/clshim-tool
FAULT=$TMP/libclfault.so
cc -shared -fPIC -O1 -Wall -Werror -o "$FAULT" "$CLSHIM_ROOT/tests/reliability/faultlib/clfault.c" || fail "cannot build clfault"
stat_of() { "$TOOL" cache stats --json | python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }
plain_f() { local tag=$1; shift; set +e; LD_PRELOAD=$FAULT "$@" >"$TMP/$tag.out" 2>"$TMP/$tag.err"; echo $? >"$TMP/$tag.rc"; set -e; }
shim_f() { local tag=$1; shift; set +e; LD_PRELOAD="$SHIM $FAULT" "$@" >"$TMP/$tag.out" 2>"$TMP/$tag.err"; echo $? >"$TMP/$tag.rc"; set -e; }

for s in 2 3; do fresh_pocl; run_plain "ref$s" "$MK" --scale $s --threads 2; done
fresh_pocl; run_plain ref2t1 "$MK" --scale 2

# 1. A garbage binary whose checksums verify: only the driver can refuse it.
# One thread: with several, see KNOWN ISSUE in test_resources.sh (threads
# sharing the in-memory entry can each refuse it, and the replacement is then
# not stored by that process; reported).
run_shim pop "$MK" --scale 2
"$CLSHIM_BUILD/tests/rel/rel_forge" garble "$CLSHIM_CACHE_DIR" >"$TMP/garble.out" || fail "garble"
"$TOOL" cache verify >/dev/null || fail "a garbled entry should verify (its checksums are right)"
CLSHIM_LOG=info run_shim rej "$MK" --scale 2
same_output ref2t1 rej "driver rejects the cached binary: results of a plain run"
grep -q 'rejected a cached binary' "$TMP/rej.err" || { cat "$TMP/rej.err" >&2; fail "rejection not reported"; }
[ "$(stat_of rejected)" -ge 1 ] || fail "rejection not counted"
# KNOWN ISSUE (reported, cache/progcache.c + memtier): the process that saw
# the rejection rebuilds but does not store the rebuild (the refused
# in-memory entry stays, so its re-acquire is not a fill); it deletes the bad
# entry, so the next process compiles and stores, and the one after hits.
# The entry must be gone from disk after run 1 (never served again):
n=$(stat_of entries)
[ "$n" = 0 ] || grep -q 'stored ' "$TMP/rej.err" || fail "the refused entry is still on disk after the rebuild"
CLSHIM_LOG=info run_shim rej2 "$MK" --scale 2
same_output ref2t1 rej2 "after the rejection: same results"
grep -q 'rejected a cached' "$TMP/rej2.err" && fail "the refused binary was served again"
CLSHIM_LOG=info run_shim rej3 "$MK" --scale 2
same_output ref2t1 rej3 "after the rejection, run 3: same results"
grep -q 'hit .*(disk)' "$TMP/rej3.err" || fail "the refused entry was never replaced"
ok "a cached binary the driver refuses: rebuilt, counted ($(stat_of rejected)), never served again, replaced"

# 2.-4. Injected driver faults: shim+faults vs plain+faults.
run_shim pop3 "$MK" --scale 3 --threads 2 # an entry to be refused
for fault in CLFAULT_REJECT_BINARY CLFAULT_BINARIES CLFAULT_BUILD; do
    for s in 2 3; do
        for args in "--threads 2" "--error"; do
            fresh_pocl
            export $fault=1
            plain_f p "$MK" --scale $s $args
            shim_f sh "$MK" --scale $s $args
            unset $fault
            same_output p sh "$fault, scale $s $args: as without clshim"
            # KNOWN ISSUE (reported): the rejection warning is logged per
            # build, not once; every other condition at most one line.
            n=$(grep 'clshim:' "$TMP/sh.err" | grep -vc 'rejected a cached binary' || true)
            [ "$n" -le 1 ] || { cat "$TMP/sh.err" >&2; fail "$fault: $n clshim lines (one at most)"; }
        done
    done
done
"$TOOL" cache verify >/dev/null || fail "verify after driver faults"
ok "driver faults leave the cache valid"
# Faults gone: the cache serves right results.
for s in 2 3; do
    CLSHIM_LOG=info run_shim after$s "$MK" --scale $s --threads 2
    same_output ref$s after$s "scale $s after the faults: right results"
done
# A real compile error, cold and warm: same codes and output as plain.
fresh_pocl; run_plain perr "$MK" --error
for i in 1 2; do run_shim serr$i "$MK" --error; same_output perr serr$i "compile error (run $i): as without clshim"; done
finish
