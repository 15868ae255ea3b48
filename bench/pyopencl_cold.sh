#!/bin/bash
# pyopencl_cold.sh — PyOpenCL's test suite without clshim and under clshim
# on an empty cache (cold), REPS pairs side by side, the order alternating
# (plain first in odd pairs, cold first in even ones): the wall time each,
# their medians and cold / plain. Every run is make compat's (tests/compat/
# lib.sh): an empty PoCL cache, a private HOME, a fresh clshim cache for each
# cold run; the capture helper's stores after a cold run are waited for,
# untimed, before the next run starts. Outcomes must equal test by test.
#   bench/pyopencl_cold.sh BUILD [REPS]      (REPS default 5)
# COMPAT_PYOPENCL_TESTS limits the test files, as for make compat.
set -u
BUILD=${1:?usage: bench/pyopencl_cold.sh BUILD [REPS]}
REPS=${2:-5}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "$ROOT" && cd "$BUILD" && pwd) || exit 2
SHIM=$BUILD/libclshim.so
[ -f "$SHIM" ] || { echo "pyopencl_cold: $SHIM missing (make all)" >&2; exit 2; }
source "$ROOT/tests/compat/lib.sh"
COMPAT_TMP=$(mktemp -d /tmp/clshim-pycold.XXXXXX)
trap 'rm -rf "$COMPAT_TMP"' EXIT
WORK=$BUILD/compat
OUT=$WORK/pyopencl-cold-bench
rm -rf "$OUT"; mkdir -p "$OUT"

compat_install_packages || exit 1
compat_pyopencl_tests "$WORK" || exit 1

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
fails=0
one() { # MODE PAIR
    local d=$OUT/$1-$2
    rm -rf "$COMPAT_TMP/cache"
    compat_pytest "$1" "$d" "$COMPAT_TMP/cache" "$TDIR" "${files[@]}"
    echo "pair $2 $1: $(cat "$d/wall") s, $(cat "$d/summary"), load $(cut -d' ' -f1-3 /proc/loadavg)"
}
for ((i = 1; i <= REPS; i++)); do
    if ((i % 2)); then one plain "$i"; one cold "$i"; else one cold "$i"; one plain "$i"; fi
    why=$(compat_same_outcomes "$OUT/plain-$i" "$OUT/cold-$i") || { echo "pair $i: outcomes differ: $why"; fails=$((fails + 1)); }
    read -r h m <<<"$(compat_shim_counts "$OUT/cold-$i")"
    [ "$m" -gt 0 ] || { echo "pair $i: clshim saw no build in the cold run"; fails=$((fails + 1)); }
done
p=$(cat "$OUT"/plain-*/wall | median)
c=$(cat "$OUT"/cold-*/wall | median)
echo
echo "| runs | plain s (median, min-max) | clshim cold s (median, min-max) | cold / plain |"
echo "| --- | --- | --- | --- |"
echo "| $REPS pairs | $p ($(cat "$OUT"/plain-*/wall | sort -n | sed -n '1p;$p' | paste -sd-)) |" \
    "$c ($(cat "$OUT"/cold-*/wall | sort -n | sed -n '1p;$p' | paste -sd-)) |" \
    "$(awk -v a="$p" -v b="$c" 'BEGIN { printf "%.3f", b / a }') |"
echo "pyopencl_cold: $fails failures"
[ "$fails" = 0 ]
