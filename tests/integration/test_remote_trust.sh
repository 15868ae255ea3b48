#!/bin/bash
# Trusted writers on the remote tier (issue 31), with a real redis-server on
# a unix socket in the test's temp dir and two "machines" (two local caches):
# a builder that signs what it pushes (CLSHIM_REMOTE_SIGN_KEY) and a reader
# that takes only values signed by it (CLSHIM_REMOTE_TRUST). Attacks that
# must fail: an unsigned writer's value, another key's, a forged envelope
# (trusted key, wrong signature), a signed value moved under other keys.
# Then provenance and removal: a local copy records where it came from and
# who signed it (list, show); a runner whose TRUST no longer lists that
# signer deletes the copy at its next lookup, even with the remote tier off;
# `cache rm`, `cache remote rm`, `cache evict --origin=remote`. (keygen:
# reliability/test_cache_trust.)
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info
MK=$PROGS/multikernel
CL=$PROGS/compilelink
TOOL=$CLSHIM_BUILD/clshim-tool
start_redis
export CLSHIM_REMOTE=$REDIS_URL
# A 2 s deadline for every lookup but those that test deadlines (they set
# their own): a sanitizer build on a loaded machine misses the default
# 50 ms, and a lookup that times out counts as a timeout, not as what the
# check looks for.
export CLSHIM_REMOTE_TIMEOUT=2000
R() { "${REDIS_CLI[@]}" "$@"; }
json() { "$TOOL" cache --dir "$TMP/cache-$1" stats --json; }
entries() { "$TOOL" cache --dir "$TMP/cache-$1" list --json; }

# ---- keys ----
K=$TMP/keys
mkdir -p "$K"
"$TOOL" cache keygen "$K/ci" >/dev/null || fail "keygen"
"$TOOL" cache keygen "$K/other" >/dev/null || fail "keygen"
CI_PUB=$(awk '{print $2}' "$K/ci.pub")
SIGN=CLSHIM_REMOTE_SIGN_KEY=$K/ci
TRUST=CLSHIM_REMOTE_TRUST=$K/ci.pub

fresh_pocl; run_plain ref "$MK"
# PoCL's own cache stays warm (each run is quick); which tier answers is
# what the logs and counters tell.

# ---- the builder signs, the reader trusts it ----
run_shim w env "$SIGN" CLSHIM_CACHE_DIR="$TMP/cache-w" "$MK"
same_output ref w "builder: same results"
key=$(R --scan --pattern 'clshim:e:*')
[ -n "$key" ] && [ "$(R --raw getrange "$key" 0 7)" = CLSHIMV1 ] || fail "the builder's value is not signed"
run_shim r env "$TRUST" CLSHIM_CACHE_DIR="$TMP/cache-r" "$MK"
same_output ref r "reader: same results"
[ "$(count 'hit .*(remote)' "$TMP/r.err")" = 1 ] && [ "$(count 'miss ' "$TMP/r.err")" = 0 ] ||
    fail "reader: expected a remote hit and no compile"
entries r | grep -q "\"source\": \"remote\", \"signer\": \"$CI_PUB\"" || fail "reader: provenance: $(entries r)"
"$TOOL" cache --dir "$TMP/cache-r" show "${key##*:}" >"$TMP/show.out"
grep -q "^Source  *remote: unix://.*namespace clshim" "$TMP/show.out" &&
    grep -q "^Signed by  *$CI_PUB" "$TMP/show.out" || fail "show: provenance: $(cat "$TMP/show.out")"
"$TOOL" cache --dir "$TMP/cache-r" list | grep -q "remote/${CI_PUB:0:16}" || fail "list: no FROM column"
"$TOOL" cache --dir "$TMP/cache-w" list | grep -q " here$" || fail "list: the builder's own entry is not 'here'"
ok "a trusting reader takes the signed value, records where it came from and who signed it"

# Faster to first result than cold, by at least 5x (bench_ttfr's span,
# mixed program; PoCL's cache empty in both).
TTFR=$CLSHIM_BUILD/bench/bench_ttfr
cold_pocl() { rm -rf "$TMP/pocl-cold"; mkdir -p "$TMP/pocl-cold"; }
ttfr() { sed -n 's/.*ttfr_us=\([0-9]*\).*/\1/p' "$TMP/$1.out"; }
sum() { sed -n 's/.*checksum=\([0-9a-f]*\).*/\1/p' "$TMP/$1.out"; }
cold_pocl; run_plain tcold env POCL_CACHE_DIR="$TMP/pocl-cold" "$TTFR" --child source --program mixed
cold_pocl; run_shim tw env POCL_CACHE_DIR="$TMP/pocl-cold" "$SIGN" CLSHIM_REMOTE_NAMESPACE=tt CLSHIM_CACHE_DIR="$TMP/cache-tw" \
    "$TTFR" --child source --program mixed
cold_pocl; run_shim tr env POCL_CACHE_DIR="$TMP/pocl-cold" "$TRUST" CLSHIM_REMOTE_NAMESPACE=tt CLSHIM_CACHE_DIR="$TMP/cache-tr" \
    "$TTFR" --child source --program mixed
[ -n "$(sum tcold)" ] && [ "$(sum tcold)" = "$(sum tw)" ] && [ "$(sum tcold)" = "$(sum tr)" ] ||
    fail "mixed program: results differ"
[ "$(count 'hit .*(remote)' "$TMP/tr.err")" = 1 ] || fail "mixed program: the reader did not hit remotely"
echo "time to first result: cold $(ttfr tcold) us, trusting reader (remote hit, signed) $(ttfr tr) us"
[ $(($(ttfr tr) * 5)) -le "$(ttfr tcold)" ] || fail "the signed remote hit is not 5x faster than cold"
ok "signed remote hit: $(($(ttfr tcold) / $(ttfr tr)))x faster to first result than cold, same results"

# ---- values the reader must not take ----
# ignored NAME NS [ENV...]: a trusting reader with an empty cache compiles,
# counts one untrusted value, and copies nothing remote into its cache.
ignored() {
    local tag=$1 ns=$2; shift 2
    run_shim "$tag" env "$@" CLSHIM_REMOTE_NAMESPACE="$ns" CLSHIM_CACHE_DIR="$TMP/cache-$tag" "$MK"
    same_output ref "$tag" "$tag: same results"
    [ "$(count 'hit ' "$TMP/$tag.err")" = 0 ] && [ "$(count 'miss ' "$TMP/$tag.err")" = 1 ] ||
        fail "$tag: the value was taken"
    grep -q 'ignored: untrusted' "$TMP/$tag.err" || fail "$tag: no log line"
    json "$tag" | grep -q '"remote_untrusted": 1,' || fail "$tag: not counted: $(json "$tag")"
    entries "$tag" | grep -q '"source": "remote"' && fail "$tag: a remote value reached the local cache"
    true
}
run_shim u env CLSHIM_REMOTE_NAMESPACE=u CLSHIM_CACHE_DIR="$TMP/cache-u" "$MK"
ignored ru u "$TRUST"
ok "an unsigned writer's value: ignored, counted, not copied"

run_shim o env CLSHIM_REMOTE_SIGN_KEY="$K/other" CLSHIM_REMOTE_NAMESPACE=o CLSHIM_CACHE_DIR="$TMP/cache-o" "$MK"
ignored ro o "$TRUST"
ok "a value signed by a key not trusted: ignored, counted, not copied"

# Forged: the unsigned writer's (valid) record in an envelope that names the
# trusted key, with the trusted builder's signature of another record.
ukey=$(R --scan --pattern 'u:e:*')
R --raw get "$ukey" | head -c -1 >"$TMP/u.rec"
R --raw get "$key" | head -c -1 >"$TMP/w.val"
python3 - "$TMP/w.val" "$TMP/u.rec" "$TMP/forged.val" <<'EOF'
import sys
w, u = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
assert w[:8] == b"CLSHIMV1" and u[:8] == b"CLSHIME1"
open(sys.argv[3], "wb").write(w[:104] + u)  # trusted key and signature, another record
EOF
R -x set "f:e:${ukey##*:}" <"$TMP/forged.val" >/dev/null
ignored rf f "$TRUST"
ignored rfn f # a signature that does not verify is refused even without TRUST
ok "a forged envelope (trusted key, signature of another record): ignored, with and without TRUST"

# Signed values moved under other keys (each a valid signature by the
# trusted key, of another program's record): refused by the record's checks.
run_plain clref "$CL"
run_shim clw env "$SIGN" CLSHIM_REMOTE_NAMESPACE=mv CLSHIM_CACHE_DIR="$TMP/cache-clw" "$CL"
keys=($(R --scan --pattern 'mv:e:*'))
[ ${#keys[@]} = 3 ] || fail "compile+link: expected 3 signed values"
for k in "${keys[@]}"; do R --raw get "$k" | head -c -1 >"$TMP/${k##*:}.val"; done
for i in "${!keys[@]}"; do
    next=${keys[$(((i + 1) % 3))]}
    R -x set "${keys[$i]}" <"$TMP/${next##*:}.val" >/dev/null
done
run_shim clr env "$TRUST" CLSHIM_REMOTE_NAMESPACE=mv CLSHIM_CACHE_DIR="$TMP/cache-clr" "$CL"
same_output clref clr "signed values moved between keys: same results"
[ "$(count 'hit ' "$TMP/clr.err")" = 0 ] && [ "$(count 'miss ' "$TMP/clr.err")" = 3 ] ||
    fail "signed values moved between keys: one was served"
json clr | grep -q '"remote_corrupt": 3' || fail "moved values not counted: $(json clr)"
ok "trusted signatures replayed under other keys: refused, counted, rebuilt"

# Knobs that cannot be used fail safe, with one line saying what to do.
run_shim badsk env CLSHIM_REMOTE_SIGN_KEY="$TMP/nonexistent" CLSHIM_REMOTE_NAMESPACE=bad \
    CLSHIM_CACHE_DIR="$TMP/cache-badsk" "$MK"
same_output ref badsk "unreadable sign key: same results"
[ "$(count 'CLSHIM_REMOTE_SIGN_KEY: cannot read .*nothing is pushed' "$TMP/badsk.err")" = 1 ] ||
    fail "unreadable sign key: no line: $(cat "$TMP/badsk.err")"
[ "$(R --scan --pattern 'bad:*' | wc -l)" = 0 ] || fail "unreadable sign key: something was written"
ignored badtr clshim CLSHIM_REMOTE_TRUST="$TMP/nonexistent.pub"
[ "$(count 'CLSHIM_REMOTE_TRUST: cannot read' "$TMP/badtr.err")" = 1 ] || fail "unreadable trust file: no line"
ok "an unreadable sign key pushes nothing; an unreadable trust file trusts nothing"

# ---- local copies follow TRUST, also with the remote tier off ----
run_shim roff env CLSHIM_REMOTE= "$TRUST" CLSHIM_CACHE_DIR="$TMP/cache-r" "$MK"
[ "$(count 'hit .*(disk)' "$TMP/roff.err")" = 1 ] || fail "reader, remote off, signer trusted: not a local hit"
run_shim rdis env CLSHIM_REMOTE= CLSHIM_REMOTE_TRUST="$K/other.pub" CLSHIM_CACHE_DIR="$TMP/cache-r" "$MK"
same_output ref rdis "signer no longer trusted: same results"
[ "$(count 'hit ' "$TMP/rdis.err")" = 0 ] && [ "$(count 'miss ' "$TMP/rdis.err")" = 1 ] ||
    fail "signer no longer trusted: the local copy was used"
grep -q 'not trusted now: deleted' "$TMP/rdis.err" || fail "signer no longer trusted: no log line"
json r | grep -q '"remote_distrusted": 1' || fail "signer no longer trusted: not counted"
entries r | grep -q '"source": "remote"' && fail "signer no longer trusted: the copy is still there"
ok "a local copy whose signer TRUST no longer lists is deleted at its next lookup (remote tier off)"

# The issue's story: a runner without TRUST took an unsigned value; once it
# trusts only the builder, that copy goes at its next lookup.
run_shim n1 env CLSHIM_REMOTE_NAMESPACE=u CLSHIM_CACHE_DIR="$TMP/cache-n" "$MK"
[ "$(count 'hit .*(remote)' "$TMP/n1.err")" = 1 ] || fail "without TRUST an unsigned value is not taken"
entries n | grep -q '"source": "remote", "signer": null' || fail "unsigned copy: provenance: $(entries n)"
run_shim n2 env CLSHIM_REMOTE= "$TRUST" CLSHIM_CACHE_DIR="$TMP/cache-n" "$MK"
same_output ref n2 "unsigned copy, then TRUST: same results"
[ "$(count 'miss ' "$TMP/n2.err")" = 1 ] || fail "unsigned copy, then TRUST: it was used"
ok "without TRUST unsigned values work as before; adding TRUST drops their local copies"

# ---- removal ----
run_shim e1 env "$TRUST" CLSHIM_CACHE_DIR="$TMP/cache-e" "$MK"
run_shim e2 env CLSHIM_REMOTE= CLSHIM_CACHE_DIR="$TMP/cache-e" "$CL"
[ "$(entries e | grep -c '"source": "remote"')" = 1 ] && [ "$(entries e | grep -c '"source": "here"')" = 3 ] ||
    fail "evict setup: $(entries e)"
"$TOOL" cache --dir "$TMP/cache-e" evict --origin=remote | grep -q 'Removed 1 local copy of remote values' ||
    fail "evict --origin=remote: output"
[ "$(entries e | grep -c '"source": "remote"')" = 0 ] && [ "$(entries e | grep -c '"source": "here"')" = 3 ] ||
    fail "evict --origin=remote: $(entries e)"
ok "evict --origin=remote drops every local copy of remote values, keeps local builds"

first=$(entries e | sed -n 's/.*"key": "\([0-9a-f]*\)".*/\1/p' | head -1)
"$TOOL" cache --dir "$TMP/cache-e" rm "${first:0:12}" | grep -q "Removed $first" || fail "rm: output"
[ "$(entries e | grep -c '"key"')" = 2 ] || fail "rm: the entry is still there"
"$TOOL" cache --dir "$TMP/cache-e" rm 0123456789abcdef0 2>/dev/null && fail "rm of a missing key succeeded"
"$TOOL" cache --dir "$TMP/cache-e" rm not-hex 2>/dev/null && fail "rm took a key that is not hex"
ok "cache rm removes local entries by key prefix; a missing or malformed key fails"

"$TOOL" cache remote rm "${key##*:}" | grep -q "Removed ${key##*:}" || fail "remote rm: output"
[ "$(R exists "$key")" = 0 ] || fail "remote rm: the value is still on the server"
"$TOOL" cache remote rm "${key##*:}" 2>/dev/null && fail "remote rm of a removed key succeeded"
run_shim r2 env "$TRUST" CLSHIM_CACHE_DIR="$TMP/cache-r2" "$MK"
[ "$(count 'hit ' "$TMP/r2.err")" = 0 ] || fail "remote rm: a reader still hit"
ok "cache remote rm deletes the value on the server"

# Counted fleet-wide by the clients that write (rfn, without TRUST, in "f").
CLSHIM_REMOTE_NAMESPACE=f "$TOOL" cache remote stats --json >"$TMP/rs.json"
grep -q '"untrusted": 1,' "$TMP/rs.json" || fail "remote stats: fleet untrusted count: $(cat "$TMP/rs.json")"
ok "cache remote stats counts untrusted values fleet-wide"
finish
