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
rm -rf "$DEST" && mkdir -p "$DEST/bench" "$DEST/examples" "$DEST/lib"
cp "$BUILD/libclshim.so" "$DEST/"
cp "$BUILD/bench/bench_ttfr" "$DEST/bench/"
cp "$BUILD/examples/pipeline" "$DEST/examples/"
for lib in libOpenCL.so.1 liblmdb.so.0 libzstd.so.1; do
    path=$(/sbin/ldconfig -p | awk -v l="$lib" '$1 == l && /x86-64/ { p = $NF } END { print p }')
    [ -n "$path" ] || { echo "gpu-pack: $lib not found" >&2; exit 1; }
    cp -L "$path" "$DEST/lib/$lib"
done
# The machine's copy of the tree may carry older git metadata: say here what was built.
git -C "$(dirname "$0")/.." describe --always --dirty >"$DEST/REVISION" 2>/dev/null || echo '?' >"$DEST/REVISION"
du -sh "$DEST" | awk '{ print "gpu-pack: " $1 " in '"$DEST"'" }'
