#!/bin/bash
# callgrind_chain.sh — the instructions clshim executes per fused chain of an
# unmodified program, exactly (wall-clock host times on a loaded 2-core
# machine carry microseconds of noise; instruction counts carry none).
#
#   bench/callgrind_chain.sh BUILD [SHIM...]
#
# Runs fusion_model --sequence k0,k1,k2 (three kernels an unmodified program
# enqueues in a loop, fused by the plan k0+k1+k2) on PoCL under callgrind,
# counting only inside clEnqueueNDRangeKernel: entering the ICD loader's
# function of that name toggles collection off again, so what is counted is
# clshim's wrapper and fusion path, not the driver's enqueue. The steady
# state per chain is the run of 2N chains minus the run of N, over N (the
# first chain, which builds the fused program, cancels out). Each SHIM
# (default BUILD/libclshim.so) is measured in turn, so two builds compare
# side by side; also the same loop with no plan (every kernel forwarded
# through the armed wrapper: what clshim adds to a plain enqueue), and
# CLSHIM_FUSION=auto with one kernel enqueued over and over (nothing to
# fuse: what watching for sequences costs an enqueue; bench_passthrough's
# `auto` row, in instructions).
set -eu
BUILD=${1:?usage: callgrind_chain.sh BUILD [SHIM...]}
shift
[ $# -gt 0 ] || set -- "$BUILD/libclshim.so"
FM=$BUILD/tests/progs/fusion_model
command -v valgrind >/dev/null || { echo "callgrind_chain: valgrind is not installed" >&2; exit 2; }
N=${CALLGRIND_CHAINS:-1000}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# The program is stored in-process (no capture helper finishing after the
# process exits), so every counted run finds it: none waits for a capture.
export CLSHIM_CAPTURE_PROCESS=0 POCL_CACHE_DIR=$T/pocl XDG_CACHE_HOME=$T/xdg

count() { # shim plan chains [sequence]: instructions counted inside clEnqueueNDRangeKernel
    # plan "auto": CLSHIM_FUSION=auto, no plan
    local fuse=$2 fusion=off
    [ "$fuse" = auto ] && fuse= && fusion=auto
    LD_PRELOAD=$1 CLSHIM_FUSE=$fuse CLSHIM_FUSION=$fusion valgrind --tool=callgrind --collect-atstart=no \
        --toggle-collect=clEnqueueNDRangeKernel --callgrind-out-file="$T/cg" \
        "$FM" --sequence "${4:-k0,k1,k2}" --iterations "$3" >/dev/null 2>"$T/err" ||
        { tail -3 "$T/err" >&2; exit 1; }
    sed -n 's/.*Collected : *\([0-9]*\).*/\1/p' "$T/err" | head -1 | grep . ||
        sed -n 's/.*I *refs: *\([0-9,]*\).*/\1/p' "$T/err" | tr -d , | head -1
}
per_chain() { # shim plan [sequence]
    export CLSHIM_CACHE_DIR=$T/cache-$RANDOM
    count "$1" "$2" "$N" ${3:+"$3"} >/dev/null # the caches warm: both counted runs alike
    local a b
    a=$(count "$1" "$2" "$N" ${3:+"$3"})
    b=$(count "$1" "$2" $((2 * N)) ${3:+"$3"})
    echo $(((b - a) / N))
}
echo "| libclshim.so | plan k0+k1+k2: per fused chain | no plan: per 3 forwarded enqueues | auto, k0 again and again: per enqueue |"
echo "|---|---|---|---|"
for shim in "$@"; do
    echo "| $shim | $(per_chain "$shim" "k0+k1+k2") | $(per_chain "$shim" "nothere+absent") | $(per_chain "$shim" auto k0) |"
done
