#!/bin/bash
# Route (b) (generated OpenCL C, forced on PoCL with CLSHIM_FUSE_ROUTE=source
# as it is chosen on NVIDIA) over kernels of different programs: their
# sources are joined with each one's file-scope names renamed
# (fusion/fuse_join.c). elwise_progs makes PyOpenCL-like elementwise
# programs that all name their kernel `elwise_kernel`, their helper
# `elwise_op` and a typedef `elwise_t`, two of them a program-scope
# constant `elwise_c` of different values: every fused run must print
# exactly what the plain run prints. Programs built with options that
# differ are refused with the reason, and run unfused.
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info CLSHIM_FUSE_ROUTE=source
EP=$PROGS/elwise_progs
K3="elwise_kernel+elwise_kernel+elwise_kernel"

# vs_plain TAG ENV -- ARGS...: the plain run and a run under the shim with ENV (VAR=VALUE ...).
vs_plain() {
    local tag=$1 envs=()
    shift
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    run_ref "ref_$tag" "$EP" "$@"
    [ "$(cat "$TMP/ref_$tag.rc")" = 0 ] || fail "$tag: the plain run failed: $(head -3 "$TMP/ref_$tag.err")"
    fresh_pocl; run_shim "$tag" env "${envs[@]}" "$EP" "$@"
    [ "$(cat "$TMP/$tag.rc")" = 0 ] || fail "$tag: exit code $(cat "$TMP/$tag.rc"): $(head -3 "$TMP/$tag.err")"
    same_output "ref_$tag" "$tag" "$tag: bit-identical to the plain run"
}
fused() { occurrences "fused $1 into one launch" "$TMP/$2.err"; }
joined() { count "$1 programs to IR, then generated OpenCL C" "$TMP/$2.err"; }

# 1. Three programs under a plan: one generated program, every launch fused.
vs_plain three CLSHIM_FUSE="$K3" -- --programs 3 --iterations 4
[ "$(joined 3 three)" = 1 ] || fail "three: the three programs were not joined: $(grep 'refused' "$TMP/three.err" | head -2)"
[ "$(fused "$K3" three)" = 4 ] || fail "three: expected 4 fused launches, got $(fused "$K3" three)"
[ "$(count ') refused: ' "$TMP/three.err")" = 0 ] || fail "three: a refusal: $(grep ') refused: ' "$TMP/three.err")"
ok "three programs with the same kernel, helper, typedef and constant names: joined, fused, bit for bit"

# 1b. A kernel that reads its own name (sizeof(__func__)): joined, it would
#     be renamed and read another; refused with the reason, run as plain.
vs_plain func CLSHIM_FUSE="$K3" -- --programs 3 --iterations 3 --func
cmp -s "$TMP/ref_func.out" "$TMP/ref_three.out" && fail "func: __func__ changes nothing (the test is void)"
grep -q "refused: program 3 reads a function's own name (__func__)" "$TMP/func.err" ||
    { cat "$TMP/func.err" >&2; fail "func: no refusal naming __func__"; }
[ "$(fused "$K3" func)" = 0 ] || fail "func: fused although a kernel reads its name"
ok "a kernel reading __func__: not joined (it would be renamed), results as plain"

# 2. Two programs.
vs_plain two CLSHIM_FUSE="elwise_kernel+elwise_kernel" -- --programs 2 --iterations 3
[ "$(joined 2 two)" = 1 ] || fail "two: the two programs were not joined"
[ "$(fused elwise_kernel+elwise_kernel two)" = 3 ] || fail "two: expected 3 fused launches"
ok "two programs: joined, fused, bit for bit"

# 3. Automatic fusion learns the chain and fuses it by route (b).
vs_plain auto CLSHIM_FUSION=auto -- --programs 3 --iterations 6
grep -q "auto: learned $K3" "$TMP/auto.err" || fail "auto: the chain was not learned"
[ "$(fused "$K3" auto)" -ge 3 ] || fail "auto: expected at least 3 fused launches, got $(fused "$K3" auto)"
ok "automatic fusion: the chain of three programs learned and fused, bit for bit"

# 4. Warm, and without LLVM: the joined source comes from the cache (stored
#    apart from the device), as on a GPU machine that has no clang.
fresh_pocl; run_shim nollvm env CLSHIM_LLVM_LIB=/nonexistent CLSHIM_FUSE="$K3" "$EP" --programs 3 --iterations 4
same_output ref_three nollvm "without LLVM: same results"
[ "$(fused "$K3" nollvm)" = 4 ] || fail "without LLVM: expected 4 fused launches"
[ "$(count 'building the fused kernel' "$TMP/nollvm.err")" = 0 ] || fail "without LLVM: rebuilt"
ok "warm without LLVM: the joined program from the cache, fused"

# 5. Options that differ (a -D on one program): refused with the reason,
#    once, not tried again; results as plain.
vs_plain opts CLSHIM_FUSE="elwise_kernel+elwise_kernel" -- --programs 2 --options2 "-DELWISE_FAST=1" --iterations 3
[ "$(fused '' opts)" = 0 ] || fail "opts: fused although the options differ"
[ "$(grep ') refused: ' "$TMP/opts.err" | grep -vc 'again [0-9]* times')" = 1 ] || fail "opts: expected one refusal line"
grep ') refused: ' "$TMP/opts.err" | grep -q "options that differ: '(none)' against '-DELWISE_FAST=1'" ||
    fail "opts: the refusal does not name the option: $(grep ') refused: ' "$TMP/opts.err")"
grep -q "not tried again in this process" "$TMP/opts.err" || fail "opts: the refusal is tried again"
[ "$(count 'building the fused kernel' "$TMP/opts.err")" = 0 ] || fail "opts: the programs were compiled to IR before the refusal"
ok "programs built with other options: refused with the reason before compiling, run unfused"

# 6. Options that change no code (-cl-kernel-arg-info, -w, -I) do not stop the join.
vs_plain optsok CLSHIM_FUSE="elwise_kernel+elwise_kernel" -- --programs 2 --options2 "-w -I /tmp" --iterations 2
[ "$(fused elwise_kernel+elwise_kernel optsok)" = 2 ] || fail "optsok: expected 2 fused launches"
ok "options that change no code: joined"

# 7. A pragma that would hold for the program after it: refused, once, for good.
vs_plain pragma CLSHIM_FUSE="$K3" -- --programs 3 --contract-off2 --iterations 3
[ "$(fused '' pragma)" = 0 ] || fail "pragma: fused although program 2 sets FP_CONTRACT"
[ "$(grep ') refused: ' "$TMP/pragma.err" | grep -vc 'again [0-9]* times')" = 1 ] || fail "pragma: expected one refusal line"
grep ') refused: ' "$TMP/pragma.err" | grep -q "program 2 has a #pragma other than OPENCL EXTENSION" ||
    fail "pragma: the refusal does not say why: $(grep ') refused: ' "$TMP/pragma.err")"
grep -q "not tried again in this process" "$TMP/pragma.err" || fail "pragma: the refusal is tried again"
ok "a program that sets FP_CONTRACT: refused with the reason, not tried again, run unfused"

finish
