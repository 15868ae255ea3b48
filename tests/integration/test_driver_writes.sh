#!/bin/bash
# A hit's driver files synced once in the background (cache/driver_writes.h),
# on PoCL under LD_PRELOAD: a hit with an empty driver cache makes PoCL
# unpack the binary into its kcache; clshim skips PoCL's per-file syncs, and
# a marker of another boot (what a crash before the writeback leaves) makes
# the next run remove the directory it names, so PoCL writes it again,
# where without the marker PoCL would load the truncated files and abort.
source "$(dirname "$0")/lib.sh"
FC=$PROGS/fusion_chain
PLANT=$CLSHIM_BUILD/tests/rel/plant_unsynced
export CLSHIM_CACHE_DIR=$TMP/cache
MARKERS=$CLSHIM_CACHE_DIR/unsynced
markers() { find "$MARKERS" -type f ! -name lock 2>/dev/null | wc -l; }

fresh_pocl; run_plain ref "$FC" --mode chain
[ "$(cat "$TMP/ref.rc")" = 0 ] || fail "plain run: exit code $(cat "$TMP/ref.rc")"
fresh_pocl; run_shim cold env CLSHIM_CAPTURE_PROCESS=0 "$FC" --mode chain
same_output ref cold "cold run under clshim computes as plain"

# 1. A hit with an empty driver cache: PoCL's syncs are skipped (the debug
#    line says how many), the results are plain's, and what the marker
#    names lies inside POCL_CACHE_DIR.
fresh_pocl; run_shim hit env CLSHIM_LOG=debug "$FC" --mode chain
same_output ref hit "a hit with an empty driver cache computes as plain"
grep -q "^clshim: hit " "$TMP/hit.err" || fail "no hit line"
n=$(sed -n 's/^clshim: driver wrote \([0-9]*\) files of a hit without a sync each.*/\1/p' "$TMP/hit.err")
[ -n "$n" ] && [ "$n" -gt 0 ] || fail "no sync skipped on the hit's load"
[ "$(find "$POCL_CACHE_DIR" -name program.bc | wc -l)" = 1 ] || fail "PoCL unpacked no program.bc"
ok "a hit's load skipped $n per-file syncs of PoCL's"
for m in $(find "$MARKERS" -type f ! -name lock); do
    grep '^dir ' "$m" | while read -r _ d _; do
        case $d in "$POCL_CACHE_DIR"/*/*) ;; *) fail "marker names $d, outside the kcache" ;; esac
    done
done
ok "every marker left names directories inside POCL_CACHE_DIR only ($(markers) left)"

# 2. A second hit on the filled kcache writes nothing. A process waits at
#    exit (bounded) for its sync, so a run leaves a marker only when it
#    says so; a later run of this boot syncs and deletes a marker left by
#    a process that is gone. On a busy disk a sync can outlast the bound:
#    then each run must say it left one, and the runs go on (at most 5).
LEFT='still being synced at exit; their marker is left for a later process'
left_before=$(count "$LEFT" "$TMP/hit.err")
[ "$(markers)" = 0 ] || [ "$left_before" = 1 ] ||
    fail "the hit left a marker without saying so: $(ls "$MARKERS")"
runs=0
while :; do
    runs=$((runs + 1))
    run_shim again env CLSHIM_LOG=debug "$FC" --mode chain
    same_output ref again "a hit on PoCL's filled kcache computes as plain (run $runs)"
    [ "$(markers)" = 0 ] && break
    [ "$(count "$LEFT" "$TMP/again.err")" = 1 ] ||
        fail "markers of finished runs are not deleted, and no run said it left one: $(ls "$MARKERS")"
    [ "$runs" -lt 5 ] || fail "5 runs in a row left their sync unfinished at exit: $(ls "$MARKERS")"
done
ok "markers of processes that are gone are deleted by the next run ($runs run(s))"

# 3. What a crash before the writeback leaves: the kcache's program
#    directory with truncated files. Without a marker PoCL loads them and
#    fails (the hazard the marker guards against)...
PDIR=$(dirname "$(find "$POCL_CACHE_DIR" -name program.bc | head -1)")
truncate_all() { find "$PDIR" -name '*.so' -exec truncate -s 0 {} +; }
truncate_all
run_shim bare "$FC" --mode chain
if [ "$(cat "$TMP/bare.rc")" = 0 ] && cmp -s "$TMP/ref.out" "$TMP/bare.out"; then
    fail "truncated kcache files without a marker: the run still computed as plain (the test shows nothing)"
fi
ok "truncated kcache files make the run fail without a marker (exit $(cat "$TMP/bare.rc"))"

# ...with the marker an earlier boot left, the next run removes the
# directory first (one info line), PoCL unpacks it again, and the results
# are plain's.
truncate_all
mkdir -p "$MARKERS"
"$PLANT" "$MARKERS/999-999-1" 00000000-0000-0000-0000-000000000000 999 "$POCL_CACHE_DIR" "$PDIR"
run_shim recovered env CLSHIM_LOG=info "$FC" --mode chain
same_output ref recovered "after a crash, the marked directory is written again and the run computes as plain"
[ "$(count 'driver cache directory written unsynced before a restart' "$TMP/recovered.err")" = 1 ] ||
    fail "no one line saying what was removed"
[ ! -e "$MARKERS/999-999-1" ] || fail "the other boot's marker stayed"
ok "one line says what the recovery removed"

# 4. A marker naming a directory outside the kcache is never acted upon.
mkdir -p "$TMP/user/data"
echo keep >"$TMP/user/data/file"
"$PLANT" "$MARKERS/999-999-2" 00000000-0000-0000-0000-000000000000 999 "$POCL_CACHE_DIR" "$TMP/user/data" "$POCL_CACHE_DIR"
fresh_pocl; run_shim hostile "$FC" --mode chain
same_output ref hostile "a hostile marker: the run computes as plain"
[ -f "$TMP/user/data/file" ] || fail "a marker made clshim delete a directory outside the kcache"
[ -d "$POCL_CACHE_DIR" ] || fail "a marker made clshim delete the kcache's root"
ok "a marker naming directories outside the kcache (or its root) removes nothing"

finish
