#!/bin/bash
# capture_latency.sh — how soon a cold run's binaries are stored by the
# capture helper (issue 30), on PoCL:
#   1. without a wait: seconds from the application's exit until the cache
#      holds every program it built (polled every 50 ms), on this machine
#      as it is;
#   2. `clshim cache wait` with two busy loops on the machine: its wall time
#      and the helper's CPU time (the target: at most 2 x CPU + 5 s).
#   bench/capture_latency.sh BUILD [REPS] [APP ARGS...]
# BUILD may be an older build, to compare. Private temp dirs; prints one
# line per run and the medians.
set -u
BUILD=$(cd "${1:?usage: capture_latency.sh BUILD [REPS] [APP ARGS...]}" && pwd)
REPS=${2:-5}
shift 2 2>/dev/null || shift $#
[ $# -gt 0 ] || set -- "$BUILD/examples/pipeline"
T=$(mktemp -d)
LOOPS=""
cleanup() { [ -n "$LOOPS" ] && kill $LOOPS 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
export CLSHIM_CAPTURE_PROCESS=1 CLSHIM_LOG=warn CLSHIM_LOG_FILE=$T/helper.log
TOOL=$BUILD/clshim-tool
entries() { CLSHIM_CACHE_DIR=$1 "$TOOL" cache stats --json | python3 -c "import json,sys; print(json.load(sys.stdin)['entries'])"; }
now() { date +%s.%N; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

# The entries a finished run leaves (after a wait): what "every program" is.
export CLSHIM_CACHE_DIR=$T/ref POCL_CACHE_DIR=$T/pocl-ref
LD_PRELOAD=$BUILD/libclshim.so "$@" >/dev/null 2>&1
"$TOOL" cache wait --timeout 300 >/dev/null 2>&1
want=$(entries "$T/ref")
echo "programs stored by one run: $want"

: >"$T/lat"
for r in $(seq "$REPS"); do
    export CLSHIM_CACHE_DIR=$T/c$r POCL_CACHE_DIR=$T/p$r
    LD_PRELOAD=$BUILD/libclshim.so "$@" >/dev/null 2>&1
    t0=$(now)
    until [ "$(entries "$CLSHIM_CACHE_DIR")" -ge "$want" ]; do
        sleep 0.05
        [ "$(echo "$(now) - $t0 > 120" | bc)" = 1 ] && break
    done
    lat=$(echo "$(now) - $t0" | bc)
    echo "run $r: stored ${lat} s after the application's exit"
    echo "$lat" >>"$T/lat"
    "$TOOL" cache wait --timeout 300 >/dev/null 2>&1
done
echo "median: $(median <"$T/lat") s after exit (no wait, this machine's load: $(cut -d' ' -f1 /proc/loadavg))"

: >"$T/wait"
for r in $(seq "$REPS"); do
    export CLSHIM_CACHE_DIR=$T/w$r POCL_CACHE_DIR=$T/q$r
    LD_PRELOAD=$BUILD/libclshim.so "$@" >/dev/null 2>&1
    (while :; do :; done) & LOOPS="$!"
    (while :; do :; done) & LOOPS="$LOOPS $!"
    : >"$T/helper.log"
    t0=$(now)
    "$TOOL" cache wait --timeout 600 >/dev/null 2>&1
    w=$(echo "$(now) - $t0" | bc)
    kill $LOOPS 2>/dev/null; wait $LOOPS 2>/dev/null; LOOPS=""
    echo "run $r: cache wait ${w} s with two busy loops"
    echo "$w" >>"$T/wait"
done
echo "median: cache wait $(median <"$T/wait") s with two busy loops"
