#!/bin/bash
# nvidia_route_a.sh — route (a) in clshim's fusion launch path on NVIDIA's
# driver: an unmodified program (chain_app) runs the K = 4 chain of
# tests/compat/data/chain4.cl (s0..s3, the last a sqrt) and the same chain
# written by hand as one kernel (handreg4); under a plan clshim fuses the
# four launches through route (a) (fusion/froute.h): its fused IR, lowered
# to PTX, loaded with clCreateProgramWithBinary.
#
#   nvidia_route_a.sh --pack BUILD DEST   here: prime a cache and pack DEST
#   nvidia_route_a.sh DIR OUTDIR          on the GPU machine (DIR: the pack)
#
# The GPU machine has neither clang nor LLVM. clang is needed to fuse a
# program built from source (clshim's IR of it), so --pack primes a cache
# here on PoCL with CLSHIM_FUSE_PTX_TEST=90 (PoCL taken for an sm_90 NVIDIA
# device up to the PTX, which is cached apart from the device; the H100 and
# H200 are sm_90), one process per size, for both plans below, and the cache
# travels as an export. The SPIR-V program itself is translated and lowered
# to PTX on the GPU machine when the app builds it (compiler/route_a.h), so
# the pack also carries libclshim-llvm.so with its libraries compressed
# (llvm.tar.zst) and libclc's NVPTX library, as nvidia_spirv.sh does.
#
# On the GPU machine, all in one run:
#  A. SPIR-V: chain4 as SPIR-V under clshim, unfused and with the plan
#     s0+s1+s2+s3 (route (a): no source exists), against the OpenCL C
#     version built by NVIDIA: b4 bit for bit at 1, 4, 16, 64 Mi floats.
#  B. The plan s0+s1+s2+s3:internal on the OpenCL C program (route (a):
#     b1..b3 in registers): unfused (the plain run) vs fused (under clshim)
#     vs hand-written, latency (clFinish after each chain, median of 15) and
#     pipelined (50 chains back to back, one clFinish: us per chain), b4
#     compared bit for bit.
set -u
PLAN="s0+s1+s2+s3"
SIZES="1048576 4194304 16777216 67108864"
if [ "${1:-}" = --pack ]; then
    BUILD=${2:?usage: nvidia_route_a.sh --pack BUILD DEST}
    DEST=${3:?usage: nvidia_route_a.sh --pack BUILD DEST}
    set -e
    HERE=$(cd "$(dirname "$0")" && pwd)
    source "$HERE/pack.sh"
    rm -rf "$DEST" && mkdir -p "$DEST"
    cp "$BUILD/libclshim.so" "$BUILD/clshim-tool" "$BUILD/tests/progs/chain_app" "$HERE/data/chain4.cl" "$DEST/"
    cp "$0" "$DEST/nvidia_route_a.sh"
    clang-15 -x cl -target spir64 -cl-std=CL1.2 -emit-llvm -c -Xclang -no-opaque-pointers \
        "$HERE/data/chain4.cl" -o "$DEST/chain4.bc"
    llvm-spirv-15 "$DEST/chain4.bc" -o "$DEST/chain4.spv"
    rm "$DEST/chain4.bc"
    pack_libs "$DEST" $PACK_SHIM_LIBS
    # The fused PTX, made here: one process per size (a refused plan
    # sequence is not tried again in a process).
    PRIMED=$(mktemp -d)
    export CLSHIM_CACHE_DIR=$PRIMED/cache POCL_CACHE_DIR=$PRIMED/pocl CLSHIM_FUSE_PTX_TEST=90:$PRIMED CLSHIM_LOG=info
    made=0
    for n in $SIZES; do
        LD_PRELOAD=$BUILD/libclshim.so CLSHIM_FUSE="$PLAN:internal" nice "$DEST/chain_app" --source "$DEST/chain4.cl" \
            --reps 0 "$n" >/dev/null 2>"$PRIMED/src$n.err"
        LD_PRELOAD=$BUILD/libclshim.so CLSHIM_FUSE="$PLAN" nice "$DEST/chain_app" --il "$DEST/chain4.spv" \
            --reps 0 "$n" >/dev/null 2>"$PRIMED/il$n.err"
        made=$((made + $(cat "$PRIMED/src$n.err" "$PRIMED/il$n.err" | grep -c 'but this device does not load PTX')))
    done
    [ "$made" = 8 ] || { echo "nvidia_route_a: $made of 8 fused PTX made:" >&2; grep -h refused "$PRIMED"/*.err >&2; exit 1; }
    echo "nvidia_route_a: fused PTX primed: $made ($(grep -c 'st\.global' "$PRIMED/$PLAN.ptx") store(s) in the last one)"
    unset CLSHIM_FUSE_PTX_TEST CLSHIM_LOG
    "$BUILD/clshim-tool" cache --dir "$PRIMED/cache" export "$DEST/cache.export"
    rm -rf "$PRIMED"
    pack_llvm "$BUILD" "$DEST" 19
    pack_done "$DEST" nvidia_route_a
    exit 0
fi

C=$(cd "${1:?usage: nvidia_route_a.sh DIR OUTDIR}" && pwd)
OUT=${2:?usage: nvidia_route_a.sh DIR OUTDIR}
W=/tmp/nvr
rm -rf "$W" && mkdir -p "$OUT" "$W/icd" "$W/home"
echo /usr/local/nvidia/lib64/libnvidia-opencl.so.1 >"$W/icd/nv.icd"
LD_LIBRARY_PATH=$C/lib "$C/zstd" -q -d -c "$C/llvm.tar.zst" | tar -C "$W" -xf - || { echo "nvidia_route_a: unpacking LLVM failed"; exit 1; }
cp "$C/libclshim.so" "$W/llvm/" # libclshim-llvm.so is looked for beside libclshim.so
export OCL_ICD_VENDORS=$W/icd LD_LIBRARY_PATH=$C/lib:$W/llvm HOME=$W/home CLSHIM_LIBCLC=$W/llvm/nvptx64--nvidiacl.bc
unset CLSHIM_PTX_BUILTINS CLSHIM_FUSE_ROUTE CLSHIM_FUSE_PTX_TEST POCL_CACHE_DIR
SHIM=$W/llvm/libclshim.so
CA=$C/chain_app
fails=0
check() { # STATUS WHAT
    if [ "$1" = 0 ]; then echo "ok - $2"; else echo "FAIL - $2"; fails=$((fails + 1)); fi
}
field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" "$2"; } # KEY FILE: one value per line (per N)
# How often the fused launch came: fusion logs a line once and counts its
# repeats at exit ("fusion: again N times: LINE").
fused() {
    awk -v pat="fused $PLAN into one launch" '!index($0, pat) { next }
        match($0, /fusion: again [0-9]+ times: /) { n += substr($0, RSTART + 14, RLENGTH - 22); next }
        { n++ } END { print n + 0 }' "$1"
}
echo "clshim $(cat "$C/REVISION")"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /'
ls "${CUDA_HOME:-/usr/local/cuda}/nvvm/libdevice/libdevice.10.bc" >/dev/null 2>&1 && echo "libdevice: found" || echo "libdevice: none"
"$C/clshim-tool" cache --dir "$W/cache" import "$C/cache.export" >"$OUT/import.txt" 2>&1
check $? "the primed cache imported"
export CLSHIM_CACHE_DIR=$W/cache

# ---- A. a SPIR-V program's chain --------------------------------------------
echo
echo "== A. chain4 as SPIR-V: unfused and fused by route (a) under clshim, vs the OpenCL C version built by NVIDIA =="
"$CA" --source "$C/chain4.cl" --reps 0 $SIZES >"$OUT/a.src.out" 2>"$OUT/a.src.err"
check $? "plain OpenCL C run"
CLSHIM_LOG=info LD_PRELOAD=$SHIM "$CA" --il "$C/chain4.spv" --reps 0 $SIZES >"$OUT/a.il.out" 2>"$OUT/a.il.err"
check $? "SPIR-V under clshim, no plan"
CLSHIM_LOG=info CLSHIM_FUSE=$PLAN LD_PRELOAD=$SHIM "$CA" --il "$C/chain4.spv" --reps 0 $SIZES >"$OUT/a.fused.out" 2>"$OUT/a.fused.err"
check $? "SPIR-V under clshim with the plan $PLAN"
[ "$(fused "$OUT/a.fused.err")" = 4 ]; check $? "SPIR-V: every chain fused (one per size): $(fused "$OUT/a.fused.err") of 4"
echo "fused PTX: $(grep -c 'PTX (route (a)) for s0..s3 (4 kernels) comes from the cache' "$OUT/a.fused.err") from the primed cache, $(grep -c 'then PTX (route (a))' "$OUT/a.fused.err") made here"
paste -d' ' <(field N "$OUT/a.src.out") <(field chain_hash "$OUT/a.src.out") <(field chain_hash "$OUT/a.il.out") \
    <(field chain_hash "$OUT/a.fused.out") >"$OUT/a.hashes"
echo "| floats | b4, OpenCL C by NVIDIA | b4, SPIR-V unfused (route (a)) | b4, SPIR-V fused (route (a)) | identical |"
echo "| --- | --- | --- | --- | --- |"
awk '{ same = ($2 == $3 && $2 == $4) ? "yes" : "NO"; if (same == "NO") bad++; print "| " $1 " | " $2 " | " $3 " | " $4 " | " same " |" }
     END { exit bad ? 1 : 0 }' "$OUT/a.hashes"
check $? "SPIR-V: b4 bit-identical to the OpenCL C version, unfused and fused"
[ "$(wc -l <"$OUT/a.hashes")" = 4 ]; check $? "SPIR-V: all 4 sizes ran"

# ---- B. internalised fusion through the launch path ---------------------------
echo
echo "== B. $PLAN:internal on the OpenCL C program: unfused (plain) vs fused by route (a) (clshim) vs hand-written =="
"$CA" --source "$C/chain4.cl" --reps 15 --pipe 50 $SIZES >"$OUT/b.plain.out" 2>"$OUT/b.plain.err"
check $? "plain run"
CLSHIM_LOG=info CLSHIM_FUSE="$PLAN:internal" LD_PRELOAD=$SHIM "$CA" --source "$C/chain4.cl" --reps 15 --pipe 50 $SIZES \
    >"$OUT/b.shim.out" 2>"$OUT/b.shim.err"
check $? "run under clshim with the plan"
# Per size: 1 untimed chain, 15 timed, 3 x 50 pipelined.
[ "$(fused "$OUT/b.shim.err")" = 664 ]; check $? "internal: every chain fused: $(fused "$OUT/b.shim.err") of 664"
echo "fused PTX: $(grep -c 'PTX (route (a)) for s0..s3 (4 kernels) comes from the cache' "$OUT/b.shim.err") from the primed cache; refusals: $(grep -c ') refused: ' "$OUT/b.shim.err")"
grep ') refused: ' "$OUT/b.shim.err" | head -3
paste -d' ' <(field N "$OUT/b.plain.out") <(field chain_us "$OUT/b.plain.out") <(field chain_us "$OUT/b.shim.out") \
    <(field hand_us "$OUT/b.plain.out") <(field chain_pipe_us "$OUT/b.plain.out") <(field chain_pipe_us "$OUT/b.shim.out") \
    <(field hand_pipe_us "$OUT/b.plain.out") <(field chain_hash "$OUT/b.plain.out") <(field chain_hash "$OUT/b.shim.out") \
    <(field hand_hash "$OUT/b.plain.out") >"$OUT/b.rows"
echo "| floats | unfused us | fused us | hand us | fused vs unfused | fused / hand | pipelined unfused us/chain | fused | hand | fused vs unfused | fused / hand | b4 identical (fused, hand) |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
awk '{ fs = ($8 == $9) ? "yes" : "NO"; hs = ($8 == $10) ? "yes" : "no"; if (fs == "NO") bad++
       printf "| %s | %s | %s | %s | %.2fx | %.2f | %s | %s | %s | %.2fx | %.2f | %s, %s |\n", $1, $2, $3, $4, $2 / $3, $3 / $4,
              $5, $6, $7, $5 / $6, $6 / $7, fs, hs }
     END { exit bad ? 1 : 0 }' "$OUT/b.rows"
check $? "internal: b4 of the fused chain bit-identical to the unfused one"
[ "$(wc -l <"$OUT/b.rows")" = 4 ]; check $? "internal: all 4 sizes ran"
echo
echo "nvidia_route_a: $fails failures"
exit "$fails"
