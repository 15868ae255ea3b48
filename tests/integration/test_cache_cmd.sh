#!/bin/bash
# `clshim cache` as a user runs it: the real clshim-tool binary, configured by
# the environment (CLSHIM_CACHE_DIR, CLSHIM_CACHE_READONLY,
# CLSHIM_CACHE_ALLOW_SHARED). The command's output on a populated cache is
# covered by tests/unit/test_cache_cmd.c; this checks exit codes, the
# environment knobs, file modes and the refusal of an unsafe directory.
set -euo pipefail
: "${CLSHIM_BUILD:?run through tests/run-all.sh}" "${TEST_TMP:?}" "${CLSHIM_CACHE_DIR:?}"
TOOL=$CLSHIM_BUILD/clshim-tool
[ -x "$TOOL" ] || { echo "FAIL: $TOOL not built"; exit 1; }
n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
fail() { echo "FAIL: $1"; exit 1; }
expect_rc() { # want description command...
    local want=$1 what=$2; shift 2
    local rc=0
    "$@" >"$TEST_TMP/out" 2>"$TEST_TMP/err" || rc=$?
    [ "$rc" -eq "$want" ] || { cat "$TEST_TMP/out" "$TEST_TMP/err"; fail "$what: exit $rc, expected $want"; }
}

DIR=$CLSHIM_CACHE_DIR/sub
export CLSHIM_CACHE_DIR=$DIR

expect_rc 2 "bare 'cache'" "$TOOL" cache
grep -q "usage: clshim cache" "$TEST_TMP/err" || fail "usage not printed on stderr"
expect_rc 0 "help" "$TOOL" cache help
expect_rc 2 "unknown command" "$TOOL" cache frobnicate
ok "usage errors exit 2, help exits 0"

expect_rc 0 "stats without a cache" "$TOOL" cache stats
grep -q "no cache yet" "$TEST_TMP/out" || fail "stats did not say there is no cache"
[ ! -e "$DIR" ] || fail "stats created $DIR"
expect_rc 0 "verify without a cache" "$TOOL" cache verify
expect_rc 1 "export without a cache" "$TOOL" cache export "$TEST_TMP/none.export"
ok "read-only commands create nothing"

# An export with no entries: magic, end marker, count 0.
printf 'CLSHIMX1\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0' >"$TEST_TMP/empty.export"
expect_rc 0 "import of an empty export" "$TOOL" cache import "$TEST_TMP/empty.export"
grep -q "Imported 0 entries; 0 rejected." "$TEST_TMP/out" || fail "import summary: $(cat "$TEST_TMP/out")"
[ "$(stat -c %a "$DIR")" = 700 ] || fail "cache dir mode $(stat -c %a "$DIR"), expected 700"
for f in data.mdb lock.mdb compact.lock; do
    [ "$(stat -c %a "$DIR/$f")" = 600 ] || fail "$f mode $(stat -c %a "$DIR/$f"), expected 600"
done
ok "a cache is created private (0700 directory, 0600 files)"

expect_rc 0 "export" "$TOOL" cache export "$TEST_TMP/again.export"
cmp -s "$TEST_TMP/empty.export" "$TEST_TMP/again.export" || fail "export of an empty cache differs from the empty stream"
expect_rc 1 "export over an existing file" "$TOOL" cache export "$TEST_TMP/again.export"
printf 'not an export' >"$TEST_TMP/junk"
expect_rc 1 "import of junk" "$TOOL" cache import "$TEST_TMP/junk"
grep -q "not a complete clshim cache export" "$TEST_TMP/err" || fail "junk import message: $(cat "$TEST_TMP/err")"
ok "export/import round trip and refusals"

expect_rc 0 "stats --json" "$TOOL" cache stats --json
grep -q '"entries": 0' "$TEST_TMP/out" || fail "stats --json: $(cat "$TEST_TMP/out")"
expect_rc 0 "--dir overrides the environment" "$TOOL" cache --dir "$TEST_TMP/other" stats
grep -q "$TEST_TMP/other" "$TEST_TMP/out" || fail "--dir not used"
ok "stats, --json and --dir"

CLSHIM_CACHE_READONLY=1 expect_rc 1 "clear on a read-only cache" "$TOOL" cache clear
grep -q "read-only" "$TEST_TMP/err" || fail "read-only clear message: $(cat "$TEST_TMP/err")"
ok "CLSHIM_CACHE_READONLY=1 refuses changes"

chmod 0777 "$DIR"
expect_rc 1 "list of a world-writable cache" "$TOOL" cache list
grep -q "CLSHIM_CACHE_ALLOW_SHARED" "$TEST_TMP/err" || fail "no override named: $(cat "$TEST_TMP/err")"
grep -q "$DIR" "$TEST_TMP/err" || fail "path not named in the warning"
CLSHIM_CACHE_ALLOW_SHARED=1 expect_rc 0 "list with CLSHIM_CACHE_ALLOW_SHARED=1" "$TOOL" cache list
CLSHIM_CACHE_ALLOW_SHARED=1 expect_rc 1 "clear with CLSHIM_CACHE_ALLOW_SHARED=1 (read-only)" "$TOOL" cache clear
chmod 0700 "$DIR"
ok "an unsafe directory is refused; the override reads it read-only"

expect_rc 0 "compact" "$TOOL" cache compact
grep -q "Compacted" "$TEST_TMP/out" || fail "compact output: $(cat "$TEST_TMP/out")"
ok "compact"
echo "all $n passed"
