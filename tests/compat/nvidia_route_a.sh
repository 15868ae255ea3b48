#!/bin/bash
# nvidia_route_a.sh — internalised fusion through route (a) on NVIDIA's
# driver: a K = 4 chain fused by clshim's IR fuser with `internal` (the
# intermediates in registers), lowered to PTX, against the kernels unfused
# and against the chain written by hand (issue 19's GPU figure).
#
#   nvidia_route_a.sh --pack BUILD DEST   here: the fused PTX, packed
#   nvidia_route_a.sh DIR OUTDIR          on the GPU machine (DIR: the pack)
#
# The GPU machine has no LLVM: the fused kernel's PTX is made here
# (`clshim fuse --plan s0+s1+s2+s3 --internal --emit=ptx`); route_a_chain
# loads it with clCreateProgramWithBinary beside NVIDIA's own build of the
# kernels, times the three ways and compares the results bit for bit. This
# measures route (a)'s code, not clshim's launch path (route (a) is not yet
# wired into fusion on NVIDIA devices).
set -u
if [ "${1:-}" = --pack ]; then
    BUILD=${2:?usage: nvidia_route_a.sh --pack BUILD DEST}
    DEST=${3:?usage: nvidia_route_a.sh --pack BUILD DEST}
    set -e
    rm -rf "$DEST" && mkdir -p "$DEST/lib"
    HERE=$(cd "$(dirname "$0")" && pwd)
    cp "$BUILD/tests/progs/route_a_chain" "$HERE/data/chain4.cl" "$DEST/"
    cp "$0" "$DEST/nvidia_route_a.sh"
    "$BUILD/clshim-tool" fuse --plan "s0+s1+s2+s3" --internal --emit=ptx --sm 90 -o "$DEST/fused.ptx" \
        "$HERE/data/chain4.cl"
    path=$(/sbin/ldconfig -p | awk '$1 == "libOpenCL.so.1" && /x86-64/ { p = $NF } END { print p }')
    cp -L "$path" "$DEST/lib/libOpenCL.so.1"
    git -C "$HERE/../.." describe --always --dirty >"$DEST/REVISION" 2>/dev/null || echo '?' >"$DEST/REVISION"
    echo "nvidia_route_a: $(grep -c 'st.global' "$DEST/fused.ptx") store(s) in the fused kernel; $(du -sh "$DEST" | cut -f1) in $DEST"
    exit 0
fi
C=$(cd "${1:?usage: nvidia_route_a.sh DIR OUTDIR}" && pwd)
OUT=${2:?usage: nvidia_route_a.sh DIR OUTDIR}
mkdir -p "$OUT" /tmp/nvr-icd
echo /usr/local/nvidia/lib64/libnvidia-opencl.so.1 >/tmp/nvr-icd/nv.icd
export OCL_ICD_VENDORS=/tmp/nvr-icd LD_LIBRARY_PATH=$C/lib HOME=/tmp/nvr-home
echo "clshim $(cat "$C/REVISION")"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /'
"$C/route_a_chain" --source "$C/chain4.cl" --ptx "$C/fused.ptx" --reps 15 >"$OUT/chain.txt" 2>"$OUT/chain.err"
rc=$?
echo "| floats | unfused us | route (a) internal us | hand-written us | internal vs unfused | internal vs hand | bit-identical (internal, hand) |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
       printf "| %s | %s | %s | %s | %.2fx | %.2f | %s, %s |\n", v["N"], v["unfused_us"], v["fused_us"], v["hand_us"],
              v["unfused_us"] / v["fused_us"], v["fused_us"] / v["hand_us"], v["fused_same"], v["hand_same"] }' "$OUT/chain.txt"
[ "$rc" = 0 ] || echo "route_a_chain exit $rc: $(head -c 2000 "$OUT/chain.err")"
grep -q "same=no" "$OUT/chain.txt" && echo "nvidia_route_a: results differ" && exit 1
exit "$rc"
