#!/bin/bash
# Automatic fusion's run-length history (fusion/fhistory.h; docs/fusion.md,
# "Never slower"): each run records in the cache how often a learned
# sequence occurred, what loading its fused program cost and what a fused
# occurrence saved; a later run loads the cached program only where the
# run is expected to go on long enough for it to pay, and one that
# outlasts its prediction loads it once it has. bench_short's chain of 4
# kernels over 1 Mi floats on PoCL; CLSHIM_FUSION_TEST_LOAD_US sets the
# load a run records (the measured one is a few ms here, and a fused chain
# saves a fraction of one), so that the decision is the test's to know.
# Every run's result is compared with the plain run's.
source "$(dirname "$0")/lib.sh"
BS=$CLSHIM_BUILD/bench/bench_short
TOOL=$CLSHIM_BUILD/clshim-tool
hash_of() { sed -n 's/^result .*hash=//p' "$TMP/$1.out"; }
fused() { sed -n 's/.*fusion summary: \([0-9]*\) fused launches.*/\1/p' "$TMP/$1.err"; }
unwatched() { sed -n 's/.*replays; \([0-9]*\) runs not watched.*/\1/p' "$TMP/$1.err"; }
# history TAG: "OCCURRENCES RUNS LOAD_US LOADS GAIN_US" as the run read them
history() {
    sed -n 's/.*history of s0+s1+s2+s3: \([0-9]*\) occurrences in the last of \([0-9]*\) runs, load \([0-9]*\) us (\([0-9]*\) measured), gain \(-*[0-9.]*\) us.*/\1 \2 \3 \4 \5/p' \
        "$TMP/$1.err" | head -1
}
auto() { # TAG CHAINS [VAR=VALUE...]: one run under the shim, then the capture helper waited for
    local tag=$1 c=$2; shift 2
    fresh_pocl; run_shim "$tag" env CLSHIM_FUSION=auto CLSHIM_LOG=debug CLSHIM_STATS=1 "$@" "$BS" --chains "$c"
    [ "$(cat "$TMP/$tag.rc")" = 0 ] || fail "$tag: exit code $(cat "$TMP/$tag.rc"): $(tail -3 "$TMP/$tag.err")"
    "$TOOL" cache wait >/dev/null 2>&1 || true
    [ "$(hash_of "$tag")" = "$(hash_of "ref$c")" ] || fail "$tag: result $(hash_of "$tag"), plain $(hash_of "ref$c")"
}
for c in 6 40 400; do fresh_pocl; run_plain "ref$c" "$BS" --chains "$c"; done

# 1. The first run has the capture helper make the fused program; the
#    second loads it (no record says otherwise) and records its load: the
#    38 occurrences after learning (the 1st and 2nd are seen, not held).
export CLSHIM_CACHE_DIR=$TMP/c1
auto prime 40
auto r1 40 CLSHIM_FUSION_TEST_LOAD_US=10000000
read -r occ runs load loads gain <<<"$(history r1)"
[ "$occ $runs $load $loads" = "38 1 0 0" ] || fail "r1: read '$(history r1)', expected 38 occurrences of 1 run, no load"
[ "$(fused r1)" -gt 0 ] || fail "r1: not fused"
ok "a run's record: 38 occurrences of 40 chains, read by the next run, which loads and fuses ($(fused r1))"

# 2. One load measured says little (the driver may have compiled then what
#    its cache keeps): loaded again, and now two are recorded.
TL=CLSHIM_FUSION_TEST_LOAD_US=10000000
auto r2 40 $TL
read -r occ runs load loads gain <<<"$(history r2)"
[ "$occ $runs $load $loads" = "38 2 10000000 1" ] || fail "r2: read '$(history r2)', expected one load of 10 s"
[ "$(fused r2)" -gt 0 ] || fail "r2: with one load measured, not loaded"
ok "one load measured: loaded again ($(fused r2) fused)"

# 3. A run after one of 38 occurrences: 38 more save far less than the
#    10 s load at any gain a chain of 1 ms can have: not loaded, not held,
#    one line says why; the plain run's results. The gain is fspeed.c's
#    measurement of the 40-chain run (from its 20th occurrence or so): a
#    loaded machine may find the fused chain no faster once, and then
#    nothing is predicted; the 40-chain run is then repeated.
for i in 1 2 3 4; do
    auto short 6 $TL
    read -r occ runs load loads gain <<<"$(history short)"
    awk -v g="$gain" 'BEGIN { exit !(g > 0) }' && break
    auto again 40 $TL
done
[ "$occ $load $loads" = "38 10000000 2" ] || fail "short: read '$(history short)', expected 38 occurrences, two loads"
grep -q "fusion: auto: s0+s1+s2+s3 runs unfused for now: its last run had 38 occurrences; loading the fused program costs 10000000 us and an occurrence saves $gain us: decided again after [0-9]* more" \
    "$TMP/short.err" || fail "short: no line saying why it runs unfused: $(grep 'fusion: auto' "$TMP/short.err" | tail -3)"
[ "$(fused short)" = 0 ] || fail "short: $(fused short) fused launches, expected none"
# Decided when the sequence was learned: no occurrence held, nor keyed.
held=$(sed -n 's/.*launches; \([0-9]*\) held kernels submitted unfused.*/\1/p' "$TMP/short.err")
[ "$held" = 0 ] || fail "short: $held kernels held and submitted unfused, expected none (decided at learning)"
# The sequence rests (fb_rests): from its second occurrence sent unfused
# on, each chain's kernels go to the driver without the queue lock and the
# learner ("runs not watched"), the first kernel counting the occurrences.
[ "$(unwatched short)" = 3 ] || fail "short: $(unwatched short) runs not watched, expected the 3 chains after the first sent unfused"
ok "a short run after a long one: the cached program not loaded, nothing held (0 fused launches; gain $gain us; $(unwatched short) chains past the lock)"
auto short2 6 $TL
grep -q "runs unfused for now: its last run had 4 occurrences" "$TMP/short2.err" ||
    fail "short2: the record of the 6-chain run (4 occurrences) not read"
[ "$(fused short2)" = 0 ] || fail "short2: fused"
ok "the short run's own count (4 occurrences) recorded and read"

# 4. CLSHIM_FUSION_HISTORY=0: loaded at once, whatever the record.
auto off 6 CLSHIM_FUSION_HISTORY=0
[ "$(fused off)" -gt 0 ] || fail "off: CLSHIM_FUSION_HISTORY=0 did not load"
grep -q "runs unfused for now" "$TMP/off.err" && fail "off: deferred with the history off"
ok "CLSHIM_FUSION_HISTORY=0: loaded and fused at once ($(fused off))"

# 5. A run that outlasts its prediction loads once it has gone on long
#    enough to pay: a load recorded as 25 chains' gain (the gain must
#    cover two loads: FH_MARGIN), a 6-chain run before (4 occurrences); a
#    400-chain run then waits until the 50th or so occurrence and fuses
#    from there. The gain the runs record is fspeed.c's measurement, which
#    a loaded machine makes several times lower or higher than section
#    3's (the wait then passes the 398 occurrences, or there is none): the
#    case is then repeated in a fresh cache, with the load made from the
#    gain these runs measured.
g=$gain
for try in 1 2 3; do
    x=$(awk -v g="$g" 'BEGIN { printf "%d", g * 25 + 1 }')
    export CLSHIM_CACHE_DIR=$TMP/c2-$try
    auto prime2 40
    auto m1 40 CLSHIM_FUSION_TEST_LOAD_US="$x"
    auto m2 40 CLSHIM_FUSION_TEST_LOAD_US="$x"
    auto m3 6 CLSHIM_FUSION_TEST_LOAD_US="$x"
    auto long 400
    read -r occ runs load loads gain2 <<<"$(history long)"
    [ "$occ $load" = "4 $x" ] || fail "long: read '$(history long)', expected 4 occurrences and a load of $x us"
    line=$(grep "runs unfused for now: its last run had 4 occurrences" "$TMP/long.err" || true)
    w=$(sed -n 's/.*decided again after \([0-9]*\) more.*/\1/p' <<<"$line")
    [ -n "$w" ] && [ "$w" -lt 390 ] && break
    g=$gain2
done
[ -n "$line" ] || fail "long: not deferred after a 4-occurrence run in 3 tries (gain now $gain2 us, load $x us)"
n=$(fused long)
# 398 occurrences after learning: w sit out (decided when the sequence
# was learned), the rest fuse but for the measurements' unfused halves.
[ "$w" -lt 390 ] && [ "$n" -le $((398 - w)) ] && [ "$n" -ge $((398 - w - 60)) ] ||
    fail "long: waited $w occurrences, fused $n of 398; expected a wait under 390, then $((338 - w))-$((398 - w)) fused"
# While it rests its chains pass without the lock (all but the first
# sent unfused), and the rest ends where the wait does (the fused count
# above): its occurrences counted on the way.
if [ "$w" -ge 8 ]; then
    [ "$(unwatched long)" -ge $((w - 1)) ] || fail "long: $(unwatched long) runs not watched during a wait of $w, expected $((w - 1))"
fi
ok "a run that outlasts its prediction: unfused for $w occurrences ($(unwatched long) past the lock), then loaded ($n fused of 398)"
finish
