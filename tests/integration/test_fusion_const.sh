#!/bin/bash
# The `const` fusion option (docs/fusion.md, "Constant propagation") on PoCL
# under LD_PRELOAD: scalar arguments baked into the fused kernel. Every
# buffer after every iteration must match the plain run bit for bit; the
# values are part of the fused program's key and of the repeat fast path,
# so a launch with other values never runs a program baked with old ones.
# Last, a 2-D kernel followed by a 1-D one (different work dimensions).
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info
FC=$PROGS/fusion_const
baked() { count 'const: .* baked in' "$TMP/$1.err"; }

# 1. The same values every iteration: baked once, reused, bit for bit.
run_ref ref_same "$FC" --values same --iterations 3
fresh_pocl; run_shim same env CLSHIM_FUSE="c1+c2+c3:const" "$FC" --values same --iterations 3
same_output ref_same same "same values: every buffer of every iteration as plain"
[ "$(occurrences 'fused c1+c2+c3 into one launch' "$TMP/same.err")" = 3 ] || fail "same: expected 3 fused launches"
grep -q 'c1+c2+c3: const: 6 scalar arguments baked in' "$TMP/same.err" || fail "same: no 'baked in' line (6 expected)"
[ "$(baked same)" = 1 ] || fail "same: the program was made more than once"
grep -q 'fused c1+c2+c3 into one launch (6 parameters for 14 arguments)' "$TMP/same.err" ||
    fail "same: the fused kernel still takes the scalars"
ok "const: 6 of 8 scalars baked (the two factors of a contracted a*b+c stay arguments), 6 parameters"

# 2. Two sets of values, alternating: a program per set, never the other's.
run_ref ref_alt "$FC" --values alternate --iterations 4
fresh_pocl; run_shim alt env CLSHIM_CACHE_DIR="$TMP/alt-cache" CLSHIM_FUSE="c1+c2+c3:const" "$FC" --values alternate --iterations 4
same_output ref_alt alt "alternating values: every iteration as plain"
[ "$(awk '$2 == "out" { print $3 }' "$TMP/alt.out" | sort -u | wc -l)" = 2 ] || fail "alt: the two sets give the same output (test is blind)"
[ "$(baked alt)" = 2 ] || fail "alt: expected 2 programs made, one per set"
[ "$(occurrences 'fused c1+c2+c3 into one launch' "$TMP/alt.err")" = 4 ] || fail "alt: expected 4 fused launches"
ok "const: the values are in the key: 2 programs for 2 alternating sets, each launch its own"

# 3. The key from the persistent cache: a second run makes nothing, hits both.
fresh_pocl; run_shim alt_again env CLSHIM_CACHE_DIR="$TMP/alt-cache" CLSHIM_FUSE="c1+c2+c3:const" "$FC" --values alternate --iterations 4
same_output ref_alt alt_again "alternating values from the cache: as plain"
[ "$(baked alt_again)" = 0 ] || fail "alt again: a program was made again"
[ "$(count 'hit derived program' "$TMP/alt_again.err")" = 2 ] || fail "alt again: expected 2 derived hits"
ok "const: both baked programs come from the cache"

# 4. Without the option, on the same cache: the plain fused program (not a
#    baked one) — every scalar a parameter.
fresh_pocl; run_shim plainfuse env CLSHIM_CACHE_DIR="$TMP/alt-cache" CLSHIM_FUSE="c1+c2+c3" "$FC" --values alternate --iterations 4
same_output ref_alt plainfuse "without const: as plain"
grep -q 'fused c1+c2+c3 into one launch (11 parameters for 14 arguments)' "$TMP/plainfuse.err" ||
    fail "plain fuse: a baked program was used"
ok "const is part of the key: the plain fusion keeps its 11 parameters"

# 5. A new value every iteration: at most 8 baked programs, then the scalars
#    are passed as arguments (one line), results always as plain.
run_ref ref_new "$FC" --values new --iterations 11
fresh_pocl; run_shim new env CLSHIM_CACHE_DIR="$TMP/new-cache" CLSHIM_FUSE="c1+c2+c3:const" "$FC" --values new --iterations 11
same_output ref_new new "a new value each iteration: as plain"
[ "$(baked new)" = 8 ] || fail "new: expected 8 baked programs, got $(baked new)"
[ "$(occurrences 'programs with other values of c1..c3 exist' "$TMP/new.err")" = 3 ] ||
    fail "new: expected the 'passed as arguments' line for the 3 launches past the bound"
ok "const: 8 baked programs per sequence at most, then its scalars are arguments"

# 6. The extension API's property CL_FUSION_CONST_CLSHIM.
run_ref ref_ext "$FC" --values alternate --iterations 2
fresh_pocl; run_shim ext env CLSHIM_CACHE_DIR="$TMP/ext-cache" "$FC" --values alternate --iterations 2 --ext 1
grep -q 'ext: present' "$TMP/ext.err" || fail "ext: the extension is absent"
same_output ref_ext ext "extension API with CL_FUSION_CONST_CLSHIM: as plain"
[ "$(baked ext)" = 2 ] || fail "ext: expected 2 baked programs"
ok "extension API: CL_FUSION_CONST_CLSHIM bakes"

# 7. Route (b) (generated OpenCL C) does not bake: one line, results as plain.
fresh_pocl; run_shim source env CLSHIM_FUSE="c1+c2+c3:const" CLSHIM_FUSE_ROUTE=source "$FC" --values alternate --iterations 2
same_output ref_ext source "route (b) with const: as plain"
[ "$(occurrences 'const: not applied: generated OpenCL C' "$TMP/source.err")" = 2 ] || fail "source: expected the 'not applied' line for each of the 2 launches"
[ "$(baked source)" = 0 ] || fail "source: something was baked"
ok "route (b): const not applied, one line"

# 8. Different work dimensions (docs/fusion.md): a 2-D kernel (64 x n/64,
#    row-major) then a 1-D one over the same n elements: remapped onto one
#    1-D range and fused, bit for bit. The same with the 2-D kernel writing
#    column-major (not pointwise in the linear id), with local sizes, or on
#    route (b): refused with the reason in the one line, results as plain.
run_ref ref_dims "$FC" --mode dims --iterations 2
fresh_pocl; run_shim dims env CLSHIM_FUSE="d2+d1" "$FC" --mode dims --iterations 2
same_output ref_dims dims "2-D then 1-D: as plain"
[ "$(occurrences 'fused d2+d1 into one launch (5 parameters for 6 arguments)' "$TMP/dims.err")" = 2 ] ||
    fail "dims: expected 2 fused launches"
ok "2-D then 1-D over the same elements: remapped, fused, bit for bit"
dims_refused() { # tag mode plan pattern [env...]
    local tag=$1 mode=$2 plan=$3 pattern=$4; shift 4
    run_ref "ref_$tag" "$FC" --mode "$mode" --iterations 2
    fresh_pocl; run_shim "$tag" env CLSHIM_FUSE="$plan" "$@" "$FC" --mode "$mode" --iterations 2
    same_output "ref_$tag" "$tag" "$tag: as plain"
    [ "$(count "fusion of ${plan} (plan CLSHIM_FUSE:1:1) refused: $pattern" "$TMP/$tag.err")" = 1 ] ||
        fail "$tag: expected one refusal line: $pattern"
    [ "$(count 'into one launch' "$TMP/$tag.err")" = 0 ] || fail "$tag: something was fused"
    ok "$tag: refused with the reason in one line: $pattern"
}
dims_refused transposed transposed "d2t+d1" "needs a barrier: kernel 'd2t' writes 't1' at an index other than get_global_id()"
dims_refused dims_local dims-local "d2+d1" "the kernels have different work dimensions and kernel 'd2' (work_dim 2) has a local size"
dims_refused dims_source dims "d2+d1" "the kernels have different work dimensions: generated OpenCL C does not remap" CLSHIM_FUSE_ROUTE=source

finish
