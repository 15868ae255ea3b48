#!/bin/bash
# pyopencl_fusion.sh BUILD — PyOpenCL ElementwiseKernel chains, unfused vs
# fused (plan scale_add+square_it), and the chain written by hand as one
# ElementwiseKernel (the ceiling of fusion), all under the shim, interleaved
# per size, best of 3 rounds up to 1 Mi. Needs python3-pyopencl (the system
# python3). Private caches.
set -eu
BUILD=$(cd "${1:-build}" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${COMPAT_PYTHON:-/usr/bin/python3}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/clshim-pyfusion.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export POCL_CACHE_DIR=$TMP/pocl CLSHIM_CACHE_DIR=$TMP/clshim XDG_CACHE_HOME=$TMP/xdg LD_PRELOAD=$BUILD/libclshim.so
mkdir -p "$POCL_CACHE_DIR" "$XDG_CACHE_HOME"
echo "| N | unfused (us per chain) | fused (us per chain) | hand-written (us per chain) | speedup | fused/hand |"
echo "|---|---|---|---|---|---|"
min() { awk -v a="$1" -v b="$2" 'BEGIN { print (a == "" || b + 0 < a + 0) ? b : a }'; }
for n in 4096 65536 262144 1048576 4194304 16777216; do
    # Best of 3 interleaved rounds up to 1 Mi (one run of the larger sizes
    # takes minutes); a single process is at the mercy of the machine.
    rounds=3
    [ "$n" -gt 1048576 ] && rounds=1
    u= f= h=
    for _ in $(seq $rounds); do
        u=$(min "$u" "$(N=$n "$PY" "$ROOT/bench/pyopencl_fusion.py")")
        f=$(min "$f" "$(N=$n CLSHIM_FUSE="scale_add+square_it" "$PY" "$ROOT/bench/pyopencl_fusion.py")")
        h=$(min "$h" "$(N=$n HAND=1 "$PY" "$ROOT/bench/pyopencl_fusion.py")")
    done
    awk -v n="$n" -v u="$u" -v f="$f" -v h="$h" \
        'BEGIN { printf "| %d | %s | %s | %s | %.2fx | %.2f |\n", n, u, f, h, u / f, f / h }'
done
