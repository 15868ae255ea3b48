#!/bin/bash
# A held kernel reaches the driver whenever the plain driver would start it,
# and fusion never changes a program's output (issue 33; docs/fusion.md,
# "What cancels fusion"). fusion_held enqueues `first`, the prefix of the
# sequence first+second, and waits for it without clFlush: through a
# CL_COMPLETE callback, by polling its status, through clWaitForEvents, or by
# spinning on memory the kernel writes in place (only the idle timer,
# CLSHIM_FUSION_HOLD_MS, can end that wait). Under a plan, and under
# automatic fusion, which learns the pair from the two occurrences before.
# Before the fix the callback and idle waits timed out (exit 1) and
# clWaitForEvents was logged as another queue's wait.
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info
FH=$PROGS/fusion_held

# 1. The four waits, plan and auto.
for mode in callback poll wait idle; do
    run_ref "ref_$mode" "$FH" --mode "$mode" --learn 2
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
    held_case "$how" idle "nothing enqueued on its queue for 50 ms (CLSHIM_FUSION_HOLD_MS)"
done
held_case plan poll "a status query on a held event"
held_case plan wait "clWaitForEvents"
ok "callbacks, status queries, clWaitForEvents and an idle queue submit the held prefix, each with its reason"

# 2. The idle bound: never before CLSHIM_FUSION_HOLD_MS, well within twice
#    it (a loaded machine: the wait ends before 2 s); 0 turns it off, and
#    the wait then times out (what every idle wait did before the timer).
waited() { sed -n 's/^waited \([0-9]*\) ms$/\1/p' "$TMP/$1.err"; }
fresh_pocl; run_shim idle200 env CLSHIM_FUSE=first+second CLSHIM_FUSION_HOLD_MS=200 "$FH" --mode idle --learn 2
same_output ref_idle idle200 "idle, CLSHIM_FUSION_HOLD_MS=200: as plainly"
w=$(waited idle200)
[ "$w" -ge 195 ] && [ "$w" -lt 2000 ] || fail "idle200: the held kernel ran after $w ms (expected 1 to 2 periods)"
fresh_pocl; run_shim idle_off env CLSHIM_FUSE=first+second CLSHIM_FUSION_HOLD_MS=0 "$FH" --mode idle --timeout-ms 500
grep -qx "first: not complete after the timeout" "$TMP/idle_off.out" || fail "idle_off: the kernel ran with the bound off"
[ "$(cat "$TMP/idle_off.rc")" = 1 ] || fail "idle_off: exit code $(cat "$TMP/idle_off.rc")"
ok "idle: held $w ms with CLSHIM_FUSION_HOLD_MS=200; with 0 held until the application's next call"
finish
