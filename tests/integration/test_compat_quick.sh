#!/bin/bash
# The quick part of make compat (tests/compat/run.sh runs PyOpenCL's whole test
# suite, clpeak and clinfo): a real PyOpenCL program (tests/compat/
# pyopencl_smoke.py: PyOpenCL loads OpenCL with RTLD_LOCAL; generated
# elementwise, reduction and scan kernels; -D options) without clshim, with
# clshim on an empty cache and again on the filled cache — the same output,
# and the warm run compiles nothing; armed with a fusion plan naming every
# kernel it launches (make compat's armed mode, in small), the same output
# again and something fused; clinfo's output identical but for the
# cl_clshim_kernel_fusion clshim reports (docs/fusion.md). Needs
# python3-pyopencl, which make check installs: its absence is a failure here,
# not a skip. Needs no network.
source "$(dirname "$0")/lib.sh"
source "$CLSHIM_ROOT/tests/compat/lib.sh"
COMPAT_TMP=$TMP

missing=$(compat_missing_packages python3-pyopencl clinfo)
[ -z "$missing" ] || fail "packages missing (scripts/install-deps.sh installs them): $missing"
compat_check_pyopencl || fail "PyOpenCL unusable"

R=$TMP/runs
for mode in plain cold warm; do
    compat_run "$mode" "$R/$mode" "$TMP/shimcache" "$TMP" "$COMPAT_PYTHON" "$CLSHIM_ROOT/tests/compat/pyopencl_smoke.py"
    echo "$mode: exit $(cat "$R/$mode/rc") in $(cat "$R/$mode/wall") s"
done
[ "$(cat "$R/plain/rc")" = 0 ] || { cat "$R/plain/stderr"; fail "the PyOpenCL program fails without clshim"; }
[ "$(wc -l <"$R/plain/stdout")" -ge 7 ] || fail "the PyOpenCL program printed too little"
for mode in cold warm; do
    cmp -s "$R/plain/stdout" "$R/$mode/stdout" && cmp -s "$R/plain/rc" "$R/$mode/rc" ||
        { diff "$R/plain/stdout" "$R/$mode/stdout" | head; cat "$R/$mode/stderr" | tail -5; fail "PyOpenCL ($mode): output differs"; }
    compat_shim_silent "$R/$mode" || fail "$mode: clshim wrote to the client's output"
    ok "PyOpenCL program, clshim $mode: same output"
done
read -r hits misses <<<"$(compat_shim_counts "$R/cold")"
[ "$misses" -gt 0 ] || fail "cold run: clshim saw no build (not loaded?)"
read -r hits misses <<<"$(compat_shim_counts "$R/warm")"
[ "$hits" -gt 0 ] && [ "$misses" = 0 ] || fail "warm run: expected only hits, got $hits hits, $misses misses"
ok "PyOpenCL warm run: $hits hits, nothing compiled"

# Armed: record the launches (warm), plan every kernel, run under the plan.
COMPAT_RUN_ENV=(COMPAT_LAUNCH_TRACE="$TMP/launches.txt")
compat_run warm "$R/record" "$TMP/shimcache" "$TMP" "$COMPAT_PYTHON" "$CLSHIM_ROOT/tests/compat/launch_trace.py" \
    "$CLSHIM_ROOT/tests/compat/pyopencl_smoke.py"
cmp -s "$R/plain/stdout" "$R/record/stdout" || { tail -5 "$R/record/stderr"; fail "recording run: output differs"; }
read -r nkernels nseqs < <("$COMPAT_PYTHON" "$CLSHIM_ROOT/tests/compat/plan_from_trace.py" "$TMP/launches.txt" "$TMP/smoke.plan") ||
    fail "no plan from the recorded launches"
[ "$nkernels" -ge 5 ] || fail "only $nkernels kernels recorded"
COMPAT_RUN_ENV=(CLSHIM_FUSION_PLAN="$TMP/smoke.plan" CLSHIM_STRICT=1)
compat_run armed "$R/armed" "$TMP/shimcache" "$TMP" "$COMPAT_PYTHON" "$CLSHIM_ROOT/tests/compat/pyopencl_smoke.py"
COMPAT_RUN_ENV=()
cmp -s "$R/plain/stdout" "$R/armed/stdout" && cmp -s "$R/plain/rc" "$R/armed/rc" ||
    { diff "$R/plain/stdout" "$R/armed/stdout" | head; tail -5 "$R/armed/stderr"; fail "PyOpenCL (armed): output differs"; }
compat_shim_silent "$R/armed" || fail "armed: clshim wrote to the client's output"
grep -q -E "clshim: fusion plan: $nseqs sequences?$" "$R/armed/clshim.log" || fail "armed: the plan was not loaded"
read -r fused replaced unfused refused <<<"$(compat_fusion_counts "$R/armed")"
[ "$fused" -gt 0 ] || fail "armed: nothing fused ($unfused held kernels submitted unfused, $refused refused)"
ok "PyOpenCL armed with $nseqs sequences naming its $nkernels kernels: same output; $fused fused launches replaced $replaced, $unfused held submitted unfused, $refused refused"

for args in "" "--raw"; do
    # shellcheck disable=SC2086
    for mode in plain cold warm; do compat_run "$mode" "$R/clinfo-$mode" "$TMP/cache-clinfo$args" "$TMP" clinfo $args; done
    [ "$(cat "$R/clinfo-plain/rc")" = 0 ] && [ -s "$R/clinfo-plain/stdout" ] || fail "clinfo $args fails without clshim"
    for mode in cold warm; do
        compat_clinfo_without_ext "$R/clinfo-$mode/stdout" "$R/clinfo-$mode/stdout.noext" ||
            fail "clinfo $args ($mode): cl_clshim_kernel_fusion not listed"
        cmp -s "$R/clinfo-plain/stdout" "$R/clinfo-$mode/stdout.noext" ||
            { diff "$R/clinfo-plain/stdout" "$R/clinfo-$mode/stdout.noext" | head -n 10; fail "clinfo $args ($mode): stdout differs"; }
        for f in stderr rc; do
            cmp -s "$R/clinfo-plain/$f" "$R/clinfo-$mode/$f" ||
                { diff "$R/clinfo-plain/$f" "$R/clinfo-$mode/$f" | head -n 10; fail "clinfo $args ($mode): $f differs"; }
        done
    done
    ok "clinfo${args:+ $args}: identical output with clshim but for cl_clshim_kernel_fusion"
done
finish
