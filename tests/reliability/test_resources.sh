#!/bin/bash
# Resource faults, each real: a full disk (a 1 MiB tmpfs, filled), a
# read-only file system (tmpfs remounted ro) holding a cache and holding
# $XDG_CACHE_HOME, a cache path whose parent is a file, a missing directory
# (created), no $HOME at all, a size limit smaller than a binary, a binary
# over CLSHIM_CACHE_MAX_ENTRY. Every time the app's results equal a plain
# run, and clshim's lines name the condition and do not repeat per call: a
# run with 8 threads building logs exactly as many lines as a run with one.
# (Needs root for mount, as `make check` runs here.)
source "$CLSHIM_ROOT/tests/integration/lib.sh"
MK=$PROGS/multikernel
M=$TMP/mnt
mkdir -p "$M"
cleanup() { umount "$M" 2>/dev/null || true; }
trap cleanup EXIT
mount -t tmpfs -o size=1m,mode=0700 tmpfs "$M" || fail "cannot mount a tmpfs (the resource tests need root)"
for s in 2 3 4; do for t in 1 8; do fresh_pocl; run_plain "ref$s.$t" "$MK" --scale $s --threads $t; done; done

# Runs scale $2 with 1 and 8 threads under the shim; same results as plain;
# with one thread exactly $3 clshim lines, one of them matching $4; with 8
# threads the same line(s), once each, not once per thread.
expect() { # label scale lines pattern
    for t in 1 8; do
        run_shim "$1.$t" "$MK" --scale $2 --threads $t
        same_output "ref$2.$t" "$1.$t" "$1 ($t threads): results of a plain run"
        local f=$TMP/$1.$t.err n
        n=$(count 'clshim:' "$f")
        [ "$n" = "$3" ] || { cat "$f" >&2; fail "$1 ($t threads): expected $3 clshim lines, got $n"; }
        if [ "$3" != 0 ]; then
            [ "$(count "$4" "$f")" = 1 ] || { cat "$f" >&2; fail "$1 ($t threads): not one line saying '$4'"; }
            [ "$(grep 'clshim:' "$f" | sort | uniq -d | wc -l)" = 0 ] ||
                { cat "$f" >&2; fail "$1 ($t threads): a line repeats"; }
        fi
    done
    ok "$1: $3 line(s), however many threads build"
}

# Disk full: a cache with one entry, then the file system filled up.
export CLSHIM_CACHE_DIR=$M/cache
run_shim seed "$MK" --scale 2
dd if=/dev/zero of="$M/fill" bs=4k 2>/dev/null || true
[ "$(df -k "$M" | awk 'NR==2 {print $4}')" = 0 ] || fail "the tmpfs is not full"
expect diskfull 3 1 "cannot store built programs: no space left on device"
CLSHIM_LOG=info run_shim diskhit "$MK" --scale 2
grep -q 'hit .*(disk)' "$TMP/diskhit.err" || fail "disk full: the existing entry is not served"
ok "disk full: existing entries still served"
rm -f "$M/fill"
"$CLSHIM_BUILD/clshim-tool" cache verify >/dev/null || fail "disk full: the cache is damaged"
CLSHIM_LOG=info run_shim diskfree "$MK" --scale 3
grep -q 'stored ' "$TMP/diskfree.err" || fail "space freed: nothing stored"
ok "disk full: cache intact (verify), and stores resume once space is freed"
# A new cache on a full file system: LMDB's fresh sparse files fault when
# mapped; the app must not die of it, and one line says why caching is off.
dd if=/dev/zero of="$M/fill" bs=4k 2>/dev/null || true
CLSHIM_CACHE_DIR=$M/fresh expect freshfull 3 1 "cannot be opened: no space left on device; caching is off"
rm -rf "$M/fill" "$M/fresh"

# Read-only file system holding the cache: read-only use, one warning.
mkdir "$M/empty"
mount -o remount,ro "$M"
expect rofs 4 1 "cannot be written (Read-only file system); using its cache read-only"
# ... holding an empty cache directory: one line, caching off and why.
CLSHIM_CACHE_DIR=$M/empty expect roempty 3 1 "cannot be written (Read-only file system) and holds no cache: caching is off"
CLSHIM_LOG=info run_shim rohit "$MK" --scale 2
grep -q 'hit .*(disk)' "$TMP/rohit.err" || fail "read-only: the existing entry is not served"
ok "read-only file system: entries served, nothing written"
# ... and holding $XDG_CACHE_HOME, where no cache exists yet.
unset CLSHIM_CACHE_DIR
XDG_CACHE_HOME=$M/xdg expect roxdg 2 1 "cannot be created (Read-only file system); caching is off"
mount -o remount,rw "$M"

# A cache path that cannot be a directory.
: >"$TMP/afile"
CLSHIM_CACHE_DIR=$TMP/afile/cache expect notadir 3 1 "afile is not a directory; caching is off"
CLSHIM_CACHE_DIR=$TMP/afile expect isafile 3 1 "afile is not a directory; caching is off"
# A missing directory is created, private.
CLSHIM_CACHE_DIR=$TMP/new/a/b expect missing 3 0 ""
[ "$(stat -c %a "$TMP/new/a/b")" = 700 ] || fail "missing directory: not created 0700"
ok "missing directory: created 0700, no warning"
# No $HOME, no XDG_CACHE_HOME, no CLSHIM_CACHE_DIR.
for t in 1 8; do
    env -u HOME -u XDG_CACHE_HOME -u XDG_CONFIG_HOME -u CLSHIM_CACHE_DIR LD_PRELOAD=$SHIM "$MK" --scale 4 --threads $t \
        >"$TMP/nohome.$t.out" 2>"$TMP/nohome.$t.err"
    cmp -s "$TMP/ref4.$t.out" "$TMP/nohome.$t.out" || fail "no HOME: results differ"
    [ "$(count 'clshim:' "$TMP/nohome.$t.err")" = 1 ] && grep -q "no cache directory" "$TMP/nohome.$t.err" ||
        { cat "$TMP/nohome.$t.err" >&2; fail "no HOME: expected one line"; }
done
ok "no HOME: one line, results right"

# Out of memory on a huge binary: a 300 MiB entry whose checksums verify, read
# by a process whose allocator fails every allocation over 280 MiB (a real
# failing malloc, preloaded; PoCL itself needs 256 MiB blocks to serialise a
# binary, so the limit sits above that). The app compiles instead and the
# result is right. CLSHIM_CACHE_MAX_ENTRY=1G: the entry is not refused by policy.
BIG=$TMP/bigalloc.so
cc -shared -fPIC -O1 -Wall -Werror -o "$BIG" "$CLSHIM_ROOT/tests/reliability/faultlib/bigalloc.c" || fail "cannot build bigalloc"
export CLSHIM_CACHE_DIR=$TMP/huge CLSHIM_CACHE_MAX_ENTRY=1G CLSHIM_CACHE_MAX_SIZE=2G
fresh_pocl; run_shim hugepop "$MK" --scale 6
"$CLSHIM_BUILD/tests/rel/rel_forge" huge "$CLSHIM_CACHE_DIR" 300 >/dev/null || fail "cannot forge a huge entry"
fresh_pocl; run_plain ref6 "$MK" --scale 6
fresh_pocl
if [ "${CLSHIM_SANITIZED:-}" = address ]; then
    # Under ASan the sanitizer's allocator does the refusing (a preloaded
    # malloc cannot sit beside it).
    ASAN_OPTIONS="$ASAN_OPTIONS:allocator_may_return_null=1:max_allocation_size_mb=280" LD_PRELOAD="$SHIM" \
        "$MK" --scale 6 >"$TMP/oom.out" 2>"$TMP/oom.err"
else
    LD_PRELOAD="$SHIM:$BIG" CLFAULT_MALLOC_MAX=$((280 << 20)) "$MK" --scale 6 >"$TMP/oom.out" 2>"$TMP/oom.err"
fi
echo $? >"$TMP/oom.rc"
same_output ref6 oom "a huge cached binary that cannot be allocated: results of a plain run"
[ "$(count 'clshim:' "$TMP/oom.err")" -le 1 ] || { cat "$TMP/oom.err" >&2; fail "out of memory: more than one line"; }
fresh_pocl; CLSHIM_LOG=info run_shim afteroom "$MK" --scale 6
same_output ref6 afteroom "after the out-of-memory run: results right"
grep -q 'hit .*(disk)' "$TMP/afteroom.err" || { cat "$TMP/afteroom.err" >&2; fail "the huge entry was not replaced by the rebuild"; }
unset CLSHIM_CACHE_MAX_ENTRY CLSHIM_CACHE_MAX_SIZE
ok "out of memory on a huge binary: compiled instead, at most one line, the entry replaced"

# Limits: an entry bigger than the whole cache, or than CLSHIM_CACHE_MAX_ENTRY,
# is not stored, silently (a policy, not a fault); info says so.
export CLSHIM_CACHE_DIR=$TMP/limits
CLSHIM_CACHE_MAX_SIZE=10K expect tiny 2 0 ""
CLSHIM_CACHE_MAX_ENTRY=1K expect maxentry 3 0 ""
CLSHIM_LOG=info CLSHIM_CACHE_MAX_SIZE=10K run_shim tinyinfo "$MK" --scale 2
grep -q 'not stored [0-9a-f]\{16\} .*its size is outside CLSHIM_CACHE_MIN_ENTRY' "$TMP/tinyinfo.err" || fail "size limit: info does not report it"
n=$("$CLSHIM_BUILD/clshim-tool" cache stats --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["entries"])')
[ "$n" = 0 ] || fail "an entry over the limits was stored ($n entries)"
ok "over the size limit / the entry limit: nothing stored, app unaffected"
# Size limit forcing eviction on each store: right results, bounded size.
for s in 2 3 4; do CLSHIM_CACHE_MAX_SIZE=60K run_shim ev$s "$MK" --scale $s --threads 8; same_output ref$s.8 ev$s "eviction on every store, scale $s"; done
"$CLSHIM_BUILD/clshim-tool" cache verify >/dev/null || fail "eviction: verify"
b=$("$CLSHIM_BUILD/clshim-tool" cache stats --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["stored_bytes"])')
[ "$b" -le 61440 ] || fail "size limit exceeded: $b bytes"
ok "a size limit that evicts at every store: results right, $b bytes <= 60K"
finish
