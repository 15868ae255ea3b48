#!/bin/bash
# Plans naming every kernel of a real program change nothing it computes:
# the project's multi-kernel programs run under the shim unarmed and armed
# with a plan holding every ordered pair of their kernels (so every launch
# is held, most sequences break, some fuse) must print the same results and
# exit codes, with no internal error (CLSHIM_STRICT=1 from run-all.sh aborts
# on one).
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info

pairs() { local p="" a b; for a in "$@"; do for b in "$@"; do p="$p${p:+;}$a+$b"; done; done; echo "$p"; }
every() { # tag "kernels" command...
    local tag=$1 kernels=$2; shift 2
    # shellcheck disable=SC2086 # the kernel list splits into words
    local plan; plan=$(pairs $kernels)
    fresh_pocl; run_shim "ref_$tag" "$@"
    run_shim "$tag" env CLSHIM_FUSE="$plan" "$@"
    same_output "ref_$tag" "$tag" "$tag: every kernel planned, same results as unarmed"
    ! grep -q "internal error" "$TMP/$tag.err" || fail "$tag: an internal error was logged"
    fused=$((fused + $(count 'into one launch' "$TMP/$tag.err")))
}
fused=0
every multikernel "saxpy scale block_sum" "$PROGS/multikernel" --iterations 3
every multikernel_threads "saxpy scale block_sum" "$PROGS/multikernel" --threads 3
for m in chain sync events setarg sizes vary elide barrier threads release; do
    every "chain_$m" "offset scale square blend shifted other" "$PROGS/fusion_chain" --mode "$m"
done
every fusion_ext "offset scale square" "$PROGS/fusion_ext"
every dlopen_app "weigh square_add" "$PROGS/dlopen_app"
every compilelink "apply" "$PROGS/compilelink"
every ext_first "twice" "$PROGS/ext_first"
every badcalls "k" "$PROGS/badcalls"
# A wait list with no count, completing a replay of k+k, is not held: the
# driver answers it (PoCL ignores the list; the specification says
# CL_INVALID_EVENT_WAIT_LIST).
grep -q "'k' cannot be held (invalid wait list)" "$TMP/badcalls.err" ||
    fail "badcalls: a wait list with no count was held"
[ "$fused" -gt 0 ] || fail "nothing fused: the plans exercised no fused launch"
ok "$fused fused sequence kinds over the programs, every result as unarmed"
finish
