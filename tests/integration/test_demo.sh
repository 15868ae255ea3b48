#!/bin/bash
# make demo (examples/demo.sh) does what README.md says: a miss, a hit, and a
# fused sequence, cold and from the cache, with the plain run's results.
source "$(dirname "$0")/lib.sh"

set +e
DEMO_DIR=$TMP/demo "$CLSHIM_ROOT/examples/demo.sh" "$CLSHIM_BUILD" >"$TMP/demo.log" 2>&1
rc=$?
set -e
[ $rc = 0 ] || { tail -30 "$TMP/demo.log" >&2; fail "demo.sh exited with $rc"; }
ok "demo runs and its results match the plain run"

grep -q 'clshim: miss .* to be stored at its first use' "$TMP/demo.log" || fail "demo: no miss"
grep -q 'clshim: hit .*(disk)' "$TMP/demo.log" || fail "demo: no hit"
ok "demo shows a miss and a hit"

[ "$(occurrences 'fused standardize+gain+clamp01 into one launch' "$TMP/demo.log")" -ge 6 ] ||
    fail "demo: the chain was not fused in both fusion runs"
grep -q 'hit derived program' "$TMP/demo.log" || fail "demo: the fused kernel did not come from the cache"
ok "demo fuses the chain, then takes the fused kernel from the cache"
finish
