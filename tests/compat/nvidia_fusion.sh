#!/bin/bash
# nvidia_fusion.sh — fusion by generated OpenCL C (route (b)) and the drivers'
# caches kept with clshim's, on NVIDIA's OpenCL driver (the GPU machine).
#
#   nvidia_fusion.sh --pack BUILD DEST   here: prime a cache and pack DEST
#   nvidia_fusion.sh DIR OUTDIR          on the GPU machine (DIR: the pack)
#
# The GPU machine has neither LLVM nor clang, which route (b) needs for its
# analysis; so --pack first runs the same programs here on PoCL with
# CLSHIM_FUSE_ROUTE=source (bench_fusion --prime: every K and N once, results
# compared), and the cache it fills travels: the generated sources are
# stored apart from the device (pc_derived_get/put), and on NVIDIA the
# driver compiles them, LLVM never loaded. DEST holds libclshim.so, the
# programs, the tool, the libraries the machine lacks (lib/), the primed
# cache as an export (cache.export, imported there as a CI job would) and
# this script.
#
# On the GPU machine it prints, all in one run:
#  A. bench_fusion: K = 2, 4, 8 elementwise chains over 4 Ki..64 Mi floats,
#     unfused vs fused (route (b), through clshim's extension API) vs the
#     same chain written by hand as one kernel, results compared bit for bit;
#  B. an unmodified program with a plan (fusion_source --mode chain4, e1+e2+
#     e3+e4 with a sqrt) at 1, 16, 64 Mi: plain vs under the plan, outputs
#     compared, time per chain;
#  C. the mixed 15-kernel program's time to first result (bench_ttfr's
#     child): cold; NVIDIA's ComputeCache warm; clshim's cache without the
#     driver's; and a fresh home whose clshim cache was imported with
#     `clshim cache import --with-driver-caches` (CLSHIM_DRIVER_CACHES=1);
#  D. the host time per chain of enqueueing alone (bench_fusion
#     --host-cost, K = 2, 4, 8 at 4 Ki): fused against the hand-written
#     kernel's enqueue and the driver's own (clshim not on the path); with
#     NVF_BASELINE=SHIM also under another libclshim.so, side by side.
# NVF_PARTS (default ABCD) picks the parts to run; NVF_PRIME_ARGS adds
# options to --pack's bench_fusion --prime.
set -u
if [ "${1:-}" = --pack ]; then
    BUILD=${2:?usage: nvidia_fusion.sh --pack BUILD DEST}
    DEST=${3:?usage: nvidia_fusion.sh --pack BUILD DEST}
    set -e
    source "$(dirname "$0")/pack.sh"
    rm -rf "$DEST" && mkdir -p "$DEST/bench" "$DEST/progs"
    cp "$BUILD/libclshim.so" "$BUILD/clshim-tool" "$DEST/"
    cp "$BUILD/bench/bench_fusion" "$BUILD/bench/bench_ttfr" "$DEST/bench/"
    cp "$BUILD/tests/progs/fusion_source" "$DEST/progs/"
    cp "$0" "$DEST/nvidia_fusion.sh"
    pack_libs "$DEST" $PACK_SHIM_LIBS
    PRIMED=$(mktemp -d)
    POCL_CACHE_DIR=$(mktemp -d)
    export CLSHIM_CACHE_DIR=$PRIMED/cache CLSHIM_FUSE_ROUTE=source POCL_CACHE_DIR
    # shellcheck disable=SC2086 # NVF_PRIME_ARGS: more bench_fusion options (e.g. --n 4096 for part D alone)
    nice "$BUILD/bench/bench_fusion" --prime ${NVF_PRIME_ARGS:-} | grep -c "same results" | sed 's/^/primed bench_fusion configurations: /'
    for n in 1048576 16777216 67108864; do
        LD_PRELOAD=$BUILD/libclshim.so CLSHIM_FUSE="e1+e2+e3+e4" nice "$BUILD/tests/progs/fusion_source" \
            --mode chain4 --n $n --iterations 1 >/dev/null
    done
    "$BUILD/clshim-tool" cache --dir "$PRIMED/cache" export "$DEST/cache.export"
    rm -rf "$POCL_CACHE_DIR" "$PRIMED"
    pack_done "$DEST" nvidia_fusion
    exit 0
fi

C=$(cd "${1:?usage: nvidia_fusion.sh DIR OUTDIR}" && pwd)
OUT=${2:?usage: nvidia_fusion.sh DIR OUTDIR}
mkdir -p "$OUT" /tmp/nvf-icd
echo /usr/local/nvidia/lib64/libnvidia-opencl.so.1 >/tmp/nvf-icd/nv.icd
export OCL_ICD_VENDORS=/tmp/nvf-icd LD_LIBRARY_PATH=$C/lib
unset POCL_CACHE_DIR CUDA_CACHE_PATH CLSHIM_DRIVER_CACHES CLSHIM_FUSE_ROUTE
SHIM=$C/libclshim.so
TOOL=$C/clshim-tool
PARTS=${NVF_PARTS:-ABCD}
fails=0
echo "clshim $(cat "$C/REVISION")"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /'

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "nan" }'; }

rm -rf /tmp/nvf-cache
"$TOOL" cache --dir /tmp/nvf-cache import "$C/cache.export" || fails=$((fails + 1))

# ---- D. host time per chain (first: the shortest) ------------------------------
if [[ $PARTS == *D* ]]; then
echo
echo "== D. bench_fusion --host-cost (enqueue only, 4 Ki) =="
for shim in "$SHIM" ${NVF_BASELINE:+"$NVF_BASELINE"}; do
    echo "libclshim.so: $shim"
    HOME=/tmp/nvf-home-d CLSHIM_CACHE_DIR=/tmp/nvf-cache LD_PRELOAD=$shim "$C/bench/bench_fusion" --host-cost \
        >"$OUT/host_cost.txt" 2>"$OUT/host_cost.err"
    rc=$?
    cat "$OUT/host_cost.txt"
    [ "$rc" = 0 ] || { echo "bench_fusion --host-cost exit $rc"; fails=$((fails + 1)); }
done
fi

# ---- A. bench_fusion ---------------------------------------------------------
if [[ $PARTS == *A* ]]; then
echo
echo "== A. bench_fusion (route (b) on NVIDIA; fused sources from the carried cache) =="
HOME=/tmp/nvf-home-a CLSHIM_CACHE_DIR=/tmp/nvf-cache CLSHIM_LOG=info CLSHIM_LOG_FILE=$OUT/bench_fusion.log \
    "$C/bench/bench_fusion" >"$OUT/bench_fusion.txt" 2>"$OUT/bench_fusion.err"
rc=$?
cat "$OUT/bench_fusion.txt"
echo "bench_fusion exit $rc; $(grep -c 'comes from the cache' "$OUT/bench_fusion.log") fused sources from the cache," \
    "$(grep -c 'building the fused kernel' "$OUT/bench_fusion.log") built here (needs LLVM)," \
    "$(grep -c ') refused: ' "$OUT/bench_fusion.log") refusals"
grep ') refused: \|cannot load' "$OUT/bench_fusion.log" | sort | uniq -c | head -5
[ "$rc" = 0 ] || fails=$((fails + 1))
fi

# ---- B. an unmodified program with a plan --------------------------------------
if [[ $PARTS == *B* ]]; then
echo
echo "== B. fusion_source chain4 (e1+e2+e3+e4, the last a sqrt), plain vs under CLSHIM_FUSE =="
echo "| floats | same output | plain us/chain | fused us/chain | speed-up |"
echo "| --- | --- | --- | --- | --- |"
for n in 1048576 16777216 67108864; do
    "$C/progs/fusion_source" --mode chain4 --n $n --iterations 2 --reps 9 >"$OUT/b$n.plain.out" 2>"$OUT/b$n.plain.err"
    HOME=/tmp/nvf-home-b CLSHIM_CACHE_DIR=/tmp/nvf-cache CLSHIM_LOG=info CLSHIM_FUSE="e1+e2+e3+e4" LD_PRELOAD=$SHIM \
        "$C/progs/fusion_source" --mode chain4 --n $n --iterations 2 --reps 9 >"$OUT/b$n.shim.out" 2>"$OUT/b$n.shim.err"
    same=yes
    cmp -s "$OUT/b$n.plain.out" "$OUT/b$n.shim.out" && [ -s "$OUT/b$n.plain.out" ] || { same=NO; fails=$((fails + 1)); }
    grep -q "fused e1+e2+e3+e4 into one launch" "$OUT/b$n.shim.err" || { same="$same (NOT FUSED)"; fails=$((fails + 1)); }
    tp=$(sed -n 's/.*median_us=//p' "$OUT/b$n.plain.err")
    tf=$(sed -n 's/.*median_us=//p' "$OUT/b$n.shim.err")
    echo "| $n | $same | $tp | $tf | $(awk -v a="$tp" -v b="$tf" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "?" }') |"
done
fi

# ---- C. the drivers' caches with clshim's --------------------------------------
if [[ $PARTS == *C* ]]; then
echo
echo "== C. mixed program, time to first result (ms, medians of 5; bench_ttfr child) =="
ttfr() { # LOG ENV...: one child run, prints ttfr in ms
    local log=$1
    shift
    env "$@" "$C/bench/bench_ttfr" --child source --program mixed >"$log.out" 2>"$log.err"
    sed -n 's/.*ttfr_us=\([0-9.]*\).*/\1/p' "$log.out" | awk '{ printf "%.1f\n", $1 / 1000 }'
    sed -n 's/.*checksum=\([0-9a-f]*\).*/\1/p' "$log.out" >>"$OUT/c.checksums"
}
rm -f "$OUT/c.checksums"
H=/tmp/nvf-home-c
cold=$(for i in 1 2 3 4 5; do rm -rf $H; mkdir -p $H; ttfr "$OUT/c.cold$i" HOME=$H CUDA_CACHE_DISABLE=1; done | median)
rm -rf $H; mkdir -p $H; ttfr "$OUT/c.fill" HOME=$H >/dev/null
nvwarm=$(for i in 1 2 3 4 5; do ttfr "$OUT/c.nvwarm$i" HOME=$H; done | median)
# clshim's cache alone (a CI job that keeps only it): filled once, then fresh homes.
rm -rf /tmp/nvf-c1; ttfr "$OUT/c.fill1" HOME=$H CLSHIM_CACHE_DIR=/tmp/nvf-c1 LD_PRELOAD=$SHIM CUDA_CACHE_DISABLE=1 >/dev/null
shimonly=$(for i in 1 2 3 4 5; do rm -rf $H; mkdir -p $H; ttfr "$OUT/c.shim$i" HOME=$H CLSHIM_CACHE_DIR=/tmp/nvf-c1 \
    LD_PRELOAD=$SHIM CUDA_CACHE_DISABLE=1 CLSHIM_LOG=info; done | median)
# With the drivers' caches: one job fills the cache (twice: the second loads
# clshim's PTX, whose JIT result NVIDIA then keeps), exports it; each later
# job starts from a fresh home and an empty cache directory and imports.
rm -rf /tmp/nvf-c2 /tmp/nvf-x /tmp/nvf-x.drivers.tar.gz $H; mkdir -p $H
for i in 1 2; do ttfr "$OUT/c.fill2.$i" HOME=$H CLSHIM_CACHE_DIR=/tmp/nvf-c2 CLSHIM_DRIVER_CACHES=1 LD_PRELOAD=$SHIM >/dev/null; done
"$TOOL" cache --dir /tmp/nvf-c2 export --with-driver-caches /tmp/nvf-x >"$OUT/c.export.txt" 2>&1 || fails=$((fails + 1))
withdrv=$(for i in 1 2 3 4 5; do
    rm -rf $H /tmp/nvf-c3; mkdir -p $H
    "$TOOL" cache --dir /tmp/nvf-c3 import --with-driver-caches /tmp/nvf-x >"$OUT/c.import$i.txt" 2>&1
    ttfr "$OUT/c.drv$i" HOME=$H CLSHIM_CACHE_DIR=/tmp/nvf-c3 CLSHIM_DRIVER_CACHES=1 LD_PRELOAD=$SHIM CLSHIM_LOG=info
done | median)
cat "$OUT/c.export.txt"
echo "| cold (no caches) | NVIDIA ComputeCache warm | clshim cache only (fresh home) | clshim cache imported --with-driver-caches (fresh home) | imported / ComputeCache-warm |"
echo "| --- | --- | --- | --- | --- |"
echo "| $cold | $nvwarm | $shimonly | $withdrv | $(awk -v a="$withdrv" -v b="$nvwarm" 'BEGIN { printf "%.2fx", a / b }') |"
echo "clshim hits in the imported runs: $(cat "$OUT"/c.drv*.err | grep -c 'hit ')," \
    "misses: $(cat "$OUT"/c.drv*.err | grep -c 'miss ')"
n=$(sort -u "$OUT/c.checksums" | wc -l)
echo "checksums: $(wc -l <"$OUT/c.checksums") runs, $n distinct"
[ "$n" = 1 ] || fails=$((fails + 1))
fi
echo
echo "nvidia_fusion: $fails failures"
