#!/bin/bash
# Every miss explained (issue 45): on a real program under LD_PRELOAD, a miss
# of a program whose entries the cache holds for other inputs logs one line
# naming the nearest stored entry and what differs, and `clshim cache why`
# (--last, KEYPREFIX, --json) gives the same field by field: a header edit,
# an option change, a device change (PoCL's pthread and basic devices) and a
# driver variable (POCL_EXTRA_BUILD_FLAGS). A key with no neighbour says so.
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info
SF=$PROGS/srcfile
CLSHIM=$CLSHIM_BUILD/clshim
cd "$TMP" # the header is keyed by the path the program names: inc/params.h
mkdir -p inc
printf '#include "params.h"\n__kernel void k(__global float *y) { size_t i = get_global_id(0); y[i] = V * (float)(i %% 7) + TILE; }\n' >k.cl
echo '#define V 1.0f' >inc/params.h

# build TAG OPTIONS [VAR=VALUE...]: srcfile under the shim, exactly one miss
# (the explanation is a line of its own, not a second "miss "); KEY is its
# 16-digit prefix.
build() {
    local tag=$1 opts=$2; shift 2
    fresh_pocl; run_shim "$tag" env "$@" "$SF" k.cl --options "$opts"
    [ "$(cat "$TMP/$tag.rc")" = 0 ] || fail "$tag: the program failed: $(tail -3 "$TMP/$tag.err")"
    [ "$(count 'miss ' "$TMP/$tag.err")" = 1 ] || fail "$tag: expected one line with 'miss ', got $(count 'miss ' "$TMP/$tag.err")"
    KEY=$(sed -n 's/^clshim: miss \([0-9a-f]\{16\}\) on .*/\1/p' "$TMP/$tag.err")
    [ -n "$KEY" ] || fail "$tag: no miss line"
}
stored() { grep -q "stored $1" "$TMP/$2.err" || fail "$2: $1 was not stored (it is the next case's neighbour)"; }

# explained TAG NEAR PATTERN: the miss line of TAG names NEAR and what differs.
explained() {
    grep -qx "clshim: $KEY missed: nearest stored entry $2 differs in $3" "$TMP/$1.err" ||
        fail "$1: no line 'clshim: $KEY missed: nearest stored entry $2 differs in $3' in: $(grep -v '^clshim: \(program\|capture\|summary\)' "$TMP/$1.err")"
}

# why_says TAG NEAR TEXT FIELD NAME STORED NOW: `cache why --last` and `cache
# why KEY` name NEAR and print TEXT with this key's value; --json (parsed)
# has the item with both values: "None" for a value the stored key lacks,
# HEX for a header's content hash (then the two differ).
why_says() {
    local tag=$1 near=$2 text=$3 field=$4 name=$5 was=$6 now=$7 how
    for how in --last "$KEY"; do
        "$CLSHIM" cache why $how >"$TMP/$tag.why" 2>&1 || fail "$tag: cache why $how failed: $(cat "$TMP/$tag.why")"
        grep -q "^Key  *$KEY[0-9a-f]\{16\}" "$TMP/$tag.why" || fail "$tag: cache why $how: not about $KEY: $(cat "$TMP/$tag.why")"
        grep -q "^Nearest  *$near[0-9a-f]\{16\}" "$TMP/$tag.why" || fail "$tag: cache why $how: nearest is not $near: $(cat "$TMP/$tag.why")"
        grep -qFx "  $text" "$TMP/$tag.why" || fail "$tag: cache why $how: no '$text' in: $(cat "$TMP/$tag.why")"
        if [ "$now" = HEX ]; then grep -qx '    now      [0-9a-f]\{32\}' "$TMP/$tag.why"
        else grep -qFx "    now      $now" "$TMP/$tag.why"; fi || fail "$tag: cache why $how: no value '$now': $(cat "$TMP/$tag.why")"
    done
    "$CLSHIM" cache why --last --json >"$TMP/$tag.json" || fail "$tag: cache why --last --json failed"
    python3 -c '
import json, re, sys
key, near, field, name, was, now = sys.argv[2:]
d = json.load(open(sys.argv[1]))
assert d["last_miss"] is True and d["key"].startswith(key), d
assert d["nearest"].startswith(near), d
items = [i for i in d["differences"] if i["field"] == field and i["name"] == name]
assert len(items) == 1, d["differences"]
got = [str(items[0]["stored"]), str(items[0]["now"])]
for g, w in zip(got, [was, now]):
    assert re.fullmatch("[0-9a-f]{32}", g) if w == "HEX" else g == w, (got, was, now)
assert was != "HEX" or got[0] != got[1], got
' "$TMP/$tag.json" "$KEY" "$near" "$field" "$name" "$was" "$now" || fail "$tag: cache why --last --json: $(cat "$TMP/$tag.json")"
    ok "$tag: the miss names $near and $text; cache why --last, why $KEY and --json say it"
}

# The first build: nothing of the program is stored, so nothing to explain.
build first "-I inc -DTILE=16"
FIRST=$KEY
stored "$FIRST" first
grep -q "missed:" "$TMP/first.err" && fail "first: explained a miss with nothing stored: $(grep 'missed:' "$TMP/first.err")"
"$CLSHIM" cache why --last >"$TMP/none.why" || fail "cache why --last with no neighbour: exit $?"
[ "$(wc -l <"$TMP/none.why")" = 1 ] && grep -q "^$FIRST[0-9a-f]\{16\}: no stored neighbour" "$TMP/none.why" ||
    fail "cache why --last with no neighbour: $(cat "$TMP/none.why")"
"$CLSHIM" cache why --last --json | python3 -c 'import json, sys; d = json.load(sys.stdin); assert d["nearest"] is None and d["differences"] == [], d' ||
    fail "cache why --last --json with no neighbour"
ok "first build: no explanation; cache why says in one line that it has no neighbour"

# A header edit.
echo '#define V 2.0f' >inc/params.h
build header "-I inc -DTILE=16"
HEADER=$KEY
stored "$HEADER" header
explained header "$FIRST" 'header inc/params.h (content)'
why_says header "$FIRST" 'header inc/params.h (content)' header inc/params.h HEX HEX

# An option: a define's value.
build option "-I inc -DTILE=32"
OPTION=$KEY
stored "$OPTION" option
explained option "$HEADER" 'option -DTILE=16 -> -DTILE=32'
why_says option "$HEADER" 'option -DTILE=16 -> -DTILE=32' option -DTILE -DTILE=16 -DTILE=32

# Another device: PoCL's basic device has an identity of its own.
build device "-I inc -DTILE=32" POCL_DEVICES=basic
explained device "$OPTION" "device 'pthread-[^']*' -> 'basic-[^']*'"
PTHREAD=$(sed -n "s/.*device 'pthread-\([^']*\)' -> .*/pthread-\1/p" "$TMP/device.err")
why_says device "$OPTION" "device '$PTHREAD' -> 'basic-${PTHREAD#pthread-}'" device device.name "$PTHREAD" "basic-${PTHREAD#pthread-}"

# A driver variable (a driver.env line of the device identity).
build env "-I inc -DTILE=32" POCL_EXTRA_BUILD_FLAGS=-cl-fast-relaxed-math
explained env "$OPTION" "driver variable POCL_EXTRA_BUILD_FLAGS: unset -> '-cl-fast-relaxed-math'"
why_says env "$OPTION" "driver variable POCL_EXTRA_BUILD_FLAGS: unset -> '-cl-fast-relaxed-math'" \
    driver.env POCL_EXTRA_BUILD_FLAGS None -cl-fast-relaxed-math

# A stored entry that is not the last miss: its nearest by the family record.
"$CLSHIM" cache why "$FIRST" >"$TMP/first.why" || fail "cache why $FIRST failed"
grep -q "^Nearest  *$HEADER" "$TMP/first.why" && grep -qFx "  header inc/params.h (content)" "$TMP/first.why" ||
    fail "cache why $FIRST: $(cat "$TMP/first.why")"
ok "cache why of a stored entry: its nearest neighbour and the header that differs"

set +e; "$CLSHIM" cache why >/dev/null 2>&1; rc=$?; set -e
[ $rc = 2 ] || fail "cache why with no key: exit $rc, expected 2 (usage)"
ok "cache why without a key or --last is a usage error"
finish
