#!/bin/bash
# Runs every clshim test: cmocka unit tests (build/tests/unit/*), then the
# integration tests (tests/integration/test_*.sh) and reliability tests
# (tests/reliability/test_*.sh). Every test gets private temp dirs for
# CLSHIM_CACHE_DIR, POCL_CACHE_DIR, XDG_* and HOME, so nothing touches the
# user's real caches. Prints a closing "N passed, N failed" line and exits
# non-zero on any failure.
#   tests/run-all.sh BUILD [--threaded] [--only PATTERN] [-j N]
# Tests run N at a time (default CLSHIM_TEST_JOBS, else 2): most of a test's
# time is spent waiting for a compile or a helper, so on two cores two at a
# time take about 0.6 of the serial time. A test whose first lines say
# "run-all: alone" measures time or loads the machine on purpose; those run
# afterwards, one at a time, with nothing else beside them.
set -u
BUILD=${1:-build}; shift || true
THREADED_ONLY=0; ONLY=""; JOBS=${CLSHIM_TEST_JOBS:-2}
while [ $# -gt 0 ]; do
    case "$1" in
        --threaded) THREADED_ONLY=1 ;;
        --only) ONLY=$2; shift ;;
        -j) JOBS=$2; shift ;;
        -j*) JOBS=${1#-j} ;;
    esac
    shift
done
[[ $JOBS =~ ^[1-9][0-9]*$ ]] || { echo "run-all.sh: -j needs a positive number, not '$JOBS'" >&2; exit 2; }
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
RESULTS=$(mktemp -d /tmp/clshim-results.XXXXXX)
trap 'rm -rf "$RESULTS"' EXIT

# One test; its verdict goes to $RESULTS (the runner may be a background
# job), its report to stdout in one piece under a lock, so that reports of
# tests running side by side do not interleave.
run_one() { # name command...
    local name=$1; shift
    local t; t=$(mktemp -d /tmp/clshim-test.XXXXXX)
    mkdir -p "$t/cache" "$t/pocl" "$t/xdg-cache" "$t/xdg-config" "$t/home"
    local start=$SECONDS verdict
    # The capture helper (program/capture_proc.h) stores after the app
    # exited; tests that count what a run stored get the in-process capture
    # unless they ask for the helper (integration/test_capture_proc).
    if env CLSHIM_CACHE_DIR="$t/cache" POCL_CACHE_DIR="$t/pocl" XDG_CACHE_HOME="$t/xdg-cache" \
           XDG_CONFIG_HOME="$t/xdg-config" HOME="$t/home" TEST_TMP="$t" \
           CLSHIM_CAPTURE_PROCESS="${CLSHIM_CAPTURE_PROCESS:-0}" \
           timeout -k 10 600 "$@" >"$t/log" 2>&1; then
        verdict=PASS; echo "PASS $name ($((SECONDS - start)) s)" >"$t/report"
    else
        verdict=FAIL
        { echo "FAIL $name ($((SECONDS - start)) s); output:"; tail -n 60 "$t/log" | sed 's/^/    /'; } >"$t/report"
    fi
    echo "$verdict $name" >>"$RESULTS/verdicts"
    flock "$RESULTS/verdicts" cat "$t/report"
    [ "$verdict" = PASS ] && rm -rf "$t"
    return 0
}

# Starts a test in the background once fewer than $JOBS run.
run_beside() { # name command...
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
    run_one "$@" &
}

threaded_test() { case "$1" in *thread*|*concurr*|*load*|*memtier*|*fusion*) return 0 ;; esac; return 1; }
runs_alone() { head -n 30 "$1" | grep -q "run-all: alone"; }
selected() { # name
    [ -n "$ONLY" ] && [[ $1 != *$ONLY* ]] && return 1
    [ "$THREADED_ONLY" = 1 ] && ! threaded_test "$1" && return 1
    return 0
}

touch "$RESULTS/verdicts"
for t in "$BUILD"/tests/unit/test_*; do
    [ -x "$t" ] || continue
    name=unit/$(basename "$t")
    selected "$name" && run_beside "$name" "$t"
done
alone=()
for t in "$ROOT"/tests/integration/test_*.sh "$ROOT"/tests/reliability/test_*.sh; do
    [ -f "$t" ] || continue
    name=$(basename "$(dirname "$t")")/$(basename "$t" .sh)
    selected "$name" || continue
    if runs_alone "$t"; then alone+=("$name=$t"); else run_beside "$name" bash "$t"; fi
done
wait
for a in "${alone[@]}"; do run_one "${a%%=*}" bash "${a#*=}"; done
passed=$(grep -c '^PASS ' "$RESULTS/verdicts")
failed=$(grep -c '^FAIL ' "$RESULTS/verdicts")
echo
[ "$failed" -gt 0 ] && echo "failed:$(sed -n 's/^FAIL / /p' "$RESULTS/verdicts" | sort | tr -d '\n')"
echo "$passed passed, $failed failed"
[ "$passed" -eq 0 ] && [ "$failed" -eq 0 ] && echo "run-all.sh: no test matched; see the names under tests/" >&2
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
