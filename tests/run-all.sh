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
passed=0; failed=0; failures=""

run_one() { # name command...
    local name=$1; shift
    local t; t=$(mktemp -d /tmp/clshim-test.XXXXXX)
    mkdir -p "$t/cache" "$t/pocl" "$t/xdg-cache" "$t/xdg-config" "$t/home"
    local start=$SECONDS
    if env CLSHIM_CACHE_DIR="$t/cache" POCL_CACHE_DIR="$t/pocl" XDG_CACHE_HOME="$t/xdg-cache" \
           XDG_CONFIG_HOME="$t/xdg-config" HOME="$t/home" TEST_TMP="$t" \
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
