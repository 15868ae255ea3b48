#!/bin/bash
# The three entry modes (docs/modes.md). A program that loads OpenCL only
# with dlopen + dlsym(handle) and builds with clCompileProgram +
# clLinkProgram is invisible to LD_PRELOAD but gets cache hits on its second
# run in loader mode and in layer mode, with the results of a plain run; a
# linked program works in all three modes; combined modes intercept each
# build exactly once, whatever the order of the first calls; `clshim run
# --mode=auto` and `clshim doctor` pick the mode that reaches the program.
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info
LOADER=$CLSHIM_BUILD/loader
WRAP=$CLSHIM_BUILD/clshim
DL=$PROGS/dlopen_app MK=$PROGS/multikernel EF=$PROGS/ext_first

[ -f "$LOADER/libOpenCL.so.1" ] || fail "no loader library in $LOADER"
if readelf -d "$DL" | grep -q 'NEEDED.*libOpenCL'; then fail "dlopen_app links libOpenCL"; fi
ok "dlopen_app does not link libOpenCL"

# Every function of the real ICD loader is exported, with its version node.
real=$(/sbin/ldconfig -p | awk '$1 == "libOpenCL.so.1" && /x86-64/ { print $NF; exit }')
missing=$(comm -23 <(nm -D --defined-only "$real" | awk '$2 == "T" && $3 ~ /^cl/ { print $3 }' | sort) \
                   <(nm -D --defined-only "$LOADER/libOpenCL.so.1" | awk '$2 == "T" { print $3 }' | sort))
[ -z "$missing" ] || fail "loader library lacks: $missing"
if readelf -d "$LOADER/libOpenCL.so.1" | grep -q 'NEEDED.*libOpenCL'; then fail "loader library needs libOpenCL"; fi
ok "loader library exports all $(nm -D --defined-only "$real" | grep -c ' T cl') functions of $real, same versions"

# run_mode TAG MODE CMD...: MODE is plain, or preload/loader/layer joined by +.
run_mode() {
    local tag=$1 mode=$2; shift 2
    local env=(CLSHIM_DOCTOR=1)
    case "+$mode+" in *+preload+*) env+=("LD_PRELOAD=$SHIM") ;; esac
    case "+$mode+" in *+loader+*) env+=("LD_LIBRARY_PATH=$LOADER") ;; esac
    case "+$mode+" in *+layer+*) env+=("OPENCL_LAYERS=$SHIM") ;; esac
    fresh_pocl
    run_plain "$tag" env "${env[@]}" "$@"
}
builds() { echo $(($(count 'clshim: hit ' "$TMP/$1.err") + $(count 'clshim: miss ' "$TMP/$1.err"))); }
intercepting() { count 'doctor: .*; intercepting$' "$TMP/$1.err"; }

fresh_pocl; run_plain dl_ref "$DL"
fresh_pocl; run_plain mk_ref "$MK"
fresh_pocl; run_plain ef_ref "$EF"
grep -q 'compile+link: weigh checksum' "$TMP/dl_ref.out" || fail "dlopen_app: no result"

# The problem: LD_PRELOAD sees nothing of a dlopen program.
run_mode dl_pre preload "$DL"
same_output dl_ref dl_pre "dlopen_app, preload: same results"
[ "$(builds dl_pre)" = 0 ] && [ "$(intercepting dl_pre)" = 0 ] || fail "preload reached a dlopen program?"
ok "dlopen_app, preload: no call reaches clshim (why loader and layer modes exist)"

# Loader and layer mode: cold misses, warm hits, same results. Each mode
# starts from an empty cache of its own.
for mode in loader layer; do
    export CLSHIM_CACHE_DIR=$TMP/cache-$mode
    run_mode "dl_${mode}_cold" $mode "$DL"
    same_output dl_ref "dl_${mode}_cold" "dlopen_app, $mode mode, cold: same results"
    [ "$(count 'clshim: miss .*compiled object' "$TMP/dl_${mode}_cold.err")" = 1 ] || fail "$mode cold: no clCompileProgram miss"
    [ "$(count 'clshim: miss .*linked' "$TMP/dl_${mode}_cold.err")" = 1 ] || fail "$mode cold: no clLinkProgram miss"
    [ "$(count 'clshim: miss ' "$TMP/dl_${mode}_cold.err")" = 3 ] || fail "$mode cold: expected 3 misses"
    [ "$(count "doctor: $mode mode reached clshim; intercepting" "$TMP/dl_${mode}_cold.err")" = 1 ] ||
        fail "$mode cold: not intercepted in $mode mode"
    ok "dlopen_app, $mode mode, cold: compile, link and build each a miss"
    run_mode "dl_${mode}_warm" $mode "$DL"
    same_output dl_ref "dl_${mode}_warm" "dlopen_app, $mode mode, warm: same results"
    [ "$(count 'clshim: hit .*(disk, compiled object)' "$TMP/dl_${mode}_warm.err")" = 1 ] || fail "$mode warm: compile not a hit"
    [ "$(count 'clshim: hit .*(disk, linked program)' "$TMP/dl_${mode}_warm.err")" = 1 ] || fail "$mode warm: link not a hit"
    [ "$(count 'clshim: hit ' "$TMP/dl_${mode}_warm.err")" = 3 ] || fail "$mode warm: expected 3 hits"
    [ "$(count 'clshim: miss ' "$TMP/dl_${mode}_warm.err")" = 0 ] || fail "$mode warm: unexpected miss"
    ok "dlopen_app, $mode mode, warm: compile, link and build served from the cache"
done

# A linked program in all three modes, one shared cache: the cache does not
# know which mode delivered the call.
export CLSHIM_CACHE_DIR=$TMP/cache-shared
run_mode mk_pre preload "$MK"
same_output mk_ref mk_pre "multikernel, preload: same results"
[ "$(count 'clshim: miss ' "$TMP/mk_pre.err")" = 1 ] || fail "multikernel preload: expected a miss"
for mode in loader layer; do
    run_mode "mk_$mode" $mode "$MK"
    same_output mk_ref "mk_$mode" "multikernel, $mode mode: same results"
    [ "$(count 'clshim: hit ' "$TMP/mk_$mode.err")" = 1 ] || fail "multikernel $mode: expected a hit on preload's entry"
    [ "$(intercepting "mk_$mode")" = 1 ] || fail "multikernel $mode: not intercepted"
done
ok "multikernel: preload's cache entry is a hit in loader and layer mode"

# Combined modes: each build intercepted once, by one copy. ext_first's first
# OpenCL call is one clshim handles, made before the ICD loader initialised.
for combo in preload+layer preload+loader loader+layer preload+loader+layer; do
    for app in dl mk ef; do
        case $app in dl) prog=$DL n=3 ;; mk) prog=$MK n=1 ;; ef) prog=$EF n=1 ;; esac
        tag="${app}_${combo//+/_}"
        run_mode "$tag" "$combo" "$prog"
        same_output "${app}_ref" "$tag" "$(basename "$prog"), $combo: same results"
        [ "$(builds "$tag")" = "$n" ] || fail "$tag: $(builds "$tag") hit/miss lines for $n builds"
        [ "$(intercepting "$tag")" = 1 ] || fail "$tag: $(intercepting "$tag") copies intercepted"
    done
    ok "$combo: every build intercepted exactly once, by one copy"
done

# The loader library never takes itself for the real loader.
CLSHIM_REAL_LOADER=$LOADER/libOpenCL.so.1 run_mode self loader "$DL"
same_output dl_ref self "CLSHIM_REAL_LOADER naming the loader library itself: same results"
grep -q 'CLSHIM_REAL_LOADER=.*trying the defaults' "$TMP/self.err" || fail "bad CLSHIM_REAL_LOADER not reported"
ok "CLSHIM_REAL_LOADER naming clshim's own library: reported, real loader used"

# CLSHIM_DISABLE=1 in loader and layer mode: pure pass-through.
for mode in loader layer; do
    CLSHIM_DISABLE=1 run_mode "off_$mode" $mode "$DL"
    same_output dl_ref "off_$mode" "CLSHIM_DISABLE=1, $mode mode: same results"
    [ "$(builds "off_$mode")" = 0 ] || fail "CLSHIM_DISABLE=1 in $mode mode still caches"
done
ok "CLSHIM_DISABLE=1: loader and layer modes forward everything"

# clshim run --mode=auto picks the loader for dlopen_app, preload for multikernel.
fresh_pocl
CLSHIM_DOCTOR=1 "$WRAP" run --mode=auto -- "$DL" >"$TMP/auto_dl.out" 2>"$TMP/auto_dl.err"; echo $? >"$TMP/auto_dl.rc"
same_output dl_ref auto_dl "clshim run --mode=auto dlopen_app: same results"
grep -q 'doctor: loader mode reached clshim; intercepting' "$TMP/auto_dl.err" || fail "auto: dlopen_app not run in loader mode"
fresh_pocl
CLSHIM_DOCTOR=1 "$WRAP" run --mode=auto -- "$MK" >"$TMP/auto_mk.out" 2>"$TMP/auto_mk.err"; echo $? >"$TMP/auto_mk.rc"
same_output mk_ref auto_mk "clshim run --mode=auto multikernel: same results"
grep -q 'doctor: preload mode reached clshim; intercepting' "$TMP/auto_mk.err" || fail "auto: multikernel not preloaded"
ok "clshim run --mode=auto: loader for a dlopen program, preload for a linked one"

# clshim doctor tells which modes reach the program and which to use.
"$WRAP" doctor -- "$DL" >"$TMP/doc_dl.txt" 2>&1 || fail "doctor dlopen_app failed: $(cat "$TMP/doc_dl.txt")"
grep -q '^  preload: NOT reached' "$TMP/doc_dl.txt" || fail "doctor: preload should not reach dlopen_app"
grep -q '^  loader: reached clshim' "$TMP/doc_dl.txt" || fail "doctor: loader should reach dlopen_app"
grep -q '^  layer: reached clshim' "$TMP/doc_dl.txt" || fail "doctor: layer should reach dlopen_app"
grep -q "^  use: clshim run --mode=loader -- $DL" "$TMP/doc_dl.txt" || fail "doctor: wrong advice: $(cat "$TMP/doc_dl.txt")"
"$WRAP" doctor -- "$MK" >"$TMP/doc_mk.txt" 2>&1 || fail "doctor multikernel failed"
grep -q "^  use: clshim run --mode=preload -- $MK" "$TMP/doc_mk.txt" || fail "doctor: wrong advice for multikernel"
set +e; "$WRAP" doctor -- /bin/true >"$TMP/doc_true.txt" 2>&1; rc=$?; set -e
[ "$rc" = 1 ] && grep -q 'no mode reached clshim' "$TMP/doc_true.txt" || fail "doctor: a program without OpenCL"
grep -Eq '^  preload: reached clshim \(exit status 0; [0-9]+ cache hits, [0-9]+ misses\)' "$TMP/doc_mk.txt" &&
    ! grep -q '0 cache hits, 0 misses' "$TMP/doc_mk.txt" ||
    fail "doctor: no hit or miss counted for multikernel: $(cat "$TMP/doc_mk.txt")"
# An application whose own binary cache serves its builds: no "0 hits, 0
# misses" without a reason.
"$PROGS/appcache" save "$TMP/app.bin" >/dev/null
"$WRAP" doctor -- "$PROGS/appcache" load "$TMP/app.bin" >"$TMP/doc_app.txt" 2>&1 || fail "doctor appcache failed"
grep -q "^  preload: reached clshim (exit status 0; no build went through its cache: 1 built from" "$TMP/doc_app.txt" ||
    fail "doctor: no reason for a run without hits or misses: $(cat "$TMP/doc_app.txt")"
ok "clshim doctor: reports the modes that reach the program and the one to use"
finish
