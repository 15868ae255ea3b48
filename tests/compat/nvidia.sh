#!/bin/bash
# nvidia.sh — runs clshim's integration programs, clinfo and clpeak on
# NVIDIA's OpenCL driver, without and with clshim (cold, warm), and prints a
# table. Made for the GPU machine, where nothing can be installed: everything
# it needs travels in one folder (see docs/compat.md, "NVIDIA"):
#   DIR/bin: the programs (tests/progs/*, examples/pipeline, clinfo, clpeak)
#   DIR/lib: libclshim.so, ocl-icd's libOpenCL.so.1, liblmdb.so.0
#   DIR/data: features.spv, pipeline.plan
# usage: nvidia.sh DIR OUTDIR
set -u
C=$(cd "$1" && pwd)
OUT=$2
mkdir -p "$OUT" /tmp/nv-icd
echo /usr/local/nvidia/lib64/libnvidia-opencl.so.1 >/tmp/nv-icd/nv.icd
export OCL_ICD_VENDORS=/tmp/nv-icd LD_LIBRARY_PATH=$C/lib
export HOME=/tmp/nv-home CLSHIM_CACHE_DIR=/tmp/nv-clshim CUDA_CACHE_DISABLE=1 CLSHIM_LOG=info
rm -rf "$HOME" "$CLSHIM_CACHE_DIR"
mkdir -p "$HOME"
SHIM=$C/lib/libclshim.so
B=$C/bin
TIMEFORMAT=%R
fails=0

run() { # tag preload(0/1) command...
    local tag=$1 pre=$2
    shift 2
    local t
    if [ "$pre" = 1 ]; then
        t=$( { time LD_PRELOAD=$SHIM "$@" >"$OUT/$tag.out" 2>"$OUT/$tag.err"; echo $? >"$OUT/$tag.rc"; } 2>&1 )
    else
        t=$( { time "$@" >"$OUT/$tag.out" 2>"$OUT/$tag.err"; echo $? >"$OUT/$tag.rc"; } 2>&1 )
    fi
    echo "$t" >"$OUT/$tag.time"
}

row() { # name command... : plain, cold, warm; compare outputs and exit codes
    local name=$1
    shift
    local tag=${name//[^a-zA-Z0-9]/_}
    run "$tag.plain" 0 "$@"
    run "$tag.cold" 1 "$@"
    run "$tag.warm" 1 "$@"
    local same=yes
    for m in cold warm; do
        cmp -s "$OUT/$tag.plain.out" "$OUT/$tag.$m.out" && cmp -s "$OUT/$tag.plain.rc" "$OUT/$tag.$m.rc" || same=NO
    done
    [ "$same" = yes ] || fails=$((fails + 1))
    printf '| %-28s | rc %s | %s | %6ss | %6ss | %6ss | %s miss, %s hit (cold); %s miss, %s hit (warm) |\n' "$name" \
        "$(cat "$OUT/$tag.plain.rc")" "$same" "$(cat "$OUT/$tag.plain.time")" "$(cat "$OUT/$tag.cold.time")" \
        "$(cat "$OUT/$tag.warm.time")" "$(grep -c 'miss ' "$OUT/$tag.cold.err")" "$(grep -c 'hit ' "$OUT/$tag.cold.err")" \
        "$(grep -c 'miss ' "$OUT/$tag.warm.err")" "$(grep -c 'hit ' "$OUT/$tag.warm.err")"
}

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /'
"$B/clinfo" -l
echo
echo "| program | exit | same output | plain | clshim cold | clshim warm | cache |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
row multikernel "$B/multikernel"
row "multikernel 4 threads" "$B/multikernel" --threads 4 --scale 5
row "multikernel build error" "$B/multikernel" --error
row compilelink "$B/compilelink"
row badcalls "$B/badcalls"
row norelease "$B/norelease"
row pipeline "$B/pipeline"
row "pipeline + fusion plan" env CLSHIM_FUSION_PLAN=$C/data/pipeline.plan "$B/pipeline"
row "ilprog (SPIR-V)" "$B/ilprog" --il "$C/data/features.spv"
row clinfo "$B/clinfo"
echo
echo "clshim lines of interest:"
grep -h "clshim:" "$OUT"/*.err | grep -v "hit \|miss \|summary" | sort | uniq -c | head -20
echo
# clpeak: kernel latency and one compute test, plain vs warm clshim.
for m in plain shim shim; do
    pre=0; [ "$m" = shim ] && pre=1
    run "clpeak.$m" $pre "$B/clpeak" --kernel-latency --compute-sp
done
echo "clpeak (plain):"; grep -E "latency|float  |float2|float4|float8|float16" "$OUT/clpeak.plain.out" | head -8
echo "clpeak (clshim, warm):"; grep -E "latency|float  |float2|float4|float8|float16" "$OUT/clpeak.shim.out" | head -8
echo "clpeak times: plain $(cat "$OUT/clpeak.plain.time") s, clshim warm $(cat "$OUT/clpeak.shim.time") s"
echo "rows with different output: $fails"
