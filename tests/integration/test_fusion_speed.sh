#!/bin/bash
# Never slower (docs/fusion.md, "Never slower"): a sequence is timed fused
# against unfused now and then, and automatic fusion keeps the faster way; a
# plan's sequence stays fused, with one line when it measured slower. Fusion
# is made slower on purpose with CLSHIM_FUSION_TEST_SLOWDOWN_US (each fused
# launch first sleeps 20 ms; the unfused chain of 4 kernels over 4096 floats
# takes well under 1 ms). Every run is compared bit for bit with the plain one.
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info
FA=$PROGS/fusion_auto
fused() { occurrences "fused $1 into one launch" "$TMP/$2.err"; }
SLOWER='k1+k2+k3+k4 measured slower fused than unfused; it runs unfused and is measured again now and then'

# 1. auto, 110 iterations (each ends with clFinish): learned at the 2nd,
#    fused for 7 occurrences, measured over 12 (6 fused: the first a
#    warm-up; 6 unfused), found slower, run unfused (not even held) for the
#    next 64, measured again (12), found slower again. Without the rule all
#    108 later occurrences would be fused.
run_ref ref_chain4 "$FA" --mode chain4 --iterations 110
fresh_pocl; run_shim slow env CLSHIM_FUSION=auto CLSHIM_FUSION_TEST_SLOWDOWN_US=20000 "$FA" --mode chain4 --iterations 110
[ "$(cat "$TMP/slow.rc")" = 0 ] || fail "slow: exit code $(cat "$TMP/slow.rc")"
same_output ref_chain4 slow "slow: every buffer bit for bit as without clshim"
grep -qF "fusion: auto: $SLOWER" "$TMP/slow.err" || fail "slow: no line saying the sequence measured slower fused"
grep -qF "fusion: again 1 times: fusion: auto: $SLOWER" "$TMP/slow.err" ||
    fail "slow: not measured again after the unfused period"
n=$(fused k1+k2+k3+k4 slow)
# 7 + 6 + 6 fused, and an occurrence or two more where a completion
# callback came after the application's next enqueue.
[ "$n" -ge 19 ] && [ "$n" -le 24 ] || fail "slow: expected 19 to 24 fused launches of 108, got $n"
ok "auto: a sequence slower fused runs unfused ($n of 108 occurrences fused: the first 7 and the measurements)"

# 2. The same program with the fused launch as fast as it is: fused from
#    the 3rd occurrence on but for the measurements' unfused halves (noise
#    may find the fused chain slower once on a loaded machine: then it is
#    still fused for at least 7 + 6 + 6 occurrences).
fresh_pocl; run_shim fast env CLSHIM_FUSION=auto "$FA" --mode chain4 --iterations 110
same_output ref_chain4 fast "fast: every buffer bit for bit as without clshim"
n=$(fused k1+k2+k3+k4 fast)
[ "$n" -ge 19 ] || fail "fast: expected at least 19 fused launches, got $n"
ok "auto: a sequence as fast fused is still fused ($n of 108 occurrences)"

# 3. A plan's sequence: fused for its first 255 occurrences, measured once
#    (12 occurrences, 6 of them unfused), one warning, fused on as the
#    plan says: 290 - 6 fused launches. (5 ms per fused launch here: 290
#    of them.)
fresh_pocl; run_shim plan env CLSHIM_FUSE="k1+k2+k3+k4" CLSHIM_FUSION_TEST_SLOWDOWN_US=5000 \
    "$FA" --mode chain4 --iterations 290
run_ref ref_chain4_290 "$FA" --mode chain4 --iterations 290
same_output ref_chain4_290 plan "plan: every buffer bit for bit as without clshim"
[ "$(count 'measured slower fused' "$TMP/plan.err")" = 1 ] || fail "plan: expected one line saying it measured slower"
grep -q "clshim: fusion: plan CLSHIM_FUSE:1:1: k1+k2+k3+k4 measured slower fused (median [0-9.]* ms against [0-9.]* ms unfused, 5 occurrences each); fused as the plan says" \
    "$TMP/plan.err" || fail "plan: the line does not say what was measured"
[ "$(fused k1+k2+k3+k4 plan)" = 284 ] || fail "plan: expected 284 fused launches, got $(fused k1+k2+k3+k4 plan)"
ok "plan: a sequence slower fused is said so in one line and stays fused"
# 4. Kernels of one name, as PyOpenCL names every elementwise kernel
#    (elwise_progs: three programs, each kernel elwise_kernel): the unfused
#    occurrence of a measurement passes whole. Before, only its first kernel
#    passed and its second started a hold of the sequence's rotation: the
#    measurement never saw an unfused occurrence, so no verdict came and
#    fusion stayed on (32 of 40 fused), and on a driver without LLVM the
#    rotation's fused program, never primed, ended fusion for the process.
EP=$PROGS/elwise_progs
fresh_pocl; run_plain ref_elwise "$EP" --n 4096 --iterations 40
fresh_pocl; run_shim names env CLSHIM_FUSION=auto CLSHIM_FUSION_TEST_SLOWDOWN_US=20000 "$EP" --n 4096 --iterations 40
same_output ref_elwise names "one name: results as without clshim"
grep -qF "elwise_kernel+elwise_kernel+elwise_kernel measured slower fused than unfused" "$TMP/names.err" ||
    fail "one name: the measurement reached no verdict (no unfused occurrence timed)"
[ "$(count 'miss derived program' "$TMP/names.err")" = 1 ] || fail "one name: more than one fused program built"
n=$(fused elwise_kernel+elwise_kernel+elwise_kernel names)
[ "$n" -le 16 ] || fail "one name: $n of 38 occurrences fused, expected at most 16 (7 + 6 + a late callback or two)"
ok "kernels of one name: the unfused occurrence passes whole; measured slower, $n of 38 fused"

finish
