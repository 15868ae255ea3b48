#!/bin/bash
# gpu-pack.sh — what bench/run.sh --gpu needs on the GPU machine, where
# nothing can be installed: a BUILD-shaped folder with the shim, the
# benchmarks, the demo app, and in lib/ the libraries the machine lacks
# (ocl-icd's loader, LMDB, zstd). Name DEST (inside the repo, ignored by
# git: .carry/) in the device tool's carry list. docs/benchmarks.md, "The GPU
# section", has the whole procedure.
# For bench/elwise_join.sh (three elementwise programs fused automatically
# by route (b)) the fused source is primed here on PoCL with
# CLSHIM_FUSE_ROUTE=source, for the ND-range PyOpenCL picks on an H100 or
# H200 (132 compute units) and on an H100 PCIe (114), and travels as a cache
# export (DEST/elwise.export): the GPU machine has no clang for the analysis.
# For bench/pyopencl_arrays.sh on the GPU (PyOpenCL array code, unmodified),
# with PYOPENCL_SITE naming a folder that holds PyOpenCL (and numpy) for
# this machine's /usr/bin/python3 and PYOPENCL_WHEELS one with the same
# PyOpenCL version's wheels for the GPU machine's Python: its fused sources
# are primed here for 132 compute units at 64 Ki and 1 Mi floats
# (bench/pyopencl_prime.py) into DEST/arrays.export, and the wheels go to
# DEST/whl. The GPU machine must install them at the same path as
# PYOPENCL_SITE: PyOpenCL builds with -I of its own folder, which is part
# of every key. docs/benchmarks.md, "The GPU section", has the commands.
#   bench/gpu-pack.sh BUILD DEST
set -euo pipefail
BUILD=${1:?usage: bench/gpu-pack.sh BUILD DEST}
DEST=${2:?usage: bench/gpu-pack.sh BUILD DEST}
source "$(dirname "$0")/../tests/compat/pack.sh"
rm -rf "$DEST" && mkdir -p "$DEST/bench" "$DEST/examples"
cp "$BUILD/libclshim.so" "$BUILD/clshim-tool" "$DEST/"
cp "$BUILD/bench/bench_ttfr" "$BUILD/bench/bench_short" "$BUILD/tests/progs/elwise_progs" "$DEST/bench/"
cp "$BUILD/examples/pipeline" "$DEST/examples/"
pack_libs "$DEST" $PACK_SHIM_LIBS
# libclshim-llvm.so and the LLVM it links (compressed: the carry limit),
# so that SPIR-V translation and route (a) are on there; run.sh --gpu
# unpacks it. Source programs still need clang to fuse, which the machine
# lacks: their fused programs come primed (below).
pack_llvm "$BUILD" "$DEST" 19
PRIMED=$(mktemp -d)
for cus in 132 114; do
    CLSHIM_CACHE_DIR=$PRIMED/cache POCL_CACHE_DIR=$PRIMED/pocl CLSHIM_FUSE_ROUTE=source CLSHIM_FUSION=auto CLSHIM_FUSION_BUILD=app \
        CLSHIM_LOG=info LD_PRELOAD=$BUILD/libclshim.so nice "$BUILD/tests/progs/elwise_progs" --n 1048576 \
        --cus $cus --iterations 4 >/dev/null 2>"$PRIMED/log"
    grep -q "fused elwise_kernel+elwise_kernel+elwise_kernel" "$PRIMED/log" ||
        { echo "gpu-pack: elwise_progs did not fuse for $cus compute units" >&2; cat "$PRIMED/log" >&2; exit 1; }
done
"$BUILD/clshim-tool" cache --dir "$PRIMED/cache" export "$DEST/elwise.export" >/dev/null
rm -rf "$PRIMED"
if [ -n "${PYOPENCL_SITE:-}" ]; then
    PRIMED=$(mktemp -d)
    mkdir -p "$PRIMED/pocl" "$PRIMED/xdg" "$DEST/whl"
    for mode in arrays three; do
        for n in 65536 1048576; do
            CUS=132 PYTHONPATH=$PYOPENCL_SITE CLSHIM_CACHE_DIR=$PRIMED/cache XDG_CACHE_HOME=$PRIMED/xdg \
                POCL_CACHE_DIR=$PRIMED/pocl CLSHIM_FUSE_ROUTE=source CLSHIM_FUSION=auto CLSHIM_FUSION_BUILD=app CLSHIM_LOG=info \
                LD_PRELOAD=$BUILD/libclshim.so MODE=$mode N=$n WARM=30 BLOCKS=1 STEPS=2 PYTHONWARNINGS=ignore \
                nice /usr/bin/python3 "$(dirname "$0")/pyopencl_prime.py" >/dev/null 2>"$PRIMED/log"
            grep -q "miss derived program" "$PRIMED/log" ||
                { echo "gpu-pack: PyOpenCL $mode at $n floats made no fused program" >&2; cat "$PRIMED/log" >&2; exit 1; }
        done
    done
    "$BUILD/clshim-tool" cache --dir "$PRIMED/cache" export "$DEST/arrays.export" >/dev/null
    cp "${PYOPENCL_WHEELS:?PYOPENCL_WHEELS: the wheels for the GPU machine}"/*.whl "$DEST/whl/"
    rm -rf "$PRIMED"
fi
pack_done "$DEST" gpu-pack
