#!/bin/bash
# elwise_join.sh — a chain of three PyOpenCL-style elementwise kernels, each
# its own program (tests/integration/progs/elwise_progs.c: y = s*x + c,
# y = x*x, y = x - 0.5f), plain against CLSHIM_FUSION=auto, per step. On
# NVIDIA automatic fusion takes route (b), which joins the three programs'
# sources (docs/fusion.md); on PoCL the IR route.
#
#   bench/elwise_join.sh BUILD [--n N] [--rounds R]          here (PoCL)
#   bench/elwise_join.sh DIR --gpu [--n N] [--rounds R]      on the GPU machine
#
# BUILD is a build directory; DIR a pack from bench/gpu-pack.sh, whose
# cache export (elwise.export, primed on PoCL: that machine has no clang for
# the analysis) is imported first. R rounds (default 7) of a plain process
# and an auto process, interleaved (A B A B ...); each process times its
# steps two ways (elwise_progs --reps: 20 steps back to back then clFinish,
# "pipelined"; a clFinish after every step, "latency") and prints medians;
# the table gives the medians over the rounds, min-max beside them. Every
# run's results must equal the plain ones, and every auto run must have
# fused, or the script exits 1. With BENCH_CSV set, rows are appended to it
# (bench,case,variant,metric,unit,median,min,max,n). Private caches.
set -u
DIR=$(cd "${1:?usage: elwise_join.sh BUILD|DIR [--gpu] [--n N] [--rounds R]}" && pwd)
shift
GPU=0 N=1048576 ROUNDS=7
while [ $# -gt 0 ]; do
    case $1 in
    --gpu) GPU=1 ;;
    --n) N=$2; shift ;;
    --rounds) ROUNDS=$2; shift ;;
    *) echo "elwise_join.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
TMP=$(mktemp -d "${TMPDIR:-/tmp}/clshim-elwise.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export CLSHIM_CACHE_DIR=$TMP/clshim POCL_CACHE_DIR=$TMP/pocl XDG_CACHE_HOME=$TMP/xdg CUDA_CACHE_PATH=$TMP/nv
mkdir -p "$POCL_CACHE_DIR" "$XDG_CACHE_HOME"
if [ "$GPU" = 1 ]; then
    PROG=$DIR/bench/elwise_progs
    "$DIR/clshim-tool" cache --dir "$CLSHIM_CACHE_DIR" import "$DIR/elwise.export" >/dev/null ||
        { echo "elwise_join.sh: cannot import $DIR/elwise.export" >&2; exit 1; }
else
    PROG=$DIR/tests/progs/elwise_progs
fi
SHIM=$DIR/libclshim.so
fails=0
: >"$TMP/p.us" && : >"$TMP/a.us"
for r in $(seq "$ROUNDS"); do
    "$PROG" --n "$N" --iterations 1 --reps 9 >"$TMP/p.out" 2>"$TMP/p.err" || fails=$((fails + 1))
    CLSHIM_FUSION=auto CLSHIM_LOG=info LD_PRELOAD=$SHIM "$PROG" --n "$N" --iterations 1 --reps 9 \
        >"$TMP/a.out" 2>"$TMP/a.err" || fails=$((fails + 1))
    cmp -s "$TMP/p.out" "$TMP/a.out" && [ -s "$TMP/p.out" ] || { echo "round $r: results differ"; fails=$((fails + 1)); }
    grep -q "fused elwise_kernel+elwise_kernel+elwise_kernel into one launch" "$TMP/a.err" ||
        { echo "round $r: not fused: $(grep -m2 'refused\|cannot' "$TMP/a.err")"; fails=$((fails + 1)); }
    sed -n 's/.*pipelined_us=\([0-9.]*\) latency_us=\([0-9.]*\).*/\1 \2/p' "$TMP/p.err" >>"$TMP/p.us"
    sed -n 's/.*pipelined_us=\([0-9.]*\) latency_us=\([0-9.]*\).*/\1 \2/p' "$TMP/a.err" >>"$TMP/a.us"
done
grep -m1 'elwise n=' "$TMP/p.err"
# stats FILE COLUMN: median min max count
stats() { awk -v c="$2" '{ print $c }' "$1" | sort -g | awk '{ v[NR] = $1 } END { if (NR) printf "%s %s %s %d\n", v[int((NR + 1) / 2)], v[1], v[NR], NR; else print "nan nan nan 0" }'; }
echo "| N | mode | plain us/step | auto us/step | plain / auto |"
echo "| --- | --- | --- | --- | --- |"
col=1
for mode in pipelined latency; do
    read -r pm plo phi pn < <(stats "$TMP/p.us" $col)
    read -r am alo ahi an < <(stats "$TMP/a.us" $col)
    echo "| $N | $mode | $pm ($plo-$phi) | $am ($alo-$ahi) | $(awk -v a="$pm" -v b="$am" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "?" }') |"
    if [ -n "${BENCH_CSV:-}" ]; then
        echo "elwise_join,n=$N,plain,$mode,us,$pm,$plo,$phi,$pn" >>"$BENCH_CSV"
        echo "elwise_join,n=$N,auto,$mode,us,$am,$alo,$ahi,$an" >>"$BENCH_CSV"
    fi
    col=2
done
echo "rounds: $ROUNDS; failures: $fails; load: $(cut -d' ' -f1-3 /proc/loadavg)"
[ "$fails" = 0 ]
