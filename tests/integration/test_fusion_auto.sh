#!/bin/bash
# Automatic fusion (CLSHIM_FUSION=auto, docs/fusion.md "Automatic fusion") on
# PoCL under LD_PRELOAD, with no plan: clshim learns the kernel sequences a
# program runs back to back and fuses their later occurrences only where the
# analysis proves it safe. Every run is compared bit for bit with the plain
# run (no shim); the log shows what was learned, fused and refused.
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info
FA=$PROGS/fusion_auto

# auto_vs_plain TAG ARGS...: ARGS plainly and under CLSHIM_FUSION=auto, compared.
auto_vs_plain() {
    local tag=$1; shift
    run_ref "ref_$tag" "$FA" "$@"
    fresh_pocl; run_shim "$tag" env CLSHIM_FUSION=auto "$FA" "$@"
    [ "$(cat "$TMP/$tag.rc")" = 0 ] || fail "$tag: exit code $(cat "$TMP/$tag.rc")"
    [ "$(wc -l <"$TMP/$tag.out")" -ge 5 ] || fail "$tag: missing output lines"
    same_output "ref_$tag" "$tag" "$tag: every buffer bit for bit as without clshim"
}
fused() { occurrences "fused $1 into one launch" "$TMP/$2.err"; }
# summary_says TAG TEXT WHAT: the exit summary of TAG's run begins with TEXT, else fails saying WHAT
summary_says() { grep -q "fusion summary: $2" "$TMP/$1.err" || fail "$1: $3"; }
# refused TAG: the lines saying a fusion was refused (each kind once; not
# the exit summary's repeat counts)
refused() { grep 'refused' "$TMP/$1.err" | grep -v 'fusion summary\|fusion: again [0-9]* times' || true; }

# 1. A pointwise 4-kernel chain, 6 iterations: learned after the second,
#    fused from the third on (4 fused launches), in/t1/t2/t3/out bit for bit.
auto_vs_plain chain4 --mode chain4 --iterations 6
[ "$(count 'auto: learned k1+k2+k3+k4' "$TMP/chain4.err")" = 1 ] || fail "chain4: k1+k2+k3+k4 not learned once"
[ "$(fused k1+k2+k3+k4 chain4)" = 4 ] || fail "chain4: expected 4 fused launches, got $(fused k1+k2+k3+k4 chain4)"
grep -q "fusion summary: 4 fused launches replaced 16 kernel launches; 0 held kernels submitted unfused" \
    "$TMP/chain4.err" || fail "chain4: the summary does not show 4 launches for 16"
[ -z "$(refused chain4)" ] || fail "chain4: a fusion was refused"
[ "$(count 'kept in registers' "$TMP/chain4.err")" = 0 ] || fail "chain4: automatic fusion internalised"
ok "chain4: learned after 2 occurrences, the 4 later ones fused, never internalised"

# 1b. Off by default: the same program without the knob fuses nothing.
fresh_pocl; run_shim chain4_default "$FA" --mode chain4 --iterations 6
same_output ref_chain4 chain4_default "chain4 without CLSHIM_FUSION: as without clshim"
[ "$(count 'fused \|auto: learned' "$TMP/chain4_default.err")" = 0 ] || fail "chain4: fused without CLSHIM_FUSION=auto"
ok "automatic fusion is off by default"

# 1c. An invalid value is reported as any other invalid knob, fusion stays off.
fresh_pocl; run_shim chain4_bad env CLSHIM_FUSION=always "$FA" --mode chain4 --iterations 4
run_ref ref_chain4_4 "$FA" --mode chain4 --iterations 4
same_output ref_chain4_4 chain4_bad "CLSHIM_FUSION=always: as without clshim"
grep -q 'CLSHIM_FUSION' "$TMP/chain4_bad.err" || fail "CLSHIM_FUSION=always: not reported"
[ "$(count 'fused \|auto: learned' "$TMP/chain4_bad.err")" = 0 ] || fail "CLSHIM_FUSION=always: something fused"
ok "CLSHIM_FUSION=always is reported and fuses nothing"

# refused_case TAG SEQUENCE REASON: run --mode TAG; SEQUENCE learned after
#    2 occurrences, then refused with REASON (one line) at the 3rd, not held
#    at the 4th (the back-off), refused again at the 5th, not held at the
#    6th; every buffer bit for bit.
refused_case() {
    local tag=$1 seq=$2 reason=$3
    auto_vs_plain "$tag" --mode "$tag" --iterations 6
    [ "$(fused "$seq" "$tag")" = 0 ] || fail "$tag: $seq was fused"
    [ "$(refused "$tag" | wc -l)" = 1 ] || fail "$tag: expected one refusal line"
    refused "$tag" | grep -qF "$seq (plan auto) refused: $reason" || fail "$tag: the refusal does not say '$reason'"
    refused "$tag" | grep -qF "; submitted unfused, tried again after a back-off" ||
        fail "$tag: the refusal does not say it is tried again"
    grep -q "fusion summary: 0 fused launches replaced 0 kernel launches; 4 held kernels submitted unfused; 2 fusions refused" \
        "$TMP/$tag.err" || fail "$tag: not held twice, each time refused, with the back-off between"
}

# 2. A neighbour-reading stencil after a pointwise kernel.
refused_case stencil k1+blur "needs a barrier: kernel 'blur' reads 'in' at an index"
ok "stencil: refused (needs a barrier), held again only after a back-off"

# 2b. The back-off doubles with each refusal in a row: of 38 occurrences
#     after the learning, the 1st, 3rd and 6th are held (skipping 1, 2);
#     the third refusal in a row for the fused program's key retires the
#     sequence (no shorter window to learn), and its kernels then go to
#     the driver as quiet ones (the "runs not watched"): a sequence the
#     analysis always refuses costs no more than no fusion.
auto_vs_plain stencil_long --mode stencil --iterations 40
grep -q "fusion summary: 0 fused launches replaced 0 kernel launches; 6 held kernels submitted unfused; 3 fusions refused" \
    "$TMP/stencil_long.err" || fail "stencil_long: expected 3 refusals in 38 occurrences (a doubling back-off, then retired)"
grep -q "k1+blur (plan auto) refused: needs a barrier: .*; submitted unfused, not tried again in this process: refused for its key 3 times in a row" \
    "$TMP/stencil_long.err" || fail "stencil_long: the third refusal does not say the sequence is retired"
notwatched=$(sed -n 's/.*replays; \([0-9]*\) runs not watched.*/\1/p' "$TMP/stencil_long.err")
[ "${notwatched:-0}" -ge 30 ] || fail "stencil_long: $notwatched runs not watched after the retirement, expected 30 or more"
ok "stencil, 40 iterations: held and refused 3 times (back-off 1, 2), then retired ($notwatched runs not watched)"

# 3. An aliasing pair (sub-buffers of one parent).
refused_case alias k1+k2 "sub-buffer arguments (they may alias)"
grep -q '^parent ' "$TMP/alias.out" || fail "alias: the parent buffer was not compared"
ok "alias: sub-buffers of one parent refused, parent bit for bit"

# 3b. A refusal is not for the rest of the process: the same pair aliases in
#     its first 4 iterations and runs on separate buffers from the 5th on.
#     Refused at the 3rd, not held at the 4th, fused from the 5th on.
auto_vs_plain unalias --mode unalias --iterations 10
grep -q '^parent ' "$TMP/unalias.out" || fail "unalias: the parent buffer was not compared"
[ "$(refused unalias | grep -c 'k1+k2 (plan auto) refused: sub-buffer arguments')" = 1 ] ||
    fail "unalias: expected the aliasing refusal once"
[ "$(fused k1+k2 unalias)" = 6 ] || fail "unalias: expected 6 fused launches once the buffers are separate, got $(fused k1+k2 unalias)"
grep -q "fusion summary: 6 fused launches replaced 12 kernel launches; 2 held kernels submitted unfused; 1 fusions refused" \
    "$TMP/unalias.err" || fail "unalias: the summary does not show 1 refusal then 6 fused launches"
ok "unalias: refused while the buffers alias, fused once they no longer do"

# 4. A chain broken by syncs: k1 | k2 | k3 k4. Only k3+k4 runs back to back;
#    nothing across a clFinish is ever fused.
auto_vs_plain sync --mode sync --iterations 6
[ "$(fused k3+k4 sync)" = 4 ] || fail "sync: expected k3+k4 fused 4 times"
[ "$(count 'fused k1+\|fused k2+\|learned k1\|learned k2' "$TMP/sync.err")" = 0 ] ||
    fail "sync: kernels separated by clFinish were fused"
ok "sync: nothing fused across clFinish; the unbroken k3+k4 fused"

# 4b. A host wait splits the chain as clFinish does: k1 | wait | k2 k3. Only
#     k2+k3 is learned and fused; k1 is never held (it would be submitted at
#     the wait every time).
auto_vs_plain waitmid --mode waitmid --iterations 6
[ "$(count 'learned k1' "$TMP/waitmid.err")" = 0 ] || fail "waitmid: a sequence across clWaitForEvents was learned"
[ "$(count 'auto: learned k2+k3' "$TMP/waitmid.err")" = 1 ] || fail "waitmid: k2+k3 not learned"
[ "$(fused k2+k3 waitmid)" = 4 ] || fail "waitmid: expected k2+k3 fused 4 times, got $(fused k2+k3 waitmid)"
summary_says waitmid "4 fused launches replaced 8 kernel launches; 0 held kernels submitted unfused" \
    "kernels were held and submitted at the wait"
ok "waitmid: clWaitForEvents ends the run; k2+k3 after it fused 4 times, nothing held across the wait"

# 5. The same pair enqueued over and over without syncs: the run's period
#    is learned when the pair has come twice.
auto_vs_plain pairs --mode pairs --iterations 8
[ "$(fused k1+k2 pairs)" = 6 ] || fail "pairs: expected 6 fused launches, got $(fused k1+k2 pairs)"
ok "pairs: a loop without syncs is learned and fused"

# 5a. A step whose first kernel recurs inside it (k1 k1 k2 k3 per iteration,
#     no syncs; PyOpenCL's `s*x + c` is two kernels of one name): the run's
#     period, the whole step, is learned after two steps and fused from the
#     third; nothing held is ever broken off.
auto_vs_plain steps --mode steps --iterations 10
[ "$(grep 'auto: learned' "$TMP/steps.err")" = \
  "clshim: fusion: auto: learned k1+k1+k2+k3 (the period of a run enqueued without syncs); its next occurrences are fused if proven safe" ] ||
    fail "steps: not the whole step k1+k1+k2+k3 alone learned, as the run's period"
summary_says steps "8 fused launches replaced 32 kernel launches; 0 held kernels submitted unfused" \
    "not 8 steps fused whole, or held kernels submitted unfused"
ok "steps: the period k1+k1+k2+k3 learned, 8 of 10 steps fused whole"

# 5a'. The same loop found from two places (PyOpenCL array code in blocks
#     of steps ended by a sync): the period is learned from a lone k3 on
#     (k3+k1+k1+k2+k1+k2); while a measurement lets occurrences pass unheld
#     (the never-slower rule) a block starts at k1 and the run's period is
#     found again as k1+k1+k2+k1+k2+k3, and later as two of its steps. Each
#     is the learned loop begun elsewhere: learned, it would build a second
#     fused program and take the first one's kernels. Before, it was.
auto_vs_plain exprblocks --mode exprblocks --iterations 60
[ "$(grep -c 'auto: learned' "$TMP/exprblocks.err")" = 1 ] ||
    fail "exprblocks: expected k3+k1+k1+k2+k1+k2 alone learned, got: $(grep 'auto: learned' "$TMP/exprblocks.err")"
grep -qF 'auto: k1+k1+k2+k1+k2+k3 not learned: the sequence at auto is the same loop begun elsewhere' \
    "$TMP/exprblocks.err" || fail "exprblocks: the loop begun at k1 was not found and refused"
[ "$(count 'derived program' "$TMP/exprblocks.err")" = 1 ] || fail "exprblocks: more than one fused program"
ok "exprblocks: the loop found again from another kernel is not learned twice"

# 5a''. Wait lists that name events of launches fused before, held by
#     clshim alone (the application released them, as PyOpenCL does), whose
#     completion callbacks run on the driver's thread while the next fused
#     launch is made. The launch read such an event's record and real event
#     unretained: a callback could free both in between (a crash inside the
#     driver's clEnqueueNDRangeKernel on an H200 in 2 of 9 PyOpenCL runs;
#     under make check-sanitize a use after free). 2000 iterations of tiny
#     kernels make the completions come during launches. At 256 floats the
#     never-slower rule may find the chain slower fused and run it unfused
#     between measurements: then 7 + 6 fused launches and 6 per later
#     measurement (after 64, 128, ... occurrences), at least 30 in all.
auto_vs_plain events --mode events --iterations 2000 --n 256
n=$(fused k1+k2+k3 events)
[ "$n" -ge 30 ] || fail "events: expected k1+k2+k3 fused at least 30 times, got $n"
ok "events: $n fused launches waiting on events of earlier ones, results as without clshim"

# 5b. Windows of a refused sequence: k1 k2 blur k3 k4 needs a barrier
#     (blur reads k2's output around its index). Refused at its 3rd
#     occurrence, its windows are learned longest first from the left, one
#     an occurrence: k1+k2+blur+k3 (refused), k1+k2+blur (refused), k1+k2
#     (fused from the 6th on); the rest after it, blur+k3+k4, is learned as
#     k1+k2 first fuses, and fuses from that same occurrence on.
auto_vs_plain windows --mode windows --iterations 10
for w in k1+k2+blur+k3 k1+k2+blur k1+k2; do
    [ "$(count "auto: learned $w (a window of " "$TMP/windows.err")" = 1 ] || fail "windows: window $w not learned once"
done
[ "$(count 'auto: learned blur+k3+k4 (the rest of a run after k1+k2, which fused)' "$TMP/windows.err")" = 1 ] ||
    fail "windows: the rest after the fused window was not learned"
[ "$(count 'auto: learned k2+\|auto: learned blur+k3 \|auto: learned k3' "$TMP/windows.err")" = 0 ] ||
    fail "windows: a window past the fused ones was learned"
[ "$(fused k1+k2 windows)" = 5 ] || fail "windows: expected k1+k2 fused 5 times, got $(fused k1+k2 windows)"
[ "$(fused blur+k3+k4 windows)" = 5 ] || fail "windows: expected blur+k3+k4 fused 5 times, got $(fused blur+k3+k4 windows)"
[ "$(refused windows | grep -c 'not tried again: a shorter window of it is learned instead')" = 3 ] ||
    fail "windows: expected 3 refusals, each retiring its sequence"
ok "windows: the refused k1+k2+blur+k3+k4 fuses as k1+k2 and blur+k3+k4"

# 5c. A learned sequence the program stops completing: k1+k2 learned in the
#     first two iterations, then k1 blur. Held k1 broken off by blur costs
#     the wait for nothing, so k1+k2 backs off as after a refusal, doubling:
#     of 38 occurrences it is held at the 1st, 3rd, 6th, 11th, 20th and 37th
#     (without the back-off, at all 38).
auto_vs_plain broken --mode broken --iterations 40
[ "$(occurrences "'blur' breaks the sequence (expected 'k2')" "$TMP/broken.err")" = 6 ] ||
    fail "broken: k1+k2 held $(occurrences "'blur' breaks the sequence" "$TMP/broken.err") times, not 6 (a doubling back-off)"
ok "broken: a learned sequence broken off backs off (held 6 times in 38)"

# 5d. The bundled demo (examples/pipeline), no plan: its five-kernel run is
#     refused (partial_sum has a local size); the window standardize+gain+
#     clamp01+histogram16 fuses, the part the shipped plan fuses with it.
fresh_pocl; run_plain ref_demo "$CLSHIM_BUILD/examples/pipeline" 65536 8
fresh_pocl; run_shim demo env CLSHIM_FUSION=auto "$CLSHIM_BUILD/examples/pipeline" 65536 8
same_output ref_demo demo "demo: as without clshim"
[ "$(occurrences 'fused standardize+gain+clamp01' "$TMP/demo.err")" -ge 4 ] ||
    fail "demo: standardize+gain+clamp01 was not fused ($(occurrences 'fused standardize+gain+clamp01' "$TMP/demo.err") launches)"
ok "demo: auto fuses a window with standardize+gain+clamp01 ($(grep -o 'fused standardize[a-z0-9+]*' "$TMP/demo.err" | sort -u | tr '\n' ' '))"

# 5e. Kernel objects created and released in every iteration: learned by
#     name, fused.
auto_vs_plain recreate --mode recreate --iterations 6
[ "$(fused k1+k2+k3 recreate)" = 4 ] || fail "recreate: expected 4 fused launches, got $(fused k1+k2+k3 recreate)"
ok "recreate: kernels recreated every iteration are learned and fused"

# A library that releases each kernel right after its enqueue (CLBlast):
# the learned k1+k2 is held and ended by the release at each occurrence;
# it backs off like a broken sequence (1, 2, 4, ... occurrences), so of 38
# occurrences after learning at most 8 are held (38 without the back-off).
auto_vs_plain release --mode release --iterations 40
held_released=$(occurrences "submitted unfused: release of a held kernel" "$TMP/release.err")
[ "$held_released" -ge 1 ] && [ "$held_released" -le 8 ] ||
    fail "release: $held_released holds ended by a release (expected 1 to 8)"
ok "release: kernels released right after their enqueue: $held_released of 38 occurrences held, results as plain"

# 6. Learning is per queue and repeats of a sequence are not learned twice;
#    a sequence the user's plan already names is not learned again.
fresh_pocl; run_shim planned env CLSHIM_FUSION=auto CLSHIM_FUSE="k1+k2+k3+k4" "$FA" --mode chain4 --iterations 6
same_output ref_chain4 planned "chain4 with a plan and auto: as without clshim"
[ "$(fused k1+k2+k3+k4 planned)" = 6 ] || fail "planned: expected 6 fused launches (the plan fuses from the first)"
[ "$(count 'auto: learned' "$TMP/planned.err")" = 0 ] || fail "planned: a planned sequence was learned"
ok "with a plan: its sequences fuse from the first occurrence, nothing learned on top"

finish
