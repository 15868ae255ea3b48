#!/bin/bash
# Entries trusted by who sealed them (issue 46): CLSHIM_SIGN_KEY seals what a
# process stores, CLSHIM_TRUST serves only entries sealed by a listed key,
# local ones included, whoever wrote them. The attack is a restored CI
# cache directory with a planted entry: another program's real binary under
# the victim's honest key, every checksum and binding valid (rel_forge
# plant). Unsealed, sealed by an unknown key, and carrying a seal made for
# another binary: each is served without trust (the attack works) and is
# ignored by a trusting reader, which computes as plain, says so once,
# counts it and keeps it (`cache verify --trust` lists it, `--fix` removes
# it). Rotation: two trusted keys, then one removed. A trusting process
# without a key keeps what it found.
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info
MK=$PROGS/multikernel
OTHER=$PROGS/rebuild
TOOL=$CLSHIM_BUILD/clshim-tool
FORGE=$CLSHIM_BUILD/tests/rel/rel_forge
K=$TMP/keys
mkdir -p "$K/trusted"
for k in ci ci2 attacker; do "$TOOL" cache keygen "$K/$k" >/dev/null || fail "keygen $k"; done
pub() { awk '{print $2}' "$K/$1.pub"; }
cachedir() { echo "$TMP/cache-$1"; }
entries() { "$TOOL" cache --dir "$(cachedir "$1")" list --json; }
stats() { "$TOOL" cache --dir "$(cachedir "$1")" stats --json; }
LINE='ignored: not sealed by a key in CLSHIM_TRUST'

fresh_pocl; run_plain ref "$MK"
[ "$(cat "$TMP/ref.rc")" = 0 ] || fail "plain run"

# run TAG CACHE [VAR=VALUE...]: multikernel under clshim on that cache.
run() { local tag=$1 c=$2; shift 2; fresh_pocl; run_shim "$tag" env CLSHIM_CACHE_DIR="$(cachedir "$c")" "$@" "$MK"; }

# ---- the builder seals; a trusting reader hits ----
run build ci CLSHIM_SIGN_KEY="$K/ci"
same_output ref build "builder: same results"
entries ci | grep -q "\"sealed_by\": \"$(pub ci)\"" || fail "the builder's entry is not sealed by its key: $(entries ci)"
"$TOOL" cache --dir "$(cachedir ci)" show "$(entries ci | sed -n 's/.*"key": "\([0-9a-f]*\)".*/\1/p' | head -1)" |
    grep -q "^Sealed by  *$(pub ci)" || fail "show does not name the sealer"
run read ci CLSHIM_TRUST="$K/ci.pub"
same_output ref read "trusting reader: same results"
[ "$(count '^clshim: hit ' "$TMP/read.err")" = 1 ] && [ "$(count '^clshim: miss ' "$TMP/read.err")" = 0 ] ||
    fail "trusting reader: not a hit on the sealed entry"
ok "an entry sealed by CLSHIM_SIGN_KEY: list and show name the sealer, a reader trusting it hits"

# ---- planted entries: the attack works without trust, fails with it ----
# The donor: another program's real binary, built on this device.
fresh_pocl; CLSHIM_CACHE_DIR=$(cachedir donor) LD_PRELOAD=$SHIM "$OTHER" 1 >/dev/null 2>&1 || fail "donor build"
plant() { # TAG FORGE-ARGS...: a copy of the builder's cache with the donor's binary planted
    local tag=$1; shift
    rm -rf "$(cachedir "$tag")"; cp -a "$(cachedir ci)" "$(cachedir "$tag")"
    "$FORGE" plant "$(cachedir "$tag")" "$(cachedir donor)" "$@" | grep -q "planted [1-9]" || fail "$tag: rel_forge plant"
}
attack() { # TAG WHY FORGE-ARGS...
    local tag=$1 why=$2; shift 2
    plant "$tag" "$@"
    cp -a "$(cachedir "$tag")" "$(cachedir "$tag-open")"
    run "$tag-open" "$tag-open"
    if [ "$(cat "$TMP/$tag-open.rc")" = 0 ] && cmp -s "$TMP/ref.out" "$TMP/$tag-open.out"; then
        fail "$tag: the planted binary was not served without trust (the test shows nothing)"
    fi
    "$TOOL" cache --dir "$(cachedir "$tag")" verify --trust "$K/ci.pub" >"$TMP/$tag.verify" && fail "$tag: verify --trust passed"
    grep -q "untrusted: $why" "$TMP/$tag.verify" || fail "$tag: verify does not say '$why': $(cat "$TMP/$tag.verify")"
    run "$tag" "$tag" CLSHIM_TRUST="$K/ci.pub"
    same_output ref "$tag" "$tag: a trusting reader computes as plain"
    [ "$(count "$LINE" "$TMP/$tag.err")" = 1 ] || { cat "$TMP/$tag.err" >&2; fail "$tag: not one line saying why"; }
    stats "$tag" | grep -q '"untrusted": [1-9]' || fail "$tag: not counted: $(stats "$tag")"
    "$TOOL" cache --dir "$(cachedir "$tag")" verify --trust "$K/ci.pub" >/dev/null && fail "$tag: the reader deleted or replaced it"
    "$TOOL" cache --dir "$(cachedir "$tag")" verify --trust "$K/ci.pub" --fix >/dev/null || fail "$tag: verify --fix"
    "$TOOL" cache --dir "$(cachedir "$tag")" verify --trust "$K/ci.pub" >/dev/null || fail "$tag: still bad after --fix"
    true
}
attack unsealed "it is not sealed"
ok "planted, unsealed: served without trust; ignored, counted, said once and kept by a trusting reader; verify --fix removes it"
attack other-key "its sealer is not in CLSHIM_TRUST" --seal "$K/attacker"
ok "planted, sealed by the attacker's own key: the same"
attack old-seal "its seal does not verify" --keep-seal
ok "planted under the builder's seal (made for the other binary): the same"

# ---- rotation: keys in a directory, numbered ----
cp "$K/ci.pub" "$K/trusted/ci-1.pub"
cp "$K/ci2.pub" "$K/trusted/ci-2.pub"
rm -rf "$(cachedir two)"; cp -a "$(cachedir ci)" "$(cachedir two)"
fresh_pocl; CLSHIM_CACHE_DIR=$(cachedir two) CLSHIM_SIGN_KEY=$K/ci2 LD_PRELOAD=$SHIM "$OTHER" 1 >"$TMP/other-ref.out" 2>/dev/null ||
    fail "second key's build"
run rot-both two CLSHIM_TRUST="$K/trusted"
same_output ref rot-both "rotation, both keys trusted: same results"
[ "$(count '^clshim: hit ' "$TMP/rot-both.err")" = 1 ] || fail "rotation: ci-1's entry not a hit with both keys"
fresh_pocl; run_shim rot-other env CLSHIM_CACHE_DIR="$(cachedir two)" CLSHIM_TRUST="$K/trusted" "$OTHER" 1
[ "$(count '^clshim: hit ' "$TMP/rot-other.err")" = 1 ] || fail "rotation: ci-2's entry not a hit with both keys"
rm "$K/trusted/ci-1.pub"
run rot-one two CLSHIM_TRUST="$K/trusted"
same_output ref rot-one "rotation, ci-1 removed: same results"
[ "$(count '^clshim: hit ' "$TMP/rot-one.err")" = 0 ] && [ "$(count "$LINE" "$TMP/rot-one.err")" = 1 ] ||
    fail "rotation: ci-1's entry still served after its key was removed"
fresh_pocl; run_shim rot-other2 env CLSHIM_CACHE_DIR="$(cachedir two)" CLSHIM_TRUST="$K/trusted" "$OTHER" 1
[ "$(count '^clshim: hit ' "$TMP/rot-other2.err")" = 1 ] || fail "rotation: ci-2's entry not a hit after ci-1 went"
ok "rotation: a directory of numbered keys trusts both; with ci-1 removed only ci-2's entries are served"

# ---- a trusting process without a key ----
run nokey-cold nokey CLSHIM_TRUST="$K/ci.pub"
same_output ref nokey-cold "trusting, no key, cold: same results"
entries nokey | grep -q '"sealed_by": null' || fail "no key: its own build is not stored unsealed: $(entries nokey)"
run nokey-warm nokey CLSHIM_TRUST="$K/ci.pub"
same_output ref nokey-warm "trusting, no key, warm: same results"
[ "$(count '^clshim: hit ' "$TMP/nokey-warm.err")" = 0 ] && [ "$(count "$LINE" "$TMP/nokey-warm.err")" = 1 ] ||
    fail "no key: its own unsealed entry was served to a trusting run"
grep -q 'not stored.*without CLSHIM_SIGN_KEY it keeps it' "$TMP/nokey-warm.err" ||
    fail "no key: the unsealed entry it found was replaced, or no line says why it was kept"
ok "trusting without a key: stores unsealed, never serves that, never replaces an entry it found"

# ---- the seal travels through the remote tier ----
start_redis
REMOTE=(CLSHIM_REMOTE="$REDIS_URL" CLSHIM_REMOTE_TIMEOUT=2000)
run r-build r-build "${REMOTE[@]}" CLSHIM_REMOTE_NAMESPACE=sealed CLSHIM_SIGN_KEY="$K/ci"
run r-read r-read "${REMOTE[@]}" CLSHIM_REMOTE_NAMESPACE=sealed CLSHIM_TRUST="$K/ci.pub"
same_output ref r-read "remote, sealed: same results"
[ "$(count 'hit .*(remote)' "$TMP/r-read.err")" = 1 ] || fail "remote, sealed: no remote hit for a trusting reader"
entries r-read | grep -q "\"source\": \"remote\", \"signer\": \"$(pub ci)\", \"sealed_by\": \"$(pub ci)\"" ||
    fail "remote, sealed: the reader's copy lost the seal: $(entries r-read)"
run r-read2 r-read CLSHIM_TRUST="$K/ci.pub"
[ "$(count '^clshim: hit .*(disk' "$TMP/r-read2.err")" = 1 ] || fail "remote, sealed: the local copy is not trusted"
run r-plain r-plain "${REMOTE[@]}" CLSHIM_REMOTE_NAMESPACE=unsealed
run r-distrust r-distrust "${REMOTE[@]}" CLSHIM_REMOTE_NAMESPACE=unsealed CLSHIM_TRUST="$K/ci.pub"
same_output ref r-distrust "remote, unsealed: same results"
[ "$(count 'hit ' "$TMP/r-distrust.err")" = 0 ] && grep -q 'remote cache: entry .*ignored: untrusted' "$TMP/r-distrust.err" ||
    fail "remote, unsealed: a trusting reader took it"
ok "remote tier: a sealed value's copy keeps its seal and is trusted locally; an unsealed value is ignored"

# ---- a key that cannot be read stores nothing; a trust file that cannot be read trusts nothing ----
run badkey badkey CLSHIM_SIGN_KEY="$TMP/nonexistent"
same_output ref badkey "unreadable CLSHIM_SIGN_KEY: same results"
grep -q 'CLSHIM_SIGN_KEY: .*nothing is stored' "$TMP/badkey.err" || fail "unreadable key: no line"
[ "$(entries badkey | grep -c '"key"')" = 0 ] || fail "unreadable key: something was stored"
run badtrust ci CLSHIM_TRUST="$TMP/nonexistent.pub"
same_output ref badtrust "unreadable CLSHIM_TRUST: same results"
grep -q 'CLSHIM_TRUST: ' "$TMP/badtrust.err" && [ "$(count '^clshim: hit ' "$TMP/badtrust.err")" = 0 ] ||
    fail "unreadable trust file: it trusted something, or no line"
ok "an unreadable CLSHIM_SIGN_KEY stores nothing, an unreadable CLSHIM_TRUST trusts nothing; one line each"
finish
