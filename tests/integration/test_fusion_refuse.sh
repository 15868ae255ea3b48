#!/bin/bash
# Refused fusions cost nothing they need not cost, and never change output
# (issue 33; docs/fusion.md, "What cancels fusion"):
#   1. kernels that call printf are never fused: fused, their lines would
#      interleave per work-item where the kernels print one after the other;
#   2. what the ND-ranges decide (different local sizes, a 2-D launch with a
#      local size before a 1-D one) is refused before anything is compiled,
#      and no refusal counts as a failed build; a refusal of the analysis
#      (needs a barrier) is remembered in the cache, so a second process
#      refuses it without making it (libclshim-llvm.so not even loaded);
#   3. a refusal no occurrence can escape (printf, no libclshim-llvm.so)
#      ends the attempts for that sequence in that process, where the
#      back-off tried again and again.
# Every run is compared with the plain run (no shim).
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info
FH=$PROGS/fusion_held
FC=$PROGS/fusion_chain
summary() { grep 'fusion summary' "$TMP/$1.err"; }

# 1. printf, under a plan and under automatic fusion (which finds the
#    refusal the plan's run left in the cache: the same key).
run_ref ref_printf "$FH" --mode printf --iterations 8
[ "$(grep -c '^p[ab] [0-3]$' "$TMP/ref_printf.out")" = 64 ] || fail "printf: the plain run printed no kernel lines"
for how in plan auto; do
    knob=CLSHIM_FUSE=pa+pb
    [ "$how" = auto ] && knob=CLSHIM_FUSION=auto
    fresh_pocl; run_shim "printf_$how" env "$knob" "$FH" --mode printf --iterations 8
    same_output ref_printf "printf_$how" "printf, $how: each kernel's lines in order, as plainly"
    grep -q "fusion of pa+pb (plan [^)]*) refused: kernel 'pa' calls printf (fused, the kernels' output would interleave per work-item)\( (remembered from an earlier run)\)\?; submitted unfused, not tried again in this process" \
        "$TMP/printf_$how.err" || fail "printf, $how: no refusal line naming printf"
    summary "printf_$how" | grep -q "0 fused launches replaced 0 kernel launches; 2 held kernels submitted unfused; 1 fusions refused" ||
        fail "printf, $how: held again after the refusal: $(summary "printf_$how")"
done
ok "printf: refused once (plan and auto), never held again, the output as plainly"

# 2. Ranges and the analysis, cold then again (one cache for both runs).
PLAN="offset+scale;square+other;other+shifted"
run_ref ref_ranges "$FC" --mode ranges --iterations 6
for run in 1 2; do
    fresh_pocl; run_shim "ranges$run" env CLSHIM_CACHE_DIR="$TMP/ranges-cache" CLSHIM_FUSE="$PLAN" "$FC" --mode ranges --iterations 6
    same_output ref_ranges "ranges$run" "ranges, run $run: as plainly"
    err=$TMP/ranges$run.err
    grep -q "offset+scale (plan CLSHIM_FUSE:1:1) refused: kernels 'offset' and 'scale' have different local sizes" "$err" ||
        fail "ranges$run: offset+scale not refused for its local sizes"
    grep -q "square+other (plan CLSHIM_FUSE:1:14) refused: the kernels have different work dimensions and kernel 'square' (work_dim 2) has a local size" "$err" ||
        fail "ranges$run: square+other not refused for its work dimensions"
    grep -q "other+shifted (plan CLSHIM_FUSE:1:27) refused: needs a barrier" "$err" || fail "ranges$run: other+shifted not refused"
    grep -q "summary: .* 0 failed (0 shared)" "$err" || fail "ranges$run: failed builds: $(grep 'clshim: summary' "$err")"
    [ "$(count 'building the fused kernel for \(offset+scale\|square+other\)' "$err")" = 0 ] ||
        fail "ranges$run: a fusion refused for its ranges was compiled"
    # 6 occurrences each: refused at the 1st, 3rd and 6th (the back-off between)
    summary "ranges$run" | grep -q "0 fused launches replaced 0 kernel launches; 18 held kernels submitted unfused; 9 fusions refused" ||
        fail "ranges$run: $(summary "ranges$run")"
done
[ "$(count 'building the fused kernel for other+shifted' "$TMP/ranges1.err")" = 1 ] ||
    fail "ranges1: other+shifted was not made once (the analysis refuses it)"
[ "$(count 'building the fused kernel' "$TMP/ranges2.err")" = 0 ] || fail "ranges2: a refused fusion was made again"
grep -q "other+shifted (plan CLSHIM_FUSE:1:27) refused: needs a barrier: .* (remembered from an earlier run)" "$TMP/ranges2.err" ||
    fail "ranges2: the analysis' refusal was not remembered"
grep -q "llvm-mapped=0" "$TMP/ranges2.err" || fail "ranges2: libclshim-llvm.so was loaded"
ok "ranges: refused before compiling, 0 failed builds; a second process makes nothing (no LLVM loaded)"

# 3. Without libclshim-llvm.so (and a cache without the fused program):
#    8 occurrences of a planned pair, held once.
run_ref ref_nollvm "$FH" --mode poll --learn 8
fresh_pocl; run_shim nollvm env CLSHIM_FUSE=first+second CLSHIM_LLVM_LIB="$TMP/absent.so" \
    CLSHIM_CACHE_DIR="$TMP/nollvm-cache" "$FH" --mode poll --learn 8
same_output ref_nollvm nollvm "no LLVM: as plainly"
grep -q "refused: libclshim-llvm.so cannot be loaded; submitted unfused, not tried again in this process" \
    "$TMP/nollvm.err" || fail "nollvm: no refusal line"
summary nollvm | grep -q "0 fused launches replaced 0 kernel launches; 2 held kernels submitted unfused; 1 fusions refused" ||
    fail "nollvm: retried: $(summary nollvm)"
ok "no libclshim-llvm.so: refused once in 8 occurrences, never retried"

# No clang (a GPU machine): kernels built from source cannot be fused, and
# LLVM is not even loaded for them (its load is tens of ms of the app's).
BS=$CLSHIM_BUILD/bench/bench_short
NOCLANG=(CLSHIM_CLANG=/nonexistent/clang CLSHIM_LLVM_LIB=/nonexistent/libclshim-llvm.so)
same_hash() { [ "$(sed -n 's/.*hash=//p' "$TMP/$1.out")" = "$(sed -n 's/.*hash=//p' "$TMP/$2.out")" ] || fail "$3"; }
fresh_pocl; run_plain noclang-ref "$BS" --chains 8 --n 4096
# An empty cache: nothing can be made nor found, so the chain is not even
# learned (no hold, no attempt: 9 us a chain on the H200 at 30 chains).
fresh_pocl; run_shim noclang env CLSHIM_FUSION=auto "${NOCLANG[@]}" "$BS" --chains 8 --n 4096
same_hash noclang noclang-ref "no clang: the chain's results differ from the plain run's"
grep -q "fusion: auto: runs of kernels built from source are not learned: /nonexistent/clang is not installed (CLSHIM_CLANG) and the cache holds no fused program made elsewhere" \
    "$TMP/noclang.err" || fail "noclang: no line says why nothing is learned: $(grep fusion "$TMP/noclang.err")"
grep -q "auto: learned" "$TMP/noclang.err" && fail "noclang: learned a chain it cannot fuse"
grep -q "fusion summary: 0 fused launches replaced 0 kernel launches; 0 held kernels submitted unfused" "$TMP/noclang.err" ||
    fail "noclang: kernels were held: $(grep 'fusion summary' "$TMP/noclang.err")"
grep -q "cannot load /nonexistent/libclshim-llvm.so" "$TMP/noclang.err" && fail "noclang: LLVM was loaded for nothing"
ok "no clang, an empty cache: a source chain is not learned, nothing held, LLVM not loaded"
# A cache that holds the fused program (made where clang is, as an
# imported cache brings it): learned and fused from the cache, no clang.
export CLSHIM_CACHE_DIR=$TMP/made-elsewhere
fresh_pocl; run_shim made env CLSHIM_FUSION=auto "$BS" --chains 8 --n 4096
grep -q "into one launch" "$TMP/made.err" || fail "with clang: nothing fused"
fresh_pocl; run_shim noclang-cached env CLSHIM_FUSION=auto "${NOCLANG[@]}" "$BS" --chains 8 --n 4096
same_hash noclang-cached noclang-ref "no clang, fused program cached: the results differ from the plain run's"
grep -q "hit derived program" "$TMP/noclang-cached.err" || fail "no clang, fused program cached: no hit"
grep -q "fused s0+s1+s2+s3 into one launch" "$TMP/noclang-cached.err" || fail "no clang, fused program cached: not fused"
grep -q "cannot load /nonexistent/libclshim-llvm.so" "$TMP/noclang-cached.err" && fail "noclang-cached: LLVM was loaded"
ok "no clang, the fused program in the cache: learned and fused from it"
# The same cache, another chain (s0 s2 s3): learned, refused for good (no
# clang, nothing cached for it), never held again; its kernels are then
# quiet, and their launches skip the learner (fusion_enqueue_kernel's
# second fast path): each chain's run from its second kernel on.
fresh_pocl; run_plain broken-ref "$BS" --chains 40 --n 4096 --broken
fresh_pocl; CLSHIM_STATS=1 run_shim broken env CLSHIM_FUSION=auto "${NOCLANG[@]}" "$BS" --chains 40 --n 4096 --broken
same_hash broken broken-ref "no clang, a chain refused for good: the results differ from the plain run's"
grep -q "fusion of s0+s2+s3 (plan auto) refused: .*not tried again in this process" "$TMP/broken.err" ||
    fail "broken: s0+s2+s3 was not refused for good: $(grep 'fusion' "$TMP/broken.err" | head -3)"
summary=$(grep "fusion summary" "$TMP/broken.err")
held=$(echo "$summary" | sed -n 's/.*; \([0-9]*\) held kernels submitted unfused.*/\1/p')
unwatched=$(echo "$summary" | sed -n 's/.*; \([0-9]*\) runs not watched.*/\1/p')
[ -n "$held" ] && [ "$held" -le 3 ] || fail "broken: $held kernels held after the refusal ($summary)"
[ -n "$unwatched" ] && [ "$unwatched" -ge 30 ] || fail "broken: $unwatched of 40 runs skipped the learner ($summary)"
ok "a chain refused for good: held once ($held kernels), then $unwatched of 40 runs past the learner, results as plain"
finish
