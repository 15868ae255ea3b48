#!/bin/bash
# Crash safety, with real SIGKILLs. (1) A store client (rel_writer: stores,
# lookups, deletes, size evictions, compactions, on a cache whose size limit
# forces constant eviction) is killed at a random moment, 100 times (1,000
# with CLSHIM_LONG=1); every 10 kills, and at the end, every key is absent or
# returns exactly its bytes, the invariants hold, and `clshim cache verify`
# passes. (2) A real OpenCL program under the shim is killed at a random
# moment of its build/store/capture, 20 times (200 long), over 4 distinct
# programs; then verify passes and every program gives the results of a run
# without clshim, from the cache.
source "$CLSHIM_ROOT/tests/integration/lib.sh"
REL=$CLSHIM_BUILD/tests/rel
TOOL=$CLSHIM_BUILD/clshim-tool
MK=$PROGS/multikernel
RANDOM=7 # fixed seed: the kill times repeat
KILLS=100; APP_KILLS=20
[ "${CLSHIM_LONG:-0}" = 1 ] && { KILLS=1000; APP_KILLS=200; }

D=$TMP/writer-cache
compaction_hits=0
for ((i = 1; i <= KILLS; i++)); do
    "$REL/rel_writer" run "$D" "$i" $((2 << 20)) >"$TMP/w.out" 2>"$TMP/w.err" &
    pid=$!
    # Wait until it has opened the cache (up to 60 s while it lives: after a
    # kill, recovery on a machine this busy took more than 10 s once), then
    # kill it 0-250 ms later.
    for _ in $(seq 6000); do [ -s "$TMP/w.out" ] && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.01; done
    [ -s "$TMP/w.out" ] || { cat "$TMP/w.err" >&2; fail "kill $i: the writer did not start"; }
    sleep "0.$(printf %03d $((RANDOM % 250)))"
    kill -KILL $pid
    wait $pid 2>/dev/null || true
    grep -q "wrong binary" "$TMP/w.err" && fail "kill $i: a writer was served a wrong binary"
    [ -e "$D/data.mdb.compact" ] && compaction_hits=$((compaction_hits + 1))
    if ((i % 10 == 0)); then
        timeout 60 "$REL/rel_writer" check "$D" >"$TMP/check.out" 2>&1 ||
            { cat "$TMP/check.out" >&2; fail "after $i kills: a damaged entry or broken invariant"; }
        timeout 60 "$TOOL" cache --dir "$D" verify >"$TMP/verify.out" 2>&1 ||
            { cat "$TMP/verify.out" >&2; fail "after $i kills: clshim cache verify fails"; }
    fi
done
ok "$KILLS writers killed at random points: every entry absent or exact, invariants hold, verify passes ($(cat "$TMP/check.out"))"
# A crash during compaction leaves at most one temp file, never one per crash.
[ "$(ls "$D" | grep -c '^data.mdb.compact')" -le 1 ] || fail "stray compaction files pile up: $(ls "$D")"
ok "kills inside a compaction ($compaction_hits seen) leave at most one temp file"
echo "kills that left a compaction temp file: $compaction_hits of $KILLS"

# (2) The shim itself, killed while it builds, stores and captures.
for s in 2 3 4 5; do fresh_pocl; run_plain "ref$s" "$MK" --scale $s --threads 2; done
export CLSHIM_CACHE_MAX_SIZE=300K # two entries fit: stores evict
for ((i = 1; i <= APP_KILLS; i++)); do
    s=$((2 + RANDOM % 4))
    [ $((RANDOM % 2)) = 0 ] && fresh_pocl # a cold driver cache makes the build slower, the window wider
    LD_PRELOAD=$SHIM "$MK" --scale $s --threads 2 >/dev/null 2>"$TMP/app.err" &
    pid=$!
    sleep "0.$(printf %03d $((RANDOM % 500)))"
    kill -KILL $pid 2>/dev/null || true
    wait $pid 2>/dev/null || true
done
timeout 60 "$TOOL" cache verify >"$TMP/verify2.out" 2>&1 || { cat "$TMP/verify2.out" >&2; fail "verify after killed apps"; }
ok "$APP_KILLS apps killed during build/store/capture: verify passes ($(cat "$TMP/verify2.out"))"
for s in 2 3 4 5; do
    fresh_pocl; run_shim "after$s" "$MK" --scale $s --threads 2
    same_output "ref$s" "after$s" "scale $s after the kills: results of a plain run"
    [ "$(count 'clshim:' "$TMP/after$s.err")" = 0 ] || { cat "$TMP/after$s.err" >&2; fail "scale $s: unexpected warnings"; }
done
for s in 2 3 4 5; do
    fresh_pocl; CLSHIM_LOG=info run_shim again$s "$MK" --scale $s --threads 2
    same_output "ref$s" "again$s" "scale $s, second run: same results"
done
grep -q 'hit .*(disk)' "$TMP/again5.err" || fail "the last program is not served from the cache after the kills"
ok "the cache works after the kills: the last program is a disk hit"
timeout 60 "$TOOL" cache verify >/dev/null || fail "final verify"
ok "final verify passes"
finish
