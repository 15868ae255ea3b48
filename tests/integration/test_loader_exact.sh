#!/bin/bash
# A program that dlopens OpenCL (hashcat's way) under clshim's loader
# library, as a layer, or both with a preload: the driver's compiler
# resolves `open` to libc's, not to clshim's, so clshim binds the driver's
# file calls to its own (interpose/bind.c). Then a compile whose header the
# driver reads from the file system is served from the key's snapshot,
# stored, and hit on the next run, as under LD_PRELOAD; a header changed
# between runs misses and computes as plain. Without the binding none of
# those compiles was stored (docs/measurements/hashcat-loader-2026-12-02.txt).
# The capture helper, in each mode, stores what was handed to it. And
# exact under attack: with the -I directory a symbolic link flipped
# between two headers all through a cold run, whatever that run stored
# computes as plain for the header then in place (10 trials, loader mode).
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=debug
LOADER=$CLSHIM_BUILD/loader
DL=$PROGS/dlopen_app

mkdir -p "$TMP/inc"
header() { echo "#define DL_WEIGHT $1" >"$TMP/inc/dl_weight.h"; }
header 1.5f; run_ref ref1 "$DL" --include "$TMP/inc"
header 2.5f; run_ref ref2 "$DL" --include "$TMP/inc"
[ "$(cat "$TMP/ref1.rc")" = 0 ] && grep -q 'include: weigh_file' "$TMP/ref1.out" || fail "plain run: no result"
! cmp -s "$TMP/ref1.out" "$TMP/ref2.out" || fail "the header's two values compute the same (the test shows nothing)"

run_mode() { # tag mode
    local tag=$1 mode=$2 env=()
    case "+$mode+" in *+preload+*) env+=("LD_PRELOAD=$SHIM") ;; esac
    case "+$mode+" in *+loader+*) env+=("LD_LIBRARY_PATH=$LOADER") ;; esac
    case "+$mode+" in *+layer+*) env+=("OPENCL_LAYERS=$SHIM") ;; esac
    fresh_pocl
    run_plain "$tag" env "${env[@]}" "$DL" --include "$TMP/inc"
}
hits() { count '^clshim: hit ' "$TMP/$1.err"; }
misses() { count '^clshim: miss ' "$TMP/$1.err"; }

for mode in loader layer preload+loader; do
    t=${mode//+/_}
    export CLSHIM_CACHE_DIR=$TMP/cache-$t
    header 1.5f
    run_mode "${t}_cold" "$mode"
    same_output ref1 "${t}_cold" "$mode, cold: computes as plain"
    [ "$(misses "${t}_cold")" = 5 ] || fail "$mode cold: $(misses "${t}_cold") misses of 5 builds"
    grep -q '^clshim: bound [0-9]* file call sites of the driver' "$TMP/${t}_cold.err" ||
        fail "$mode cold: the driver's file calls were not bound"
    if grep -q "file reads cannot be seen\|not stored" "$TMP/${t}_cold.err"; then
        grep "cannot be seen\|not stored" "$TMP/${t}_cold.err" >&2
        fail "$mode cold: a build was not stored"
    fi
    grep -Eq '^clshim: sandbox: the build was served ([1-9][0-9]* files? .*|.*recorded [1-9][0-9]*)$' "$TMP/${t}_cold.err" ||
        fail "$mode cold: no build read a file through the sandbox"
    ok "$mode, cold: the driver's header read went through clshim's sandbox; 5 builds stored"

    run_mode "${t}_warm" "$mode"
    same_output ref1 "${t}_warm" "$mode, warm: computes as plain"
    [ "$(hits "${t}_warm")" = 5 ] && [ "$(misses "${t}_warm")" = 0 ] ||
        fail "$mode warm: $(hits "${t}_warm") hits, $(misses "${t}_warm") misses of 5 builds"
    ok "$mode, warm: the compile with a header from the file system hits, and the other 4 builds"

    header 2.5f
    run_mode "${t}_changed" "$mode"
    same_output ref2 "${t}_changed" "$mode, header changed: computes as plain with the new header"
    [ "$(misses "${t}_changed")" = 2 ] && [ "$(hits "${t}_changed")" = 3 ] ||
        fail "$mode changed: $(hits "${t}_changed") hits, $(misses "${t}_changed") misses (want 3 and 2)"
    ok "$mode, header changed: its compile and link miss, the other 3 builds hit"
done

# With the capture helper (PoCL's default; run-all.sh turns it off): the
# clBuildProgram's capture is the helper's, which must see the driver's
# own devices in every mode (not clshim's layer, named in OPENCL_LAYERS);
# `cache wait` then says every capture was stored, and the next run hits.
header 1.5f
for mode in loader layer preload+loader; do
    t=helper_${mode//+/_}
    export CLSHIM_CACHE_DIR=$TMP/cache-$t
    CLSHIM_CAPTURE_PROCESS=1 run_mode "${t}_cold" "$mode"
    same_output ref1 "${t}_cold" "$mode with the capture helper, cold: computes as plain"
    grep -q 'handed to the capture helper' "$TMP/${t}_cold.err" || fail "$mode helper cold: nothing handed to the helper"
    "$CLSHIM_BUILD/clshim-tool" cache wait --timeout 120 >"$TMP/${t}_wait.out" 2>&1 ||
        { cat "$TMP/${t}_wait.out" >&2; fail "$mode helper: cache wait says a capture was not stored"; }
    CLSHIM_CAPTURE_PROCESS=1 run_mode "${t}_warm" "$mode"
    same_output ref1 "${t}_warm" "$mode with the capture helper, warm: computes as plain"
    [ "$(hits "${t}_warm")" = 5 ] || fail "$mode helper warm: $(hits "${t}_warm") hits of 5 builds"
    ok "$mode with the capture helper: every capture stored, the next run hits all 5 builds"
done

# The flip: each trial a cold run while another process flips the -I link
# between v1 and v2 (atomically, by rename); then, the link still, a run
# with v1 and one with v2 in place, each computing as plain's for that
# header whether it hits or not. A binary built from the other header's
# bytes under a key naming these would show the other value.
mkdir -p "$TMP/v1" "$TMP/v2"
echo '#define DL_WEIGHT 1.5f' >"$TMP/v1/dl_weight.h"
echo '#define DL_WEIGHT 2.5f' >"$TMP/v2/dl_weight.h"
rm -rf "$TMP/inc"
point() { ln -sfn "$TMP/$1" "$TMP/inc.new" && mv -Tf "$TMP/inc.new" "$TMP/inc"; }
export CLSHIM_CACHE_DIR=$TMP/cache-flip
stored=0
for trial in $(seq 10); do
    rm -rf "$CLSHIM_CACHE_DIR"
    point v1
    (while :; do point v2; point v1; done) &
    flipper=$!
    run_mode flip_cold loader
    kill "$flipper"; wait "$flipper" 2>/dev/null || true
    if [ "$(cat "$TMP/flip_cold.rc")" = 0 ]; then
        cmp -s "$TMP/flip_cold.out" "$TMP/ref1.out" || cmp -s "$TMP/flip_cold.out" "$TMP/ref2.out" ||
            fail "flip trial $trial: the cold run computed neither header's result"
    fi
    stored=$((stored + $(count '^clshim: stored \|compiled object in .*, stored ' "$TMP/flip_cold.err")))
    for v in 1 2; do
        point v$v
        run_mode "flip_v$v" loader
        same_output "ref$v" "flip_v$v" "flip trial $trial, v$v in place: computes as plain" >/dev/null
    done
done
[ "$stored" -gt 0 ] || fail "the flip trials stored nothing (the test shows nothing)"
ok "10 trials of an -I link flipped during the cold run: $stored stores, every later run computes as plain"

finish
