#!/bin/bash
# The driver quirks table (cache/quirks.c): each entry's bug shown without
# clshim, and the app that meets its condition without triggering it plainly
# run under clshim (cold and warm) with the plain run's results.
source "$(dirname "$0")/lib.sh"
Q=$PROGS/driver_quirks

# QUIRK_LONG_KERNEL_NAME_CODEGEN: reading the binary aborts plainly ...
fresh_pocl; run_plain longbin "$Q" long-name-binaries
[ "$(cat "$TMP/longbin.rc")" != 0 ] || fail "long name: PoCL no longer aborts reading the binary; revisit the quirk"
ok "long name: the driver aborts when its binary is read (shown without clshim)"
# ... so clshim never reads it: the app works as plainly.
fresh_pocl; run_plain long-plain "$Q" long-name
fresh_pocl; CLSHIM_LOG=info run_shim long-cold "$Q" long-name
same_output long-plain long-cold "long name: cold run under clshim works as plainly"
grep -q "not caching program .*a kernel name of 270 characters" "$TMP/long-cold.err" || fail "long name: not logged"
fresh_pocl; run_shim long-warm "$Q" long-name
same_output long-plain long-warm "long name: warm run under clshim works as plainly"

# QUIRK_BINARY_SCRATCH: with little address space left, reading a binary
# segfaults plainly ...
fresh_pocl; run_plain scratch "$Q" binary-headroom
grep -q '^ran; reading the binary' "$TMP/scratch.out" && [ "$(cat "$TMP/scratch.rc")" != 0 ] ||
    fail "binary scratch: PoCL no longer fails reading a binary with 128 MiB left; revisit the quirk"
ok "binary scratch: the driver crashes reading a binary under a tight address-space limit (shown without clshim)"
# ... so under `ulimit -v` (and -n, -s) that the plain run survives, clshim
# reads none and the run ends as plainly: same output, same exit code.
MK=$PROGS/multikernel
LIMITS=("-v 800000" "-n 32" "-s 128")
# A sanitizer reserves terabytes of address space for its shadow: no
# program of a sanitized build runs under `ulimit -v` at all, plain or not.
[ -n "${CLSHIM_SANITIZED:-}" ] && LIMITS=("-n 32" "-s 128") &&
    echo "ulimit -v: not run in a $CLSHIM_SANITIZED build (its shadow memory needs the address space)"
for lim in "${LIMITS[@]}"; do
    tag=lim${lim// /}
    fresh_pocl; (ulimit $lim; run_plain "$tag-plain" "$MK")
    [ "$(cat "$TMP/$tag-plain.rc")" = 0 ] || fail "ulimit $lim: the plain run fails; pick another limit"
    for cp in 0 1; do
        fresh_pocl; (ulimit $lim; CLSHIM_CAPTURE_PROCESS=$cp CLSHIM_LOG=info run_shim "$tag-$cp" "$MK")
        same_output "$tag-plain" "$tag-$cp" "ulimit $lim (capture helper $cp): as plainly" >/dev/null
        [ "$(cat "$TMP/$tag-$cp.rc")" = 0 ] || fail "ulimit $lim (capture helper $cp): exit code $(cat "$TMP/$tag-$cp.rc")"
        "$CLSHIM_BUILD/clshim-tool" cache wait --timeout 120 >/dev/null 2>&1 || true
    done
done
if [ -z "${CLSHIM_SANITIZED:-}" ]; then
    grep -q 'not reading program binaries: .* MiB of address space left' "$TMP/lim-v800000-0.err" ||
        { cat "$TMP/lim-v800000-0.err" >&2; fail "ulimit -v: the binary read was not said to be skipped"; }
fi
ok "ulimit ${LIMITS[*]}: clshim's runs end as the plain ones (same output, exit code 0)"

# QUIRK_POCL_SOURCE_DIR: PoCL compiles the source from a temporary file in
# $POCL_CACHE_DIR, so a quoted #include of the main source finds a header
# there before the working directory and the -I directories.
SF=$PROGS/srcfile
mkdir -p "$TMP/sd-inc"
printf '#include "sd.h"\n__kernel void k(__global float *y) { size_t i = get_global_id(0); y[i] = V * (float)(i %% 7); }\n' \
    >"$TMP/sd.cl"
echo '#define V 5.0f' >"$TMP/sd-inc/sd.h"
sd_put() { mkdir -p "$POCL_CACHE_DIR"; echo "#define V $1" >"$POCL_CACHE_DIR/sd.h"; }
fresh_pocl; run_plain sd-plain5 "$SF" "$TMP/sd.cl" --options "-I $TMP/sd-inc"
fresh_pocl; sd_put 9.0f; run_plain sd-plain9 "$SF" "$TMP/sd.cl" --options "-I $TMP/sd-inc"
fresh_pocl; sd_put 7.0f; run_plain sd-plain7 "$SF" "$TMP/sd.cl" --options "-I $TMP/sd-inc"
[ "$(cat "$TMP/sd-plain9.rc")" = 0 ] && ! cmp -s "$TMP/sd-plain5.out" "$TMP/sd-plain9.out" ||
    fail "source dir: PoCL no longer reads a header from its cache directory; revisit the quirk"
ok "source dir: a header in \$POCL_CACHE_DIR is the one PoCL includes (shown without clshim)"
SD_SAVED_CACHE=$CLSHIM_CACHE_DIR
export CLSHIM_CACHE_DIR=$TMP/sd-cache
# cold with the header there (the honest key must name it), then warm
for run in cold warm; do
    fresh_pocl; sd_put 9.0f; CLSHIM_LOG=info run_shim "sd9-$run" "$SF" "$TMP/sd.cl" --options "-I $TMP/sd-inc"
    same_output sd-plain9 "sd9-$run" "source dir: $run run with the header there works as plainly"
done
[ "$(count 'hit ' "$TMP/sd9-warm.err")" -ge 1 ] || fail "source dir: warm run did not hit"
# the entry stored with 9.0f is not served for another file there, nor without one
fresh_pocl; sd_put 7.0f; CLSHIM_LOG=info run_shim sd7 "$SF" "$TMP/sd.cl" --options "-I $TMP/sd-inc"
same_output sd-plain7 sd7 "source dir: another header there, the plain result"
[ "$(count 'hit ' "$TMP/sd7.err")" = 0 ] || fail "source dir: served the entry stored for another header"
for run in cold warm; do
    fresh_pocl; CLSHIM_LOG=info run_shim "sd5-$run" "$SF" "$TMP/sd.cl" --options "-I $TMP/sd-inc"
    same_output sd-plain5 "sd5-$run" "source dir: $run run without a header there works as plainly"
done
[ "$(count 'hit ' "$TMP/sd5-cold.err")" = 0 ] || fail "source dir: served an entry stored with a header there"
[ "$(count 'hit ' "$TMP/sd5-warm.err")" -ge 1 ] || fail "source dir: warm run without a header there did not hit"
ok "source dir: entries are keyed by what the directory holds"
export CLSHIM_CACHE_DIR=$SD_SAVED_CACHE

# QUIRK_STAND_ASIDE_UNCACHED: with POCL_KERNEL_CACHE=0, programs made from
# one binary share program-scope variables, and threads making them abort.
export POCL_KERNEL_CACHE=0
fresh_pocl; run_plain globals "$Q" binary-globals
grep -q "program 2 from the binary: counter 7" "$TMP/globals.out" ||
    fail "binary globals: PoCL no longer shares them; revisit the quirk ($(cat "$TMP/globals.out"))"
ok "binary globals: two programs from one binary share a variable (shown without clshim)"
aborted=0
for _ in 1 2 3 4 5; do
    fresh_pocl; run_plain race "$Q" uncached-binary-race
    [ "$(cat "$TMP/race.rc")" != 0 ] && { aborted=1; break; }
done
[ "$aborted" = 1 ] || fail "binary race: PoCL did not abort in 5 runs; revisit the quirk"
grep -q "Can't get stat()" "$TMP/race.err" || fail "binary race: aborted for another reason: $(tail -2 "$TMP/race.err")"
ok "binary race: concurrent programs from binaries abort (shown without clshim)"
# An app building from source on threads, run under clshim: it stands aside.
fresh_pocl; run_plain src-plain "$Q" threads-from-source
for run in cold warm; do
    fresh_pocl; CLSHIM_LOG=info run_shim "src-$run" "$Q" threads-from-source
    same_output src-plain "src-$run" "uncached PoCL: $run run from source on threads works as plainly"
    [ "$(count 'hit ' "$TMP/src-$run.err")" = 0 ] || fail "uncached PoCL: clshim served a binary"
done
grep -q "POCL_KERNEL_CACHE=0 .*clshim does not cache" "$TMP/src-cold.err" || fail "uncached PoCL: standing aside not logged"
ok "uncached PoCL: clshim stands aside"
finish
