#!/bin/bash
# CLSHIM_MEM_CACHE=0 (issue 36) switches the in-process tier off and keeps
# the persistent one: a program released and built again in the same
# process is a disk hit, never a memory hit. CLSHIM_MEM_CACHE_MAX=0 still
# means unbounded (memory hits). Results as the plain run's every time.
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info CLSHIM_CAPTURE_PROCESS=0 CLSHIM_CAPTURE_BACKGROUND=0
P=$PROGS/rebuild
# run TAG [ENV=VALUE...]: the rebuild app, 3 rounds, under clshim: the
# plain run's results and exit code (0, or set -e stopped the plain run)
run() { local tag=$1; shift; env "$@" LD_PRELOAD="$SHIM" "$P" 3 >"$TMP/$tag.out" 2>"$TMP/$tag.err" ||
        { cat "$TMP/$tag.err" >&2; fail "$tag: exit code $?"; }
    cmp -s "$TMP/ref.out" "$TMP/$tag.out" || fail "$tag: results differ from the plain run"; }
summary_is() { grep -q "summary: $2" "$TMP/$1.err" || { cat "$TMP/$1.err" >&2; fail "$1: $3"; }; }
fresh_pocl; "$P" 3 >"$TMP/ref.out"

rm -rf "$CLSHIM_CACHE_DIR"; fresh_pocl
run off CLSHIM_MEM_CACHE=0
summary_is off '2 hits (0 from memory), 1 misses' "the rebuilds were not disk hits"
[ "$(count 'clshim: hit .*(memory)' "$TMP/off.err")" = 0 ] || fail "off: a memory hit"
ok "in-memory tier off: rebuilds in the process hit the persistent tier"

fresh_pocl; run off2 CLSHIM_MEM_CACHE=0
summary_is off2 '3 hits (0 from memory), 0 misses' "not three disk hits"
ok "in-memory tier off: the next process hits the persistent tier"

rm -rf "$CLSHIM_CACHE_DIR"; fresh_pocl
run unbounded CLSHIM_MEM_CACHE_MAX=0
summary_is unbounded '2 hits (2 from memory), 1 misses' "MEM_CACHE_MAX=0 is no longer unbounded"
ok "CLSHIM_MEM_CACHE_MAX=0 still means unbounded"
finish
