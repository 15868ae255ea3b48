#!/bin/bash
# Security, end to end under LD_PRELOAD: a new cache is private (0700 dir,
# 0600 files); a cache directory owned by another user or writable by
# group/others is not read (one warning naming the override) and, with
# CLSHIM_CACHE_ALLOW_SHARED=1, is read but never written; symlinked data.mdb
# / lock.mdb are refused (writes cannot be redirected) even with the
# override; a directory on the way writable by others (not sticky) is
# refused; secrets in the environment never appear in clshim's output.
source "$CLSHIM_ROOT/tests/integration/lib.sh"
MK=$PROGS/multikernel
TOOL=$CLSHIM_BUILD/clshim-tool
C=$TMP/sec/a/cache
export CLSHIM_CACHE_DIR=$C
fresh_pocl; run_plain ref "$MK" --scale 2; run_plain ref3 "$MK" --scale 3
umask 000
run_shim new "$MK" --scale 2
umask 022
same_output ref new "new cache: right results"
[ "$(stat -c %a "$C")" = 700 ] && [ "$(stat -c %a "$TMP/sec/a")" = 700 ] || fail "cache directories not 0700 (umask 000)"
for f in data.mdb lock.mdb; do [ "$(stat -c %a "$C/$f")" = 600 ] || fail "$f not 0600"; done
ok "cache created owner-only under umask 000"

sum() { md5sum "$C/data.mdb" | cut -d' ' -f1; }
for how in group-writable other-writable foreign-owner; do
    case $how in
        group-writable) chmod 0770 "$C" ;;
        other-writable) chmod 0707 "$C" ;;
        foreign-owner) chown 65534 "$C" ;;
    esac
    before=$(sum)
    CLSHIM_LOG=info run_shim $how "$MK" --scale 2
    same_output ref $how "$how cache: right results"
    grep -q 'hit ' "$TMP/$how.err" && fail "$how cache was read"
    [ "$(count 'clshim: cache directory .* is not used' "$TMP/$how.err")" = 1 ] || { cat "$TMP/$how.err" >&2; fail "$how: no single warning"; }
    grep -q CLSHIM_CACHE_ALLOW_SHARED "$TMP/$how.err" || fail "$how: the warning does not name the override"
    CLSHIM_LOG=info CLSHIM_CACHE_ALLOW_SHARED=1 run_shim $how.shared "$MK" --scale 3
    same_output ref3 $how.shared "$how cache with the override: right results"
    CLSHIM_LOG=info CLSHIM_CACHE_ALLOW_SHARED=1 run_shim $how.shared2 "$MK" --scale 2
    grep -q 'hit .*(disk)' "$TMP/$how.shared2.err" || fail "$how with the override: not read"
    [ "$(sum)" = "$before" ] || fail "$how with the override: data.mdb was written"
    ok "$how cache: refused with one warning; with CLSHIM_CACHE_ALLOW_SHARED=1 read, never written"
    chmod 0700 "$C"; chown 0 "$C"
done

# A directory on the way that others can write (0777, not sticky): another
# user could swap the cache for theirs (test_security_race), so it is refused
# with one line naming it, and the app runs as without clshim.
mkdir -p "$TMP/open"; chmod 0777 "$TMP/open"
CLSHIM_CACHE_DIR=$TMP/open/cache run_shim openparent "$MK" --scale 2
same_output ref openparent "cache below an open parent: right results"
[ "$(count 'clshim:' "$TMP/openparent.err")" = 1 ] || { cat "$TMP/openparent.err" >&2; fail "open parent: not one line"; }
grep -q "clshim: cache directory $TMP/open/cache is not used: $TMP/open on its way is writable by group or others and not sticky" \
    "$TMP/openparent.err" || { cat "$TMP/openparent.err" >&2; fail "open parent: the line does not name it"; }
[ ! -e "$TMP/open/cache" ] || fail "open parent: the cache was created below it"
chmod 1777 "$TMP/open"
CLSHIM_CACHE_DIR=$TMP/open/cache run_shim stickyparent "$MK" --scale 2
CLSHIM_CACHE_DIR=$TMP/open/cache CLSHIM_LOG=info run_shim stickyparent2 "$MK" --scale 2
same_output ref stickyparent2 "cache below a sticky parent: right results"
grep -q 'hit .*(disk)' "$TMP/stickyparent2.err" || fail "sticky parent: the cache was not used"
ok "a cache below an open (0777) parent: refused with one line, nothing created; below a sticky one: used"

# Symlinks cannot redirect writes.
mkdir -p "$TMP/victim"; : >"$TMP/victim/target"; chmod 600 "$TMP/victim/target"
for f in data.mdb lock.mdb; do
    rm -rf "$C"; run_shim mk "$MK" --scale 2
    mv "$C/$f" "$TMP/victim/$f.real"
    ln -s "$TMP/victim/target" "$C/$f"
    for o in 0 1; do
        CLSHIM_CACHE_ALLOW_SHARED=$o run_shim link$f$o "$MK" --scale 3
        same_output ref3 link$f$o "symlinked $f (override $o): right results"
        [ -s "$TMP/victim/target" ] && fail "a write followed the $f symlink"
        grep -q "is not used" "$TMP/link$f$o.err" || fail "symlinked $f: not reported"
    done
    ok "symlinked $f: refused (even with the override), nothing written through it"
done

# Secrets in the environment are never logged, even at debug level.
rm -rf "$C"
SECRET=sk-clshim-test-3f9a1c77e2
API_TOKEN=$SECRET AWS_SECRET_ACCESS_KEY=$SECRET CLSHIM_LOG=debug run_shim secret "$MK" --scale 2 --threads 2
grep -q -- "$SECRET" "$TMP/secret.err" "$TMP/secret.out" && fail "a secret from the environment was logged"
"$TOOL" cache show "$("$TOOL" cache list --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["key"][:16])')" >"$TMP/show.txt" 2>&1 || true
grep -q -- "$SECRET" "$TMP/show.txt" && fail "a secret from the environment went into the key material"
grep -q -- "$SECRET" "$C/data.mdb" && fail "a secret from the environment is in the cache file"
ok "secrets in the environment: not in clshim's log (debug level), the key material or the cache file"
finish
