#!/bin/bash
# run-all: alone (loads the machine on purpose)
# Load: 8 processes x 8 threads for a bounded time (12 s, and at least two
# runs each; 180 s with CLSHIM_LONG=1) on one cache whose size limit (300K: about 7 entries of the
# ~40 KB binaries, 12 distinct programs) forces constant eviction, each
# process running programs of random scale (each a distinct key). Every run
# must give the results of a plain run of that scale, within a deadline (no
# deadlock); at the end `clshim cache verify` passes (entries decode, indexes
# and totals exact) and the total is within the limit.
source "$CLSHIM_ROOT/tests/integration/lib.sh"
MK=$PROGS/multikernel
TOOL=$CLSHIM_BUILD/clshim-tool
SECS=12; [ "${CLSHIM_LONG:-0}" = 1 ] && SECS=180
NPROC=8; SCALES=12
for ((s = 1; s <= SCALES; s++)); do run_plain "ref$s" "$MK" --scale $s --threads 8; done
export CLSHIM_CACHE_MAX_SIZE=300K
# A run's deadline: a hang, not a slow machine (a sanitized build with 64
# threads on two cores takes minutes); one that passes it has its threads'
# stacks taken before it is killed, so that a deadlock shows where.
DEADLINE=120; [ -n "${CLSHIM_SANITIZED:-}" ] && DEADLINE=900
bounded() { # OUT ERR CMD...: CMD's exit code, 124 when killed at the deadline
    local out=$1 err=$2 t=0 pid; shift 2
    "$@" >"$out" 2>"$err" &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        if [ $t -ge $DEADLINE ]; then
            { echo "clshim-test: still running after $DEADLINE s; its threads:"
              gdb -q -batch -ex "thread apply all bt 12" -p "$pid" 2>&1 | grep "^#\|^Thread" | head -300; } >>"$err"
            kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
            return 124
        fi
        sleep 1; t=$((t + 1))
    done
    wait "$pid"
}
worker() { # id
    local id=$1 runs=0 end=$((SECONDS + SECS)) s
    RANDOM=$id
    # Each worker runs at least twice, its first two scales fixed so that
    # every scale runs however slow the build (sanitizers): 12 distinct
    # binaries do not fit the limit, so eviction must happen.
    while [ $SECONDS -lt $end ] || [ $runs -lt 2 ]; do
        case $runs in
            0) s=$((1 + (id - 1) % SCALES)) ;;
            1) s=$((1 + (id + NPROC - 1) % SCALES)) ;;
            *) s=$((1 + RANDOM % SCALES)) ;;
        esac
        local rc=0
        bounded "$TMP/w$id.out" "$TMP/w$id.err" env LD_PRELOAD=$SHIM "$MK" --scale $s --threads 8 || rc=$?
        if [ $rc != 0 ]; then
            echo "worker $id: scale $s failed (rc $rc; 124: hung)" >>"$TMP/errors"; cat "$TMP/w$id.err" >>"$TMP/errors"
        elif ! cmp -s "$TMP/w$id.out" "$TMP/ref$s.out"; then
            echo "worker $id: scale $s: WRONG RESULTS" >>"$TMP/errors"
        fi
        grep 'clshim:' "$TMP/w$id.err" >>"$TMP/lines" || true
        runs=$((runs + 1))
    done
    echo $runs >"$TMP/runs$id"
}
: >"$TMP/errors"; : >"$TMP/lines"
for ((p = 1; p <= NPROC; p++)); do worker $p & done
wait
[ -s "$TMP/errors" ] && { head -40 "$TMP/errors" >&2; fail "errors under load"; }
total=0; for ((p = 1; p <= NPROC; p++)); do total=$((total + $(cat "$TMP/runs$p"))); done
[ "$total" -ge "$NPROC" ] || fail "only $total runs"
ok "$NPROC processes x 8 threads x $SECS s: $total runs, every result right, none hung"
[ -s "$TMP/lines" ] && { sort "$TMP/lines" | uniq -c | head >&2; }
[ ! -s "$TMP/lines" ] || fail "warnings under load"
timeout 120 "$TOOL" cache verify >"$TMP/verify.out" 2>&1 || { cat "$TMP/verify.out" >&2; fail "verify after load"; }
"$TOOL" cache stats --json >"$TMP/stats.json"
python3 - "$TMP/stats.json" <<'PY' || fail "stats after load"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["stored_bytes"] <= 300 * 1024, s
assert s["evictions_size"] > 0, "no eviction happened: the load did not exercise it"
print("entries %d, stored %d bytes, evictions %d, stores %d, hits %d, misses %d" % (
    s["entries"], s["stored_bytes"], s["evictions_size"], s["stores"], s["hits"], s["misses"]))
PY
ok "after the load: verify passes (totals exact), within the size limit, evictions happened"
finish
