#!/bin/bash
# make demo — runs the bundled OpenCL program (examples/pipeline.c) under
# clshim: cold (compiled, stored), warm (a cache hit), and twice with a
# fusion plan (the elementwise chain launched as one kernel: built and
# stored, then taken from the cache). Fails if results differ from the
# plain run or nothing was fused. Uses a private cache under BUILD/demo,
# never your own.
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

say "Without clshim (PoCL compiles the program)"
"$APP"
plain=$("$APP" 2>/dev/null)

say "clshim, cold cache: a miss; the binary is stored"
rm -rf "$POCL_CACHE_DIR"
"$CLSHIM" run -- "$APP"

say "clshim, warm cache (PoCL's own cache emptied): a hit, nothing compiled"
rm -rf "$POCL_CACHE_DIR"
"$CLSHIM" run -- "$APP"
warm=$("$CLSHIM" run -- "$APP" 2>/dev/null)
[ "$plain" = "$warm" ] || { echo "demo: results differ from the plain run" >&2; exit 1; }

export CLSHIM_FUSION_PLAN=$ROOT/examples/pipeline.plan
fused_run() { # runs the app with the plan; shows its log; fails unless it fused
    rm -rf "$POCL_CACHE_DIR"
    "$CLSHIM" run -- "$APP" 2>"$DEMO/fused.log" >"$DEMO/fused.out" || { cat "$DEMO/fused.log" >&2; exit 1; }
    cat "$DEMO/fused.log" "$DEMO/fused.out"
    grep -q 'into one launch' "$DEMO/fused.log" || { echo "demo: nothing was fused" >&2; exit 1; }
    fused=$(grep -v '^pipeline: time' "$DEMO/fused.out")
    [ "$(grep -v '^pipeline: time' <<<"$plain")" = "$fused" ] ||
        { echo "demo: fused results differ from the plain run" >&2; exit 1; }
}

say "clshim with a fusion plan: standardize+gain+clamp01 fused into one launch (built and stored)"
cat "$CLSHIM_FUSION_PLAN"
fused_run

say "The same, again: the program and the fused kernel from the cache, nothing compiled"
fused_run
unset CLSHIM_FUSION_PLAN

say "The cache afterwards (clshim cache stats / list)"
"$CLSHIM" cache stats
"$CLSHIM" cache list
say "Same results in every run. Cache kept in $DEMO for a look around."
