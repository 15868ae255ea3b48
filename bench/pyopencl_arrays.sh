#!/bin/bash
# pyopencl_arrays.sh BUILD [ROUNDS] — PyOpenCL programs as numerical code
# writes them (bench/pyopencl_arrays.py: array expressions; the three
# ElementwiseKernels of issue 33; a step automatic fusion must refuse), each
# unmodified, under the shim plainly and with CLSHIM_FUSION=auto,
# interleaved (plain, auto, plain, auto, ...; ROUNDS processes each way,
# default 3) at 64 Ki, 1 Mi and 8 Mi floats. Prints the median per-step time
# each way, auto's speed-up (plain / auto; the target is >= 1.3 at 64 Ki for
# arrays, >= 0.97 everywhere: never slower), and whether every result was
# bit-identical. Needs python3-pyopencl (the system python3). Private caches.
# MODES and SIZES (environment) choose programs and sizes; WARM, BLOCKS and
# STEPS reach bench/pyopencl_arrays.py (shorter runs at 8 Mi).
#
# pyopencl_arrays.sh BUILD ROUNDS learning — what automatic fusion's
# learning costs (issue 33 item 10): the three-ElementwiseKernel program
# (MODE=three) at 64 Ki floats, a short run (30 chains) and a long one
# (300), each plainly, with CLSHIM_FUSION=auto and with the plan naming the
# chain, interleaved, every process with fresh caches. Prints per way and
# length the median of the total time of the timed chains (ms: learning,
# measurements, PyOpenCL's compiles at the first chain and the fused
# program's build included; not the process start) and of the time per
# chain (us).
#
# On the GPU machine BUILD is a pack from bench/gpu-pack.sh: with
# ARRAYS_EXPORT naming a cache export (the fused sources primed on PoCL for
# the GPU's ND-range, bench/gpu-pack.sh), it is imported first, and
# COMPAT_PYTHON names a python3 with numpy and PyOpenCL. PIN (a command
# prefix, such as "taskset -c 3") pins every process to one core: on the
# 16-core GPU machine an unpinned Python thread that migrates between
# cores runs its host-bound steps 1.5x slower in some processes than in
# others, which hides any difference between the ways.
set -eu
BUILD=$(cd "${1:-build}" && pwd)
ROUNDS=${2:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${COMPAT_PYTHON:-/usr/bin/python3}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/clshim-pyarrays.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export CLSHIM_CACHE_DIR=$TMP/clshim XDG_CACHE_HOME=$TMP/xdg LD_PRELOAD=$BUILD/libclshim.so
mkdir -p "$XDG_CACHE_HOME"
if [ -n "${ARRAYS_EXPORT:-}" ]; then
    "$BUILD/clshim-tool" cache --dir "$CLSHIM_CACHE_DIR" import "$ARRAYS_EXPORT" >/dev/null
fi
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# one WAY MODE N: a fresh process (and a fresh PoCL cache: every run
# compiles as a first run does); appends "time hash" to $TMP/WAY-MODE-N
one() {
    # a directory of its own: a capture helper of the previous process may still write into its own
    local pocl pre=$LD_PRELOAD; pocl=$(mktemp -d "$TMP/pocl.XXXXXX")
    [ "$1" != none ] || pre=
    LD_PRELOAD=$pre POCL_CACHE_DIR=$pocl CLSHIM_FUSION=$1 MODE=$2 N=$3 ${PIN:-} "$PY" "$ROOT/bench/pyopencl_arrays.py" \
        >>"$TMP/$1-$2-$3"
}
learning() {
    export MODE=three N=65536 WARM=0 STEPS=10 TOTAL=1
    for blocks in 3 30; do
        for _ in $(seq "$ROUNDS"); do
            for way in plain auto plan; do
                rm -rf "$TMP/pocl" "$TMP/clshim" && mkdir -p "$TMP/pocl" "$XDG_CACHE_HOME"
                case $way in
                plain) set -- CLSHIM_FUSION=off ;;
                auto) set -- CLSHIM_FUSION=auto ;;
                plan) set -- CLSHIM_FUSE=k_scale+k_square+k_shift ;;
                esac
                env "$@" POCL_CACHE_DIR="$TMP/pocl" CLSHIM_CACHE_DIR="$TMP/clshim" BLOCKS=$blocks \
                    "$PY" "$ROOT/bench/pyopencl_arrays.py" >>"$TMP/$way-$blocks" 2>/dev/null
            done
        done
    done
    echo "| chains | way | total (ms) | per chain (us) |"
    echo "|---|---|---|---|"
    for blocks in 3 30; do
        for way in plain auto plan; do
            echo "| $((blocks * 10)) | $way | $(cut -d' ' -f3 "$TMP/$way-$blocks" | median) | $(cut -d' ' -f1 "$TMP/$way-$blocks" | median) |"
        done
    done
    [ "$(cut -d' ' -f2 "$TMP"/*-* | sort -u | wc -l)" = 1 ] && echo "results: identical" || echo "results: DIFFER"
}
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "${3:-}" = learning ]; then
    learning
    echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    exit 0
fi
# NOSHIM=1: a third way, no clshim at all (the "plain" of the other two is
# clshim with CLSHIM_FUSION=off), and auto's speed-up against it.
ways="off auto"
[ "${NOSHIM:-0}" = 1 ] && ways="none off auto"
if [ "${NOSHIM:-0}" = 1 ]; then
    echo "| program | N | no clshim (us per step) | plain (us per step) | auto (us per step) | plain/auto | none/auto | results |"
    echo "|---|---|---|---|---|---|---|---|"
else
    echo "| program | N | plain (us per step) | auto (us per step) | plain/auto | results |"
    echo "|---|---|---|---|---|---|"
fi
for mode in ${MODES:-arrays three refused}; do
    for n in ${SIZES:-65536 1048576 8388608}; do
        for _ in $(seq "$ROUNDS"); do for way in $ways; do one "$way" "$mode" "$n"; done; done
        p=$(cut -d' ' -f1 "$TMP/off-$mode-$n" | median)
        a=$(cut -d' ' -f1 "$TMP/auto-$mode-$n" | median)
        same=$([ "$(for way in $ways; do cut -d' ' -f2 "$TMP/$way-$mode-$n"; done | sort -u | wc -l)" = 1 ] && echo identical || echo DIFFER)
        if [ "${NOSHIM:-0}" = 1 ]; then
            z=$(cut -d' ' -f1 "$TMP/none-$mode-$n" | median)
            awk -v m="$mode" -v n="$n" -v z="$z" -v p="$p" -v a="$a" -v s="$same" \
                'BEGIN { printf "| %s | %d | %.1f | %.1f | %.1f | %.2f | %.2f | %s |\n", m, n, z, p, a, p / a, z / a, s }'
        else
            awk -v m="$mode" -v n="$n" -v p="$p" -v a="$a" -v s="$same" \
                'BEGIN { printf "| %s | %d | %.1f | %.1f | %.2f | %s |\n", m, n, p, a, p / a, s }'
        fi
    done
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
