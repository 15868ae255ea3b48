# lib.sh — helpers for integration tests (sourced). run-all.sh gives each test
# private CLSHIM_CACHE_DIR, POCL_CACHE_DIR, XDG_* and HOME, and exports
# CLSHIM_BUILD (absolute build dir) and CLSHIM_ROOT.
set -euo pipefail
: "${CLSHIM_BUILD:?run through tests/run-all.sh}"
SHIM=$CLSHIM_BUILD/libclshim.so
PROGS=$CLSHIM_BUILD/tests/progs
TMP=${TEST_TMP:-$(mktemp -d)}
checks=0

fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { checks=$((checks + 1)); echo "ok $checks - $*"; }

# Runs a command plainly; stdout+exit code into $1.out/$1.rc
run_plain() { local tag=$1; shift; set +e; "$@" >"$TMP/$tag.out" 2>"$TMP/$tag.err"; echo $? >"$TMP/$tag.rc"; set -e; }
# Same, with the shim preloaded (extra env may precede the command via env)
run_shim() { local tag=$1; shift; set +e; LD_PRELOAD=$SHIM "$@" >"$TMP/$tag.out" 2>"$TMP/$tag.err"; echo $? >"$TMP/$tag.rc"; set -e; }

same_output() { # tagA tagB what
    cmp -s "$TMP/$1.out" "$TMP/$2.out" || { diff "$TMP/$1.out" "$TMP/$2.out" | head -20 >&2; fail "$3: outputs differ"; }
    cmp -s "$TMP/$1.rc" "$TMP/$2.rc" || fail "$3: exit codes differ ($(cat "$TMP/$1.rc") vs $(cat "$TMP/$2.rc"))"
    ok "$3"
}

count() { grep -c -- "$1" "$2" || true; }
# How often a fusion log line came: fusion logs each distinct line once and
# counts its repeats in an exit line "fusion: again N times: LINE".
occurrences() {
    awk -v pat="$1" '!index($0, pat) { next }
        match($0, /fusion: again [0-9]+ times: /) { n += substr($0, RSTART + 14, RLENGTH - 22); next }
        { n++ } END { print n + 0 }' "$2"
}

fresh_pocl() { rm -rf "$POCL_CACHE_DIR"; mkdir -p "$POCL_CACHE_DIR"; }

finish() { echo "$checks checks passed"; }
