#!/bin/bash
# nvidia_builtins.sh — route (a)'s built-ins against NVIDIA's own, bit for bit
# (the table in docs/spirv.md; what matches goes into compiler/llvm/ptx_builtins.c).
#
#   nvidia_builtins.sh --pack BUILD DEST   here: route (a)'s PTX of the kernels, packed
#   nvidia_builtins.sh DIR OUTDIR          on the GPU machine (DIR: the pack)
#
# The kernels (tests/compat/data/builtins.cl) compute one built-in each over
# the same inputs; builtin_probe builds them from source with NVIDIA's
# compiler and loads route (a)'s PTX of the same file (made here by
# `clshim ptx --builtins=vendor-differs-ok`: the GPU machine has no LLVM),
# runs both and compares every output word. Three build-option sets: none,
# -cl-denorms-are-zero, -cl-fast-relaxed-math. NVIDIA's own PTX of each set
# is kept in OUTDIR (vendor-SET.ptx) for reading how it lowers a built-in.
set -u
SETS=("plain:" "daz:-cl-denorms-are-zero" "fast:-cl-fast-relaxed-math")
if [ "${1:-}" = --pack ]; then
    BUILD=${2:?usage: nvidia_builtins.sh --pack BUILD DEST}
    DEST=${3:?usage: nvidia_builtins.sh --pack BUILD DEST}
    set -e
    rm -rf "$DEST" && mkdir -p "$DEST"
    HERE=$(cd "$(dirname "$0")" && pwd)
    source "$HERE/pack.sh"
    cp "$BUILD/tests/progs/builtin_probe" "$HERE/data/builtins.cl" "$HERE/data/workitem.cl" "$DEST/"
    cp "$0" "$DEST/nvidia_builtins.sh"
    for set in "${SETS[@]}"; do
        "$BUILD/clshim-tool" ptx --sm 90 --builtins=vendor-differs-ok --options "${set#*:}" \
            -o "$DEST/route-a-${set%%:*}.ptx" "$HERE/data/builtins.cl" 2>"$DEST/route-a-${set%%:*}.log"
    done
    pack_libs "$DEST" libOpenCL.so.1
    pack_done "$DEST" nvidia_builtins
    exit 0
fi

C=$(cd "${1:?usage: nvidia_builtins.sh DIR OUTDIR}" && pwd)
OUT=${2:?usage: nvidia_builtins.sh DIR OUTDIR}
shift 2 # the rest goes to builtin_probe (--n N, --only NAME)
mkdir -p "$OUT" /tmp/nvb-icd
echo /usr/local/nvidia/lib64/libnvidia-opencl.so.1 >/tmp/nvb-icd/nv.icd
export OCL_ICD_VENDORS=/tmp/nvb-icd LD_LIBRARY_PATH=$C/lib HOME=/tmp/nvb-home CUDA_CACHE_DISABLE=1
echo "clshim $(cat "$C/REVISION")"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /'
fails=0
for set in "${SETS[@]}"; do
    name=${set%%:*} opts=${set#*:}
    echo
    echo "== $name (${opts:-no options}) =="
    "$C/builtin_probe" --source "$C/builtins.cl" --ptx "$C/route-a-$name.ptx" --options "$opts" \
        --dump-ptx "$OUT/vendor-$name.ptx" "$@" >"$OUT/$name.md" 2>"$OUT/$name.err"
    rc=$?
    cat "$OUT/$name.md"
    [ "$rc" = 0 ] || { fails=$((fails + 1)); echo "builtin_probe exit $rc: $(head -c 2000 "$OUT/$name.err")"; }
done
"$C/builtin_probe" --source "$C/workitem.cl" --dump-ptx "$OUT/vendor-workitem.ptx" 2>"$OUT/workitem.err" ||
    { fails=$((fails + 1)); echo "workitem.cl: $(head -c 2000 "$OUT/workitem.err")"; }
echo
echo "nvidia_builtins: $fails failures"
