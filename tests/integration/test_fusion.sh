#!/bin/bash
# Kernel fusion in unmodified programs (docs/fusion.md), on PoCL under
# LD_PRELOAD. Every run is compared bit for bit with the same program run
# without clshim; the log shows what was fused, cancelled or refused.
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info
FC=$PROGS/fusion_chain
FE=$PROGS/fusion_ext
PLAN="offset+scale+square;blend+offset+square"

# shim_vs_plain TAG PLAN ARGS...: runs ARGS plainly and under the plan, compares.
shim_vs_plain() {
    local tag=$1 plan=$2; shift 2
    run_ref "ref_$tag" "$@"
    fresh_pocl; run_shim "$tag" env CLSHIM_FUSE="$plan" "$@"
    same_output "ref_$tag" "$tag" "$tag: same results as without clshim"
}
fused() { occurrences "fused $1 into one launch" "$TMP/$2.err"; }

# 1. A 3-kernel chain fused by plan: one launch instead of three, each time.
shim_vs_plain chain "$PLAN" "$FC" --mode chain
[ "$(fused offset+scale+square chain)" = 3 ] || fail "chain: expected 3 fused launches"
grep -q "fusion summary: 3 fused launches replaced 9 kernel launches" "$TMP/chain.err" ||
    fail "chain: summary does not show 3 launches instead of 9"
[ "$(count 'building the fused kernel' "$TMP/chain.err")" = 1 ] || fail "chain: fused kernel built more than once"
ok "chain: offset+scale+square fused, 3 real launches instead of 9"

# 1b. CLSHIM_CACHE=0 turns the cache off, not fusion.
fresh_pocl; run_shim nocache env CLSHIM_CACHE=0 CLSHIM_FUSE="$PLAN" "$FC" --mode chain
same_output ref_chain nocache "CLSHIM_CACHE=0: same results"
[ "$(fused offset+scale+square nocache)" = 3 ] || fail "CLSHIM_CACHE=0: fusion is off"
[ "$(count 'hit \|miss \|stored ' "$TMP/nocache.err")" = 0 ] || fail "CLSHIM_CACHE=0: the cache was used"
ok "CLSHIM_CACHE=0: fused as with the cache on, nothing cached"

# 2. Second run: the fused program comes from the cache; LLVM is never loaded.
fresh_pocl; run_shim second env CLSHIM_FUSE="$PLAN" "$FC" --mode maps
same_output ref_chain second "second run: same results"
[ "$(count 'hit derived program' "$TMP/second.err")" = 1 ] || fail "second run: no hit for the fused program"
[ "$(count 'building the fused kernel\|miss derived' "$TMP/second.err")" = 0 ] || fail "second run: fused kernel rebuilt"
grep -q "llvm-mapped=0" "$TMP/second.err" || fail "second run: libclshim-llvm.so was loaded"
[ "$(fused offset+scale+square second)" = 3 ] || fail "second run: expected 3 fused launches"
fresh_pocl; run_shim cold env CLSHIM_CACHE_DIR="$TMP/cold-cache" CLSHIM_FUSE="$PLAN" "$FC" --mode maps
grep -q "llvm-mapped=1" "$TMP/cold.err" || fail "cold run: the maps check does not see libclshim-llvm.so"
ok "second run: fused program from the cache, libclshim-llvm.so not loaded"

# 2b. A program built with options: PoCL gives argument info only with
#     -cl-kernel-arg-info (or no options), so clshim adds it while fusion is
#     armed; the application still sees its own options. Fused cold and warm.
OPTS="-cl-mad-enable -DUNUSED=1"
shim_vs_plain opts "$PLAN" "$FC" --mode chain --options "$OPTS"
grep -q "^build options: '$OPTS'$" "$TMP/opts.out" || fail "options: the build options query changed"
[ "$(fused offset+scale+square opts)" = 3 ] || fail "options: expected 3 fused launches"
fresh_pocl; run_shim opts2 env CLSHIM_FUSE="$PLAN" "$FC" --mode chain --options "$OPTS"
same_output ref_opts opts2 "options, second run: same results"
[ "$(fused offset+scale+square opts2)" = 3 ] || fail "options, second run: expected 3 fused launches"
[ "$(count '^clshim: hit [0-9a-f]* on' "$TMP/opts2.err")" = 1 ] || fail "options, second run: the program was not a hit"
[ "$(count 'hit derived program' "$TMP/opts2.err")" = 1 ] || fail "options, second run: the fused program was not a hit"
ok "options: a program built with options fuses, cold and from the cache"

# 2b'. Arming changes the build of a program only when its source names a
#      planned kernel: under a plan naming none of its kernels, a program
#      built with options keeps its options, so its cache entry is the one
#      an unarmed run stored (a hit).
fresh_pocl; run_shim unarmed_x "$FC" --mode chain --options "-DX=1"
fresh_pocl; run_shim other_plan env CLSHIM_FUSE="nothere+absent" "$FC" --mode chain --options "-DX=1"
same_output unarmed_x other_plan "other plan: same results"
[ "$(count '^clshim: hit [0-9a-f]* on' "$TMP/other_plan.err")" = 1 ] || fail "other plan: the unarmed run's entry was not hit"
[ "$(count 'kernel-arg-info added' "$TMP/other_plan.err")" = 0 ] || fail "other plan: -cl-kernel-arg-info was added"
ok "a plan naming none of a program's kernels leaves its build and cache key alone"

# 2c. A program created from SPIR-V (the same kernels): its IR comes from the
#     IL through the translator; same results as the source program plainly.
"$FC" --print-source >"$TMP/chain.cl"
clang-15 -x cl -target spir64 -cl-std=CL1.2 -emit-llvm -c -Xclang -no-opaque-pointers \
    -o "$TMP/chain.bc" "$TMP/chain.cl" || fail "il: clang-15 failed"
llvm-spirv-15 "$TMP/chain.bc" -o "$TMP/chain.spv" || fail "il: llvm-spirv-15 failed"
fresh_pocl; run_shim il env CLSHIM_FUSE="$PLAN" "$FC" --mode chain --il "$TMP/chain.spv"
same_output ref_chain il "il: same results as the source program without clshim"
[ "$(fused offset+scale+square il)" = 3 ] || { grep -v "^clshim: \(lookup\|hit\|miss\)" "$TMP/il.err" >&2; fail "il: expected 3 fused launches"; }
grep -q 'translated SPIR-V program' "$TMP/il.err" || fail "il: the program was not translated"
ok "il: kernels of a SPIR-V program fuse"

# 2d. An unmodified PyOpenCL program: ElementwiseKernel's byte offsets and
#     grid-stride loops fuse, the loops merged into one; slices offsetting
#     the shared buffer differently are refused; every result as without
#     clshim.
PY=${COMPAT_PYTHON:-/usr/bin/python3}
"$PY" -c 'import pyopencl, numpy' || fail "pyopencl: python3-pyopencl is missing (make check installs it)"
run_ref ref_py "$PY" "$CLSHIM_ROOT/tests/integration/progs/pyopencl_chain.py"
# A sanitized shim in an uninstrumented interpreter: its runtime must come
# first, or PoCL's threads start unseen by TSan (make check-sanitize).
SANRT=$(ldd "$SHIM" | awk '/lib[at]san\.so/ && !found {print $3; found = 1}')
fresh_pocl; SHIM="${SANRT:+$SANRT }$SHIM" run_shim py env CLSHIM_FUSE="scale_add+square_it" "$PY" \
    "$CLSHIM_ROOT/tests/integration/progs/pyopencl_chain.py"
same_output ref_py py "pyopencl: same results as without clshim"
[ "$(fused scale_add+square_it py)" = 6 ] || fail "pyopencl: expected 6 fused launches"
grep -q "refused: needs a barrier: kernel 'square_it' offsets 'y__base' by another byte offset" "$TMP/py.err" ||
    fail "pyopencl: differently sliced buffers were not refused"
grep -q "scale_add+square_it: 1 grid-stride loop merged into the first" "$TMP/py.err" ||
    fail "pyopencl: the bodies' grid-stride loops were not merged"
ok "pyopencl: ElementwiseKernel chains fuse into one loop; differently offset slices do not fuse"

# 3. A sync call in the middle cancels.
shim_vs_plain sync "$PLAN" "$FC" --mode sync
[ "$(occurrences 'held offset submitted unfused: clFinish' "$TMP/sync.err")" = 3 ] || fail "sync: clFinish did not cancel"
[ "$(count 'into one launch' "$TMP/sync.err")" = 0 ] || fail "sync: fused across a clFinish"
ok "sync: clFinish mid-sequence submits the held kernel unfused"

# 4. Held events: waited, queried, called back, profiled, in other queues' wait lists.
shim_vs_plain events "$PLAN" "$FC" --mode events
[ "$(fused offset+scale+square events)" = 3 ] || fail "events: expected 3 fused launches"
[ "$(occurrences 'a status query on a held event' "$TMP/events.err")" = 3 ] || fail "events: status query did not cancel"
[ "$(occurrences 'another queue waits for a held event' "$TMP/events.err")" = 3 ] ||
    fail "events: other queue's wait list did not cancel"
grep -q "^callbacks 12$" "$TMP/events.out" || fail "events: callbacks missing"
[ "$(occurrences 'held offset submitted unfused: a callback registered on a held event' "$TMP/events.err")" = 3 ] ||
    fail "events: a callback registered mid-sequence did not submit the held kernel"
[ "$(grep -c '^callback before the rest: 1$' "$TMP/events.out")" = 3 ] || fail "events: a callback waited for did not fire"
ok "events: held events work in waits, queries, callbacks, profiling and other queues"

# 4b. Profiling of a fused chain on an in-order queue keeps the queue's
#     order (each command starts after the one before ended), as plain: the
#     fused launch's run is split among its parts, under a plan and auto.
shim_vs_plain profile "$PLAN" "$FC" --mode profile --iterations 4
[ "$(fused offset+scale+square profile)" = 4 ] || fail "profile: expected 4 fused launches"
grep -q "after the one before 1" "$TMP/profile.out" && ! grep -q "after the one before 0" "$TMP/profile.out" ||
    fail "profile: the plain run's order is not what the test expects"
run_ref ref_profile8 "$FC" --mode profile --iterations 8
fresh_pocl; run_shim profile_auto env CLSHIM_FUSION=auto "$FC" --mode profile --iterations 8
same_output ref_profile8 profile_auto "profile, automatic fusion: the plain driver's results and profiling order"
[ "$(count 'into one launch' "$TMP/profile_auto.err")" -ge 1 ] || fail "profile (auto): nothing fused"
ok "profile: a fused chain's events keep an in-order queue's profiling order (plan and auto)"

# 5. clSetKernelArg after the enqueue does not change held kernels.
shim_vs_plain setarg "$PLAN" "$FC" --mode setarg
[ "$(fused offset+scale+square setarg)" = 3 ] || fail "setarg: expected 3 fused launches"
ok "setarg: arguments are snapshotted at enqueue"

# 6. Different global sizes.
shim_vs_plain sizes "$PLAN" "$FC" --mode sizes
[ "$(fused offset+scale+square sizes)" = 3 ] || fail "sizes: expected 3 fused launches"
ok "sizes: kernels over different global sizes fuse"

# 7. Identical arguments are elided: 9 arguments, 4 distinct (a, b, c, s).
shim_vs_plain elide "$PLAN" "$FC" --mode elide
[ "$(occurrences 'fused blend+offset+square into one launch (4 parameters for 9 arguments)' "$TMP/elide.err")" = 3 ] ||
    fail "elide: expected 3 launches with 4 parameters"
ok "elide: identical buffers and scalars become one parameter"

# 7b. Relaunches: an exact repeat reuses the last fused launch; other buffers,
#     another scalar and an aliased (in-place) step are fused correctly, and
#     only the aliased step needs another fused kernel.
shim_vs_plain vary "$PLAN" "$FC" --mode vary --iterations 2
[ "$(fused offset+scale+square vary)" = 12 ] || fail "vary: expected 12 fused launches"
[ "$(occurrences 'fused offset+scale+square into one launch (4 parameters' "$TMP/vary.err")" = 2 ] ||
    fail "vary: the in-place step should fuse with 4 parameters, twice"
ok "vary: repeats, other buffers, scalars and aliasing give the unfused results"

# 7c. The fused kernel's arguments as clshim remembers them: relaunches
#     with unchanged arguments (from the third on nothing is compared or
#     set), then another scalar, another buffer, and a released buffer
#     replaced by a new one under the same handle take effect. Whether
#     the handle comes back is up to malloc: PoCL callocs a buffer, and
#     calloc never takes from the per-thread cache a free may have filled,
#     so with that cache on no handle came back in 4 of 6 runs of this test
#     beside four busy loops. With it off (both runs): back 12 of 12 times.
NO_TCACHE=GLIBC_TUNABLES=glibc.malloc.tcache_count=0
shim_vs_plain relaunch "$PLAN" env "$NO_TCACHE" "$FC" --mode relaunch --iterations 2
[ "$(fused offset+scale+square relaunch)" = 24 ] || fail "relaunch: expected 24 fused launches"
# (Under AddressSanitizer freed memory is quarantined, so no handle comes back.)
[ -n "${CLSHIM_SANITIZED:-}" ] || [ "$(count "has the released one's handle" "$TMP/relaunch.err")" -ge 1 ] ||
    fail "relaunch: the driver never gave a new buffer a released one's handle (nothing tested there)"
ok "relaunch: remembered arguments; changed ones and a reused buffer handle take effect"

# 8. A chain that needs a barrier is refused (3 iterations: refused at the
#    1st, skipped at the 2nd by the back-off, refused again at the 3rd; the
#    line is logged once); a plan forcing it where a barrier is impossible
#    falls back too.
shim_vs_plain barrier "other+shifted" "$FC" --mode barrier
[ "$(grep 'refused: needs a barrier' "$TMP/barrier.err" | grep -vc 'again [0-9]* times')" = 1 ] ||
    fail "barrier: expected one refusal line"
[ "$(occurrences 'refused: needs a barrier' "$TMP/barrier.err")" = 2 ] || fail "barrier: expected 2 refusals (a back-off of 1)"
[ "$(count 'into one launch' "$TMP/barrier.err")" = 0 ] || fail "barrier: fused anyway"
shim_vs_plain forced "other+shifted:force-barrier" "$FC" --mode barrier
[ "$(grep 'refused: needs a barrier.*cannot be forced' "$TMP/forced.err" | grep -vc 'again [0-9]* times')" = 1 ] ||
    fail "forced: expected one refusal naming why the barrier cannot be forced"
grep -q "4 held kernels submitted unfused; 2 fusions refused" "$TMP/forced.err" || fail "forced: not refused twice with the back-off between"
ok "barrier: refused with the reason (one line), retried after a back-off; forced failure falls back"

# 9. Releasing a buffer a held kernel uses cancels.
shim_vs_plain release "$PLAN" "$FC" --mode release
[ "$(occurrences 'release of a buffer a held kernel uses' "$TMP/release.err")" = 3 ] || fail "release: did not cancel"
ok "release: a held kernel's buffer released mid-sequence"

# 10. Two threads with two queues fusing at once.
shim_vs_plain threads "$PLAN" "$FC" --mode threads --iterations 8
[ "$(fused offset+scale+square threads)" = 16 ] || fail "threads: expected 16 fused launches"
ok "threads: two queues fuse concurrently"

# 11. The extension API (the program falls back when the lookup gives NULL).
run_ref ref_ext "$FE"
fresh_pocl; run_shim ext "$FE"
same_output ref_ext ext "extension: same results as without clshim"
grep -q "ext: absent" "$TMP/ref_ext.err" || fail "extension: lookup without the shim did not return NULL"
grep -q "ext: present" "$TMP/ext.err" || fail "extension: lookup under the shim failed"
[ "$(fused offset+scale+square ext)" = 4 ] || fail "extension: expected 4 fused launches"
[ "$(count 'ext: start again rc=-59' "$TMP/ext.err")" = 2 ] || fail "extension: double start not refused"
[ "$(count 'ext: bad properties rc=-30' "$TMP/ext.err")" = 2 ] || fail "extension: bad properties not refused"
[ "$(count 'ext: complete after sync rc=0 event=1' "$TMP/ext.err")" = 2 ] ||
    fail "extension: complete after a cancelling sync gives no event"
[ "$(occurrences 'submitted unfused: clFinish' "$TMP/ext.err")" = 2 ] || fail "extension: clFinish did not cancel"
ok "extension: start/complete/cancel, early cancel, properties"

# 12. A plan file; and an invalid one: file:line:column, fusion off, the app runs.
printf '# plan\n\nfuse offset scale square   # the chain\n' >"$TMP/good.plan"
fresh_pocl; run_shim planfile env CLSHIM_FUSION_PLAN="$TMP/good.plan" "$FC" --mode chain
same_output ref_chain planfile "plan file: same results"
[ "$(fused offset+scale+square planfile)" = 3 ] || fail "plan file: expected 3 fused launches"
printf '# plan\nfuse offset scale square\nfuse  a+b force-barier\n' >"$TMP/bad.plan"
fresh_pocl; run_shim badplan env CLSHIM_FUSION_PLAN="$TMP/bad.plan" "$FC" --mode chain
same_output ref_chain badplan "invalid plan: the app runs, same results"
[ "$(count "invalid fusion plan: $TMP/bad.plan:3:11: unknown option 'force-barier'" "$TMP/badplan.err")" = 1 ] ||
    fail "invalid plan: message does not name file:line:column once"
[ "$(count 'into one launch' "$TMP/badplan.err")" = 0 ] || fail "invalid plan: fused anyway"
ok "plan file works; an invalid one is reported with file:line:column and fusion is off"

# 13. Without a plan nothing is held.
fresh_pocl; run_shim noplan "$FC" --mode chain
same_output ref_chain noplan "no plan: same results"
[ "$(count 'fusion' "$TMP/noplan.err")" = 0 ] || fail "no plan: fusion active"
ok "no plan: fusion stays off"

finish
