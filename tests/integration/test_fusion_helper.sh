#!/bin/bash
# Automatic fusion's fused programs made by the capture helper
# (CLSHIM_FUSION_BUILD=helper, the default; fusion/fjob.h), on PoCL under
# LD_PRELOAD with the helper on, as users run it:
# 1. a cold run never makes the fused program itself (libclshim-llvm.so
#    never loads in the application): it hands the job over and runs the
#    sequence unfused, bit for bit as plain; `cache wait` sees it stored;
#    the next run, on an empty PoCL cache, hits it and fuses every
#    occurrence from the third, bit for bit, with PoCL using the fused
#    kernel's work-group function from the stored binary (the helper's
#    first launch made it), so its first launch compiles nothing;
# 2. a sequence the analysis refuses: the helper records the refusal, the
#    next run says it (remembered) and hands nothing over;
# 3. CLSHIM_FUSION_BUILD=app, and no helper (CLSHIM_CAPTURE_PROCESS=0):
#    made in the application at the third occurrence, as before;
# 4. a bad CLSHIM_FUSION_BUILD value is one line, and the default stands.
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info
TOOL=$CLSHIM_BUILD/clshim-tool
FA=$PROGS/fusion_auto
LLVM=libclshim-llvm.so
helper() { env CLSHIM_CAPTURE_PROCESS=1 CLSHIM_FUSION=auto "$@"; }
fused() { occurrences "fused $1 into one launch" "$TMP/$2.err"; }
loaded() { grep -q "^loaded $LLVM: $2$" "$TMP/$1.err" || fail "$1: expected '$LLVM loaded: $2'"; }
wait_stored() { # TAG WHAT: cache wait after TAG's run, its lines kept
    "$TOOL" cache wait --timeout 120 >"$TMP/$1.wait" 2>&1 || { cat "$TMP/$1.wait" >&2; fail "$1: cache wait: $2"; }
}

# 1. chain4, 8 iterations: learned after two, the fused kernel handed over at the third.
run_ref ref "$FA" --mode chain4 --iterations 8
fresh_pocl; run_shim cold helper "$FA" --mode chain4 --iterations 8 --loaded "$LLVM"
same_output ref cold "cold: every buffer bit for bit as without clshim"
grep -q "fusion: the fused kernel for k1+k2+k3+k4 is made by the capture helper" "$TMP/cold.err" ||
    fail "cold: the job was not handed to the capture helper"
loaded cold no
[ "$(fused k1+k2+k3+k4 cold)" = 0 ] || [ "$(count 'hit derived program' "$TMP/cold.err")" = 1 ] ||
    fail "cold: fused without the helper's program"
ok "cold: the fused kernel is made by the capture helper; the application loads no LLVM and its results are plain's"
wait_stored cold "the fused program was not stored"
grep -q "captures stored" "$TMP/cold.wait" || fail "cold: cache wait says nothing stored"
fresh_pocl
POCL_DEBUG=general run_shim warm helper "$FA" --mode chain4 --iterations 8 --loaded "$LLVM"
same_output ref warm "warm: every buffer bit for bit as without clshim"
[ "$(count 'hit derived program' "$TMP/warm.err")" = 1 ] || fail "warm: the fused program was not a hit"
[ "$(fused k1+k2+k3+k4 warm)" = 6 ] || fail "warm: expected 6 fused launches, got $(fused k1+k2+k3+k4 warm)"
loaded warm no
grep -q "Using a cached WG function: .*/clshim_fused/" "$TMP/warm.err" ||
    { grep -i "WG function\|clshim_fused" "$TMP/warm.err" | head -5 >&2; fail "warm: PoCL compiled the fused kernel's first launch"; }
ok "warm: the helper's program hits, 6 of 6 occurrences fused from the third, its first launch's code from the binary"

# 1b. While the helper makes it, occurrences run unheld: each held one
# costs the application the wait for its end, and only a look (at doubling
# intervals from 100 ms) is held. 200 iterations: the old rule (every
# fourth occurrence held) held about 50.
rm -rf "$CLSHIM_CACHE_DIR"; mkdir -p "$CLSHIM_CACHE_DIR"
run_ref ref200 "$FA" --mode chain4 --iterations 200
fresh_pocl; CLSHIM_STATS=1 run_shim pend helper "$FA" --mode chain4 --iterations 200
same_output ref200 pend "pending: as without clshim"
held=$(sed -n 's/.*fusion summary: .* launches; \([0-9]*\) held kernels submitted unfused.*/\1/p' "$TMP/pend.err")
[ -n "$held" ] || fail "pending: no fusion summary"
[ "$held" -le 80 ] || fail "pending: $held kernels held and submitted unfused while the helper made the program (at most 80)"
ok "while the helper makes the fused program, $held of 800 kernels were held (a look at doubling intervals)"
"$TOOL" cache wait --timeout 120 >/dev/null 2>&1 || true

# 1c. The job waits for the capture worker's turn, as a capture does
# (program/capture_proc.h, capture_proc_queue): while the application is
# busy no helper is started for it (started at once, its start cost a
# 30-chain run at 64 Ki floats a third of its speed), so `clshim cache wait`
# does not wait for the running application; its exit hands the job over,
# `cache wait` then waits for the helper, and the next run fuses.
rm -rf "$CLSHIM_CACHE_DIR"; mkdir -p "$CLSHIM_CACHE_DIR"
BUSY=(--mode chain4 --iterations 6000 --n 1048576)
run_ref refbusy "$FA" "${BUSY[@]}"
fresh_pocl
helper CLSHIM_CAPTURE_DEFER_MAX=600 LD_PRELOAD="$SHIM" "$FA" "${BUSY[@]}" >"$TMP/busy.out" 2>"$TMP/busy.err" &
APP=$!
for _ in $(seq 600); do
    grep -q "fused kernel for k1+k2+k3+k4 is made by the capture helper" "$TMP/busy.err" && break
    kill -0 $APP 2>/dev/null || break
    sleep 0.1
done
grep -q "fused kernel for k1+k2+k3+k4 is made by the capture helper" "$TMP/busy.err" ||
    { cat "$TMP/busy.err" >&2; fail "busy: the job was not queued for the helper"; }
sleep 1
kill -0 $APP 2>/dev/null || fail "busy: the app ended before the check"
set +e; "$TOOL" cache wait --timeout 1 >"$TMP/busy.wait1" 2>&1; rc=$?; set -e
[ $rc = 0 ] || { cat "$TMP/busy.wait1" >&2; fail "busy: cache wait waited ($rc): a helper took the job while the app was busy"; }
kill -0 $APP 2>/dev/null || fail "busy: the app ended before the checks were done"
set +e; wait $APP; rc=$?; set -e
echo $rc >"$TMP/busy.rc"
same_output refbusy busy "busy: every buffer bit for bit as without clshim"
wait_stored busy "the job handed over at exit was not stored"
grep -q "captures stored" "$TMP/busy.wait" || { cat "$TMP/busy.wait" >&2; fail "busy: cache wait says nothing stored"; }
run_ref refbusy2 "$FA" --mode chain4 --iterations 8 --n 1048576 # the ranges are in the key
fresh_pocl; run_shim busy2 helper "$FA" --mode chain4 --iterations 8 --n 1048576
same_output refbusy2 busy2 "busy, next run: as without clshim"
[ "$(fused k1+k2+k3+k4 busy2)" = 6 ] || fail "busy, next run: expected 6 fused launches, got $(fused k1+k2+k3+k4 busy2)"
ok "a busy app starts no helper for its job (cache wait does not wait for it); its exit hands it over, the next run fuses 6 of 6"

# 2. stencil: refused by the analysis in the helper; remembered.
rm -rf "$CLSHIM_CACHE_DIR"; mkdir -p "$CLSHIM_CACHE_DIR"
run_ref ref_stencil "$FA" --mode stencil --iterations 8
fresh_pocl; run_shim stencil1 helper "$FA" --mode stencil --iterations 8
same_output ref_stencil stencil1 "stencil, first run: as without clshim"
wait_stored stencil1 "a refusal counted as a loss"
fresh_pocl; run_shim stencil2 helper "$FA" --mode stencil --iterations 8 --loaded "$LLVM"
same_output ref_stencil stencil2 "stencil, second run: as without clshim"
grep -q "fusion of k1+blur (plan auto) refused: needs a barrier: .* (remembered from an earlier run)" "$TMP/stencil2.err" ||
    { grep refused "$TMP/stencil2.err" >&2; fail "stencil: the helper's refusal is not remembered"; }
[ "$(count 'made by the capture helper' "$TMP/stencil2.err")" = 0 ] || fail "stencil: handed over again"
loaded stencil2 no
ok "a refusal in the helper is recorded: the next run says why and hands nothing over"

# 3. In the application: CLSHIM_FUSION_BUILD=app, or no helper.
for way in app nohelper; do
    rm -rf "$CLSHIM_CACHE_DIR"; mkdir -p "$CLSHIM_CACHE_DIR"
    case $way in
    app) e=(CLSHIM_CAPTURE_PROCESS=1 CLSHIM_FUSION_BUILD=app) ;;
    nohelper) e=(CLSHIM_CAPTURE_PROCESS=0) ;;
    esac
    fresh_pocl; run_shim "$way" env "${e[@]}" CLSHIM_FUSION=auto "$FA" --mode chain4 --iterations 8 --loaded "$LLVM"
    same_output ref "$way" "$way: as without clshim"
    [ "$(fused k1+k2+k3+k4 "$way")" = 6 ] || fail "$way: expected 6 fused launches"
    [ "$(count 'made by the capture helper' "$TMP/$way.err")" = 0 ] || fail "$way: handed to the helper"
    loaded "$way" yes
    "$TOOL" cache wait --timeout 120 >/dev/null 2>&1 || true
done
ok "CLSHIM_FUSION_BUILD=app and CLSHIM_CAPTURE_PROCESS=0: made in the application, 6 of 6 fused"

# 4. A bad value.
fresh_pocl; run_shim bad env CLSHIM_FUSION_BUILD=later CLSHIM_CAPTURE_PROCESS=0 CLSHIM_FUSION=auto "$FA" --mode chain4 --iterations 8
same_output ref bad "CLSHIM_FUSION_BUILD=later: as without clshim"
grep -q "CLSHIM_FUSION_BUILD=later is not valid (accepts helper or app)" "$TMP/bad.err" ||
    { grep clshim: "$TMP/bad.err" | head -3 >&2; fail "bad value: no line says so"; }
ok "CLSHIM_FUSION_BUILD=later: one line, the default stands"
finish
