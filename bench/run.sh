#!/bin/bash
# run.sh — runs clshim's benchmarks against a build: `make bench` calls it.
#
#   bench/run.sh BUILD [--quick]
#
# Builds nothing (make bench built $BUILD first). Runs, in order:
#   bench_passthrough  per-call and start-up cost with nothing enabled (issue 2)
#   bench_ttfr         time to first result: cold, PoCL warm, clshim warm, limit (issue 3)
#   bench_remote       time to first result: cold, local hit, remote (Redis) hit (issue 20)
#   bench_il           SPIR-V time to first result, cold vs warm cache (issue 5)
#   bench_store        the persistent store with many entries (always --quick here)
#   bench_fusion       kernel fusion: unfused, fused, hand-written (always --quick here),
#                      then the grid-stride shape (K = 4, latency)
# Each prints its own table with "target met" / "target MISSED" per target.
# Exits non-zero only when a benchmark failed to run (or found wrong
# results), never because a target was missed. Private temp directories
# keep the user's caches untouched.
set -u

BUILD=${1:-}
if [ -z "$BUILD" ] || [ ! -d "$BUILD" ]; then
    echo "usage: bench/run.sh BUILD [--quick]" >&2
    exit 2
fi
shift
QUICK=
for a in "$@"; do
    case $a in
    --quick) QUICK=--quick ;;
    *) echo "bench/run.sh: unknown option $a" >&2; exit 2 ;;
    esac
done
BUILD=$(cd "$BUILD" && pwd)

# Nothing here may read or write the user's caches.
TMP=$(mktemp -d "${TMPDIR:-/tmp}/clshim-bench.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export TMPDIR=$TMP XDG_CACHE_HOME=$TMP/xdg-cache XDG_CONFIG_HOME=$TMP/xdg-config
export POCL_CACHE_DIR=$TMP/pocl CLSHIM_CACHE_DIR=$TMP/clshim
mkdir -p "$XDG_CACHE_HOME" "$XDG_CONFIG_HOME" "$POCL_CACHE_DIR"

echo "clshim benchmarks: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)," \
     "$(clinfo -l 2>/dev/null | sed -n 's/^Platform #0: //p' | head -1)${QUICK:+, quick}"
echo

failed=()
ran=0
run() {
    local name=$1
    shift
    local bin=$BUILD/bench/$name
    if [ ! -x "$bin" ]; then
        echo "bench/run.sh: $bin is missing (run make BUILD=... all first)" >&2
        failed+=("$name (missing)")
        return
    fi
    local t0=$SECONDS
    "$bin" "$@"
    local rc=$?
    ran=$((ran + 1))
    echo "  ($name: $((SECONDS - t0)) s)"
    echo
    [ $rc -eq 0 ] || failed+=("$name (exit $rc)")
}

run bench_passthrough --shim "$BUILD/libclshim.so" $QUICK
run bench_ttfr --shim "$BUILD/libclshim.so" $QUICK
run bench_remote --shim "$BUILD/libclshim.so" $QUICK
run bench_il --shim "$BUILD/libclshim.so" $QUICK
run bench_store --quick --dir "$TMP"
run bench_fusion --quick
run bench_fusion --quick --shape grid --k 4 --mode latency

if [ ${#failed[@]} -gt 0 ]; then
    echo "bench/run.sh: ${#failed[@]} benchmark(s) failed: ${failed[*]}"
    exit 1
fi
echo "bench/run.sh: $ran benchmarks ran"
