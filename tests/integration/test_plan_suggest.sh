#!/bin/bash
# `clshim plan suggest -- CMD` (docs/fusion.md, "Plan suggestions") on PoCL:
# it runs the program once under automatic fusion and prints a plan of the
# sequences fused there, with their times; the plan, used as
# CLSHIM_FUSION_PLAN without automatic fusion, fuses exactly what it names,
# from the first occurrence, with the plain run's results bit for bit.
# Sequences the analysis refused are only comments.
source "$(dirname "$0")/lib.sh"
CLSHIM=$CLSHIM_BUILD/clshim
FA=$PROGS/fusion_auto

# suggest TAG ARGS...: the plan for fusion_auto ARGS in $TMP/TAG.plan
suggest() {
    local tag=$1; shift
    fresh_pocl
    "$CLSHIM" plan suggest -- "$FA" "$@" >"$TMP/$tag.plan" 2>"$TMP/$tag.suggest.err" ||
        { cat "$TMP/$tag.suggest.err" >&2; fail "$tag: plan suggest failed"; }
}
# use TAG ARGS...: fusion_auto ARGS under the plan (no automatic fusion), against the plain run
use() {
    local tag=$1; shift
    fresh_pocl; run_plain "ref_$tag" "$FA" "$@"
    fresh_pocl; run_shim "$tag" env CLSHIM_LOG=info CLSHIM_FUSION=off CLSHIM_FUSION_PLAN="$TMP/$tag.plan" "$FA" "$@"
    same_output "ref_$tag" "$tag" "$tag: the suggested plan gives the plain run's results"
}

# 1. A pointwise chain: one `fuse` line with its gain; used, it fuses every occurrence.
suggest chain4 --mode chain4 --iterations 8 --n 262144
[ "$(grep -c '^fuse ' "$TMP/chain4.plan")" = 1 ] || { cat "$TMP/chain4.plan" >&2; fail "chain4: expected one fuse line"; }
grep -Eq '^fuse k1 k2 k3 k4 +# 262144 work-items; ran 3 times unfused \(median [0-9.]+ ms\), 5 fused \(median [0-9.]+ ms\): expected gain [0-9.]+x .*each occurrence waited for' \
    "$TMP/chain4.plan" || { cat "$TMP/chain4.plan" >&2; fail "chain4: the fuse line lacks its counts or gain"; }
grep -q '^chain4\|^in \|^out ' "$TMP/chain4.plan" && fail "chain4: the program's output is mixed into the plan"
grep -q '^out ' "$TMP/chain4.suggest.err" || fail "chain4: the program's output was lost"
use chain4 --mode chain4 --iterations 8 --n 262144
[ "$(occurrences 'fused k1+k2+k3+k4 into one launch' "$TMP/chain4.err")" = 8 ] ||
    fail "chain4: the suggested plan did not fuse all 8 occurrences"
ok "chain4: suggested 'fuse k1 k2 k3 k4' with its gain; the plan fuses all 8 occurrences"

# 2. Refused sequences are comments with the reason; the plan fuses nothing.
suggest stencil --mode stencil
grep -q "^# not fusable: k1 blur (4096 work-items, ran 6 times): needs a barrier" "$TMP/stencil.plan" ||
    { cat "$TMP/stencil.plan" >&2; fail "stencil: the refusal is not listed"; }
[ "$(grep -c '^fuse ' "$TMP/stencil.plan")" = 0 ] || fail "stencil: a refused sequence was suggested"
use stencil --mode stencil
[ "$(count 'fused \|refused' "$TMP/stencil.err")" = 0 ] || fail "stencil: the plan made clshim try something"
ok "stencil: listed as not fusable, with the reason; nothing suggested"

# 3. A chain broken by syncs: only the part that runs back to back.
suggest sync --mode sync --iterations 10 --n 262144
[ "$(grep '^fuse ' "$TMP/sync.plan" | cut -d'#' -f1 | tr -s ' ')" = "fuse k3 k4 " ] ||
    { cat "$TMP/sync.plan" >&2; fail "sync: expected exactly 'fuse k3 k4'"; }
use sync --mode sync --iterations 10 --n 262144
[ "$(occurrences "fused k3+k4 into one launch" "$TMP/sync.err")" = 10 ] || fail "sync: k3+k4 not fused 10 times"
[ "$(count 'fused k1\|fused k2' "$TMP/sync.err")" = 0 ] || fail "sync: something across a clFinish was fused"
ok "sync: suggested only k3+k4, which the plan fuses"

# 3b. Windows: k1 k2 blur k3 k4 recurs, refused whole (needs a barrier);
#     the plan fuses its windows k1+k2 and blur+k3+k4, says so per recurring
#     run, and lists each refused window with the reason (a plan's use is
#     checked with chain4 and sync).
suggest windows --mode windows --iterations 12
grep -Eq '^# recurring: k1 k2 blur k3 k4 \(4096 work-items; ran 12 times back to back, each occurrence waited for\): fused k1 k2, blur k3 k4$' \
    "$TMP/windows.plan" || { cat "$TMP/windows.plan" >&2; fail "windows: no summary of what fused of the recurring run"; }
[ "$(grep '^fuse ' "$TMP/windows.plan" | cut -d'#' -f1 | tr -s ' ' | sort | tr '\n' ';')" = "fuse blur k3 k4 ;fuse k1 k2 ;" ] ||
    { cat "$TMP/windows.plan" >&2; fail "windows: expected exactly 'fuse k1 k2' and 'fuse blur k3 k4'"; }
for w in "k1 k2 blur k3 k4" "k1 k2 blur k3" "k1 k2 blur"; do
    grep -q "^# not fusable: $w (4096 work-items, ran [0-9]* times): needs a barrier" "$TMP/windows.plan" ||
        { cat "$TMP/windows.plan" >&2; fail "windows: the refusal of $w is not listed with its reason"; }
done
ok "windows: suggested k1+k2 and blur+k3+k4 with the refusals of the longer windows"

# 3c. The bundled demo as `make demo` runs it (3 iterations): its run
#     recurred, but too few times to be tried; the plan says so instead of
#     "nothing ran twice". With 12 iterations: the fusable window and why
#     partial_sum is left out.
fresh_pocl
"$CLSHIM" plan suggest -- "$CLSHIM_BUILD/examples/pipeline" >"$TMP/demo3.plan" 2>/dev/null || fail "demo3: plan suggest failed"
grep -Eq '^# recurring: standardize gain clamp01 histogram16 partial_sum \(1048576 work-items; ran 3 times back to back, each occurrence waited for\): not tried: it recurred too few times' \
    "$TMP/demo3.plan" || { cat "$TMP/demo3.plan" >&2; fail "demo3: the recurring run is not listed as not tried"; }
grep -q 'no kernel sequence ran twice' "$TMP/demo3.plan" && fail "demo3: says nothing ran twice"
fresh_pocl
"$CLSHIM" plan suggest -- "$CLSHIM_BUILD/examples/pipeline" 65536 12 >"$TMP/demo12.plan" 2>/dev/null || fail "demo12: plan suggest failed"
grep -Eq '^# recurring: standardize gain clamp01 histogram16 partial_sum .*: fused standardize gain clamp01[a-z0-9 ]*; left unfused: [a-z0-9 ]*partial_sum \(below: why\)$' \
    "$TMP/demo12.plan" || { cat "$TMP/demo12.plan" >&2; fail "demo12: no summary of the fused window and what is left"; }
grep -Eq '^fuse standardize gain clamp01' "$TMP/demo12.plan" || { cat "$TMP/demo12.plan" >&2; fail "demo12: no fuse line"; }
grep -q "^# not fusable: standardize gain clamp01 histogram16 partial_sum (65536 work-items, ran [0-9]* times): kernels 'standardize' and 'partial_sum' have different local sizes" \
    "$TMP/demo12.plan" || { cat "$TMP/demo12.plan" >&2; fail "demo12: the refusal of the whole run is not listed"; }
ok "demo: 3 iterations: recurring, not tried; 12: the fused window, and why partial_sum is left out"

# 3d. Issued without syncs (the pair loop): the fuse line says so, and its
#     gain is the never-slower measurement's (both ways interleaved, as the
#     program issues them), not latencies of overlapping occurrences.
suggest pairs --mode pairs --iterations 40
grep -Eq '^fuse k1 k2 +# .*expected gain [0-9.]+x \([0-9.-]+ ms less per occurrence; measured: [0-9.]+ ms unfused, [0-9.]+ ms fused, medians, interleaved, enqueued back to back without syncs\)' \
    "$TMP/pairs.plan" || { cat "$TMP/pairs.plan" >&2; fail "pairs: the gain is not the measured one of a pipelined sequence"; }
ok "pairs: a pipelined sequence's gain is measured as the program issues it"

# 4. A program with no OpenCL sequences: says so, exit status kept.
fresh_pocl
"$CLSHIM" plan suggest -- "$FA" --mode chain4 --iterations 1 >"$TMP/once.plan" 2>/dev/null || fail "once: plan suggest failed"
grep -q '^# no kernel sequence ran twice back to back' "$TMP/once.plan" || fail "once: no 'nothing to suggest' line"
set +e; "$CLSHIM" plan suggest -- "$FA" --mode nonsense >"$TMP/bad.plan" 2>/dev/null; rc=$?; set -e
[ "$rc" = 2 ] && grep -q '^# the command exited with status 2' "$TMP/bad.plan" || fail "bad: exit status $rc not passed on"
ok "nothing to suggest is said; the command's exit status is passed on"
finish
