#!/bin/bash
# Runs every clshim test: cmocka unit tests (build/tests/unit/*), then the
# integration tests (tests/integration/test_*.sh) and reliability tests
# (tests/reliability/test_*.sh). Every test gets private temp dirs for
# CLSHIM_CACHE_DIR, POCL_CACHE_DIR, XDG_* and HOME, so nothing touches the
# user's real caches. Prints a closing "N passed, N failed" line and exits
# non-zero on any failure.
#   tests/run-all.sh BUILD [--threaded] [--only PATTERN]
set -u
BUILD=${1:-build}; shift || true
THREADED_ONLY=0; ONLY=""
while [ $# -gt 0 ]; do
    case "$1" in
        --threaded) THREADED_ONLY=1 ;;
        --only) ONLY=$2; shift ;;
    esac
    shift
done
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "$ROOT" && cd "$BUILD" && pwd)
export CLSHIM_BUILD=$BUILD CLSHIM_ROOT=$ROOT
# A broken internal invariant aborts in tests (release runs fall back).
export CLSHIM_STRICT=1
# Sanitized builds (make check-sanitize): PoCL and the ICD loader leak by
# design (LeakSanitizer off; the preloaded shim precedes the ASan runtime in
# the initial library list, which is safe here: link-order check off), and TSan reports races inside PoCL's own
# threads; tests/tsan.supp silences libpocl/libOpenCL frames only.
case "${CLSHIM_SANITIZED:-}" in
    address) export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1:verify_asan_link_order=0} ;;
    thread) export TSAN_OPTIONS=${TSAN_OPTIONS:-suppressions=$ROOT/tests/tsan.supp:halt_on_error=1} ;;
esac
passed=0; failed=0; failures=""

run_one() { # name command...
    local name=$1; shift
    local t; t=$(mktemp -d /tmp/clshim-test.XXXXXX)
    mkdir -p "$t/cache" "$t/pocl" "$t/xdg-cache" "$t/xdg-config" "$t/home"
    local start=$SECONDS
    # The capture helper (program/capture_proc.h) stores after the app
    # exited; tests that count what a run stored get the in-process capture
    # unless they ask for the helper (integration/test_capture_proc).
    if env CLSHIM_CACHE_DIR="$t/cache" POCL_CACHE_DIR="$t/pocl" XDG_CACHE_HOME="$t/xdg-cache" \
           XDG_CONFIG_HOME="$t/xdg-config" HOME="$t/home" TEST_TMP="$t" \
           CLSHIM_CAPTURE_PROCESS="${CLSHIM_CAPTURE_PROCESS:-0}" \
           timeout -k 10 600 "$@" >"$t/log" 2>&1; then
        passed=$((passed + 1)); echo "PASS $name ($((SECONDS - start)) s)"
        rm -rf "$t"
    else
        failed=$((failed + 1)); failures="$failures $name"
        echo "FAIL $name ($((SECONDS - start)) s); output:"; tail -n 60 "$t/log" | sed 's/^/    /'
    fi
}

threaded_test() { case "$1" in *thread*|*concurr*|*load*|*memtier*|*fusion*) return 0 ;; esac; return 1; }

for t in "$BUILD"/tests/unit/test_*; do
    [ -x "$t" ] || continue
    name=unit/$(basename "$t")
    [ -n "$ONLY" ] && [[ $name != *$ONLY* ]] && continue
    [ "$THREADED_ONLY" = 1 ] && ! threaded_test "$name" && continue
    run_one "$name" "$t"
done
for t in "$ROOT"/tests/integration/test_*.sh "$ROOT"/tests/reliability/test_*.sh; do
    [ -f "$t" ] || continue
    name=$(basename "$(dirname "$t")")/$(basename "$t" .sh)
    [ -n "$ONLY" ] && [[ $name != *$ONLY* ]] && continue
    [ "$THREADED_ONLY" = 1 ] && ! threaded_test "$name" && continue
    run_one "$name" bash "$t"
done
echo
[ -n "$failures" ] && echo "failed:$failures"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
