#!/bin/bash
# nvidia_warm.sh — `clshim cache warm` from PoCL to NVIDIA's driver (issue
# 46): a cache filled here on PoCL (a program from source with a header, a
# compile + link with an embedded header, bench_ttfr's mixed program) is
# warmed on the GPU machine for its NVIDIA device; then every program's
# first run there hits and computes as NVIDIA's driver does without clshim.
# Also on that machine: bench/short_runs.sh (issue 47, automatic fusion at
# 30 / 300 / 3,000 chains) and one `clshim run --profile`.
#
#   nvidia_warm.sh --pack BUILD DEST   here: the shim, the programs, the PoCL cache, LLVM
#   nvidia_warm.sh DIR OUTDIR          on the GPU machine (DIR: the pack; NVW_SHORT=0: no short runs)
set -u
if [ "${1:-}" = --pack ]; then
    BUILD=${2:?usage: nvidia_warm.sh --pack BUILD DEST}
    DEST=${3:?usage: nvidia_warm.sh --pack BUILD DEST}
    set -e
    BUILD=$(cd "$BUILD" && pwd)
    HERE=$(cd "$(dirname "$0")" && pwd)
    source "$HERE/pack.sh"
    rm -rf "$DEST" && mkdir -p "$DEST/bench" "$DEST/app/inc"
    DEST=$(cd "$DEST" && pwd)
    cp "$BUILD/libclshim.so" "$BUILD/clshim-tool" "$BUILD/clshim" "$DEST/"
    cp "$BUILD/tests/progs/srcfile" "$BUILD/tests/progs/compilelink" "$BUILD/tests/progs/profile_app" "$DEST/"
    cp "$BUILD/bench/bench_ttfr" "$BUILD/bench/bench_short" "$DEST/bench/"
    cp "$HERE/../../bench/short_runs.sh" "$DEST/bench/"
    cp "$0" "$DEST/nvidia_warm.sh"
    printf '#include "params.h"\n__kernel void k(__global float *y) { size_t i = get_global_id(0); y[i] = V * (float)(i %% 7); }\n' >"$DEST/app/k.cl"
    echo '#define V 3.0f' >"$DEST/app/inc/params.h"
    # The cache, filled on PoCL here (in the app directory: the header's
    # path is keyed as the program names it).
    T=$(mktemp -d)
    (cd "$DEST/app" && export CLSHIM_CACHE_DIR=$DEST/pocl-cache POCL_CACHE_DIR=$T/p XDG_CACHE_HOME=$T &&
        LD_PRELOAD=$BUILD/libclshim.so "$BUILD/tests/progs/srcfile" k.cl --options -Iinc >/dev/null &&
        LD_PRELOAD=$BUILD/libclshim.so "$BUILD/tests/progs/compilelink" >/dev/null &&
        LD_PRELOAD=$BUILD/libclshim.so "$BUILD/bench/bench_ttfr" --child source --file "$T/x" --program mixed >/dev/null &&
        "$BUILD/clshim-tool" cache wait >/dev/null 2>&1)
    rm -rf "$T"
    pack_libs "$DEST" $PACK_SHIM_LIBS
    pack_llvm "$BUILD" "$DEST" 19
    pack_done "$DEST" nvidia_warm
    exit 0
fi

C=$(cd "${1:?usage: nvidia_warm.sh DIR OUTDIR}" && pwd)
OUT=$(mkdir -p "${2:?usage: nvidia_warm.sh DIR OUTDIR}" && cd "$2" && pwd)
W=/tmp/nvw
rm -rf "$W" && mkdir -p "$W/icd" "$W/home"
echo /usr/local/nvidia/lib64/libnvidia-opencl.so.1 >"$W/icd/nv.icd"
LD_LIBRARY_PATH=$C/lib "$C/zstd" -q -d -c "$C/llvm.tar.zst" | tar -C "$W" -xf - || { echo "nvidia_warm: unpacking LLVM failed"; exit 1; }
# A BUILD-shaped folder: the shim with libclshim-llvm.so beside it.
cp "$C/libclshim.so" "$C/clshim-tool" "$C/clshim" "$W/llvm/"
mkdir -p "$W/llvm/bench" && cp "$C/bench/"* "$W/llvm/bench/"
B=$W/llvm
export OCL_ICD_VENDORS=$W/icd LD_LIBRARY_PATH=$C/lib:$W/llvm HOME=$W/home CLSHIM_LIBCLC=$W/llvm/nvptx64--nvidiacl.bc
unset POCL_CACHE_DIR CLSHIM_CACHE_DIR
echo "clshim $(cat "$C/REVISION")"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /'
fails=0
check() { if [ "$1" = 0 ]; then echo "ok - $2"; else echo "FAIL - $2"; fails=$((fails + 1)); fi; }

# 1. cache warm: PoCL's entries for NVIDIA.
cp -a "$C/pocl-cache" "$W/cache"
cp -a "$C/app" "$W/app"
cd "$W/app"
export CLSHIM_CACHE_DIR=$W/cache CUDA_CACHE_DISABLE=1
"$B/clshim" cache list >"$OUT/list-before.txt" 2>&1
t0=$(date +%s%N)
"$B/clshim" cache warm --json >"$OUT/warm.json" 2>"$OUT/warm.err"
check $? "cache warm exits 0"
echo "cache warm took $((($(date +%s%N) - t0) / 1000000)) ms"
cat "$OUT/warm.err"
python3 - "$OUT/warm.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
print("warm: warmed %d, already %d, skipped %d %s, failed %d, devices %s" % (d["warmed"], d["already"], d["skipped"],
      d["skipped_by"], d["failed"], d["devices"]))
sys.exit(0 if d["warmed"] >= 4 and d["failed"] == 0 else 1)
EOF
check $? "cache warm built the PoCL programs for the NVIDIA device"
"$B/clshim" cache list >"$OUT/list-after.txt" 2>&1
# plain, then under the shim: the same output, hits only.
for p in "k:$C/srcfile k.cl --options -Iinc" "cl:$C/compilelink" "mixed:$B/bench/bench_ttfr --child source --file $W/x --program mixed"; do
    tag=${p%%:*}
    env -u CLSHIM_CACHE_DIR ${p#*:} >"$OUT/plain-$tag.out" 2>&1
    CLSHIM_LOG=info LD_PRELOAD=$B/libclshim.so ${p#*:} >"$OUT/shim-$tag.out" 2>"$OUT/shim-$tag.err"
    hits=$(grep -c "^clshim: hit " "$OUT/shim-$tag.err"); misses=$(grep -c "^clshim: miss " "$OUT/shim-$tag.err")
    if [ "$tag" = mixed ]; then
        a=$(sed -n 's/.*checksum=\([0-9a-f]*\).*/\1/p' "$OUT/plain-$tag.out"); b=$(sed -n 's/.*checksum=\([0-9a-f]*\).*/\1/p' "$OUT/shim-$tag.out")
        echo "$tag: plain $(grep -o 'ttfr_us=[0-9.]*' "$OUT/plain-$tag.out"), after warm $(grep -o 'ttfr_us=[0-9.]*' "$OUT/shim-$tag.out") (CUDA cache off)"
        [ -n "$a" ] && [ "$a" = "$b" ]; check $? "$tag: the same results as NVIDIA's driver without clshim"
    else
        cmp -s "$OUT/plain-$tag.out" "$OUT/shim-$tag.out"; check $? "$tag: the same output as NVIDIA's driver without clshim"
    fi
    [ "$hits" -ge 1 ] && [ "$misses" = 0 ]; check $? "$tag: $hits hits, $misses misses after warm"
done
unset CUDA_CACHE_DISABLE

# 2. short runs on the GPU: plain vs automatic fusion (NVW_SHORT=0: not).
cd "$W"
[ "${NVW_SHORT:-1}" = 0 ] || for sync in chain end; do
    "$B/bench/short_runs.sh" "$B" --reps 5 --sync $sync >"$OUT/short-$sync.txt" 2>&1
    check $? "short_runs.sh --sync $sync ran with identical results"
    cat "$OUT/short-$sync.txt"
done

# 3. clshim run --profile on NVIDIA.
CLSHIM_CACHE_DIR=$W/pcache CLSHIM_FUSE=c0+c1 "$B/clshim" run --profile --json "$OUT/profile.json" --trace "$OUT/profile.trace" -- "$C/profile_app" >"$OUT/profile.out" 2>"$OUT/profile.err"
check $? "clshim run --profile on NVIDIA"
env -u CLSHIM_CACHE_DIR "$C/profile_app" >"$OUT/profile-plain.out" 2>&1
cmp -s "$OUT/profile.out" "$OUT/profile-plain.out"; check $? "profiled: the program's answers are NVIDIA's without clshim"
cat "$OUT/profile.err"
echo "nvidia_warm: $fails failed"
exit $((fails > 0))
