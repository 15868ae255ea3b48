#!/bin/bash
# Fusion never changes what an application computes nor makes it fail
# (docs/fusion.md). Model-based: fusion_model generates a random plan per
# plan seed and random command streams per case seed; each stream runs
# plainly and under the shim armed with the plan (LD_PRELOAD, PoCL), and the
# digests of every buffer and every event's status and profiling order, and
# whether callbacks fired and waits without a flush completed, must be
# equal (buffers an `internal` sequence may leave undefined excepted), with
# no abort (run-all.sh sets CLSHIM_STRICT=1: a broken internal invariant
# aborts) and no internal error logged. Section 4 runs
# the same streams under CLSHIM_FUSION=auto with no plan.
#   make check: PLANS plan seeds x CASES cases (140 per section, fixed),
#   LOCAL_CASES per local-family plan;
#   CLSHIM_LONG=1 (make check-long): 40 plans x 125 cases = 5,000 cases,
#   30 per local-family plan.
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info
FM=$PROGS/fusion_model

# 1. Regressions: plans never completed by the application. A held prefix
#    broken by a kernel that starts no sequence once aborted the process
#    (fusion/batch.c: "Assertion 'q->ncand > 0' failed").
# The batcher's state machine is what these exercise: the runs under the
# shim share the test's PoCL cache, as the model's below do (a cold PoCL
# compile of the program per run cost seconds and checked nothing more).
regress() { # tag plan args...
    local tag=$1 plan=$2; shift 2
    run_ref "ref_$tag" "$FM" "$@"
    run_shim "$tag" env CLSHIM_FUSE="$plan" "$FM" "$@"
    same_output "ref_$tag" "$tag" "$tag: same results as without clshim, no abort"
    ! grep -q "internal error" "$TMP/$tag.err" || fail "$tag: an internal error was logged"
}
regress never_e "k0+k1+k2+k3+k4" --sequence k0,k1,k2,k3 --iterations 30
grep -q "held k0+k1+k2+k3 submitted unfused: 'k0' breaks the sequence (expected 'k4')" "$TMP/never_e.err" ||
    fail "never_e: the log does not name the kernel expected next"
regress repeat_k "k0+k1" --sequence k0 --iterations 100
grep -q "held k0 submitted unfused: 'k0' breaks the sequence (expected 'k1')" "$TMP/repeat_k.err" ||
    fail "repeat_k: the log does not name the kernel expected next"
regress shared_prefix "k0+k1+k2;k0+k1+k4;k2+k3" --sequence k0,k1,k3,k2,k0,k1,k2 --iterations 20
grep -q "'k3' breaks the sequence (expected 'k2' or 'k4')" "$TMP/shared_prefix.err" ||
    fail "shared_prefix: the log does not name both kernels expected next"
grep -q "fused k0+k1+k2 into one launch" "$TMP/shared_prefix.err" || fail "shared_prefix: the full sequence did not fuse"

# 1b. Handles the driver reuses. A kernel released while a launch of it is
#     pending stays alive in the driver, so its record outlived it, and a new
#     kernel given its handle was taken for it (k0 held as 'k1'). Queues the
#     same: PoCL keeps a reference of its own, and a new out-of-order queue
#     could inherit an in-order queue's record.
regress kernel_reuse "k1+k4" --kernel-reuse 10
[ "$(occurrences "'k1' breaks the sequence" "$TMP/kernel_reuse.err")" = 0 ] ||
    fail "kernel_reuse: a new kernel was taken for the released one with its handle"
[ "$(occurrences "held k1 submitted unfused: release of a held kernel" "$TMP/kernel_reuse.err")" = 10 ] ||
    fail "kernel_reuse: the released kernel was not held each time"
regress queue_reuse "k0+k1" --queue-reuse 10
[ "$(occurrences "fused k0+k1 into one launch" "$TMP/queue_reuse.err")" = 10 ] ||
    fail "queue_reuse: expected 10 fused launches (in-order queues only)"

# 1c. Replays (fusion/batch.c): a loop relaunching the chain it fused last
#     is held kernel by kernel without plan matching, only while that gives
#     what matching gives. Two sequences starting with one kernel, in turn:
#     k0 must stay open to both, every occurrence fuses. One chain again
#     and again: every launch after the first is a replay. (Arguments set
#     to other values between relaunches: test_fusion.sh's vary and
#     relaunch.)
regress shared_first "k0+k1;k0+k2" --sequence k0,k1,k0,k2 --iterations 10
[ "$(occurrences "fused k0+k2 into one launch" "$TMP/shared_first.err")" = 10 ] ||
    fail "shared_first: k0+k2 after a fused k0+k1 was not fused each time"
grep -q "0 held kernels submitted unfused; 0 fusions refused; 0 replays$" "$TMP/shared_first.err" ||
    fail "shared_first: $(grep 'fusion summary' "$TMP/shared_first.err")"
regress replay "k0+k1+k2" --sequence k0,k1,k2 --iterations 30
grep -q "fusion summary: 30 fused launches replaced 90 kernel launches; 0 held kernels submitted unfused; 0 fusions refused; 29 replays$" \
    "$TMP/replay.err" || fail "replay: $(grep 'fusion summary' "$TMP/replay.err")"

# 1d. Automatic fusion's fast path (fusion/batch.c, fq.steady): a kernel
#     enqueued again and again, alone in the queue's run, is forwarded
#     without the queue lock (counted, not appended: fauto.c's `alone`),
#     and stops being so once it starts a learned sequence. k0 three times,
#     then k1 and k2, ten times: the whole step k0+k0+k0+k1+k2 is learned
#     at the second iteration (the repeats the fast path counted are part of
#     the run) and fused in each of the 8 after, nothing held in vain.
#     CLSHIM_FUSION_HOLD_MS=0: no idle submission, so the counts do not
#     depend on the machine's load.
run_ref ref_steady "$FM" --sequence k0,k0,k0,k1,k2 --iterations 10
run_shim steady env CLSHIM_FUSION=auto CLSHIM_FUSION_HOLD_MS=0 "$FM" --sequence k0,k0,k0,k1,k2 --iterations 10
same_output ref_steady steady "steady: k0 again and again, then k0+k1+k2: same results as without clshim"
grep -q "fusion summary: 8 fused launches replaced 40 kernel launches; 0 held kernels submitted unfused; 0 fusions refused" \
    "$TMP/steady.err" || fail "steady: $(grep 'fusion summary' "$TMP/steady.err")"
grep -q "learned k0+k0+k0+k1+k2 " "$TMP/steady.err" || fail "steady: the whole step was not learned"
ok "steady: a kernel enqueued again and again is held again once it starts a learned sequence"

# 2. The model. Failures found by it stay as fixed seeds (PLAN:FIRST:COUNT):
#    1:0:1   a held prefix broken by a kernel starting no sequence (the abort above);
#    6:0:32  case 31 (under load, about 1 run in 30): a buffer differed: a new kernel
#            inherited the record of a released one with the same handle (1b).
REGRESSIONS="1:0:1 6:0:32"
if [ "${CLSHIM_LONG:-0}" = 1 ]; then PLANS=40; CASES=125; LOCAL_CASES=30; else PLANS=7; CASES=20; LOCAL_CASES=15; fi
model() { # plan_seed first count
    local ps=$1 first=$2 n=$3 plan tag=m$1_$2 ref=ref_$1_$2_$3
    plan=$("$FM" --plan "$ps")
    [ "${AUTO:-0}" = 1 ] && tag=a$1_$2 && plan="CLSHIM_FUSION=auto"
    # The plain run depends on the seeds only: section 4 compares with section 2's.
    [ -f "$TMP/$ref.out" ] || run_ref "$ref" "$FM" --plan-seed "$ps" --cases "$first" "$n"
    if [ "${AUTO:-0}" = 1 ]; then # no plan: what automatic fusion learns
        run_shim "$tag" env CLSHIM_FUSION=auto "$FM" --plan-seed "$ps" --cases "$first" "$n"
    else
        run_shim "$tag" env CLSHIM_FUSE="$plan" "$FM" --plan-seed "$ps" --cases "$first" "$n"
    fi
    if ! cmp -s "$TMP/$ref.out" "$TMP/$tag.out" || ! cmp -s "$TMP/$ref.rc" "$TMP/$tag.rc"; then
        diff "$TMP/$ref.out" "$TMP/$tag.out" | head -6 >&2
        tail -3 "$TMP/$tag.err" >&2
        fail "model: plan seed $ps ('$plan'), cases $first..$((first + n - 1)): differs from the plain run"
    fi
    [ "$(cat "$TMP/$tag.rc")" = 0 ] || fail "model: plan seed $ps: the program failed plainly"
    ! grep -q "internal error" "$TMP/$tag.err" || fail "model: plan seed $ps: an internal error was logged"
    cases=$((cases + n))
    fused=$((fused + $(count 'into one launch' "$TMP/$tag.err")))
}
cases=0; fused=0
for r in $REGRESSIONS; do IFS=: read -r ps first n <<<"$r"; model "$ps" "$first" "$n"; done
ok "model: $cases regression cases as without clshim"
cases=0; fused=0
for ps in $(seq 1 $PLANS); do model "$ps" 0 "$CASES"; done
[ "$cases" -ge $((PLANS * CASES)) ] || fail "model: only $cases cases ran"
[ "$fused" -gt 0 ] || fail "model: nothing was fused: the test exercised no fused launch"
ok "model: $cases random cases over $PLANS plans as without clshim ($fused fused sequence kinds logged)"

# 2b. Callbacks and status polling (fusion_model's observe, a generator of
#     its own): CL_COMPLETE callbacks on earlier events all fired, and the
#     queue's last command, waited for without a flush by a callback or by
#     polling its status, completed as plainly (" w!" or a missing callback
#     would have differed above) — held ones included: the log says so.
outs=(); errs=()
for ps in $(seq 1 $PLANS); do outs+=("$TMP/m${ps}_0.out"); errs+=("$TMP/m${ps}_0.err"); done
n_cb=$(cat "${outs[@]}" | grep -o ' cb[1-9][0-9]*' | wc -l)
n_wc=$(cat "${outs[@]}" | grep -o ' wc' | wc -l)
n_wp=$(cat "${outs[@]}" | grep -o ' wp' | wc -l)
[ "$n_cb" -gt 0 ] && [ "$n_wc" -gt 0 ] && [ "$n_wp" -gt 0 ] ||
    fail "model: callbacks or status polling not exercised ($n_cb streams with callbacks, $n_wc, $n_wp waits)"
[ "$(cat "${errs[@]}" | grep -c 'submitted unfused: a callback registered on a held event')" -gt 0 ] ||
    fail "model: no callback was registered on a held event"
ok "model: callbacks ($n_cb streams) and waits without a flush ($n_wc by callback, $n_wp by polling) as plainly"

# 3. `internal` (about a third of the plans' sequences carry it; the program
#    prints every buffer such a sequence may leave undefined as "x"): a plan
#    whose internal sequence is internalised in some of its cases.
cases=0; fused=0
model 15 0 20
[ "$(count 'kept in registers' "$TMP/m15_0.err")" -gt 0 ] || fail "model: plan 15 internalised nothing"
ok "model: internalised sequences leave every other buffer and event as without clshim"

# 3b. `const` (about 40 % of the plans' sequences carry it: plans 1, 4, 7
#     and 15 here): scalars baked into fused kernels, and sections 2 and 3
#     found every digest as without clshim.
baked_total=0
for ps in 1 4 7 15; do baked_total=$((baked_total + $(count 'const: [1-9][0-9]* scalar arguments* baked in' "$TMP/m${ps}_0.err"))); done
[ "$baked_total" -gt 0 ] || fail "model: no const sequence baked a scalar (plans 1, 4, 7, 15)"
ok "model: sequences with baked scalars leave every buffer and event as without clshim ($baked_total programs baked)"

# 3c. internal=KERNEL.ARG,... (half of the `internal` sequences name buffers,
#     by parameter name or index): plans whose named buffers are internalised
#     in some cases and kept, with the reason, in others.
for ps in 90 399; do
    model "$ps" 0 20
    grep -q "internal=" <<<"$("$FM" --plan "$ps")" || fail "model: plan $ps names no buffers (the generator changed)"
    [ "$(count 'kept in registers' "$TMP/m${ps}_0.err")" -gt 0 ] || fail "model: plan $ps internalised nothing"
    [ "$(count 'stored as without the option: internal=' "$TMP/m${ps}_0.err")" -gt 0 ] ||
        fail "model: plan $ps: no named buffer was kept with its reason"
done
ok "model: internal= lists leave every other buffer and event as without clshim"

# 3d. Local memory: the local family (plan seeds from 1000, fusion_model.c):
#     every launch has a local size (16 to 4096 items; sometimes another one,
#     or half the range, in one launch: group shapes that differ), and the
#     sequences mix the elementwise kernels with g0..g3, which read within
#     their work-group, mostly with force-barrier,internal. The oracle taints
#     only what a possibly fused `internal` sequence may leave undefined, so
#     each sequence's own results are compared: an intermediate put in a
#     __local array where one work-group does not produce every element it
#     reads, or an array PoCL shares among work-groups (not named
#     KERNEL.VAR, like g3's own variable), changes them. Each rule's refusal
#     must have come up: kept in local memory, an index not proven inside the
#     group (g1 reads the mirror element), an escaping pointer (g2 selects
#     between two buffers), a kernel over a smaller range, arrays over
#     clshim's 16 KiB budget (two at 4096 items), different local sizes (the
#     fusion refused: run unfused).
LOCAL_PLANS="1001 1004 1009 1012 1013"
cases=0; fused=0
grep -q 'force-barrier,internal' <<<"$(for ps in $LOCAL_PLANS; do "$FM" --plan "$ps"; done)" ||
    fail "local model: no plan has a force-barrier,internal sequence (the generator changed)"
for ps in $LOCAL_PLANS; do model "$ps" 0 $LOCAL_CASES; done
[ "$fused" -gt 0 ] || fail "local model: nothing was fused"
local_lines() { for ps in $LOCAL_PLANS; do grep -h -- "$1" "$TMP/m${ps}_0.err"; done | grep -c -v 'again [0-9]* times'; }
for what in 'kept in local memory' 'not in local memory: it is read at an index not proven inside' \
    'through a phi, select' 'a barrier cannot be forced because' "would exceed clshim's 16384-byte budget" \
    'have different local sizes'; do
    [ "$(local_lines "$what")" -gt 0 ] || fail "local model: no fusion of plans $LOCAL_PLANS logged '$what'"
done
ok "local model: $cases cases over $(wc -w <<<"$LOCAL_PLANS") plans as without clshim ($(local_lines 'kept in local memory') fused kernels with __local arrays; every refusal rule came up)"

# 4. Automatic fusion (CLSHIM_FUSION=auto, no plan): the same streams (they
#    run the plan seed's sequences, now unknown to clshim, among everything
#    else), so sequences recur, are learned and fused where proven safe.
cases=0; fused=0; learned=0
for ps in $(seq 1 $PLANS); do
    AUTO=1 model "$ps" 0 "$CASES"
    learned=$((learned + $(count 'auto: learned' "$TMP/a${ps}_0.err")))
done
[ "$cases" -ge $((PLANS * CASES)) ] || fail "auto model: only $cases cases ran"
[ "$learned" -gt 0 ] || fail "auto model: nothing was learned"
[ "$fused" -gt 0 ] || fail "auto model: nothing was fused: the test exercised no fused launch"
ok "auto model: $cases random cases over $PLANS seeds as without clshim ($learned sequences learned, $fused fused kinds logged)"
finish
