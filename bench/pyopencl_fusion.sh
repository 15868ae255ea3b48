#!/bin/bash
# pyopencl_fusion.sh BUILD — PyOpenCL ElementwiseKernel chains, unfused vs
# fused (plan scale_add+square_it), both under the shim, interleaved per
# size. Needs python3-pyopencl (the system python3). Private caches.
set -eu
BUILD=$(cd "${1:-build}" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${COMPAT_PYTHON:-/usr/bin/python3}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/clshim-pyfusion.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export POCL_CACHE_DIR=$TMP/pocl CLSHIM_CACHE_DIR=$TMP/clshim XDG_CACHE_HOME=$TMP/xdg LD_PRELOAD=$BUILD/libclshim.so
mkdir -p "$POCL_CACHE_DIR" "$XDG_CACHE_HOME"
echo "| N | unfused (us per chain) | fused (us per chain) | speedup |"
echo "|---|---|---|---|"
for n in 4096 65536 262144 1048576 4194304 16777216; do
    u=$(N=$n "$PY" "$ROOT/bench/pyopencl_fusion.py")
    f=$(N=$n CLSHIM_FUSE="scale_add+square_it" "$PY" "$ROOT/bench/pyopencl_fusion.py")
    awk -v n="$n" -v u="$u" -v f="$f" 'BEGIN { printf "| %d | %s | %s | %.2fx |\n", n, u, f, u / f }'
done
