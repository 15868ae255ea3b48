#!/bin/bash
# A stored binary comes from a build that read exactly the bytes its key
# names (issue 44): the capture helper builds from the snapshot the
# application's key was made of, under a sandbox, never from what the disk
# holds later. Each case fails on a helper that builds again from the disk
# and checks it by sampling:
#  1. a header reached through a symbolic link (a file link, an -I directory
#     link), or rewritten by a rename, flipped to another content and back
#     while the helper works (a check before and after sees V=1 twice): every
#     trial stores (the key read V=1), and every later run computes V=1's
#     results (20 trials of each way, 60 in all; 210 in `make check-long`);
#  2. a generated header deleted right after the run (a tuner's job): stored
#     all the same, the next run with the header written again hits;
#  3. a driver's environment variable (POCL_EXTRA_BUILD_FLAGS) is keyed;
#  4. `#pragma once` through a symbolic or a hard link, the link then
#     replaced by a copy:
#     keyed by file identity, as the compiler decides;
#  5. runs back to back: the run started the moment a cold one exited waits
#     for its capture (one line) and hits, and so does every run after it,
#     beside busy loops or after captures queued behind a busy application;
#  6. time and place, however they arise: __TIME__ made by token pasting,
#     __TIME__ in a -D option, __FILE__ in the program source: not cached
#     (the reason said), never another run's binary.
source "$(dirname "$0")/lib.sh"
export CLSHIM_CAPTURE_PROCESS=1 # run-all.sh turns it off for other tests
export CLSHIM_LOG=info
SF=$PROGS/srcfile
TOOL=$CLSHIM_BUILD/clshim-tool
TRIALS=20 # per way of flipping: 60 in all
[ -n "${CLSHIM_LONG:-}" ] && TRIALS=70 # 210 in all, within run-all.sh's 600 s

kernel='__kernel void k(__global float *y) { size_t i = get_global_id(0); y[i] = V * (float)(i % 7); }'
wait_captures() { "$TOOL" cache wait --timeout 120 >/dev/null 2>&1 || fail "$1: cache wait"; }
hit() { grep -q 'clshim: hit ' "$TMP/$1.err"; }

# ---- 1. the symlink flip ------------------------------------------------------
mkdir -p "$TMP/v1" "$TMP/v2"
echo '#define V 1.0f' >"$TMP/v1/h.h"
echo '#define V 2.0f' >"$TMP/v2/h.h"
printf '#include "h.h"\n%s\n' "$kernel" >"$TMP/p.cl"
ln -sfn "$TMP/v1" "$TMP/dirlink"
fresh_pocl; run_plain ref1 "$SF" "$TMP/p.cl" --options "-I $TMP/v1"
fresh_pocl; run_plain ref2 "$SF" "$TMP/p.cl" --options "-I $TMP/v2"
[ "$(cat "$TMP/ref1.rc")" = 0 ] && ! cmp -s "$TMP/ref1.out" "$TMP/ref2.out" || fail "reference runs"

flip_trials() { # how: file | dir
    local how=$1 stored=0
    for trial in $(seq "$TRIALS"); do
        rm -rf "$CLSHIM_CACHE_DIR"; mkdir -p "$CLSHIM_CACHE_DIR" "$TMP/inc"
        if [ "$how" = file ]; then
            ln -sfn "$TMP/v1/h.h" "$TMP/inc/h.h"; opts="-I $TMP/inc"
        elif [ "$how" = rename ]; then
            rm -f "$TMP/inc/h.h"; cp "$TMP/v1/h.h" "$TMP/inc/h.h"; opts="-I $TMP/inc"
        else
            ln -sfn "$TMP/v1" "$TMP/dirlink"; opts="-I $TMP/dirlink"
        fi
        fresh_pocl
        run_shim cold "$SF" "$TMP/p.cl" --options "$opts"
        same_output ref1 cold "$how trial $trial: cold run" >/dev/null
        grep -q 'capture of .* handed to the capture helper' "$TMP/cold.err" ||
            { cat "$TMP/cold.err" >&2; fail "$how trial $trial: the capture was not handed to the helper"; }
        sleep "0.$((RANDOM % 8))$((RANDOM % 10))"
        for _ in $(seq $((5 + RANDOM % 60))); do
            if [ "$how" = file ]; then
                ln -sfn "$TMP/v2/h.h" "$TMP/inc/h.h.new" && mv -T "$TMP/inc/h.h.new" "$TMP/inc/h.h"
                ln -sfn "$TMP/v1/h.h" "$TMP/inc/h.h.new" && mv -T "$TMP/inc/h.h.new" "$TMP/inc/h.h"
            elif [ "$how" = rename ]; then
                cp "$TMP/v2/h.h" "$TMP/inc/h.h.new" && mv -T "$TMP/inc/h.h.new" "$TMP/inc/h.h"
                cp "$TMP/v1/h.h" "$TMP/inc/h.h.new" && mv -T "$TMP/inc/h.h.new" "$TMP/inc/h.h"
            else
                ln -sfn "$TMP/v2" "$TMP/dirlink.new" && mv -T "$TMP/dirlink.new" "$TMP/dirlink"
                ln -sfn "$TMP/v1" "$TMP/dirlink.new" && mv -T "$TMP/dirlink.new" "$TMP/dirlink"
            fi
        done
        wait_captures "$how trial $trial"
        fresh_pocl
        run_shim check "$SF" "$TMP/p.cl" --options "$opts"
        cmp -s "$TMP/ref1.out" "$TMP/check.out" ||
            { cat "$TMP/check.err" >&2; fail "$how trial $trial: a binary of other inputs was served under V=1's key"; }
        hit check || { cat "$TMP/check.err" >&2; fail "$how trial $trial: the capture of V=1's build was not stored"; }
        stored=$((stored + 1))
        wait_captures "$how trial $trial, after the check"
    done
    ok "$TRIALS trials, the header ($how) flipped to V=2 and back during the capture: 0 wrong binaries, $stored of $TRIALS stored"
}
flip_trials file
flip_trials dir
flip_trials rename

# ---- 2. a generated header gone after the run ---------------------------------
for trial in 1 2 3; do
    rm -rf "$CLSHIM_CACHE_DIR" "$TMP/gen"; mkdir -p "$CLSHIM_CACHE_DIR" "$TMP/gen"
    echo '#define V 1.0f' >"$TMP/gen/h.h"
    fresh_pocl
    run_shim gen1 "$SF" "$TMP/p.cl" --options "-I $TMP/gen"
    rm -f "$TMP/gen/h.h" # the job deletes what it generated
    wait_captures "generated header $trial"
    echo '#define V 1.0f' >"$TMP/gen/h.h"
    fresh_pocl
    run_shim gen2 "$SF" "$TMP/p.cl" --options "-I $TMP/gen"
    wait_captures "generated header $trial, second run"
    same_output ref1 gen2 "generated header $trial: the second run" >/dev/null
    hit gen2 || { cat "$TMP/gen1.err" "$TMP/gen2.err" >&2; fail "generated header $trial: the second run missed"; }
done
ok "a header generated for the run and deleted after it: stored, the next run hits (3 of 3)"

# ---- 3. the driver's own environment ------------------------------------------
printf '%s\n' '__kernel void k(__global float *y) { size_t i = get_global_id(0); y[i] = VAL * (float)(i % 7); }' \
    >"$TMP/env.cl"
rm -rf "$CLSHIM_CACHE_DIR"; mkdir -p "$CLSHIM_CACHE_DIR"
POCL_EXTRA_BUILD_FLAGS=-DVAL=1 run_ref env1 "$SF" "$TMP/env.cl"
POCL_EXTRA_BUILD_FLAGS=-DVAL=2 run_ref env2 "$SF" "$TMP/env.cl"
! cmp -s "$TMP/env1.out" "$TMP/env2.out" || fail "POCL_EXTRA_BUILD_FLAGS does not change the plain build"
fresh_pocl; POCL_EXTRA_BUILD_FLAGS=-DVAL=1 run_shim envs1 "$SF" "$TMP/env.cl"
wait_captures "driver environment"
fresh_pocl; POCL_EXTRA_BUILD_FLAGS=-DVAL=2 run_shim envs2 "$SF" "$TMP/env.cl"
same_output env1 envs1 "POCL_EXTRA_BUILD_FLAGS=-DVAL=1 under clshim"
same_output env2 envs2 "POCL_EXTRA_BUILD_FLAGS=-DVAL=2 after a run with -DVAL=1: not the other's binary"
! hit envs2 || fail "a build under another POCL_EXTRA_BUILD_FLAGS hit"
wait_captures "driver environment, second run"

# ---- 4. #pragma once decides by identity --------------------------------------
for how in symlink hardlink; do
    rm -rf "$CLSHIM_CACHE_DIR" "$TMP/once" "$TMP/pocl-ref"; mkdir -p "$CLSHIM_CACHE_DIR" "$TMP/once"
    printf '#pragma once\n#ifdef SEEN\n#define TWICE 1\n#endif\n#define SEEN 1\n' >"$TMP/once/a.h"
    if [ $how = symlink ]; then ln -s a.h "$TMP/once/b.h"; else ln "$TMP/once/a.h" "$TMP/once/b.h"; fi
    printf '#include "a.h"\n#include "b.h"\n#ifdef TWICE\n#define V 2.0f\n#else\n#define V 1.0f\n#endif\n%s\n' \
        "$kernel" >"$TMP/once.cl"
    run_ref once_link "$SF" "$TMP/once.cl" --options "-I $TMP/once"
    fresh_pocl; run_shim once1 "$SF" "$TMP/once.cl" --options "-I $TMP/once"
    same_output once_link once1 "#pragma once through a $how"
    wait_captures "pragma once ($how)"
    rm "$TMP/once/b.h" && cp "$TMP/once/a.h" "$TMP/once/b.h"
    rm -rf "$TMP/pocl-ref"; run_ref once_copy "$SF" "$TMP/once.cl" --options "-I $TMP/once"
    ! cmp -s "$TMP/once_link.out" "$TMP/once_copy.out" || fail "a copy for the $how does not change the plain build"
    fresh_pocl; run_shim once2 "$SF" "$TMP/once.cl" --options "-I $TMP/once"
    same_output once_copy once2 "#pragma once, the $how replaced by a copy: not the $how's binary"
    ! hit once2 || fail "the copy's build hit the $how's entry"
    wait_captures "pragma once ($how), second run"
done

# ---- 5. back to back -------------------------------------------------------------
for trial in 1 2 3; do
    rm -rf "$CLSHIM_CACHE_DIR"; mkdir -p "$CLSHIM_CACHE_DIR"
    printf '#include "h.h"\n%s\n// trial %s\n' "$kernel" "$trial" >"$TMP/b2b.cl"
    fresh_pocl
    run_shim b2b1 "$SF" "$TMP/b2b.cl" --options "-I $TMP/v1"
    run_shim b2b2 "$SF" "$TMP/b2b.cl" --options "-I $TMP/v1"
    run_shim b2b3 "$SF" "$TMP/b2b.cl" --options "-I $TMP/v1"
    for t in b2b1 b2b2 b2b3; do same_output ref1 $t "back to back $trial: $t" >/dev/null; done
    grep -q 'clshim: miss ' "$TMP/b2b1.err" || fail "back to back $trial: the first run did not miss"
    for t in b2b2 b2b3; do
        hit $t || { cat "$TMP/b2b1.err" "$TMP/$t.err" >&2; fail "back to back $trial: $t, started as the run before it ended, missed"; }
    done
    wait_captures "back to back $trial"
done
ok "three runs back to back, 3 times: miss, hit, hit (a run waits for the capture still in progress)"

# 5b. The same beside eight busy loops, with three programs a run: the
#     captures wait in a queue. A capture nobody waits for runs at nice 19
#     while its application lives; once the application exited, or a run
#     waits for its key or one queued behind it, it runs at normal priority
#     and a waited-for key goes first. A queued capture keeps its claim
#     until it is captured: claims that expired on a clock let the next run
#     compile what sat in the queue (CI, four loops on two slower cores; 3
#     of 5 runs here beside twelve loops).
BG=$PROGS/capture_bg
fresh_pocl; run_plain busy_ref "$BG" exit 3
for trial in 1 2 3; do
    rm -rf "$CLSHIM_CACHE_DIR"; mkdir -p "$CLSHIM_CACHE_DIR"
    LOOPS=()
    for _ in 1 2 3 4 5 6 7 8; do (while :; do :; done) & LOOPS+=($!); done
    trap 'kill "${LOOPS[@]}" 2>/dev/null || true' EXIT
    fresh_pocl
    for t in busy1 busy2 busy3; do run_shim $t "$BG" exit 3; done
    kill "${LOOPS[@]}"; wait "${LOOPS[@]}" 2>/dev/null || true
    what="beside eight busy loops, trial $trial"
    for t in busy1 busy2 busy3; do same_output busy_ref $t "$what: $t" >/dev/null; done
    [ "$(count 'clshim: miss ' "$TMP/busy1.err")" = 3 ] || fail "$what: the first run did not miss 3 times"
    for t in busy2 busy3; do
        [ "$(count 'clshim: hit ' "$TMP/$t.err")" = 3 ] ||
            { cat "$TMP/busy1.err" "$TMP/$t.err" >&2; fail "$what: $t, started as the run before it ended, missed"; }
    done
    wait_captures "$what"
done
ok "three runs of three programs back to back beside eight busy loops, 3 times: 3 misses, 3 hits, 3 hits"

# 5c. The same without load, the queue held back on purpose: the first run
#     stays busy for 3 s after its programs' first use, longer than any
#     grace a clock could give the queued captures' claims (3x a compile,
#     a second at least); the run started as it exits waits and hits.
for trial in 1 2 3; do
    rm -rf "$CLSHIM_CACHE_DIR"; mkdir -p "$CLSHIM_CACHE_DIR"
    fresh_pocl
    run_shim held1 "$BG" busy 3 3
    run_shim held2 "$BG" exit 3
    what="the queue held back 3 s, trial $trial"
    [ "$(count 'clshim: miss ' "$TMP/held1.err")" = 3 ] || fail "$what: the first run did not miss 3 times"
    [ "$(count 'clshim: hit ' "$TMP/held2.err")" = 3 ] ||
        { cat "$TMP/held1.err" "$TMP/held2.err" >&2; fail "$what: the run started as the first exited missed"; }
    same_output busy_ref held2 "$what" >/dev/null
    wait_captures "$what"
done
ok "captures queued behind a busy application for 3 s keep their claims: the next run hits 3 of 3, 3 times"

# ---- 6. time and place after expansion ---------------------------------------------
printf '#define CAT(a,b) a##b\n__constant char t[] = CAT(__TI,ME__);\n%s\n' \
    '__kernel void k(__global float *y) { size_t i = get_global_id(0); y[i] = (float)(t[7] - 48) * (float)(i % 7); }' \
    >"$TMP/pasted.cl"
printf '%s\n' '__kernel void k(__global float *y) { size_t i = get_global_id(0); y[i] = (float)T * (float)(i % 7); }' \
    >"$TMP/topt.cl"
printf '__constant char f[] = __FILE__;\n%s\n' \
    '__kernel void k(__global float *y) { size_t i = get_global_id(0); y[i] = (float)f[1] * (float)(i % 7); }' \
    >"$TMP/file.cl"
rm -rf "$CLSHIM_CACHE_DIR"; mkdir -p "$CLSHIM_CACHE_DIR"
for case in pasted topt file; do
    opts=""
    [ $case = topt ] && opts="-DT=(__TIME__[7]-'0')"
    for run in 1 2; do
        fresh_pocl
        run_shim "t_${case}_$run" "$SF" "$TMP/$case.cl" --options "$opts"
        [ "$(cat "$TMP/t_${case}_$run.rc")" = 0 ] || fail "$case: the run failed"
        grep -q 'clshim: not caching program .*\(time macro\|__FILE__\)' "$TMP/t_${case}_$run.err" ||
            { cat "$TMP/t_${case}_$run.err" >&2; fail "$case, run $run: not said to be uncacheable"; }
        ! hit "t_${case}_$run" || fail "$case, run $run: a hit"
        wait_captures "$case"
    done
done
n=$("$TOOL" cache stats --json | python3 -c "import json,sys; print(json.load(sys.stdin)['uncacheable_time_macros'])")
[ "$n" -ge 6 ] || fail "uncacheable time macros counted $n times, expected 6"
ok "__TIME__ by token pasting and by a -D option, __FILE__ of the source: not cached, the reason said, counted"
finish
