#!/bin/bash
# run-all: alone (weighs each run's delay against the remote timeout)
# CLSHIM_REMOTE_TIMEOUT is a deadline for a whole lookup, not a timeout per
# read (issue 31): against fake servers (fake_redis.py, on a unix socket in
# the test's temp dir, stopping by themselves) that stay silent, trickle
# their reply, send a huge value slowly, answer garbage or die mid-reply,
# the app's results are those of a run without clshim, the run is at most
# 2 x the timeout slower than one without a remote tier (the lookup's
# deadline; pushes are dropped by the breaker, never waited for), and each
# kind of failure is counted in `clshim cache stats` and `cache remote stats`.
# Before issue 31 the trickling and the huge-value servers held a build for
# as long as they kept sending.
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info
MK=$PROGS/multikernel
TOOL=$CLSHIM_BUILD/clshim-tool
FAKE=$CLSHIM_ROOT/tests/integration/fake_redis.py
T=400 # ms: large beside the noise of one run on a shared machine

FAKES=""
stop_fakes() { local p; for p in $FAKES; do kill "$p" 2>/dev/null || true; done; }
trap stop_fakes EXIT
# fake MODE: a fake server on $TMP/MODE.sock (FAKE_URL), gone after 90 s at most.
fake() {
    rm -f "$TMP/$1.sock"
    timeout 90 python3 "$FAKE" "$1" "$TMP/$1.sock" 90 &
    FAKES="$FAKES $!"
    for _ in $(seq 100); do [ -S "$TMP/$1.sock" ] && break; sleep 0.05; done
    [ -S "$TMP/$1.sock" ] || fail "fake server $1 did not start"
    FAKE_URL=unix://$TMP/$1.sock
}

fresh_pocl; run_plain ref "$MK"
remote_base_ms "$MK"
base=$BASE_MS

# check MODE KIND TAG [ENV...]: one run against fake MODE; KIND is the
# counter that must say what happened.
declare -A kind_text=([timeouts]=timeouts [garbage]="garbage replies" [lost]="connections lost"
                      [oversize]="oversize replies")
check() {
    local mode=$1 kind=$2 tag=$3; shift 3
    fake "$mode"
    local t
    t=$(ms run_shim "$tag" env POCL_CACHE_DIR="$TMP/pocl-warm" CLSHIM_REMOTE="$FAKE_URL" CLSHIM_REMOTE_TIMEOUT=$T \
        CLSHIM_CACHE_DIR="$TMP/cache-$tag" "$@" "$MK")
    local extra=$((t - base))
    echo "$tag: $t ms, +$extra ms over no remote tier (timeout $T ms, bound $((2 * T)) ms)"
    same_output ref "$tag" "$tag server: same results as without clshim"
    [ "$extra" -le $((2 * T)) ] || fail "$tag server: the run took $extra ms longer; more than 2 x the timeout"
    [ "$(count 'remote tier off' "$TMP/$tag.err")" = 1 ] || fail "$tag server: expected one breaker line"
    "$TOOL" cache --dir "$TMP/cache-$tag" stats --json >"$TMP/$tag.json"
    grep -q "\"remote_$kind\": 1," "$TMP/$tag.json" || fail "$tag server: not counted as $kind: $(cat "$TMP/$tag.json")"
    grep -q '"remote_errors": 1,' "$TMP/$tag.json" || fail "$tag server: errors: $(cat "$TMP/$tag.json")"
    "$TOOL" cache --dir "$TMP/cache-$tag" stats | grep -q "^  ${kind_text[$kind]}  *1" ||
        fail "$tag server: clshim cache stats does not show the $kind"
    ok "$tag server: +$extra ms (<= 2 x $T ms), same results, counted as $kind"
}
check silent timeouts silent
check trickle timeouts trickle
check huge timeouts huge
check garbage garbage garbage
check die lost die
# The huge value again, with CLSHIM_REMOTE_MAX_VALUE under its size: cut
# off as too large, long before the deadline.
check huge oversize huge-1M CLSHIM_REMOTE_MAX_VALUE=1M

# `clshim cache remote stats` shows this cache's counters even when the
# server cannot answer.
fake trickle
CLSHIM_REMOTE=$FAKE_URL CLSHIM_REMOTE_TIMEOUT=$T "$TOOL" cache --dir "$TMP/cache-trickle" remote stats \
    >"$TMP/rstats.out" 2>"$TMP/rstats.err" && fail "remote stats against a trickling server succeeded"
grep -q 'timed out' "$TMP/rstats.err" || fail "remote stats: no reason given: $(cat "$TMP/rstats.err")"
grep -q '^  timeouts  *1 ' "$TMP/rstats.out" || fail "remote stats: this cache's timeouts not shown: $(cat "$TMP/rstats.out")"
ok "clshim cache remote stats: bounded by the timeout, shows this cache's counters"

# Heavier: a program with several builds against the trickling server, each
# bounded (the breaker makes the later ones free).
if [ "${CLSHIM_LONG:-0}" = 1 ]; then
    CL=$PROGS/compilelink
    fresh_pocl; run_plain clref "$CL"
    fake trickle
    t0=$(date +%s%N)
    run_shim cltr env CLSHIM_REMOTE="$FAKE_URL" CLSHIM_REMOTE_TIMEOUT=$T CLSHIM_CACHE_DIR="$TMP/cache-cltr" "$CL"
    same_output clref cltr "compile+link against a trickling server: same results"
    ok "compile+link against a trickling server: $((($(date +%s%N) - t0) / 1000000)) ms"
fi
finish
