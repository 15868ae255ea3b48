#!/bin/bash
# run-all: alone (times cache wait with two busy loops of its own)
# `clshim cache wait` (tools/capture_wait.h, issue 30 item 6): it waits for
# the captures outstanding in the cache directory — each one a shared flock
# on <cache dir>/capture.lock — not for the processes that have the file
# open; it says what it waits for every few seconds; it raises the capture
# helpers it waits for to normal priority (each thread's nice, the session
# group's), or says in one line that it may not; and with two busy loops on
# the machine a real cold run's captures are stored within twice the
# helper's CPU time plus 5 s (a helper left at nice 19 in a group at nice
# 19 gets almost nothing of a loaded machine).
source "$CLSHIM_ROOT/tests/integration/lib.sh"
TOOL=$CLSHIM_BUILD/clshim-tool
LOCK=$CLSHIM_CACHE_DIR/capture.lock
now_ms() { date +%s%3N; }
pids=()
cleanup() {
    [ ${#pids[@]} = 0 ] || kill "${pids[@]}" 2>/dev/null || true
    [ -z "${SHARED:-}" ] || rm -rf "$SHARED"
}
trap cleanup EXIT
nice_of() { sed 's/.*) //' "/proc/$1/stat" | cut -d' ' -f17; } # no ps: procps may be absent
group_nice_of() { sed 's/.* nice //' "/proc/$1/autogroup"; }
# A stand-in helper: holds a shared lock on its own open of lock file $1 as
# `clshim-tool capture-helper ...` (what cache wait looks for), at nice 19 in
# a session (scheduler group) of its own at nice 19; its pid in $helper.
# `as USER` runs it as that user.
fake_helper() {
    local lock=$1; shift
    mkdir -p "$TMP/fh" && touch "$TMP/fh/capture-helper" && chmod 755 "$TMP" "$TMP/fh"
    (cd "$TMP/fh" && exec "$@" flock -s "$lock" nice -n 19 setsid -f bash -c \
        'echo 19 >/proc/self/autogroup; exec -a clshim-tool tail capture-helper -f' >/dev/null 2>&1) &
    local d last=${helper:-} && helper=""
    for _ in $(seq 100); do
        for d in /proc/[0-9]*; do
            [ "${d#/proc/}" != "$last" ] && [ "$(tr '\0' ' ' <"$d/cmdline" 2>/dev/null)" = "clshim-tool capture-helper -f " ] &&
                grep -q "nice 19" "$d/autogroup" && [ "$(nice_of "${d#/proc/}")" = 19 ] && helper=${d#/proc/} && break
        done
        [ -n "$helper" ] && break
        sleep 0.05
    done
    [ -n "$helper" ] || fail "the stand-in helper did not start"
    pids+=("$helper")
}

# 1. Captures outstanding, no helper: two shared locks, each on its own open
#    of the lock file, let go after 2 and 3 s; a process with the file open
#    and no lock (an application between captures) is not waited for.
touch "$LOCK"
exec 7<"$LOCK"
t0=$(now_ms); "$TOOL" cache wait --timeout 30 2>"$TMP/none.err" || fail "cache wait with the lock file open, no lock: $?"
[ $(($(now_ms) - t0)) -lt 1000 ] && [ ! -s "$TMP/none.err" ] || fail "cache wait waited for an open file without a lock"
flock -s "$LOCK" sleep 2 & pids+=($!)
flock -s "$LOCK" sleep 3 & pids+=($!)
sleep 0.3
t0=$(now_ms); "$TOOL" cache wait --timeout 30 2>"$TMP/two.err" || { cat "$TMP/two.err" >&2; fail "cache wait failed"; }
waited=$(($(now_ms) - t0))
exec 7<&-
[ $waited -ge 2000 ] && [ $waited -lt 8000 ] || fail "cache wait took $waited ms for captures let go after 2 and 3 s"
grep -q '^clshim: cache wait: 2 captures outstanding, 1 s$' "$TMP/two.err" ||
    { cat "$TMP/two.err" >&2; fail "cache wait did not say it waits for 2 captures"; }
ok "cache wait waits for the captures outstanding ($waited ms), not for an open lock file, and says how many"

flock -s "$LOCK" sleep 5 & pids+=($!)
sleep 0.3
set +e; "$TOOL" cache wait --timeout 1 2>"$TMP/late.err"; rc=$?; set -e
[ $rc = 1 ] && grep -q "captures still outstanding in .* after 1 s" "$TMP/late.err" ||
    { cat "$TMP/late.err" >&2; fail "cache wait --timeout 1 with a capture outstanding: exit $rc"; }
ok "a capture still outstanding after --timeout: exit 1, one line"
wait; pids=()

flock -s "$LOCK" sleep 2 & pids+=($!)
sleep 0.3
t0=$(now_ms)
set +e; "$CLSHIM_BUILD/clshim" run --wait -- sh -c 'exit 3' 2>"$TMP/run.err"; rc=$?; set -e
waited=$(($(now_ms) - t0))
[ $rc = 3 ] && [ $waited -ge 1500 ] || { cat "$TMP/run.err" >&2; fail "clshim run --wait: exit $rc after $waited ms"; }
ok "clshim run --wait waits for the capture outstanding ($waited ms) and keeps the command's exit status"
wait; pids=()

# 2. A helper at nice 19 in a group at nice 19: cache wait names it and
#    raises both to 0 (root may; as another user, 3 only).
if [ "$(id -u)" = 0 ]; then
    fake_helper "$LOCK"
    set +e; "$TOOL" cache wait --timeout 2 2>"$TMP/fh.err"; rc=$?; set -e
    [ $rc = 1 ] || fail "cache wait returned $rc while the stand-in helper holds a capture"
    grep -q "^clshim: cache wait: 1 capture outstanding (capture helper pid $helper), 1 s$" "$TMP/fh.err" ||
        { cat "$TMP/fh.err" >&2; fail "cache wait did not name the helper"; }
    [ "$(nice_of "$helper")" = 0 ] && [ "$(group_nice_of "$helper")" = 0 ] ||
        fail "the helper stays at nice $(nice_of "$helper"), its group at $(group_nice_of "$helper")"
    ! grep -q "cannot raise" "$TMP/fh.err" || { cat "$TMP/fh.err" >&2; fail "root was refused"; }
    kill "$helper"
    ok "cache wait names the helper it waits for and raises it and its group to nice 0"
fi

# 3. Not permitted: a user without CAP_SYS_NICE cannot lower a thread's
#    nice (its group's down to 0 it may): one line that says so and what
#    it means; the wait goes on. As root, the helper and the wait run as
#    nobody.
lock=$LOCK dir=$CLSHIM_CACHE_DIR as_user=()
if [ "$(id -u)" = 0 ]; then
    SHARED=$(mktemp -d /tmp/clshim-wait.XXXXXX); chmod 755 "$SHARED"
    touch "$SHARED/capture.lock"; chown nobody "$SHARED/capture.lock"
    lock=$SHARED/capture.lock dir=$SHARED as_user=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
fi
fake_helper "$lock" "${as_user[@]}"
set +e; "${as_user[@]}" "$TOOL" cache --dir "$dir" wait --timeout 7 2>"$TMP/eperm.err"; rc=$?; set -e
[ $rc = 1 ] || fail "cache wait as $(id -un) returned $rc"
[ "$(count 'cannot raise the threads of capture helper pid' "$TMP/eperm.err")" = 1 ] &&
    grep -q "needs CAP_SYS_NICE or root); its session's scheduler group is raised to 0" "$TMP/eperm.err" &&
    [ "$(count ' capture outstanding' "$TMP/eperm.err")" = 2 ] ||
    { cat "$TMP/eperm.err" >&2; fail "not one line on the refusal, then the wait"; }
[ "$(nice_of "$helper")" = 19 ] && [ "$(group_nice_of "$helper")" = 0 ] ||
    fail "not permitted: the helper at nice $(nice_of "$helper"), its group at $(group_nice_of "$helper")"
kill "$helper"
ok "not permitted to raise the helper's threads: its group raised, one line that says what it means, the wait goes on"

# 4. Real captures (PoCL) with two busy loops on the machine: started
#    before the application, so its helper (its captures deferred while
#    the application is busy) has everything left to do when the
#    application exits, at nice 19, starved; cache wait raises it.
export CLSHIM_CAPTURE_PROCESS=1 # run-all.sh turns it off for the other tests
N=6
for _ in 1 2; do bash -c 'while :; do :; done' & pids+=($!); done
fresh_pocl
CLSHIM_LOG=info CLSHIM_LOG_FILE=$TMP/helper.log run_shim cold "$PROGS/capture_bg" exit $N
[ "$(cat "$TMP/cold.rc")" = 0 ] || { cat "$TMP/cold.err" >&2; fail "the cold run failed"; }
t0=$(now_ms)
"$TOOL" cache wait --timeout 300 2>"$TMP/real.err" || { cat "$TMP/real.err" "$TMP/helper.log" >&2; fail "cache wait: exit $?"; }
waited=$(($(now_ms) - t0))
kill "${pids[@]}" 2>/dev/null || true; pids=()
# The helper's last line may come after its last capture is let go.
for _ in $(seq 300); do grep -q 'capture helper: .*CPU .* s after' "$TMP/helper.log" && break; sleep 0.1; done
cpu_ms=$(sed -n 's/.*capture helper: .*CPU \([0-9.]*\) s while it ran, \([0-9.]*\) s after.*/\1 \2/p' "$TMP/helper.log" |
         awk '{ printf "%d\n", ($1 + $2) * 1000 }')
[ -n "$cpu_ms" ] || { cat "$TMP/helper.log" >&2; fail "no CPU line from the helper"; }
[ "$(count '^clshim: stored ' "$TMP/helper.log")" = $N ] || { cat "$TMP/helper.log" >&2; fail "not $N stored"; }
! grep -q "cannot raise" "$TMP/real.err" || { cat "$TMP/real.err" >&2; fail "root was refused"; }
[ $waited -le $((2 * cpu_ms + 5000)) ] ||
    { cat "$TMP/real.err" >&2; fail "cache wait took $waited ms for a helper's $cpu_ms ms of CPU (two busy loops)"; }
ok "two busy loops: cache wait returned in $waited ms for the helper's $cpu_ms ms of CPU, $N stored"
# At CLSHIM_LOG=info the helper's "stored" line reaches a terminal, though
# it comes after the application exited (into a pipe or file it does not: whoever
# reads it to the end would wait for the helper; `cache wait` says it).
fresh_pocl
export CLSHIM_CACHE_DIR=$TMP/tty-cache
script -qec "env CLSHIM_LOG=info LD_PRELOAD=$SHIM $PROGS/fusion_chain --mode chain >/dev/null; $TOOL cache wait --timeout 120 >/dev/null 2>&1; sleep 0.5" /dev/null >"$TMP/tty.out" 2>&1 || true
tr -d '\r' <"$TMP/tty.out" >"$TMP/tty.txt"
grep -q '^clshim: capture of .* handed to the capture helper' "$TMP/tty.txt" || { cat "$TMP/tty.txt" >&2; fail "terminal: not handed to the helper"; }
[ "$(count '^clshim: stored [0-9a-f]*: [0-9]* bytes' "$TMP/tty.txt")" = 1 ] || { cat "$TMP/tty.txt" >&2; fail "terminal: no stored line"; }
run_shim piped env CLSHIM_LOG=info CLSHIM_CACHE_DIR="$TMP/pipe-cache" "$PROGS/fusion_chain" --mode chain
"$TOOL" cache --dir "$TMP/pipe-cache" wait --timeout 120 >"$TMP/pipe-wait.out" 2>&1 || true
[ "$(count '^clshim: stored ' "$TMP/piped.err")" = 0 ] || fail "a file got the helper's line after the app's exit"
grep -q "1 capture stored" "$TMP/pipe-wait.out" || { cat "$TMP/pipe-wait.out" >&2; fail "cache wait: no stored count"; }
ok "at info the helper's stored line reaches a terminal; into a pipe, cache wait tells it"
finish
