#!/bin/bash
# nvidia_spirv.sh — SPIR-V on NVIDIA's driver through route (a): the
# project's SPIR-V integration programs (tests/integration/data/features.cl
# and spec.cl, as SPIR-V) run by an unmodified program (ilprog) under
# clshim give the results of their OpenCL C versions built by NVIDIA, and a
# second run translates nothing.
#
#   nvidia_spirv.sh --pack BUILD DEST   here: the shim, ilprog, the modules, LLVM
#   nvidia_spirv.sh DIR OUTDIR          on the GPU machine (DIR: the pack)
#
# The GPU machine has no LLVM; a cold build needs it (translation and PTX
# lowering run in the app's process), so the pack carries libclshim-llvm.so
# with the libraries it needs (LLVM 15, the SPIR-V translator, their own
# dependencies) compressed in llvm.tar.zst with a zstd to unpack it, and
# libclc's NVPTX library (CLSHIM_LIBCLC). libdevice is the machine's CUDA
# toolkit's ($CUDA_HOME, /usr/local/cuda).
set -u
if [ "${1:-}" = --pack ]; then
    BUILD=${2:?usage: nvidia_spirv.sh --pack BUILD DEST}
    DEST=${3:?usage: nvidia_spirv.sh --pack BUILD DEST}
    set -e
    HERE=$(cd "$(dirname "$0")" && pwd)
    DATA=$HERE/../integration/data
    source "$HERE/pack.sh"
    rm -rf "$DEST" && mkdir -p "$DEST"
    cp "$BUILD/libclshim.so" "$BUILD/tests/progs/ilprog" "$DATA/features.cl" "$DATA/spec.cl" "$DEST/"
    cp "$0" "$DEST/nvidia_spirv.sh"
    for f in features spec; do
        clang-15 -x cl -target spir64 -cl-std=CL1.2 -emit-llvm -c -Xclang -no-opaque-pointers \
            "$DATA/$f.cl" -o "$DEST/$f.bc"
        llvm-spirv-15 "$DEST/$f.bc" -o "$DEST/$f.spv"
        rm "$DEST/$f.bc"
    done
    pack_libs "$DEST" $PACK_SHIM_LIBS
    pack_llvm "$BUILD" "$DEST" 12
    pack_done "$DEST" nvidia_spirv
    exit 0
fi

C=$(cd "${1:?usage: nvidia_spirv.sh DIR OUTDIR}" && pwd)
OUT=${2:?usage: nvidia_spirv.sh DIR OUTDIR}
mkdir -p "$OUT" /tmp/nvs-icd /tmp/nvs
echo /usr/local/nvidia/lib64/libnvidia-opencl.so.1 >/tmp/nvs-icd/nv.icd
LD_LIBRARY_PATH=$C/lib "$C/zstd" -q -d -c "$C/llvm.tar.zst" | tar -C /tmp/nvs -xf - || { echo "nvidia_spirv: unpacking LLVM failed"; exit 1; }
export OCL_ICD_VENDORS=/tmp/nvs-icd LD_LIBRARY_PATH=$C/lib:/tmp/nvs/llvm CUDA_CACHE_DISABLE=1
unset CLSHIM_PTX_BUILTINS
cp "$C/libclshim.so" /tmp/nvs/llvm/ # libclshim-llvm.so is looked for beside libclshim.so
SHIM=/tmp/nvs/llvm/libclshim.so
export CLSHIM_LIBCLC=/tmp/nvs/llvm/nvptx64--nvidiacl.bc CLSHIM_CACHE_DIR=/tmp/nvs/cache HOME=/tmp/nvs/home
rm -rf /tmp/nvs/cache
echo "clshim $(cat "$C/REVISION")"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /'
ls "${CUDA_HOME:-/usr/local/cuda}/nvvm/libdevice/libdevice.10.bc" >/dev/null 2>&1 && echo "libdevice: found" || echo "libdevice: none"
fails=0
check() { # WHAT: the last command's status; counts failures
    if [ "$1" = 0 ]; then echo "ok - $2"; else echo "FAIL - $2"; fails=$((fails + 1)); fi
}
run() { # TAG ENV... -- CMD...: stdout/stderr into OUT/TAG.{out,err}
    local tag=$1; shift
    env "$@" >"$OUT/$tag.out" 2>"$OUT/$tag.err"; echo $? >"$OUT/$tag.rc"
}
"$C/ilprog" --source "$C/features.cl" >"$OUT/src.out" 2>"$OUT/src.err"; echo "plain, OpenCL C: exit $?"
"$C/ilprog" --il "$C/features.spv" >"$OUT/plainil.out" 2>"$OUT/plainil.err"; echo "plain, SPIR-V: exit $? ($(head -c 200 "$OUT/plainil.out" "$OUT/plainil.err" | tr '\n' ' '))"
# features calls sqrt(double), not matched (docs/spirv.md): refused by default, built with the opt-in
run default CLSHIM_LOG=info LD_PRELOAD=$SHIM "$C/ilprog" --il "$C/features.spv"
grep -q "build failed: -11" "$OUT/default.out" && grep -q "_Z4sqrtd" "$OUT/default.out"; check $? "features.spv, default: build fails, the log names sqrt(double) (CL_BUILD_PROGRAM_FAILURE)"
run cold CLSHIM_LOG=info CLSHIM_PTX_BUILTINS=vendor-differs-ok LD_PRELOAD=$SHIM "$C/ilprog" --il "$C/features.spv"
grep -v '^CL_PROGRAM_IL' "$OUT/cold.out" | cmp -s - "$OUT/src.out"; check $? "features.spv under clshim (opted in): the OpenCL C version's results"
grep -q "CL_PROGRAM_IL returns the module: yes" "$OUT/cold.out"; check $? "CL_PROGRAM_IL returns the module"
[ "$(grep -c 'lowered SPIR-V program .* to PTX' "$OUT/cold.err")" = 1 ]; check $? "one translation and PTX lowering"
run warm CLSHIM_LOG=info CLSHIM_PTX_BUILTINS=vendor-differs-ok LD_PRELOAD=$SHIM "$C/ilprog" --il "$C/features.spv"
cmp -s "$OUT/cold.out" "$OUT/warm.out"; check $? "warm run: same results"
[ "$(grep -c 'translated SPIR-V' "$OUT/warm.err")" = 0 ] && grep -q "llvm loaded: no" "$OUT/warm.err"; check $? "warm run: nothing translated, LLVM not loaded"
for v in "" 5; do
    run spec$v CLSHIM_LOG=info LD_PRELOAD=$SHIM "$C/ilprog" --spec "$C/spec.spv" $v
    grep -q "spec values $((${v:-42})) $((${v:-42} + 1)) $((${v:-42} + 2)) $((${v:-42} + 3))" "$OUT/spec$v.out"; check $? "spec.spv (default, matched built-ins only) with the constant ${v:-default}: $(grep 'spec values' "$OUT/spec$v.out")"
done
echo
echo "logs: $(grep -h 'route (a)\|lowered\|refused\|cannot' "$OUT"/*.err | sort | uniq -c | head -8)"
echo "nvidia_spirv: $fails failures"
