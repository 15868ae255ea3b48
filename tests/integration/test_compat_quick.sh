#!/bin/bash
# The quick part of make compat (tests/compat/run.sh has the whole): PyOpenCL's
# test_wrapper.py (its own tests, from the matching sdist) without clshim, with
# clshim on an empty cache and again on the filled cache: the same outcome for
# every test, and the warm run compiles nothing; clinfo's output identical.
# Needs python3-pyopencl and python3-pytest, which make check installs: their
# absence is a failure here, not a skip.
source "$(dirname "$0")/lib.sh"
source "$CLSHIM_ROOT/tests/compat/lib.sh"
COMPAT_TMP=$TMP

missing=$(compat_missing_packages python3-pyopencl python3-pytest clinfo)
[ -z "$missing" ] || fail "packages missing (scripts/install-deps.sh installs them): $missing"
compat_check_pyopencl || fail "PyOpenCL unusable"
compat_fetch_tests "$CLSHIM_BUILD/compat/pyopencl" || fail "cannot get PyOpenCL's tests (COMPAT_SDIST=FILE for a local sdist)"
TDIR=$CLSHIM_BUILD/compat/pyopencl/test

R=$TMP/runs
for mode in plain cold warm; do
    compat_pytest "$mode" "$R/$mode" "$TMP/shimcache" "$TDIR" test_wrapper.py
    echo "$mode: $(cat "$R/$mode/summary") in $(cat "$R/$mode/wall") s"
done
[ "$(cat "$R/plain/rc")" = 0 ] || { tail -n 20 "$R/plain/stdout"; fail "test_wrapper.py fails without clshim"; }
[ "$(count '^passed ' "$R/plain/outcomes")" -ge 30 ] || fail "too few tests ran without clshim: $(cat "$R/plain/summary")"
ok "test_wrapper.py without clshim: $(cat "$R/plain/summary")"
for mode in cold warm; do
    why=$(compat_same_outcomes "$R/plain" "$R/$mode") || { tail -n 30 "$R/$mode/stdout"; fail "$mode: outcomes differ: $why"; }
    compat_shim_silent "$R/$mode" || fail "$mode: clshim wrote to the client's output"
    ok "test_wrapper.py, clshim $mode: every test's outcome the same"
done
read -r hits misses <<<"$(compat_shim_counts "$R/cold")"
[ "$misses" -gt 0 ] || fail "cold run: clshim saw no build (not loaded?)"
read -r hits misses <<<"$(compat_shim_counts "$R/warm")"
[ "$hits" -gt 0 ] && [ "$misses" = 0 ] || fail "warm run: expected only hits, got $hits hits, $misses misses"
ok "warm run: $hits hits, nothing compiled"

for args in "" "--raw"; do
    # shellcheck disable=SC2086
    for mode in plain cold warm; do compat_run "$mode" "$R/clinfo-$mode" "$TMP/shimcache" "$TMP" clinfo $args; done
    [ "$(cat "$R/clinfo-plain/rc")" = 0 ] && [ -s "$R/clinfo-plain/stdout" ] || fail "clinfo $args fails without clshim"
    for mode in cold warm; do
        for f in stdout stderr rc; do
            cmp -s "$R/clinfo-plain/$f" "$R/clinfo-$mode/$f" ||
                { diff "$R/clinfo-plain/$f" "$R/clinfo-$mode/$f" | head -n 10; fail "clinfo $args ($mode): $f differs"; }
        done
    done
    ok "clinfo${args:+ $args}: identical output with clshim"
done
finish
