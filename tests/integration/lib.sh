# lib.sh — helpers for integration tests (sourced). run-all.sh gives each test
# private CLSHIM_CACHE_DIR, POCL_CACHE_DIR, XDG_* and HOME, and exports
# CLSHIM_BUILD (absolute build dir) and CLSHIM_ROOT.
set -euo pipefail
: "${CLSHIM_BUILD:?run through tests/run-all.sh}"
SHIM=$CLSHIM_BUILD/libclshim.so
PROGS=$CLSHIM_BUILD/tests/progs
TMP=${TEST_TMP:-$(mktemp -d)}
checks=0

fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { checks=$((checks + 1)); echo "ok $checks - $*"; }

# Runs a command plainly; stdout+exit code into $1.out/$1.rc
run_plain() { local tag=$1; shift; set +e; "$@" >"$TMP/$tag.out" 2>"$TMP/$tag.err"; echo $? >"$TMP/$tag.rc"; set -e; }
# Same, with the shim preloaded (extra env may precede the command via env)
run_shim() { local tag=$1; shift; set +e; LD_PRELOAD=$SHIM "$@" >"$TMP/$tag.out" 2>"$TMP/$tag.err"; echo $? >"$TMP/$tag.rc"; set -e; }

same_output() { # tagA tagB what
    cmp -s "$TMP/$1.out" "$TMP/$2.out" || { diff "$TMP/$1.out" "$TMP/$2.out" | head -20 >&2; fail "$3: outputs differ"; }
    cmp -s "$TMP/$1.rc" "$TMP/$2.rc" || fail "$3: exit codes differ ($(cat "$TMP/$1.rc") vs $(cat "$TMP/$2.rc"))"
    ok "$3"
}

count() { grep -c -- "$1" "$2" || true; }
# How often a fusion log line came: fusion logs each distinct line once and
# counts its repeats in an exit line "fusion: again N times: LINE".
occurrences() {
    awk -v pat="$1" '!index($0, pat) { next }
        match($0, /fusion: again [0-9]+ times: /) { n += substr($0, RSTART + 14, RLENGTH - 22); next }
        { n++ } END { print n + 0 }' "$2"
}

# A new empty PoCL cache directory for the next runs. Not the old one emptied:
# a capture helper of an earlier run may still be writing into that one
# (under load it outlives its app), and PoCL then reads its half-written
# files (an assertion in pocl_llvm_read_program_llvm_irs) or rm -rf fails.
fresh_pocl() { POCL_CACHE_DIR=$(mktemp -d "$TMP/pocl.XXXXXX"); export POCL_CACHE_DIR; }
# The plain reference run of a comparison with the shim: the driver alone,
# on a PoCL cache of its own that the test's reference runs share (what the
# driver caches of its own compiles changes no result, and a cold PoCL
# compile costs seconds: a fresh cache is for the runs under the shim).
run_ref() { local tag=$1; shift; mkdir -p "$TMP/pocl-ref"; POCL_CACHE_DIR=$TMP/pocl-ref run_plain "$tag" "$@"; }

finish() { echo "$checks checks passed"; }

# A private redis-server (Debian's) for remote-tier tests: on a unix socket
# in $TMP, or with `start_redis tcp` on 127.0.0.1 and a free port; never any
# other address, nothing saved to disk. Extra arguments go to redis-server.
# Sets REDIS_URL and REDIS_PID; stopped when the test exits.
REDIS_PIDS=""
start_redis() {
    local mode=unix; [ "${1:-}" = tcp ] && { mode=tcp; shift; }
    local dir; dir=$(mktemp -d "$TMP/redis.XXXXXX")
    local where=(--port 0 --unixsocket "$dir/redis.sock" --unixsocketperm 700)
    REDIS_URL=unix://$dir/redis.sock; REDIS_CLI=(redis-cli -s "$dir/redis.sock")
    if [ $mode = tcp ]; then
        local port; port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
        where=(--port "$port" --bind 127.0.0.1)
        REDIS_URL=redis://127.0.0.1:$port; REDIS_CLI=(redis-cli -h 127.0.0.1 -p "$port")
    fi
    redis-server "${where[@]}" --dir "$dir" --save '' --appendonly no --daemonize yes \
        --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" "$@" || fail "cannot start redis-server"
    for _ in $(seq 100); do [ -s "$dir/redis.pid" ] && grep -q "Ready to accept" "$dir/redis.log" && break; sleep 0.05; done
    REDIS_PID=$(cat "$dir/redis.pid")
    REDIS_PIDS="$REDIS_PIDS $REDIS_PID"
    trap stop_redis EXIT
}
# Milliseconds a command takes.
ms() { local t0 t1; t0=$(date +%s%N); "$@"; t1=$(date +%s%N); echo $(((t1 - t0) / 1000000)); }
# For the remote tier's deadline checks: PoCL's own cache warm
# ($TMP/pocl-warm), clshim's cold, so each run looks up, misses and compiles
# briefly and the remote lookup is what differs between runs. Sets BASE_MS,
# the best of three runs of PROG without a remote tier.
remote_base_ms() { # PROG
    local i t
    mkdir -p "$TMP/pocl-warm"
    run_shim prime env POCL_CACHE_DIR="$TMP/pocl-warm" CLSHIM_REMOTE= CLSHIM_CACHE_DIR="$TMP/cache-prime" "$1"
    BASE_MS=999999
    for i in 1 2 3; do
        t=$(ms run_shim base$i env POCL_CACHE_DIR="$TMP/pocl-warm" CLSHIM_REMOTE= CLSHIM_CACHE_DIR="$TMP/cache-base$i" "$1")
        [ "$t" -lt "$BASE_MS" ] && BASE_MS=$t
    done
    echo "without a remote tier: $BASE_MS ms (best of 3)"
}
# A run of PROG under the shim, tag TAG, on an empty cache of its own
# ($TMP/cache-TAG) that the remote tier answers: the results of the plain
# run tagged ref, no compile, one remote hit.
remote_hit_run() { # TAG PROG
    fresh_pocl; run_shim "$1" env CLSHIM_CACHE_DIR="$TMP/cache-$1" "$2"
    same_output ref "$1" "$1: same results as without clshim"
    [ "$(count 'miss ' "$TMP/$1.err")" = 0 ] || fail "$1: compiled although the remote tier had it"
    [ "$(count 'hit .*(remote)' "$TMP/$1.err")" = 1 ] || fail "$1: expected one remote hit"
}
# Stops every server this test started (a stopped one is killed).
stop_redis() { local p; for p in $REDIS_PIDS; do kill -KILL "$p" 2>/dev/null || true; done; REDIS_PIDS=""; }

# A full disk: a 1 MiB tmpfs at $TMP/mnt (unmounted when the test exits), a
# clshim cache on it seeded by one `run_shim seed SEED_CMD...` (with the
# capture helper off: its lock would hold the mount), then filled up.
# Exports CLSHIM_CACHE_DIR. Needs root.
full_disk_cache() {
    M=$TMP/mnt
    mkdir -p "$M"
    trap 'umount "$M" 2>/dev/null || true' EXIT
    mount -t tmpfs -o size=1m,mode=0700 tmpfs "$M" || fail "cannot mount a tmpfs (the full-disk case needs root)"
    export CLSHIM_CACHE_DIR=$M/cache
    fresh_pocl; CLSHIM_CAPTURE_PROCESS=0 run_shim seed "$@"
    dd if=/dev/zero of="$M/fill" bs=4k 2>/dev/null || true
    [ "$(df -k "$M" | awk 'NR==2 {print $4}')" = 0 ] || fail "the tmpfs is not full"
}
