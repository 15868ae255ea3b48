#!/bin/bash
# hashcat.sh — hashcat through clshim's program cache (issue 15's acceptance).
#
#   bench/hashcat.sh BUILD [--skip-plain-cold]
#
# Needs Debian's `hashcat` (not installed by `make deps`: this is heavy and
# not part of `make check`). A mask attack on one MD5 (-m 0 -a 3, 7 digits)
# on the CPU device (PoCL), in private HOME/XDG/PoCL/clshim directories:
#   plain cold    no clshim, hashcat's kernel cache empty
#   plain warm    no clshim, hashcat's own kernel cache from the run before
#   clshim cold   `clshim run --mode=loader`, hashcat's cache empty, clshim's empty
#   clshim warm   the same, hashcat's cache empty again, clshim's from the run before
# PoCL's cache is emptied before every run. Every run must crack the hash
# with the same output. Targets: clshim warm >= 8x faster than clshim cold,
# and within 1.2x of plain warm. Prints a table; exits 1 when a run fails or
# outputs differ (a missed target is reported, not an error).
set -u
BUILD=${1:-}
[ -n "$BUILD" ] && [ -x "$BUILD/clshim" ] || { echo "usage: bench/hashcat.sh BUILD [--skip-plain-cold]" >&2; exit 2; }
BUILD=$(cd "$BUILD" && pwd)
SKIP_PLAIN_COLD=${2:-}
command -v hashcat >/dev/null || { echo "hashcat.sh: needs hashcat (apt-get install hashcat)" >&2; exit 2; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export HOME=$W/home XDG_CACHE_HOME=$W/home/.cache XDG_DATA_HOME=$W/home/.local/share \
    XDG_CONFIG_HOME=$W/home/.config POCL_CACHE_DIR=$W/pocl CLSHIM_CACHE_DIR=$W/clshim
mkdir -p "$HOME"
cd "$W" || exit 2
echo -n 9876543 | md5sum | cut -d' ' -f1 >hash.txt
HC=(hashcat -m 0 -a 3 --potfile-disable --force -D 1 --quiet hash.txt '?d?d?d?d?d?d?d')

# run TAG KEEP_HASHCAT_CACHE [prefix...]: wall seconds into $W/TAG.time
run() {
    local tag=$1 keep=$2; shift 2
    [ "$keep" = keep ] || rm -rf "$XDG_CACHE_HOME/hashcat/kernels" "$XDG_DATA_HOME/hashcat/kernels"
    rm -rf "$POCL_CACHE_DIR"
    local t0 t1
    t0=$(date +%s.%N)
    "$@" "${HC[@]}" >"$tag.out" 2>"$tag.err"
    local rc=$?
    t1=$(date +%s.%N)
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f\n", b - a }' >"$tag.time"
    [ $rc = 0 ] && grep -q ':9876543$' "$tag.out" || { echo "$tag: hashcat failed (rc $rc)" >&2; tail -5 "$tag.err" >&2; exit 1; }
}
if [ "$SKIP_PLAIN_COLD" != --skip-plain-cold ]; then run plain_cold drop; fi
[ -f plain_cold.time ] || run plain_seed drop # fills hashcat's cache for plain warm
run plain_warm keep
run shim_cold drop "$BUILD/clshim" run --mode=loader --stats --log info --
"$BUILD/clshim-tool" cache wait # untimed: the capture helper's stores, before the warm run
run shim_warm drop "$BUILD/clshim" run --mode=loader --stats --log info --
cmp -s plain_warm.out shim_cold.out && cmp -s plain_warm.out shim_warm.out || { echo "cracked output differs" >&2; exit 1; }

t() { cat "$1.time"; }
printf '%-14s %9s\n' run seconds
for r in plain_cold plain_warm shim_cold shim_warm; do [ -f $r.time ] && printf '%-14s %9.2f\n' $r "$(t $r)"; done
awk -v c="$(t shim_cold)" -v w="$(t shim_warm)" -v o="$(t plain_warm)" 'BEGIN {
    printf "clshim warm vs cold: %.1fx faster (target >= 8x: %s)\n", c / w, (c / w >= 8) ? "met" : "MISSED"
    printf "clshim warm vs hashcat'"'"'s own warm cache: %.2fx (target <= 1.2x: %s)\n", w / o, (w / o <= 1.2) ? "met" : "MISSED"
}'
echo "clshim lines of the warm run:"
grep -E 'clshim: (summary|program .*headers|not caching)' shim_warm.err | sed 's/^/  /'
echo "clshim lines of the cold run (preprocessor):"
grep -E 'clshim: (program .*headers|not caching)' shim_cold.err | sed 's/^/  /'
"$BUILD/clshim-tool" cache stats | sed 's/^/  /'
