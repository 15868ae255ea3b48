#!/bin/bash
# What an import may trust (issue 17). An export whose entries had their
# binaries swapped between keys, each record rewritten to be self-consistent
# (every checksum valid), used to import with "0 rejected" and pass `verify`,
# and the app then ran the other program's binary. Now the binding of each
# binary to its key material rejects every such record, in `import` and in
# `verify`. And signed exports: `export --sign KEY` / `import --trust
# KEY.pub` round trip; an unsigned, wrongly signed or altered archive is
# refused with --trust and nothing is imported. `keygen --help` is help and
# keygen never overwrites a key (issue 31).
source "$CLSHIM_ROOT/tests/integration/lib.sh"
REL=$CLSHIM_BUILD/tests/rel
TOOL=$CLSHIM_BUILD/clshim-tool
MK=$PROGS/multikernel
C=$CLSHIM_CACHE_DIR
for s in 2 3; do fresh_pocl; run_plain ref$s "$MK" --scale $s; done
for s in 2 3; do run_shim pop$s "$MK" --scale $s; done
entries() { "$TOOL" cache --dir "$1" stats --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["entries"])'; }
[ "$(entries "$C")" = 2 ] || fail "expected 2 entries after two programs"
expect() { # rc tag command...: runs, keeps stdout/stderr in $TMP/tag.{out,err}
    local want=$1 tag=$2 rc=0; shift 2
    "$@" >"$TMP/$tag.out" 2>"$TMP/$tag.err" || rc=$?
    [ "$rc" = "$want" ] || { cat "$TMP/$tag.out" "$TMP/$tag.err" >&2; fail "$tag: exit $rc, expected $want"; }
}

# Binaries swapped between keys.
cp -a "$C" "$TMP/swapped"
"$REL/rel_forge" corrupt "$TMP/swapped" swap | grep -q "corrupted 2 entries" || fail "rel_forge swap"
expect 1 verify-swapped "$TOOL" cache --dir "$TMP/swapped" verify
grep -q "Checked 2 entries: 2 bad" "$TMP/verify-swapped.out" || fail "verify: $(cat "$TMP/verify-swapped.out")"
ok "verify finds every swapped binary"
expect 0 export-swapped "$TOOL" cache --dir "$TMP/swapped" export "$TMP/swapped.export"
grep -q "Exported 2 entries" "$TMP/export-swapped.out" || fail "the swapped entries were not exported"
expect 1 import-swapped "$TOOL" cache --dir "$TMP/fresh" import "$TMP/swapped.export"
grep -q "Imported 0 entries; 2 rejected." "$TMP/import-swapped.out" || fail "import: $(cat "$TMP/import-swapped.out")"
[ "$(count 'rejected: its binary is not the one made for its key' "$TMP/import-swapped.err")" = 2 ] ||
    { cat "$TMP/import-swapped.err" >&2; fail "import does not say why each record was rejected"; }
for s in 2 3; do
    CLSHIM_CACHE_DIR=$TMP/fresh CLSHIM_LOG=info run_shim fresh$s "$MK" --scale $s
    same_output ref$s fresh$s "after the refused import, scale $s: results of a plain run"
    grep -q 'hit .*(disk)' "$TMP/fresh$s.err" && fail "a swapped binary was served"
done
ok "an export with swapped binaries: every record rejected, with the reason, nothing served"

# Signed exports.
expect 0 keygen "$TOOL" cache keygen "$TMP/builder"
[ "$(stat -c %a "$TMP/builder")" = 600 ] || fail "the secret key is not 0600"
grep -q '^clshim-ed25519-public [0-9a-f]\{64\}$' "$TMP/builder.pub" || fail "public key file: $(cat "$TMP/builder.pub")"
expect 1 keygen-again "$TOOL" cache keygen "$TMP/builder"
grep -q 'never overwritten' "$TMP/keygen-again.err" || fail "keygen: refusal does not say why"
# --help is help (it wrote keys named --help and --help.pub), an option is
# never a file name, and an existing FILE.pub is not overwritten either.
(cd "$TMP" && expect 0 keygen-help "$TOOL" cache keygen --help)
grep -q '^usage: clshim cache keygen FILE' "$TMP/keygen-help.out" || fail "keygen --help: no usage"
(cd "$TMP" && expect 2 keygen-opt "$TOOL" cache keygen -x)
[ ! -e "$TMP/--help" ] && [ ! -e "$TMP/--help.pub" ] && [ ! -e "$TMP/-x" ] || fail "keygen took an option for a file name"
touch "$TMP/lone.pub"
expect 1 keygen-lone "$TOOL" cache keygen "$TMP/lone"
[ ! -e "$TMP/lone" ] && [ ! -s "$TMP/lone.pub" ] || fail "keygen wrote beside an existing FILE.pub"
ok "keygen: --help is help, options are not file names, existing keys are never overwritten"
expect 0 keygen2 "$TOOL" cache keygen "$TMP/other"
expect 0 export-signed "$TOOL" cache export --sign "$TMP/builder" "$TMP/signed.export"
grep -q "Exported 2 entries to .*, signed." "$TMP/export-signed.out" || fail "signed export: $(cat "$TMP/export-signed.out")"
expect 0 import-signed "$TOOL" cache --dir "$TMP/trusting" import --trust "$TMP/builder.pub" "$TMP/signed.export"
grep -q "Imported 2 entries; 0 rejected." "$TMP/import-signed.out" || fail "signed import: $(cat "$TMP/import-signed.out")"
for s in 2 3; do
    CLSHIM_CACHE_DIR=$TMP/trusting CLSHIM_LOG=info run_shim trusted$s "$MK" --scale $s
    same_output ref$s trusted$s "from the signed import, scale $s: results of a plain run"
    grep -q 'hit .*(disk)' "$TMP/trusted$s.err" || fail "the signed import's entries are not used"
done
expect 0 import-stdin "$TOOL" cache --dir "$TMP/trusting2" import --trust "$TMP/builder.pub" - <"$TMP/signed.export"
grep -q "Imported 2 entries" "$TMP/import-stdin.out" || fail "signed import from standard input"
expect 0 import-untrusting "$TOOL" cache --dir "$TMP/plain" import "$TMP/signed.export"
grep -q "Imported 2 entries; 0 rejected." "$TMP/import-untrusting.out" || fail "a signed export without --trust"
ok "signed export, import --trust: round trip (file and standard input), entries served; without --trust it imports too"

refused() { # tag archive why
    expect 1 "$1" "$TOOL" cache --dir "$TMP/refusing" import --trust "$TMP/builder.pub" "$2"
    grep -q "is refused: $3.*; nothing imported" "$TMP/$1.err" || { cat "$TMP/$1.err" >&2; fail "$1: not refused for '$3'"; }
    [ "$(entries "$TMP/refusing")" = 0 ] || fail "$1: something was imported"
}
expect 0 export-plain "$TOOL" cache export "$TMP/plain.export"
refused unsigned "$TMP/plain.export" "it is not signed"
expect 0 export-other "$TOOL" cache export --sign "$TMP/other" "$TMP/other.export"
refused other-key "$TMP/other.export" "it is signed by another key"
cp "$TMP/signed.export" "$TMP/altered.export"
size=$(stat -c %s "$TMP/altered.export")
printf '\x5a' | dd of="$TMP/altered.export" bs=1 seek=$((size / 2)) conv=notrunc status=none
refused altered "$TMP/altered.export" "its signature does not match its contents"
head -c $((size - 104)) "$TMP/signed.export" >"$TMP/stripped.export"
refused stripped "$TMP/stripped.export" "it is not signed"
expect 0 export-swapped-signed "$TOOL" cache --dir "$TMP/swapped" export --sign "$TMP/builder" "$TMP/swapped-signed.export"
expect 1 import-swapped-signed "$TOOL" cache --dir "$TMP/refusing" import --trust "$TMP/builder.pub" "$TMP/swapped-signed.export"
grep -q "Imported 0 entries; 2 rejected." "$TMP/import-swapped-signed.out" || fail "signed swapped binaries were imported"
ok "with --trust: unsigned, another key's, altered and stripped archives refused, nothing imported; signed bad records still rejected"
finish
