#!/bin/bash
# Direct mode from another working directory (cache/preproc.h, docs/cache.md
# "Headers"), under LD_PRELOAD on PoCL, on a program built as hashcat builds
# its own: clCompileProgram with `-I inc` and a computed include that only
# the preprocessor can list (`#include M2S(x.h)`, found as inc/x.h), inc/x.h
# including inc/y.h, then clLinkProgram.
# - a copy of the tree in a directory never used before: every program
#   hits (through the manifest the first directory stored: no compile, no
#   preprocessor), results the plain run's;
# - a directory whose inc/x.h differs: a miss and the plain results of its
#   own header, never the other tree's binary (and then it hits, too);
# - a copy whose x.h is found elsewhere first (./x.h: the same relative
#   name, other bytes) though inc/ is unchanged: the same;
# - the first directory still hits, with its first binary, through its own
#   variant of the manifest (cache/preproc.h: up to 8 are kept).
# Before the manifest stopped being keyed by the working directory, the
# copy's compile missed (1 of 2 programs hit) and compiled again.
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info
SF=$PROGS/srcfile
KBODY='__kernel void k(__global float *y) { size_t i = get_global_id(0); y[i] = V * W * (float)(i % 5); }'
OPTS="-I inc -D \"XM2S(x)=#x\" -D \"M2S(x)=XM2S(x)\""
tree() { # DIR V: the program, inc/x.h (defines V, includes y.h), inc/y.h
    mkdir -p "$1/inc"
    printf '#include M2S(x.h)\n%s\n' "$KBODY" >"$1/k.cl"
    printf '#include "y.h"\n#define V %s\n' "$2" >"$1/inc/x.h"
    echo '#define W 2.0f' >"$1/inc/y.h"
}
compile_link() { "$SF" k.cl --options "$OPTS" --compile-link; }
hits() { count 'hit [0-9a-f]\{16\} on ' "$TMP/$1.err"; }
misses() { count 'miss [0-9a-f]\{16\} on ' "$TMP/$1.err"; }
# The key of the compiled object a run missed or hit ("" when none).
object_key() { grep -oE '(miss|hit) [0-9a-f]{16} on .*compiled object' "$TMP/$1.err" | head -1 | cut -d' ' -f2; }
# hits, misses and the object's key of run $1, for the report
say() { echo "$1: $(hits "$1") hits, $(misses "$1") misses, object $(object_key "$1")"; }

tree "$TMP/a" 3.0f
tree "$TMP/diff" 5.0f
cd "$TMP/a"
fresh_pocl; run_plain ref compile_link
cd "$TMP/diff"
fresh_pocl; run_plain ref_diff compile_link
[ "$(cat "$TMP/ref.rc")" = 0 ] && [ "$(cat "$TMP/ref_diff.rc")" = 0 ] || fail "the plain runs failed: $(cat "$TMP/ref.err")"
cmp -s "$TMP/ref.out" "$TMP/ref_diff.out" && fail "the two trees' headers give the same results: no test"

# The first directory: cold (the preprocessor lists the headers), then warm.
cd "$TMP/a"
fresh_pocl; run_shim cold compile_link
same_output ref cold "first directory, cold: the plain run's results"
grep -q 'not caching' "$TMP/cold.err" && fail "not cached: $(grep 'not caching' "$TMP/cold.err")"
[ "$(misses cold)" = 2 ] || fail "cold: expected the object and the link to miss: $(grep clshim: "$TMP/cold.err")"
KEY=$(object_key cold)
fresh_pocl; run_shim warm compile_link
same_output ref warm "first directory, warm: the plain run's results"
[ "$(hits warm)" = 2 ] && [ "$(misses warm)" = 0 ] || fail "first directory, warm: expected 2 hits: $(say warm)"
ok "first directory: stored cold, then $(hits warm) of 2 programs hit"

# (a) A copy of the same tree in a directory never used before.
cp -a "$TMP/a" "$TMP/copy"
cd "$TMP/copy"
fresh_pocl; run_shim copy compile_link
say copy
same_output ref copy "(a) the same tree elsewhere: the plain run's results"
[ "$(hits copy)" = 2 ] && [ "$(misses copy)" = 0 ] ||
    fail "(a) the same tree elsewhere: expected 2 of 2 programs to hit: $(say copy); $(grep clshim: "$TMP/copy.err")"
[ "$(object_key copy)" = "$KEY" ] || fail "(a) another key for the same content: $(object_key copy), not $KEY"
grep -q 'headers from its manifest (direct mode)' "$TMP/copy.err" || fail "(a) not direct mode"
grep -q 'headers from the preprocessor' "$TMP/copy.err" && fail "(a) the preprocessor ran"
ok "(a) a copy of the tree in a new directory: 2 of 2 hit, through the manifest, the same key"

# (b) The same relative names, another inc/x.h: its own key, never a's binary.
cd "$TMP/diff"
fresh_pocl; run_shim diff compile_link
say diff
same_output ref_diff diff "(b) another inc/x.h: the plain run's results for it"
[ "$(misses diff)" = 2 ] && [ "$(hits diff)" = 0 ] || fail "(b) another inc/x.h: expected 2 misses: $(say diff)"
[ "$(object_key diff)" != "$KEY" ] || fail "(b) another inc/x.h: the first tree's key $KEY"
fresh_pocl; run_shim diff_warm compile_link
same_output ref_diff diff_warm "(b) another inc/x.h, warm: its results"
[ "$(hits diff_warm)" = 2 ] || fail "(b) another inc/x.h, warm: expected 2 hits: $(say diff_warm)"
ok "(b) another inc/x.h: its own key, a miss with the plain results, then hits"

# (b) The same inc/ tree, but "x.h" is found first in the working
# directory (the including file's): other bytes under the same name.
cp -a "$TMP/a" "$TMP/shadow"
cd "$TMP/shadow"
printf '#include "inc/y.h"\n#define V 7.0f\n' >x.h
fresh_pocl; run_plain ref_shadow compile_link
cmp -s "$TMP/ref.out" "$TMP/ref_shadow.out" && fail "./x.h is not the one found: no test"
fresh_pocl; run_shim shadow compile_link
say shadow
same_output ref_shadow shadow "(b) x.h found first in the working directory: the plain run's results"
[ "$(misses shadow)" = 2 ] && [ "$(hits shadow)" = 0 ] || fail "(b) ./x.h: expected 2 misses: $(say shadow)"
[ "$(object_key shadow)" != "$KEY" ] || fail "(b) ./x.h: the first tree's key $KEY"
ok "(b) x.h found first in the working directory: its own key, a miss with the plain results"

# (c) The first directory again: its binary, still a hit.
cd "$TMP/a"
fresh_pocl; run_shim back compile_link
say back
same_output ref back "(c) the first directory again: its results"
[ "$(hits back)" = 2 ] && [ "$(misses back)" = 0 ] || fail "(c) the first directory again: expected 2 hits: $(say back)"
[ "$(object_key back)" = "$KEY" ] || fail "(c) the first directory again: key $(object_key back), not $KEY"
grep -q 'headers from its manifest (direct mode)' "$TMP/back.err" || fail "(c) not direct mode"
ok "(c) the first directory again: 2 of 2 hit, through the manifest"
finish
