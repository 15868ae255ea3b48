#!/bin/bash
# pyopencl_owncache.sh — PyOpenCL's test suite with its own binary cache on
# (its default) and cold, as on a fresh home or CI runner: PyOpenCL then
# appends a cache-defeating marker to every source it builds (docs/cache.md,
# "Applications that defeat caches on purpose"). Two runs under clshim, each
# as make compat runs it (tests/compat/lib.sh) but with PyOpenCL's cache on:
# cold (an empty clshim cache), then warm (the cache the cold run filled, a
# new PyOpenCL cache). Prints each run's clshim hits and misses, the entries
# the warm run added, and whether the outcomes agree test by test.
#   bench/pyopencl_owncache.sh BUILD
# COMPAT_PYOPENCL_TESTS limits the test files, as for make compat.
set -u
BUILD=${1:?usage: bench/pyopencl_owncache.sh BUILD}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "$ROOT" && cd "$BUILD" && pwd) || exit 2
SHIM=$BUILD/libclshim.so
TOOL=$BUILD/clshim-tool
[ -f "$SHIM" ] || { echo "pyopencl_owncache: $SHIM missing (make all)" >&2; exit 2; }
source "$ROOT/tests/compat/lib.sh"
COMPAT_TMP=$(mktemp -d /tmp/clshim-pyown.XXXXXX)
trap 'rm -rf "$COMPAT_TMP"' EXIT
export COMPAT_PYOPENCL_OWN_CACHE=1
WORK=$BUILD/compat
OUT=$WORK/pyopencl-owncache-bench
rm -rf "$OUT"; mkdir -p "$OUT"
compat_install_packages || exit 1
compat_pyopencl_tests "$WORK" || exit 1

CACHE=$COMPAT_TMP/cache
entries() { CLSHIM_CACHE_DIR=$CACHE "$TOOL" cache stats --json | "$COMPAT_PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["entries"])'; }
fails=0
compat_pytest cold "$OUT/cold" "$CACHE" "$TDIR" "${files[@]}"
after_cold=$(entries)
compat_pytest warm "$OUT/warm" "$CACHE" "$TDIR" "${files[@]}"
after_warm=$(entries)
for m in cold warm; do
    read -r h n <<<"$(compat_shim_counts "$OUT/$m")"
    marker=$(grep -c "cache-defeating marker recognised" "$OUT/$m/clshim.log" || true)
    echo "$m: $(cat "$OUT/$m/wall") s, $(cat "$OUT/$m/summary"); clshim: $h hits, $n misses; marker line in $marker process(es)"
done
echo "entries: $after_cold after the cold run, $after_warm after the warm run ($((after_warm - after_cold)) added)"
why=$(compat_same_outcomes "$OUT/cold" "$OUT/warm") || { echo "outcomes differ: $why"; fails=$((fails + 1)); }
echo "pyopencl_owncache: $fails failures"
[ "$fails" = 0 ]
