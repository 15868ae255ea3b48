#!/bin/bash
# clblast_auto.sh BUILD [TEST...] — issue 33's "0 failed fused builds": a
# BLAS library's own tests (Debian's clblast-tests, CLBlast 1.5.3; installed
# here when missing, as root) run plainly and under CLSHIM_FUSION=auto,
# each with fresh caches. Prints per test whether the output (colour codes
# stripped) equals the plain run's, how many fusions were refused and how
# many fused programs failed to build; exits 1 on a difference or a failed
# build. Default tests: xdot xaxpy xgemv xgemm. No capture helper: nothing
# writes into the temp dir after a run.
set -u
BUILD=$(cd "${1:?usage: bench/clblast_auto.sh BUILD [TEST...]}" && pwd)
shift
ROOT=$(cd "$(dirname "$0")/.." && pwd)
[ -x /usr/bin/clblast_test_xdot ] || "$ROOT/scripts/install-deps.sh" clblast-tests || exit 1
TMP=$(mktemp -d "${TMPDIR:-/tmp}/clshim-clblast.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
strip() { sed 's/\x1b\[[0-9;]*m//g; s/[0-9.]* *ms//g' "$1"; }
bad=0
echo "| test | output | refused | failed fused builds |"
echo "|---|---|---|---|"
for t in ${@:-xdot xaxpy xgemv xgemm}; do
    for way in plain auto; do
        mkdir -p "$TMP/$way-$t/c" "$TMP/$way-$t/p"
        env CLSHIM_CACHE_DIR="$TMP/$way-$t/c" POCL_CACHE_DIR="$TMP/$way-$t/p" \
            $([ $way = auto ] && echo "LD_PRELOAD=$BUILD/libclshim.so CLSHIM_FUSION=auto CLSHIM_LOG=info CLSHIM_CAPTURE_PROCESS=0") \
            "/usr/bin/clblast_test_$t" >"$TMP/$way-$t.out" 2>"$TMP/$way-$t.err"
        echo $? >>"$TMP/$way-$t.out"
    done
    same=$(cmp -s <(strip "$TMP/plain-$t.out") <(strip "$TMP/auto-$t.out") && echo identical || echo DIFFERS)
    refused=$(grep -c "refused" "$TMP/auto-$t.err")
    failed=$(grep -c "building the fused program failed" "$TMP/auto-$t.err")
    echo "| $t | $same | $refused | $failed |"
    [ "$same" = identical ] && [ "$failed" = 0 ] || bad=1
done
exit $bad
