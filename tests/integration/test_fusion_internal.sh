#!/bin/bash
# The `internal` fusion option (docs/fusion.md, "Internalisation") on PoCL
# under LD_PRELOAD: intermediates written by one kernel and read by a later
# one stay in registers and are never stored. Every buffer that is not
# internalised must match the plain run bit for bit; the internalised ones
# must keep their initial contents (zeros: proof they were never stored).
# Where the escape rules fail, the buffer is stored as without the option,
# with one log line saying why, and everything matches the plain run.
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info
FI=$PROGS/fusion_internal

# lines BUFFERS TAG: the output lines of the named buffers
lines() { grep -E "^($1) " "$TMP/$2.out"; }
# zero HASH: the hash of a zeroed buffer (the program's u buffer is never zero)
zero_hash() { run_ref zeros "$FI" --mode chain4 --iterations 0; lines t1 zeros | cut -d' ' -f2; }
ZERO=$(zero_hash)
kept_lines() { count 'internal: stored as without the option' "$TMP/$1.err"; }

# 1. A 4-kernel chain in -> t1 -> t2 -> t3 -> out, internalised: in, u, out
#    bit for bit; t1..t3 never stored.
run_ref ref_chain4 "$FI" --mode chain4
fresh_pocl; run_shim chain4 env CLSHIM_FUSE="k1+k2+k3+k4:internal" "$FI" --mode chain4
[ "$(cat "$TMP/chain4.rc")" = 0 ] || fail "chain4: exit code $(cat "$TMP/chain4.rc")"
[ "$(lines 'in|u|out' chain4)" = "$(lines 'in|u|out' ref_chain4)" ] || fail "chain4: in/u/out differ from the plain run"
[ "$(lines 'in|u|out' chain4 | wc -l)" = 3 ] || fail "chain4: missing output lines"
for t in t1 t2 t3; do
    [ "$(lines $t chain4 | cut -d' ' -f2)" = "$ZERO" ] || fail "chain4: $t was stored"
    [ "$(lines $t ref_chain4 | cut -d' ' -f2)" != "$ZERO" ] || fail "chain4: $t is zero in the plain run too (test is blind)"
done
[ "$(occurrences 'fused k1+k2+k3+k4 into one launch' "$TMP/chain4.err")" = 2 ] || fail "chain4: expected 2 fused launches"
grep -q 'k1+k2+k3+k4: internal: 3 buffers kept in registers' "$TMP/chain4.err" || fail "chain4: no internalisation line"
[ "$(kept_lines chain4)" = 0 ] || fail "chain4: a buffer was kept in memory"
ok "chain4: 4 kernels fused, t1..t3 kept in registers, in/u/out bit for bit"

# 1b. The option is in the fused program's key: the same chain fused without
#     it, on the same cache, stores every buffer (all match the plain run).
fresh_pocl; run_shim chain4_plainfuse env CLSHIM_FUSE="k1+k2+k3+k4" "$FI" --mode chain4
same_output ref_chain4 chain4_plainfuse "chain4 without internal after it: every buffer as plain"
[ "$(occurrences 'fused k1+k2+k3+k4 into one launch' "$TMP/chain4_plainfuse.err")" = 2 ] || fail "chain4 plain fuse: not fused"
[ "$(count 'hit derived program' "$TMP/chain4_plainfuse.err")" = 0 ] || fail "chain4 plain fuse: the internal program was reused"
fresh_pocl; run_shim chain4_again env CLSHIM_FUSE="k1+k2+k3+k4:internal" "$FI" --mode chain4
cmp -s "$TMP/chain4.out" "$TMP/chain4_again.out" || fail "chain4 from the cache: output differs"
[ "$(count 'hit derived program' "$TMP/chain4_again.err")" = 1 ] || fail "chain4 again: the internal program was not a hit"
ok "the internal option is part of the fused program's cache key"

# 1c. The extension API's property CL_FUSION_INTERNAL_CLSHIM.
fresh_pocl; run_shim chain4_ext env CLSHIM_CACHE_DIR="$TMP/ext-cache" "$FI" --mode chain4 --ext 1
grep -q 'ext: present' "$TMP/chain4_ext.err" || fail "ext: the extension is absent"
[ "$(lines 'in|u|out' chain4_ext)" = "$(lines 'in|u|out' ref_chain4)" ] || fail "ext: in/u/out differ from the plain run"
for t in t1 t2 t3; do [ "$(lines $t chain4_ext | cut -d' ' -f2)" = "$ZERO" ] || fail "ext: $t was stored"; done
grep -q 'internal: 3 buffers kept in registers' "$TMP/chain4_ext.err" || fail "ext: no internalisation line"
ok "extension API: CL_FUSION_INTERNAL_CLSHIM internalises t1..t3"

# kept TAG MODE PLAN PATTERN: fused, nothing internalised, everything as the
# plain run, exactly one line saying why, matching PATTERN.
kept() {
    local tag=$1 mode=$2 plan=$3 pattern=$4
    run_ref "ref_$tag" "$FI" --mode "$mode"
    fresh_pocl; run_shim "$tag" env CLSHIM_FUSE="$plan" "$FI" --mode "$mode"
    same_output "ref_$tag" "$tag" "$tag: every buffer as in the plain run"
    [ "$(occurrences "fused ${plan%%:*} into one launch" "$TMP/$tag.err")" = 2 ] || fail "$tag: expected 2 fused launches"
    [ "$(kept_lines "$tag")" = 1 ] || fail "$tag: expected one 'stored as without the option' line"
    grep 'internal: stored as without the option' "$TMP/$tag.err" | grep -q -- "$pattern" ||
        fail "$tag: the line does not say '$pattern'"
    [ "$(count 'kept in registers' "$TMP/$tag.err")" = 0 ] || fail "$tag: something was internalised"
    ok "$tag: stored as without the option, one line: $pattern"
}

# 2. An escaping pointer (selected between two buffers): refused with the line.
kept escape escape "k1+pick:internal,force-barrier" "'t1' of 'k1': kernel 'pick' uses 't1' through a phi, select"
# 3. A buffer read in the sequence before it is written.
kept readfirst readfirst "early+k1+k2:internal" "'t1' of 'k1': kernel 'early' reads it before kernel 'k1' writes it"
# 4. Read and written back by its first writer: the load cannot be forwarded.
kept inplace inplace "twice+k2:internal" "'t1' of 'twice': the fused kernel still loads it"

# 5. internal=KERNEL.ARG: only the named buffers are internalised (by name or
#    by index); the un-named intermediate t3 is stored and holds the plain
#    run's values.
fresh_pocl; run_shim named env CLSHIM_FUSE="k1+k2+k3+k4:internal=k1.t1,k3.0" "$FI" --mode chain4
[ "$(lines 'in|u|out|t3' named)" = "$(lines 'in|u|out|t3' ref_chain4)" ] || fail "named: in/u/out/t3 differ from the plain run"
for t in t1 t2; do [ "$(lines $t named | cut -d' ' -f2)" = "$ZERO" ] || fail "named: $t was stored"; done
[ "$(occurrences 'fused k1+k2+k3+k4 into one launch' "$TMP/named.err")" = 2 ] || fail "named: expected 2 fused launches"
grep -q "k1+k2+k3+k4: internal: 2 buffers kept in registers ('t1' of 'k1', 't2' of 'k2')" "$TMP/named.err" ||
    fail "named: the line does not name exactly t1 and t2"
[ "$(kept_lines named)" = 0 ] || fail "named: a line says a buffer was kept"
ok "internal=k1.t1,k3.0: t1 and t2 kept in registers, t3 stored with the plain run's values"

# 5b. The list is in the key: another list on the same cache builds anew.
cat >"$TMP/named.plan" <<'PLAN'
# a plan file naming one buffer by its reader's parameter
fuse k1 k2 k3 k4 internal=k4.t3
PLAN
fresh_pocl; run_shim named_file env CLSHIM_FUSION_PLAN="$TMP/named.plan" "$FI" --mode chain4
[ "$(lines 'in|u|out|t1|t2' named_file)" = "$(lines 'in|u|out|t1|t2' ref_chain4)" ] || fail "named file: in/u/out/t1/t2 differ"
[ "$(lines t3 named_file | cut -d' ' -f2)" = "$ZERO" ] || fail "named file: t3 was stored"
grep -q "internal: 1 buffer kept in registers ('t3' of 'k3')" "$TMP/named_file.err" || fail "named file: no line for t3"
[ "$(count 'hit derived program' "$TMP/named_file.err")" = 0 ] || fail "named file: another list's program was reused"
ok "plan file: internal=k4.t3 keeps only t3 in registers; the list is part of the key"

# 5c. A named buffer that is not an intermediate: stored, with one line.
fresh_pocl; run_shim named_input env CLSHIM_FUSE="k1+k2+k3+k4:internal=k1.in,k2.t2" "$FI" --mode chain4
[ "$(lines 'in|u|out|t1|t3' named_input)" = "$(lines 'in|u|out|t1|t3' ref_chain4)" ] || fail "named input: outputs differ"
[ "$(kept_lines named_input)" = 1 ] || fail "named input: expected one 'stored as without the option' line"
grep 'internal: stored as without the option' "$TMP/named_input.err" |
    grep -q "internal=k1.in: it is not written by one kernel of the sequence and read by a later one" ||
    fail "named input: the line does not give the reason"
grep -q "internal: 1 buffer kept in registers ('t2' of 'k2')" "$TMP/named_input.err" || fail "named input: t2 not internalised"
ok "internal= naming an input: stored, one line why; the other named buffer internalised"

# 5d. A kernel the sequence lacks: an invalid plan (file:line:column), fusion
#     off, the program runs as plain.
fresh_pocl; run_shim named_badk env CLSHIM_FUSE="k1+k2+k3+k4:internal=k1.t1,k9.t" "$FI" --mode chain4
same_output ref_chain4 named_badk "unknown kernel in internal=: every buffer as plain"
grep -q "invalid fusion plan: CLSHIM_FUSE:1:28: internal=: kernel 'k9' is not in the sequence; fusion is off" \
    "$TMP/named_badk.err" || fail "unknown kernel: no invalid-plan line with its position"
ok "internal= naming an unknown kernel: invalid plan at CLSHIM_FUSE:1:28"

# 5e. A parameter the kernel lacks: found when fusing; refused with the plan's
#     position, the kernels run unfused.
fresh_pocl; run_shim named_badp env CLSHIM_FUSE="k1+k2+k3+k4:internal=k2.nope" "$FI" --mode chain4
same_output ref_chain4 named_badp "unknown parameter in internal=: every buffer as plain"
grep -q "fusion of k1+k2+k3+k4 (plan CLSHIM_FUSE:1:1) refused: internal=k2.nope: the kernel has no such parameter" \
    "$TMP/named_badp.err" || fail "unknown parameter: no refusal line"
ok "internal= naming an unknown parameter: fusion refused with the reason, plain results"

# 5f. The extension API's CL_FUSION_INTERNAL_ARGS_CLSHIM.
fresh_pocl; run_shim named_ext env CLSHIM_CACHE_DIR="$TMP/ext-cache" "$FI" --mode chain4 --ext 1 --ext-args k2.t2
[ "$(lines 'in|u|out|t1|t3' named_ext)" = "$(lines 'in|u|out|t1|t3' ref_chain4)" ] || fail "named ext: outputs differ"
[ "$(lines t2 named_ext | cut -d' ' -f2)" = "$ZERO" ] || fail "named ext: t2 was stored"
grep -q "internal: 1 buffer kept in registers ('t2' of 'k2')" "$TMP/named_ext.err" || fail "named ext: no line for t2"
ok "extension API: CL_FUSION_INTERNAL_ARGS_CLSHIM=\"k2.t2\" keeps only t2 in registers"

# 6. Local memory: nbr reads t1 at its neighbour's element within the
#    work-group, so a barrier is forced between the bodies and one
#    work-group produces and consumes each element: t1 lives in a __local
#    array (never stored), everything else is the plain run's bit for bit.
#    4 Mi elements: enough work-groups run at once on PoCL that an array
#    shared among them (not per work-group) gives another `out` (PoCL takes
#    a __local global as per work-group only when named KERNEL.VAR).
NBR_N=4194304
run_ref zeros_nbr "$FI" --mode nbr --iterations 0 --n $NBR_N
ZERO_NBR=$(lines t1 zeros_nbr | cut -d' ' -f2)
run_ref ref_nbr "$FI" --mode nbr --n $NBR_N
[ "$(lines t1 ref_nbr | cut -d' ' -f2)" != "$ZERO_NBR" ] || fail "nbr: t1 is zero in the plain run (test is blind)"
for plan in "k1+nbr:force-barrier,internal" "k1+nbr:force-barrier,internal=nbr.t1"; do
    fresh_pocl; run_shim nbr env CLSHIM_FUSE="$plan" "$FI" --mode nbr --n $NBR_N
    [ "$(cat "$TMP/nbr.rc")" = 0 ] || fail "nbr ($plan): exit code $(cat "$TMP/nbr.rc")"
    [ "$(lines 'in|t2|t3|u|out' nbr)" = "$(lines 'in|t2|t3|u|out' ref_nbr)" ] || fail "nbr ($plan): outputs differ"
    [ "$(lines 'in|t2|t3|u|out' nbr | wc -l)" = 5 ] || fail "nbr ($plan): missing output lines"
    [ "$(lines t1 nbr | cut -d' ' -f2)" = "$ZERO_NBR" ] || fail "nbr ($plan): t1 was stored"
    [ "$(occurrences 'fused k1+nbr into one launch' "$TMP/nbr.err")" = 2 ] || fail "nbr ($plan): expected 2 fused launches"
    grep -q "k1+nbr: internal: 1 buffer kept in local memory ('t1' of 'k1')" "$TMP/nbr.err" ||
        fail "nbr ($plan): no local-memory line"
    [ "$(kept_lines nbr)" = 0 ] || fail "nbr ($plan): a buffer was kept in memory"
    ok "nbr ($plan): t1 kept in local memory, every other buffer bit for bit"
done

# 6b. A kernel with a __local variable of its own (grp: its group's first
#     element, written by local id 0), fused after k1 with a forced barrier,
#     over 4 Mi elements as in 6. The fused kernel must keep one variable
#     per work-group: PoCL does so only for a variable named after the
#     kernel using it ("KERNEL.VAR"), and grp's was named "grp.first" in
#     clshim_fused (shared among work-groups: out differed in most runs).
#     6 iterations fold into out, so one race in any of them shows.
run_ref ref_ownlocal "$FI" --mode ownlocal --n $NBR_N --iterations 6
for plan in "k1+grp:force-barrier" "k1+grp:force-barrier,internal"; do
    fresh_pocl; run_shim ownlocal env CLSHIM_FUSE="$plan" "$FI" --mode ownlocal --n $NBR_N --iterations 6
    [ "$(occurrences 'fused k1+grp into one launch' "$TMP/ownlocal.err")" = 6 ] || fail "ownlocal ($plan): expected 6 fused launches"
    if [ "${plan#*internal}" = "$plan" ]; then
        same_output ref_ownlocal ownlocal "ownlocal ($plan): every buffer as plain"
    else
        [ "$(lines 'in|t2|t3|u|out' ownlocal)" = "$(lines 'in|t2|t3|u|out' ref_ownlocal)" ] || fail "ownlocal ($plan): outputs differ"
        grep -q "k1+grp: internal: 1 buffer kept in registers ('t1' of 'k1')" "$TMP/ownlocal.err" ||
            fail "ownlocal ($plan): t1 not kept in registers (grp reads it at its own element only)"
        ok "ownlocal ($plan): t1 in registers, grp's variable per work-group, every other buffer as plain"
    fi
done

# 7. Read outside the work-group (far reads the next element over the whole
#    range): stored, with the reason.
kept far far "k1+far:force-barrier,internal" \
    "'t1' of 'k1': a barrier separates the kernels (so not in registers), and not in local memory: it is read at an index not proven inside the work-group's elements"

finish
