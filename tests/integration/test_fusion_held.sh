#!/bin/bash
# A held kernel reaches the driver whenever the plain driver would start it,
# and fusion never changes a program's output (issue 33; docs/fusion.md,
# "What cancels fusion"). fusion_held enqueues `first`, the prefix of the
# sequence first+second, and waits for it without clFlush: through a
# CL_COMPLETE callback, by polling its status or through clWaitForEvents.
# Under a plan, and under automatic fusion, which learns the pair from the
# two occurrences before. Before the fix the callback wait timed out (exit
# 1) and clWaitForEvents was logged as another queue's wait.
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info
FH=$PROGS/fusion_held

# 1. The four waits, plan and auto.
for mode in callback poll wait; do
    fresh_pocl; run_plain "ref_$mode" "$FH" --mode "$mode" --learn 2
    grep -qx "first: complete" "$TMP/ref_$mode.out" || fail "$mode: the plain run did not complete"
done
held_case() { # how mode reason
    local how=$1 mode=$2 reason=$3 tag=$1_$2 knob=CLSHIM_FUSE=first+second
    [ "$how" = auto ] && knob=CLSHIM_FUSION=auto
    fresh_pocl; run_shim "$tag" env "$knob" "$FH" --mode "$mode" --learn 2
    same_output "ref_$mode" "$tag" "$tag: the held prefix ran as plainly (first: complete), same results"
    [ "$(occurrences "held first submitted unfused: $reason" "$TMP/$tag.err")" = 1 ] ||
        fail "$tag: expected the line 'held first submitted unfused: $reason' once"
    [ "$(count 'another queue' "$TMP/$tag.err")" = 0 ] || fail "$tag: logged as another queue's wait"
    if [ "$how" = plan ]; then
        [ "$(occurrences 'fused first+second into one launch' "$TMP/$tag.err")" = 2 ] ||
            fail "$tag: the two complete occurrences were not fused"
    else
        [ "$(count 'auto: learned first+second' "$TMP/$tag.err")" = 1 ] || fail "$tag: first+second not learned"
    fi
}
for how in plan auto; do
    held_case "$how" callback "a callback registered on a held event"
done
held_case plan poll "a status query on a held event"
held_case plan wait "clWaitForEvents" 
ok "callbacks, status queries and clWaitForEvents submit the held prefix, each with its reason"

finish
