#!/bin/bash
# make demo — runs the bundled OpenCL program (examples/pipeline.c) under
# clshim: cold (compiled, stored), warm (a cache hit), and twice with a
# fusion plan (the elementwise chain launched as one kernel: built and
# stored, then taken from the cache). Each run empties PoCL's own cache
# first and waits for its captures (clshim run --wait): on PoCL a binary is
# stored by a capture helper after the run, so without the wait the next
# run would miss, and the helper would still be writing into the PoCL cache
# the demo removes. Fails if results differ from the plain run or nothing
# was fused. Uses a private cache under BUILD/demo, never your own.
set -euo pipefail
BUILD=$(cd "${1:-build}" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEMO=${DEMO_DIR:-$BUILD/demo} # tests point DEMO_DIR at a temp dir
rm -rf "$DEMO"
mkdir -p "$DEMO"
export CLSHIM_CACHE_DIR=$DEMO/cache POCL_CACHE_DIR=$DEMO/pocl CLSHIM_LOG=info
APP=$BUILD/examples/pipeline
CLSHIM=$BUILD/clshim

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# One run under clshim, named $1: its log (the app's and its capture
# helper's lines, CLSHIM_LOG_FILE: the helper's after the app's exit too),
# then its results; fails unless they are the plain run's.
shim_run() {
    rm -rf "$POCL_CACHE_DIR" # the last run's captures are stored: nothing writes there
    CLSHIM_LOG_FILE=$DEMO/$1.log "$CLSHIM" run --wait -- "$APP" >"$DEMO/$1.out" 2>>"$DEMO/$1.log" ||
        { cat "$DEMO/$1.log" >&2; exit 1; }
    cat "$DEMO/$1.log" "$DEMO/$1.out"
    [ "$plain" = "$(cat "$DEMO/$1.out")" ] || { echo "demo: results differ from the plain run" >&2; exit 1; }
}

say "Without clshim (PoCL compiles the program)"
plain=$("$APP")
printf '%s\n' "$plain"

say "clshim, cold cache: a miss; the binary is stored"
shim_run cold

say "clshim, warm cache (PoCL's own cache emptied): a hit, nothing compiled"
shim_run warm

export CLSHIM_FUSION_PLAN=$ROOT/examples/pipeline.plan
fused_run() { # shim_run with the plan; fails unless it fused
    shim_run "$1"
    grep -q 'into one launch' "$DEMO/$1.log" || { echo "demo: nothing was fused" >&2; exit 1; }
}

say "clshim with a fusion plan: standardize+gain+clamp01 fused into one launch (built and stored)"
cat "$CLSHIM_FUSION_PLAN"
fused_run fused-cold

say "The same, again: the program and the fused kernel from the cache, nothing compiled"
fused_run fused-warm
unset CLSHIM_FUSION_PLAN

say "The cache afterwards (clshim cache stats / list)"
"$CLSHIM" cache stats
"$CLSHIM" cache list
say "Same results in every run. Cache kept in $DEMO for a look around."
