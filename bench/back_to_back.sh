#!/bin/bash
# back_to_back.sh — does a run started the moment a cold one exited hit?
# (issue 44: the capture helper holds the key's claim, so the next run waits
# for its capture). TRIALS times, a program with one header is run three
# times back to back on empty caches; prints how many of runs 2 and 3 hit.
#   bench/back_to_back.sh BUILD [TRIALS]     (BUILD may be an older build)
set -u
B=$(cd "${1:?usage: back_to_back.sh BUILD [TRIALS]}" && pwd)
TRIALS=${2:-10}
export CLSHIM_CAPTURE_PROCESS=1 CLSHIM_LOG=info
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
mkdir -p "$d/inc"
echo '#define V 1.0f' >"$d/inc/h.h"
hits=0 runs=0
for i in $(seq "$TRIALS"); do
    printf '#include "h.h"\n__kernel void k(__global float *y) { size_t i = get_global_id(0); y[i] = V * (float)(i %% 7); }\n// %s\n' \
        "$i" >"$d/p.cl"
    export CLSHIM_CACHE_DIR=$d/c$i POCL_CACHE_DIR=$d/p$i
    for r in 1 2 3; do
        LD_PRELOAD=$B/libclshim.so "$B/tests/progs/srcfile" "$d/p.cl" --options "-I $d/inc" >/dev/null 2>"$d/e$r"
    done
    for r in 2 3; do
        runs=$((runs + 1))
        grep -q 'clshim: hit' "$d/e$r" && hits=$((hits + 1))
    done
    "$B/clshim-tool" cache wait --timeout 60 >/dev/null 2>&1
done
echo "$B: runs 2 and 3 of $TRIALS trials: $hits of $runs hit"
