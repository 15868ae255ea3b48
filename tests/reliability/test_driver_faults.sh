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
run_shim pop "$MK" --scale 2
"$CLSHIM_BUILD/tests/rel/rel_forge" garble "$CLSHIM_CACHE_DIR" >"$TMP/garble.out" || fail "garble"
"$TOOL" cache verify >/dev/null || fail "a garbled entry should verify (its checksums are right)"
CLSHIM_LOG=info run_shim rej "$MK" --scale 2
same_output ref2t1 rej "driver rejects the cached binary: results of a plain run"
grep -q 'rejected a cached binary' "$TMP/rej.err" || { cat "$TMP/rej.err" >&2; fail "rejection not reported"; }
[ "$(stat_of rejected)" -ge 1 ] || fail "rejection not counted"
# The process that saw the rejection rebuilds and stores the rebuild itself.
grep -q 'stored [0-9a-f]\{16\}:' "$TMP/rej.err" || { cat "$TMP/rej.err" >&2; fail "the rebuild was not stored"; }
CLSHIM_LOG=info run_shim rej2 "$MK" --scale 2
same_output ref2t1 rej2 "after the rejection: same results"
grep -q 'rejected a cached' "$TMP/rej2.err" && fail "the refused binary was served again"
grep -q 'hit .*(disk)' "$TMP/rej2.err" || fail "the refused entry was not replaced by the rejecting process"
ok "a cached binary the driver refuses: rebuilt, counted ($(stat_of rejected)), replaced in the same run"

# The same with 8 threads sharing the refused entry: one rebuild is stored.
run_shim pop8 "$MK" --scale 4
"$CLSHIM_BUILD/tests/rel/rel_forge" garble "$CLSHIM_CACHE_DIR" >/dev/null || fail "garble"
fresh_pocl; run_plain ref4t8 "$MK" --scale 4 --threads 8
CLSHIM_LOG=info run_shim rej8 "$MK" --scale 4 --threads 8
same_output ref4t8 rej8 "8 threads, refused entry: results of a plain run"
[ "$(count 'clshim: the driver rejected a cached binary (error' "$TMP/rej8.err")" = 1 ] ||
    { cat "$TMP/rej8.err" >&2; fail "the rejection warning must be printed once"; }
CLSHIM_LOG=info run_shim rej8b "$MK" --scale 4 --threads 8
grep -q 'rejected a cached' "$TMP/rej8b.err" && fail "8 threads: the refused binary was served again"
ok "8 threads sharing a refused entry: one warning, replaced, never served again"

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
            # One line at most per condition, however many builds.
            n=$(count 'clshim:' "$TMP/sh.err")
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
