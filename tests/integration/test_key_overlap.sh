#!/bin/bash
# The preprocessor beside the driver's compile (cache/preproc.h), under
# LD_PRELOAD on PoCL, on a program compiled as hashcat compiles its own
# (clCompileProgram + clLinkProgram, `#include M2S(INCLUDE_PATH/h.h)`):
# - a source never seen overlaps; results, exit codes and build logs are
#   the plain run's; the next run hits through direct mode;
# - another working directory uses that manifest (test_preproc_cwd has
#   the relative paths) and hits;
# - a key already stored whose manifest is gone (evicted alone) is
#   compiled and stored again, counted as a miss, results unchanged;
#   CLSHIM_PREPROC_OVERLAP=0 or CLSHIM_CACHE_MIN_ENTRY run the preprocessor
#   first, and that run hits;
# - a failing driver compile returns the driver's error and log;
# - a failing preprocessor leaves the compile's result as it is, and the
#   program is counted as uncacheable.
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info
SF=$PROGS/srcfile
INC=$TMP/inc
mkdir -p "$INC" "$TMP/a" "$TMP/b" "$TMP/c" "$TMP/d" "$TMP/e"
echo '#define V 3.0f' >"$INC/h.h"
KBODY='__kernel void k(__global float *y) { size_t i = get_global_id(0); y[i] = V * (float)(i % 5); }'
printf '#include M2S(INCLUDE_PATH/h.h)\n%s\n' "$KBODY" >"$TMP/hc.cl"
HOPTS="-D INCLUDE_PATH=$INC -D \"XM2S(x)=#x\" -D \"M2S(x)=XM2S(x)\""
compile_link() { "$SF" "$TMP/hc.cl" --options "$HOPTS" --compile-link; }
# The key of the compiled object a run missed or hit ("" when none).
object_key() { grep -oE '(miss|hit) [0-9a-f]{16} on .*(compiled object|\(disk, compiled object)' "$1" | head -1 | cut -d' ' -f2; }
# Removes every manifest record (as eviction might, leaving the binaries).
drop_manifests() {
    local keys
    keys=$("$CLSHIM_BUILD/clshim-tool" cache list --json | grep '"origin": "manifest"' | grep -oE '"key": "[0-9a-f]+"' |
        cut -d'"' -f4)
    [ -n "$keys" ] || fail "no manifest to remove"
    # shellcheck disable=SC2086
    "$CLSHIM_BUILD/clshim-tool" cache rm $keys >/dev/null
}
uncacheable() { "$CLSHIM_BUILD/clshim-tool" cache stats | awk '/^Uncacheable programs/ { print $NF }'; }

fresh_pocl; run_plain ref compile_link
[ "$(cat "$TMP/ref.rc")" = 0 ] || fail "the plain run failed: $(cat "$TMP/ref.err")"

# A source never seen: the preprocessor runs beside the compile.
cd "$TMP/a"
fresh_pocl; run_shim cold compile_link
same_output ref cold "never seen: the plain run's results"
grep -q 'headers from the preprocessor in .* beside the compile' "$TMP/cold.err" ||
    fail "never seen: the preprocessor did not run beside the compile: $(grep clshim: "$TMP/cold.err")"
KEY=$(object_key "$TMP/cold.err")
grep -q "miss $KEY on .*compiled object in .* stored" "$TMP/cold.err" || fail "never seen: the object was not stored"
fresh_pocl; run_shim warm compile_link
same_output ref warm "never seen, second run: the plain run's results"
grep -q "hit $KEY on .*compiled object" "$TMP/warm.err" || fail "second run: no hit of $KEY: $(grep clshim: "$TMP/warm.err")"
grep -q 'headers from its manifest' "$TMP/warm.err" || fail "second run: not direct mode"
grep -q 'headers from the preprocessor' "$TMP/warm.err" && fail "second run: the preprocessor ran"
ok "never seen: overlapped, stored, and the next run hits through the manifest the preprocessor's thread stored"

# Another working directory: the manifest is not keyed by it, the files
# it lists are the same, so the stored key hits; nothing runs beside.
cd "$TMP/b"
fresh_pocl; run_shim other compile_link
same_output ref other "another working directory: the plain run's results"
grep -q "hit $KEY on .*compiled object" "$TMP/other.err" ||
    fail "other directory: expected a hit of $KEY: $(grep clshim: "$TMP/other.err")"
grep -q 'headers from its manifest' "$TMP/other.err" || fail "other directory: not direct mode"
grep -q "beside the compile" "$TMP/other.err" && fail "other directory: overlapped"
ok "another working directory: the manifest holds, a hit"

# The manifest alone evicted: the compile runs (the key turns out to be
# stored already), stores again, counts a miss.
drop_manifests
fresh_pocl; run_shim evicted compile_link
same_output ref evicted "key already stored: the plain run's results"
grep -q "beside the compile" "$TMP/evicted.err" || fail "manifest evicted: no overlap"
grep -q "miss $KEY on .*compiled object in .* stored" "$TMP/evicted.err" ||
    fail "manifest evicted: expected the same key $KEY compiled and stored again: $(grep clshim: "$TMP/evicted.err")"
fresh_pocl; run_shim evicted_warm compile_link
grep -q "hit $KEY on .*compiled object" "$TMP/evicted_warm.err" || fail "manifest evicted, second run: no hit"
ok "a key already stored without its manifest: compiled, stored again as a miss, the same key; then a hit"

# Overlap off, or manifests that might not be stored: the preprocessor
# first, so a stored key without its manifest hits.
drop_manifests
cd "$TMP/c"
fresh_pocl; CLSHIM_PREPROC_OVERLAP=0 run_shim knob_off compile_link
same_output ref knob_off "CLSHIM_PREPROC_OVERLAP=0: the plain run's results"
grep -q "hit $KEY on .*compiled object" "$TMP/knob_off.err" || fail "overlap off: no hit of the stored key"
grep -q "beside the compile" "$TMP/knob_off.err" && fail "overlap off: overlapped"
drop_manifests
cd "$TMP/d"
fresh_pocl; CLSHIM_CACHE_MIN_ENTRY=1 run_shim min_entry compile_link
grep -q "hit $KEY on .*compiled object" "$TMP/min_entry.err" || fail "CLSHIM_CACHE_MIN_ENTRY: no hit of the stored key"
grep -q "beside the compile" "$TMP/min_entry.err" && fail "CLSHIM_CACHE_MIN_ENTRY: overlapped"
ok "CLSHIM_PREPROC_OVERLAP=0 and CLSHIM_CACHE_MIN_ENTRY: the preprocessor first, a stored key hits"

# The driver's compile fails while the preprocessor runs: its error and log.
cd "$TMP/e"
printf '#include M2S(INCLUDE_PATH/h.h)\n%s\nthis is not OpenCL C;\n' "$KBODY" >"$TMP/bad.cl"
fresh_pocl; run_plain bad_ref "$SF" "$TMP/bad.cl" --options "$HOPTS" --compile-link
fresh_pocl; run_shim bad "$SF" "$TMP/bad.cl" --options "$HOPTS" --compile-link
[ "$(cat "$TMP/bad_ref.rc")" = 3 ] || fail "the broken program built plainly"
same_output bad_ref bad "failed compile: the plain run's exit code"
# (PoCL names its temporary copy of the source differently each time, in
# the run's own PoCL cache directory)
app_log() { grep -v '^clshim:' "$1" | sed "s|$TMP/pocl\.[A-Za-z0-9]*|POCL_CACHE_DIR|g; s/tempfile_[A-Za-z0-9]*/tempfile/g"; }
diff <(app_log "$TMP/bad_ref.err") <(app_log "$TMP/bad.err") >&2 ||
    fail "failed compile: the build log differs from the plain run's"
grep -q "beside the compile" "$TMP/bad.err" || fail "failed compile: no overlap"
grep -q "compiled object in" "$TMP/bad.err" && fail "failed compile: something was stored"
ok "a failing compile beside the preprocessor: the driver's error and build log"

# The preprocessor fails (clang cannot run): the compile's result as is.
BEFORE=$(uncacheable)
printf '#include M2S(INCLUDE_PATH/h.h)\n%s\n/* another source */\n' "$KBODY" >"$TMP/nopp.cl"
fresh_pocl; run_plain nopp_ref "$SF" "$TMP/nopp.cl" --options "$HOPTS" --compile-link
fresh_pocl; CLSHIM_CLANG=false run_shim nopp "$SF" "$TMP/nopp.cl" --options "$HOPTS" --compile-link
same_output nopp_ref nopp "failing preprocessor: the plain run's results"
grep -q "not caching program .*the preprocessor failed.*kernels: k" "$TMP/nopp.err" ||
    fail "failing preprocessor: no line saying why: $(grep clshim: "$TMP/nopp.err")"
grep -q "compiled object in" "$TMP/nopp.err" && fail "failing preprocessor: an object was stored"
[ "$(uncacheable)" = $((BEFORE + 1)) ] || fail "failing preprocessor: not counted as uncacheable ($BEFORE -> $(uncacheable))"
ok "a failing preprocessor found after the compile: the result as is, one line, counted as uncacheable"
finish
