#!/bin/bash
# SPIR-V on PoCL (no native IL): an unmodified program's clCreateProgramWithIL
# works under clshim, gives the OpenCL C version's results, caches, applies
# specialisation constants, refuses invalid modules with CL_INVALID_VALUE and
# bounds the translator's memory.
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info
IL=$PROGS/ilprog
DATA=$CLSHIM_ROOT/tests/integration/data
for f in features spec; do
    clang-15 -x cl -target spir64 -cl-std=CL1.2 -emit-llvm -c -Xclang -no-opaque-pointers \
        "$DATA/$f.cl" -o "$TMP/$f.bc"
    llvm-spirv-15 "$TMP/$f.bc" -o "$TMP/$f.spv"
done
ok "SPIR-V made with clang-15 + llvm-spirv-15"

# Without clshim PoCL refuses IL; with it the program runs.
run_plain plainil "$IL" --il "$TMP/features.spv"
[ "$(cat "$TMP/plainil.rc")" != 0 ] || fail "PoCL took IL without clshim: the test premise is wrong"
run_plain src "$IL" --source "$DATA/features.cl"
fresh_pocl; run_shim cold "$IL" --il "$TMP/features.spv"
grep -v '^CL_PROGRAM_IL' "$TMP/cold.out" >"$TMP/cold.cmp.out"; cp "$TMP/cold.rc" "$TMP/cold.cmp.rc"
same_output src cold.cmp "IL program: same results as the OpenCL C version (local memory, float4, struct, double)"
grep -q "CL_PROGRAM_IL returns the module: yes" "$TMP/cold.out" || fail "CL_PROGRAM_IL does not return the original IL"
[ "$(count 'translated SPIR-V' "$TMP/cold.err")" = 1 ] || fail "cold IL run: expected one translation"
ok "CL_PROGRAM_IL returns the original module; one translation"
# The translator runs in an exec'd clshim-tool, not in a fork() of the
# application (a fork copies locks other threads hold, and runs the
# application's atfork handlers).
grep -q "ilprog: forks during the build: 0" "$TMP/cold.err" || fail "the translation forked the application's process"
ok "the translation forks nothing: the application's atfork handlers never run"

fresh_pocl; run_shim warm "$IL" --il "$TMP/features.spv"
same_output cold warm "IL program, warm: same results"
[ "$(count 'translated SPIR-V' "$TMP/warm.err")" = 0 ] || fail "warm IL run translated again"
[ "$(count 'hit ' "$TMP/warm.err")" = 1 ] || fail "warm IL run: expected a hit"
grep -q "llvm loaded: no" "$TMP/warm.err" || fail "warm IL run loaded LLVM"
ok "IL program, second run: a cache hit, no translation, LLVM not loaded"

# clCreateProgramWithILKHR through clGetExtensionFunctionAddressForPlatform.
fresh_pocl; run_shim khr "$IL" --il "$TMP/features.spv" --khr
same_output cold khr "clCreateProgramWithILKHR: same results"

# Specialisation constants: default, set, and part of the key.
fresh_pocl; run_shim spec0 "$IL" --spec "$TMP/spec.spv"
grep -q "spec values 42 43 44 45" "$TMP/spec0.out" || fail "spec constant default not applied"
fresh_pocl; run_shim spec5 "$IL" --spec "$TMP/spec.spv" 5
grep -q "spec values 5 6 7 8" "$TMP/spec5.out" || fail "spec constant 5 not applied"
grep -q "unknown spec id: -71" "$TMP/spec5.out" || fail "unknown spec id not refused with CL_INVALID_SPEC_ID"
[ "$(count 'miss ' "$TMP/spec5.err")" = 1 ] || fail "a new spec value must miss"
fresh_pocl; run_shim spec5b "$IL" --spec "$TMP/spec.spv" 5
grep -q "spec values 5 6 7 8" "$TMP/spec5b.out" || fail "spec constant 5 not applied on a hit"
[ "$(count 'hit ' "$TMP/spec5b.err")" = 1 ] || fail "the same spec value must hit"
ok "specialisation constants change results and are part of the key"

# Fusing an IL program's kernels keeps its specialisation constants: the
# fused module is translated with them (without, it computed with the
# defaults: 42 + 100), and they are part of the fused program's key.
fresh_pocl; run_shim specchain "$IL" --spec-chain "$TMP/spec.spv" 5
fresh_pocl; run_shim specfused env CLSHIM_FUSE=spec+spec_add "$IL" --spec-chain "$TMP/spec.spv" 5
same_output specchain specfused "fused spec+spec_add: same results as unfused"
grep -q "spec values 55 56 57 58" "$TMP/specfused.out" || fail "fused: the specialisation constants were not applied"
[ "$(count 'fused spec+spec_add into one launch' "$TMP/specfused.err")" = 1 ] || fail "spec+spec_add did not fuse"
fresh_pocl; run_shim specfused6 env CLSHIM_FUSE=spec+spec_add "$IL" --spec-chain "$TMP/spec.spv" 6
grep -q "spec values 66 67 68 69" "$TMP/specfused6.out" || fail "fused, other values: the fused program of 5 was reused"
[ "$(count 'fused spec+spec_add into one launch' "$TMP/specfused6.err")" = 1 ] || fail "spec+spec_add (6) did not fuse"
ok "fused kernels of an IL program keep its specialisation constants"

# Invalid modules: CL_INVALID_VALUE (-30), one log line each, the app goes on.
fresh_pocl; run_shim invalid "$IL" --invalid "$TMP/features.spv"
grep -q "random bytes: -30 null" "$TMP/invalid.out" || fail "random bytes not refused"
grep -q "truncated module: -30 null" "$TMP/invalid.out" || fail "truncated module not refused"
grep -q "wrong magic: -30 null" "$TMP/invalid.out" || fail "wrong magic not refused"
[ "$(count 'invalid SPIR-V module' "$TMP/invalid.err")" = 3 ] || fail "expected one log line per invalid module"
grep -q "double" "$TMP/invalid.out" || fail "the app did not continue after invalid modules"
ok "invalid IL: CL_INVALID_VALUE, one log line each, the app continues"

# A module on which the translator allocates without bound (found by
# fuzzing): the build fails in bounded time with the reason in the build log
# and one line, and the app goes on. Under ASan its allocator aborts the
# child instead of throwing bad_alloc: "crashed".
RUNAWAY=$CLSHIM_ROOT/tests/fuzz/regress/fuzz_spirv_translate/runaway-memory.spv
CLSHIM_TRANSLATE_MAX_MEMORY=256M run_shim runaway "$IL" --il "$RUNAWAY"
grep -q "build failed: -11" "$TMP/runaway.out" || fail "runaway module: the build did not fail with CL_BUILD_PROGRAM_FAILURE"
grep -Eq "ran out of memory|crashed" "$TMP/runaway.out" || fail "runaway module: the build log does not say why"
[ "$(count 'clshim: cannot build IL program' "$TMP/runaway.err")" = 1 ] || fail "runaway module: expected one log line"
[ "$(cat "$TMP/runaway.rc")" = 1 ] || fail "runaway module: the app did not end on its own terms"
ok "a module the translator cannot bound: CL_BUILD_PROGRAM_FAILURE under CLSHIM_TRANSLATE_MAX_MEMORY, one line"

# A module on which the translator calls exit() (found by fuzzing): the
# child's exit runs none of the app's atexit handlers and does not write the
# app's buffered stdout a second time.
EXITS=$CLSHIM_ROOT/tests/fuzz/regress/fuzz_spirv_translate/translator-exits.spv
run_shim exits "$IL" --il "$EXITS"
grep -q "build failed: -11" "$TMP/exits.out" || fail "translator exit: the build did not fail with CL_BUILD_PROGRAM_FAILURE"
grep -q "gave up on the module: UnimplementedOpCode" "$TMP/exits.out" || fail "translator exit: the build log does not say why"
[ "$(count 'program created' "$TMP/exits.out")" = 1 ] || fail "translator exit: the app's buffered output was written twice"
[ "$(count 'atexit handler ran' "$TMP/exits.err")" = 1 ] || fail "translator exit: the app's atexit handler ran in the child"
[ "$(count 'program created' "$TMP/runaway.out")" = 1 ] || fail "runaway module: the app's buffered output was written twice"
ok "a module the translator exits on: refused, the app's buffered output written once"

# CLSHIM_ADVERTISE_IL=1: the device reports IL support.
CLSHIM_ADVERTISE_IL=1 run_shim adv clinfo
grep -q "IL version.*SPIR-V_1.0" "$TMP/adv.out" || fail "CLSHIM_ADVERTISE_IL=1 does not report CL_DEVICE_IL_VERSION"
grep -q "cl_khr_il_program" "$TMP/adv.out" || fail "CLSHIM_ADVERTISE_IL=1 does not report cl_khr_il_program"
run_shim noadv clinfo
grep -q "cl_khr_il_program" "$TMP/noadv.out" && fail "IL advertised without CLSHIM_ADVERTISE_IL"
ok "CLSHIM_ADVERTISE_IL=1 reports IL version and cl_khr_il_program; off by default"

# CLSHIM_SPIRV=0: IL passed to the driver unchanged (PoCL refuses it).
CLSHIM_SPIRV=0 run_shim off "$IL" --il "$TMP/features.spv"
cmp -s "$TMP/plainil.rc" "$TMP/off.rc" || fail "CLSHIM_SPIRV=0 changed the outcome"
ok "CLSHIM_SPIRV=0: IL goes to the driver unchanged"
finish
