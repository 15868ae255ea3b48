#!/bin/bash
# Misses that an eviction caused (issue 45). With a size limit that holds two
# of three programs, a program built again after its entry was evicted is a
# miss of an evicted entry: `clshim cache stats` counts it apart and says which
# limit would have kept it (and a cache under that limit does keep it), and
# where the limit in force comes from. `clshim run --stats` ends with one line
# for the whole run, and appends one Markdown table per run to
# $GITHUB_STEP_SUMMARY.
source "$(dirname "$0")/lib.sh"
MK=$PROGS/multikernel
CLSHIM=$CLSHIM_BUILD/clshim
json() { "$CLSHIM" cache stats --json | sed -n "s/.*\"$1\": \([0-9]*\).*/\1/p"; }
build() { # TAG X: multikernel built with -DX=X: one entry of about 37 KiB
    fresh_pocl; run_shim "$1" env CLSHIM_LOG=info "$MK" --options "-DX=$2"
    [ "$(cat "$TMP/$1.rc")" = 0 ] || fail "$1: exit $(cat "$TMP/$1.rc"): $(tail -3 "$TMP/$1.err")"
}
export CLSHIM_CACHE_MAX_SIZE=100K

# 1. Three programs: the third's store evicts the first.
build x1 1
size1=$(json stored_bytes)
build x2 2
build x3 3
[ "$(json evictions_size)" = 1 ] && [ "$(json entries)" = 2 ] ||
    fail "the third store did not evict one entry: $("$CLSHIM" cache stats | grep -E 'Evictions|Entries')"
[ "$(json misses_evicted)" = 0 ] || fail "misses counted as evicted before any entry was evicted"
ok "a limit of two entries evicts the first of three"

# 2. The first again: a miss of an evicted entry. The limit that would have
#    kept it: what is stored now, plus what was evicted since (nothing), plus
#    its own size, over the 90 % eviction leaves (docs/cache.md, Eviction).
stored=$(json stored_bytes)
build again1 1
grep -q "^clshim: miss " "$TMP/again1.err" || fail "again1: not a miss"
grep -q "^clshim: [0-9a-f]* was evicted for size" "$TMP/again1.err" ||
    fail "again1: no line says the entry was evicted: $(grep clshim: "$TMP/again1.err")"
grep -q "summary: 0 hits (0 from memory), 1 misses (1 of evicted entries)" "$TMP/again1.err" ||
    fail "again1: the summary does not count the evicted miss: $(grep summary: "$TMP/again1.err")"
keep=$(( ((stored + size1) * 100 + 89) / 90 ))
[ "$(json misses_evicted)" = 1 ] || fail "cache stats: $(json misses_evicted) misses of evicted entries, not 1"
[ "$(json evicted_keep_limit)" = "$keep" ] ||
    fail "cache stats: suggested limit $(json evicted_keep_limit), not ($stored + $size1) / 0.9 = $keep"
# A new program is a miss too, but not of an evicted entry.
build new4 4
[ "$(json misses)" = 5 ] && [ "$(json misses_evicted)" = 1 ] ||
    fail "a new program: $(json misses) misses, $(json misses_evicted) of evicted entries (want 5, 1)"
"$CLSHIM" cache stats >"$TMP/stats.out"
grep -q "^Size limit  *100.0 KiB (.* used; CLSHIM_CACHE_MAX_SIZE, from the environment)$" "$TMP/stats.out" ||
    fail "cache stats does not say where the limit comes from: $(grep 'Size limit' "$TMP/stats.out")"
kib=$(( (keep + 1023) / 1024 ))
grep -q "^  1 miss of 5 was an evicted entry: a limit of [0-9.]* KiB would have kept it (CLSHIM_CACHE_MAX_SIZE=${kib}K)$" \
    "$TMP/stats.out" || fail "cache stats: $(grep -A1 'Size limit' "$TMP/stats.out")"
grep -q "^  of evicted entries     1$" "$TMP/stats.out" || fail "cache stats: no count under Misses"
ok "cache stats: 1 of 5 misses was an evicted entry; a limit of $keep bytes would have kept it"

# 3. It would have: the same three programs, then the first again, under
#    that limit (the next K above it), in a cache of their own: a hit.
(
    export CLSHIM_CACHE_DIR=$TMP/kept CLSHIM_CACHE_MAX_SIZE=${kib}K
    for x in 1 2 3; do build kept$x $x; done
    build kept_again 1
    grep -q "^clshim: hit " "$TMP/kept_again.err" || fail "under CLSHIM_CACHE_MAX_SIZE=${kib}K the first was not kept"
    [ "$(json evictions_size)" = 0 ] || fail "CLSHIM_CACHE_MAX_SIZE=${kib}K still evicts"
)
ok "under the suggested limit the entry is kept: a hit"

# 4. clshim run --stats: one line for the run, last; a table per run appended.
echo "previous step's summary" >"$TMP/summary.md"
fresh_pocl
GITHUB_STEP_SUMMARY=$TMP/summary.md "$CLSHIM" run --stats -- "$MK" --options -DX=2 >/dev/null 2>"$TMP/run1.err" ||
    fail "run --stats: exit $?"
[ "$(count '^clshim: run: ' "$TMP/run1.err")" = 1 ] || fail "run --stats: not one run line: $(cat "$TMP/run1.err")"
last=$(tail -1 "$TMP/run1.err")
case "$last" in
    "clshim: run: 0 hits, 1 misses (0 new, 1 evicted, 0 uncacheable), 1 stored, 0.0 s compile CPU time saved; a limit of "*" KiB would have kept the evicted (CLSHIM_CACHE_MAX_SIZE="*"K)") ;;
    *) fail "run --stats: the last line is not the run's: $last" ;;
esac
ok "run --stats ends with the run's line: ${last#clshim: run: }"
# Two processes: a new program, then a hit of it.
fresh_pocl
# shellcheck disable=SC2016 # $0 is the inner shell's
GITHUB_STEP_SUMMARY=$TMP/summary.md "$CLSHIM" run --stats -- \
    bash -c '"$0" --options -DX=5 && "$0" --options -DX=5' "$MK" >/dev/null 2>"$TMP/run2.err" || fail "run --stats: exit $?"
tail -1 "$TMP/run2.err" | grep -q "^clshim: run: 1 hits, 1 misses (1 new, 0 evicted, 0 uncacheable), 1 stored, [0-9.]* s compile CPU time saved, in 2 processes$" ||
    fail "run --stats, two processes: $(tail -1 "$TMP/run2.err")"
[ "$(head -1 "$TMP/summary.md")" = "previous step's summary" ] || fail "GITHUB_STEP_SUMMARY was truncated"
[ "$(count '^#### clshim: `' "$TMP/summary.md")" = 2 ] && [ "$(count '^| hits | misses: new | misses: evicted |' "$TMP/summary.md")" = 2 ] ||
    fail "not two tables appended: $(cat "$TMP/summary.md")"
grep -q '^| 0 | 0 | 1 | 0 | 1 | 0.0 s |$' "$TMP/summary.md" && grep -q '^| 1 | 1 | 0 | 0 | 1 | [0-9.]* s |$' "$TMP/summary.md" ||
    fail "the tables' rows: $(cat "$TMP/summary.md")"
grep -q "^A cache size limit of .* would have kept the evicted entries (\`CLSHIM_CACHE_MAX_SIZE=[0-9]*K\`).$" "$TMP/summary.md" ||
    fail "the first table does not give the limit: $(cat "$TMP/summary.md")"
ok "GITHUB_STEP_SUMMARY: one table appended per run, nothing before it lost"
finish
