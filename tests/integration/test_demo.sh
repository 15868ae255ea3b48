#!/bin/bash
# run-all: alone (runs two busy loops of its own)
# make demo (examples/demo.sh) shows what its headings say, section by
# section, with the default capture (the capture helper on PoCL, as `make
# demo` runs it): cold, a miss for the main program's key K, stored; warm, a
# hit for K and no miss; with the fusion plan, the program (a key K2 of its
# own: fusion adds -cl-kernel-arg-info) and the derived fused program miss
# and are stored, then both hit with no miss; the cache's statistics at the
# end count the hits and misses of those sections, no other miss. Results
# are the plain run's in every run (demo.sh checks them).
source "$(dirname "$0")/lib.sh"
unset CLSHIM_CAPTURE_PROCESS # run-all.sh turns the helper off; the demo runs with it

set +e
DEMO_DIR=$TMP/demo "$CLSHIM_ROOT/examples/demo.sh" "$CLSHIM_BUILD" >"$TMP/demo.log" 2>&1
rc=$?
set -e
[ $rc = 0 ] || { tail -30 "$TMP/demo.log" >&2; fail "demo.sh exited with $rc"; }
ok "demo runs and its results match the plain run"

# The log split at its "== heading" lines into $TMP/sec.NAME.
sed 's/\x1b\[[0-9;]*m//g' "$TMP/demo.log" | awk -v dir="$TMP" '
    /^== / { name = "other"
             if (index($0, "cold cache")) name = "cold"
             else if (index($0, "warm cache")) name = "warm"
             else if (index($0, "with a fusion plan")) name = "fused1"
             else if (index($0, "The same, again")) name = "fused2"
             else if (index($0, "The cache afterwards")) name = "stats"
             out = dir "/sec." name; printf "" > out; next }
    out { print >> out }'
for s in cold warm fused1 fused2 stats; do [ -s "$TMP/sec.$s" ] || fail "demo: no section '$s'"; done
section() { cat "$TMP/sec.$1"; }
show() { echo "--- section $1:" >&2; cat "$TMP/sec.$1" >&2; }
misses() { grep -c '^clshim: miss ' "$TMP/sec.$1" || true; }
hits() { grep -c '^clshim: hit ' "$TMP/sec.$1" || true; }
key_of_miss() { sed -n 's/^clshim: miss \([0-9a-f]\{16\}\) on .*/\1/p' "$TMP/sec.$1"; }
HIT='\((disk|memory)' # where it came from

# Cold: one miss, key K, stored; no hit.
K=$(key_of_miss cold)
[ -n "$K" ] && [ "$(misses cold)" = 1 ] && [ "$(hits cold)" = 0 ] ||
    { show cold; fail "cold section: not one miss and no hit"; }
section cold | grep -q "^clshim: stored $K: " || { show cold; fail "cold section: $K was not stored"; }
ok "cold: a miss for $K, stored, no hit"

# Warm: a hit for K, no miss of any kind.
section warm | grep -Eq "^clshim: hit $K on .* $HIT" || { show warm; fail "warm section: no hit for $K"; }
[ "$(misses warm)" = 0 ] || { show warm; fail "warm section: $(misses warm) misses"; }
ok "warm: a hit for $K, no miss"

# First fused run: the program, under its own key K2, and the derived fused
# program miss and are stored.
K2=$(key_of_miss fused1)
D=$(sed -n 's/^clshim: miss derived program \([0-9a-f]\{16\}\) on .*stored [0-9]* bytes.*/\1/p' "$TMP/sec.fused1")
[ -n "$K2" ] && [ "$K2" != "$K" ] || { show fused1; fail "fused section 1: no miss for the program under a key of its own"; }
[ -n "$D" ] || { show fused1; fail "fused section 1: the derived program was not a miss, stored"; }
[ "$(misses fused1)" = 2 ] && [ "$(hits fused1)" = 0 ] || { show fused1; fail "fused section 1: not 2 misses and no hit"; }
[ "$(occurrences 'fused standardize+gain+clamp01 into one launch' "$TMP/sec.fused1")" -ge 3 ] ||
    { show fused1; fail "fused section 1: the chain was not fused"; }
section fused1 | grep -q "^clshim: stored $K2: " || { show fused1; fail "fused section 1: the program $K2 was not stored"; }
ok "fused, first: misses for the program ($K2) and the derived program ($D), both stored"

# Second fused run: hits for both, no miss.
section fused2 | grep -Eq "^clshim: hit $K2 on .* $HIT" || { show fused2; fail "fused section 2: no hit for the program $K2"; }
section fused2 | grep -Eq "^clshim: hit derived program $D on .* $HIT" ||
    { show fused2; fail "fused section 2: no hit for the derived program $D"; }
[ "$(misses fused2)" = 0 ] || { show fused2; fail "fused section 2: $(misses fused2) misses"; }
[ "$(occurrences 'fused standardize+gain+clamp01 into one launch' "$TMP/sec.fused2")" -ge 3 ] ||
    { show fused2; fail "fused section 2: the chain was not fused"; }
ok "fused, again: hits for the program and the derived program, no miss"

# The statistics: the hits of the warm runs, the misses of the cold ones.
want_hits=$(($(hits warm) + $(hits fused2)))
want_misses=$(($(misses cold) + $(misses fused1)))
got_hits=$(section stats | awk '$1 == "Hits" { print $2 }')
got_misses=$(section stats | awk '$1 == "Misses" { print $2 }')
[ "$got_hits" = "$want_hits" ] && [ "$got_misses" = "$want_misses" ] ||
    { show stats; fail "cache stats: $got_hits hits and $got_misses misses, not $want_hits and $want_misses"; }
ok "cache stats: $got_hits hits, $got_misses misses (the cold runs' only)"

# make demo needs nothing from the Python package index: its step of
# scripts/install-deps.sh (--no-pypi, as the Makefile's demo target runs it)
# succeeds with the index unreachable and no .deps, and makes none; the full
# step (make check's) would need the index for moto.
mkdir -p "$TMP/tree/scripts"
cp "$CLSHIM_ROOT/scripts/install-deps.sh" "$TMP/tree/scripts/"
grep -q '^demo:$' "$CLSHIM_ROOT/Makefile" && grep -A1 '^demo:$' "$CLSHIM_ROOT/Makefile" | grep -q 'install-deps.sh --no-pypi' ||
    fail "the Makefile's demo target does not install with --no-pypi"
PIP_INDEX_URL=http://127.0.0.1:9/ PIP_NO_INPUT=1 "$TMP/tree/scripts/install-deps.sh" --no-pypi >"$TMP/nopypi.out" 2>&1 ||
    { cat "$TMP/nopypi.out" >&2; fail "install-deps.sh --no-pypi failed with the index unreachable"; }
[ ! -e "$TMP/tree/.deps" ] || fail "install-deps.sh --no-pypi made .deps"
ok "make demo's install step needs no Python package index (unreachable index, no .deps: exit 0)"
finish
