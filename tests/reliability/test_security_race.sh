#!/bin/bash
# run-all: alone (races an attacker for a fixed time)
# The directory swap race (issue 17): a cache directory inside a parent that
# another user can write (0777, not sticky). While the victim opens its cache
# over and over, the attacker, a second user, exchanges the victim's directory
# with their own cache (renameat2 RENAME_EXCHANGE) as fast as they can. Each
# victim run is a fresh process that opens the cache as an application does
# and prints the binary it got for the probe key. Before the fix, the paths
# checked were resolved again by the lock file and mdb_env_open, and parents
# were never checked: some runs got the attacker's binary. Now the walk by
# descriptor refuses the open parent, every run, with one line; and in a
# sticky parent (where the exchange is not allowed) the cache is used.
#
# Needs two users: run as root (CI does), it creates the attacker
# (useradd) and removes it at the end. Not root: skipped, with the reason.
source "$CLSHIM_ROOT/tests/integration/lib.sh"
RUNS=${RACE_RUNS:-1000} # at least 1,000 in make check (issue 17)
if [ "$(id -u)" != 0 ]; then
    echo "SKIP: the swap race needs a second user, which only root can create (CI runs the tests as root)"
    exit 0
fi
ATTACKER=clshim-race-attacker
created=0
if ! id -u "$ATTACKER" >/dev/null 2>&1; then
    useradd --system --no-create-home --shell /usr/sbin/nologin "$ATTACKER" || fail "useradd $ATTACKER"
    created=1
fi
swapper=
cleanup() {
    [ -n "$swapper" ] && kill "$swapper" 2>/dev/null
    [ "$created" = 1 ] && userdel "$ATTACKER" 2>/dev/null
    true
}
trap cleanup EXIT
uid=$(id -u "$ATTACKER"); gid=$(id -g "$ATTACKER")

# The attacker must reach the parent and run the probe: a copy of it, in a
# directory the test's private temp dir lets them through to.
chmod 711 "$TMP"
mkdir -p "$TMP/bin" && cp "$CLSHIM_BUILD/tests/rel/rel_probe" "$TMP/bin/" && chmod 755 "$TMP/bin" "$TMP/bin/rel_probe"
PROBE=$TMP/bin/rel_probe
P=$TMP/race
mkdir -p "$P"

race() { # mode: the parent's mode; prints the victim's results, one a line
    chmod "$1" "$P"
    "$PROBE" get "$P/cache" >/dev/null 2>&1 # not part of the count
    setpriv --reuid="$uid" --regid="$gid" --clear-groups "$PROBE" swap "$P/cache" "$P/evil" >"$TMP/swap.out" 2>&1 &
    swapper=$!
    sleep 0.2
    : >"$TMP/victim.out"
    : >"$TMP/victim.err"
    for _ in $(seq "$RUNS"); do "$PROBE" get "$P/cache" >>"$TMP/victim.out" 2>>"$TMP/victim.err"; done
    kill -TERM "$swapper"; wait "$swapper" || true; swapper=
    # Put the directories back where they belong, whatever the last exchange did.
    if [ "$(stat -c %U "$P/cache")" != root ]; then mv "$P/cache" "$P/tmp"; mv "$P/evil" "$P/cache"; mv "$P/tmp" "$P/evil"; fi
}

# The victim's cache (root's, 0700) and the attacker's (theirs, 0700), both
# with an entry for the probe key.
chmod 755 "$P"
"$PROBE" plant "$P/cache" victim-binary || fail "plant the victim's entry"
"$PROBE" plant "$P/evil" ATTACKER-binary || fail "plant the attacker's entry"
chown -R "$uid:$gid" "$P/evil"
chmod 700 "$P/cache" "$P/evil"
[ "$("$PROBE" get "$P/cache")" = victim-binary ] || fail "the victim's own entry is not read"

start=$SECONDS
race 0777
foreign=$(count ATTACKER-binary "$TMP/victim.out")
runs=$(wc -l <"$TMP/victim.out")
echo "open parent (0777): $runs victim runs in $((SECONDS - start)) s, attacker: $(cat "$TMP/swap.out")"
echo "  results: $(sort "$TMP/victim.out" | uniq -c | tr '\n' ' ')"
[ "$runs" = "$RUNS" ] || fail "expected $RUNS victim results, got $runs"
grep -q '^[1-9][0-9]* exchanges' "$TMP/swap.out" || fail "the attacker never managed an exchange: $(cat "$TMP/swap.out")"
[ "$foreign" = 0 ] || fail "$foreign of $RUNS victim runs got the attacker's binary"
ok "swap race in an open parent: $RUNS victim runs, 0 foreign binaries"
[ "$(count refused "$TMP/victim.out")" = "$RUNS" ] || fail "the open parent was not refused every time"
[ "$(count 'clshim:' "$TMP/victim.err")" = "$RUNS" ] || fail "expected one line per run"
[ "$(count "clshim: cache directory .* is not used: $P on its way is writable by group or others and not sticky" \
    "$TMP/victim.err")" = "$RUNS" ] || { head -3 "$TMP/victim.err" >&2; fail "the line does not name the open parent"; }
ok "the open parent is refused every run, one line naming it"

# Sticky (like /tmp): the attacker cannot exchange what is not theirs, and
# the victim's cache is used.
race 1777
foreign=$(count ATTACKER-binary "$TMP/victim.out")
echo "sticky parent (1777): attacker: $(cat "$TMP/swap.out"); results: $(sort "$TMP/victim.out" | uniq -c | tr '\n' ' ')"
[ "$foreign" = 0 ] || fail "sticky parent: $foreign runs got the attacker's binary"
[ "$(count '^victim-binary$' "$TMP/victim.out")" = "$RUNS" ] || fail "sticky parent: the victim's cache was not used every run"
ok "swap race in a sticky parent: the exchange is refused, $RUNS runs read their own cache"
finish
