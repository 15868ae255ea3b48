#!/bin/bash
# gpu-pack.sh — what bench/run.sh --gpu needs on the GPU machine, where
# nothing can be installed: a BUILD-shaped folder with the shim, the
# benchmarks, the demo app, and in lib/ the libraries the machine lacks
# (ocl-icd's loader, LMDB, zstd). Name DEST (inside the repo, ignored by
# git: .carry/) in the device tool's carry list. docs/benchmarks.md, "The GPU
# section", has the whole procedure.
#   bench/gpu-pack.sh BUILD DEST
set -euo pipefail
BUILD=${1:?usage: bench/gpu-pack.sh BUILD DEST}
DEST=${2:?usage: bench/gpu-pack.sh BUILD DEST}
source "$(dirname "$0")/../tests/compat/pack.sh"
rm -rf "$DEST" && mkdir -p "$DEST/bench" "$DEST/examples"
cp "$BUILD/libclshim.so" "$DEST/"
cp "$BUILD/bench/bench_ttfr" "$DEST/bench/"
cp "$BUILD/examples/pipeline" "$DEST/examples/"
pack_libs "$DEST" $PACK_SHIM_LIBS
pack_done "$DEST" gpu-pack
