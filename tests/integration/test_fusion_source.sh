#!/bin/bash
# Fusion by generated OpenCL C (route (b), fusion/fuse_source.h), forced on
# PoCL with CLSHIM_FUSE_ROUTE=source as it is chosen on NVIDIA (no SPIR):
# under LD_PRELOAD every run must print exactly what the plain run prints;
# refusals are logged with their reason and the kernels run unfused. Also
# `clshim fuse`, the offline view of the same generator.
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info CLSHIM_FUSE_ROUTE=source
FC=$PROGS/fusion_chain
FS=$PROGS/fusion_source
CLSHIM=$CLSHIM_BUILD/clshim

# vs_plain TAG PLAN PROG ARGS...: plain run and run under the plan, compared bit for bit.
vs_plain() {
    local tag=$1 plan=$2; shift 2
    run_ref "ref_$tag" "$@"
    [ "$(cat "$TMP/ref_$tag.rc")" = 0 ] || fail "$tag: the plain run failed"
    fresh_pocl; run_shim "$tag" env CLSHIM_FUSE="$plan" "$@"
    [ "$(cat "$TMP/$tag.rc")" = 0 ] || fail "$tag: exit code $(cat "$TMP/$tag.rc")"
    same_output "ref_$tag" "$tag" "$tag: bit-identical to the plain run"
}
fused() { occurrences "fused $1 into one launch" "$TMP/$2.err"; }
generated() { count 'then generated OpenCL C' "$TMP/$1.err"; }

# 1. The 3-kernel chain: fused by generated OpenCL C, 3 launches instead of 9.
vs_plain chain "offset+scale+square" "$FC" --mode chain
[ "$(fused offset+scale+square chain)" = 3 ] || fail "chain: expected 3 fused launches"
[ "$(generated chain)" = 1 ] || fail "chain: not built as generated OpenCL C"
ok "chain: offset+scale+square fused by generated OpenCL C, results bit for bit"

# 2. Warm: the fused program is a cache hit; LLVM is never loaded.
fresh_pocl; run_shim warm env CLSHIM_FUSE="offset+scale+square" "$FC" --mode maps
same_output ref_chain warm "warm run: same results"
[ "$(count 'hit derived program' "$TMP/warm.err")" = 1 ] || fail "warm run: the fused program was not a hit"
[ "$(count 'building the fused kernel' "$TMP/warm.err")" = 0 ] || fail "warm run: rebuilt"
grep -q "llvm-mapped=0" "$TMP/warm.err" || fail "warm run: libclshim-llvm.so was loaded"
[ "$(fused offset+scale+square warm)" = 3 ] || fail "warm run: expected 3 fused launches"
# The route is in the key: the IR route on the same cache builds its own program.
fresh_pocl; run_shim ir env CLSHIM_FUSE_ROUTE=ir CLSHIM_FUSE="offset+scale+square" "$FC" --mode chain
same_output ref_chain ir "IR route: same results"
[ "$(count 'hit derived program' "$TMP/ir.err")" = 0 ] || fail "IR route: reused the generated program"
[ "$(generated ir)" = 0 ] || fail "IR route: built generated OpenCL C"
ok "warm: the generated program comes from the cache; the route is part of the key"

# 2b. The generated source is also stored apart from any device: a machine
#     without LLVM (NVIDIA's, in practice) builds the fused kernel from an
#     imported cache. Here: a cache whose device entry was too big to store
#     (CLSHIM_CACHE_MAX_ENTRY), then a run that cannot load libclshim-llvm.so.
fresh_pocl; run_shim nodev env CLSHIM_CACHE_DIR="$TMP/c-any" CLSHIM_CACHE_MAX_ENTRY=40K CLSHIM_FUSE="offset+scale+square" "$FC" --mode chain
same_output ref_chain nodev "small entries: same results"
fresh_pocl; run_shim nollvm env CLSHIM_CACHE_DIR="$TMP/c-any" CLSHIM_LLVM_LIB=/nonexistent CLSHIM_FUSE="offset+scale+square" "$FC" --mode chain
same_output ref_chain nollvm "without LLVM: same results"
grep -q "the generated OpenCL C for offset..square (3 kernels) comes from the cache" "$TMP/nollvm.err" || fail "without LLVM: the source was not taken from the cache"
[ "$(fused offset+scale+square nollvm)" = 3 ] || fail "without LLVM: expected 3 fused launches"
[ "$(count 'cannot load' "$TMP/nollvm.err")" = 0 ] || fail "without LLVM: libclshim-llvm.so was needed"
ok "the generated source is cached apart from the device: fused without LLVM"

# 3. Different global sizes (guarded calls), shared arguments, aliasing, and
#    the same scalar or buffer passed to several parameters.
vs_plain sizes "offset+scale+square" "$FC" --mode sizes
[ "$(fused offset+scale+square sizes)" -ge 1 ] || fail "sizes: nothing fused"
vs_plain elide "blend+offset+square" "$FC" --mode elide
[ "$(fused blend+offset+square elide)" -ge 1 ] || fail "elide: nothing fused"
vs_plain vary "offset+scale+square" "$FC" --mode vary
[ "$(fused offset+scale+square vary)" -ge 1 ] || fail "vary: nothing fused"
ok "guards for smaller ranges, merged arguments, relaunches: bit for bit"

# 4. A name clash with clshim's first generated name, reqd_work_group_size,
#    restrict, a struct passed by value and a __constant table.
vs_plain attr "up+root" "$FS" --mode attr
[ "$(fused up+root attr)" = 2 ] || fail "attr: expected 2 fused launches"
vs_plain struct "affine+lookup+neg" "$FS" --mode struct
[ "$(fused affine+lookup+neg struct)" = 2 ] || fail "struct: expected 2 fused launches"
vs_plain chain4 "e1+e2+e3+e4" "$FS" --mode chain4
[ "$(fused e1+e2+e3+e4 chain4)" = 2 ] || fail "chain4: expected 2 fused launches"
ok "attributes, name clash, struct and __constant arguments, a 4-kernel chain with sqrt: bit for bit"

# 5. Refusals, each logged once with its reason; the kernels run unfused.
refused() { # TAG PATTERN
    [ "$(fused '' "$1")" = 0 ] || fail "$1: fused although it must be refused"
    # one line per reason; a retry after the back-off only adds to the exit summary's "again N times"
    [ "$(grep ') refused: ' "$TMP/$1.err" | grep -vc 'again [0-9]* times')" = 1 ] || fail "$1: expected one refusal line"
    grep ') refused: ' "$TMP/$1.err" | grep -q -- "$2" || fail "$1: the refusal does not say '$2'"
}
vs_plain local "affine+tiled" "$FS" --mode local
refused local "kernel 'tiled' declares __local variables at kernel scope"
vs_plain barrier "other+shifted" "$FC" --mode barrier
refused barrier "needs a barrier"
ok "refused with one line each: kernel-scope __local, a needed barrier; results as plain"

# 6. The driver's argument info is not used; which arguments are buffers
#    comes from the analysis (stored with the fused program), and those are
#    still checked for aliasing: buffers over overlapping host memory are
#    refused, cold and from the cache.
vs_plain alias_ok "e1+e2" "$FS" --mode chain4
vs_plain alias "e1+e2" "$FS" --mode alias
refused alias "buffers over overlapping host memory"
[ "$(count 'hit derived program' "$TMP/alias.err")" = 1 ] || fail "alias: the fused program was not taken from the cache"
vs_plain release "offset+scale+square" "$FC" --mode release
vs_plain events "offset+scale+square" "$FC" --mode events
ok "overlapping buffers refused from the analysis' buffer list; held events, released buffers: as plain"

# 7. clshim fuse: the generated kernel, the IR, and refusals, offline.
"$FS" --print-source >"$TMP/fs.cl"
"$CLSHIM" fuse --plan "up+root" --global 4096 --local 64 "$TMP/fs.cl" >"$TMP/fuse.cl" 2>"$TMP/fuse.err" ||
    fail "clshim fuse: failed: $(cat "$TMP/fuse.err")"
grep -q '^__kernel __attribute__((reqd_work_group_size(64, 1, 1))) void clshim_f1(' "$TMP/fuse.cl" ||
    fail "clshim fuse: no kernel clshim_f1 with the attribute (clshim_f0 is taken by the program)"
grep -q '^    up(clshim_f1_0, clshim_f1_1);$' "$TMP/fuse.cl" || fail "clshim fuse: no call of up"
grep -q '^    root(clshim_f1_2, clshim_f1_3);$' "$TMP/fuse.cl" || fail "clshim fuse: no call of root"
grep -q 'restrict clshim_f1_2' "$TMP/fuse.cl" || fail "clshim fuse: restrict lost"
cmp -s <(head -c "$(stat -c %s "$TMP/fs.cl")" "$TMP/fuse.cl") "$TMP/fs.cl" || fail "clshim fuse: the program's source is not kept as is"
clang-15 -x cl -cl-std=CL1.2 -fsyntax-only "$TMP/fuse.cl" 2>"$TMP/syntax.err" || fail "clshim fuse: output does not compile: $(head -3 "$TMP/syntax.err")"
# Equal parameter names are one argument: t1..t3 are shared, 6 parameters.
"$CLSHIM" fuse --plan "e1+e2+e3+e4" "$TMP/fs.cl" >"$TMP/fuse4.cl"
[ "$(grep -c '^    e[1-4](' "$TMP/fuse4.cl")" = 4 ] || fail "clshim fuse e1..e4: expected 4 calls"
grep -q 'void clshim_f1(__global const float\* clshim_f1_0, __global float\* clshim_f1_1, __global float\* clshim_f1_2, __global float\* clshim_f1_3, float clshim_f1_4, __global float\* clshim_f1_5)' "$TMP/fuse4.cl" ||
    fail "clshim fuse e1..e4: unexpected parameters: $(grep 'void clshim_f1' "$TMP/fuse4.cl")"
"$CLSHIM" fuse --plan "e1+e2+e3+e4" --emit=ll "$TMP/fs.cl" >"$TMP/fuse4.ll"
grep -q '^define spir_kernel void @clshim_fused(' "$TMP/fuse4.ll" || fail "clshim fuse --emit=ll: no fused kernel"
"$CLSHIM" fuse --plan "e1+e2" --emit=spir -o "$TMP/fuse.bc" "$TMP/fs.cl"
[ "$(head -c 2 "$TMP/fuse.bc")" = BC ] || fail "clshim fuse --emit=spir: not bitcode"
set +e
"$CLSHIM" fuse --plan "affine+tiled" "$TMP/fs.cl" >"$TMP/refused.out" 2>"$TMP/refused.err"; rc=$?
"$CLSHIM" fuse --plan "e1" "$TMP/fs.cl" 2>/dev/null; rc_usage=$?
set -e
[ "$rc" = 1 ] || fail "clshim fuse refused: exit code $rc"
[ ! -s "$TMP/refused.out" ] || fail "clshim fuse refused: printed a kernel"
grep -q "clshim fuse: refused: kernel 'tiled' declares __local variables at kernel scope" "$TMP/refused.err" ||
    fail "clshim fuse refused: no reason: $(cat "$TMP/refused.err")"
[ "$rc_usage" = 2 ] || fail "clshim fuse with one kernel: exit code $rc_usage"
ok "clshim fuse: generated kernel (name clash, attribute, restrict), --emit=ll|spir, refusal, usage"

finish
