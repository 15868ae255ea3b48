#!/bin/bash
# Unmodified programs behave exactly as without clshim: same output, same
# error codes, same exit status — with the shim enabled, disabled, and with
# bad configuration values.
source "$(dirname "$0")/lib.sh"

for args in "" "--error" "--threads 4" "--contexts 2 --threads 2" "--scale 5 --iterations 2"; do
    fresh_pocl; run_plain plain "$PROGS/multikernel" $args
    fresh_pocl; run_shim shim "$PROGS/multikernel" $args
    same_output plain shim "multikernel $args: plain vs shim (cold)"
    fresh_pocl; run_shim shim2 "$PROGS/multikernel" $args
    same_output plain shim2 "multikernel $args: plain vs shim (warm)"
    CLSHIM_DISABLE=1 run_shim off "$PROGS/multikernel" $args
    same_output plain off "multikernel $args: plain vs CLSHIM_DISABLE=1"
done

run_plain plain "$PROGS/badcalls"
run_shim shim "$PROGS/badcalls"
same_output plain shim "invalid objects and arguments: same error codes"
run_shim shim2 "$PROGS/badcalls"
same_output plain shim2 "invalid objects and arguments, warm cache: same error codes"

# Bad configuration: reported once, naming the knob; the default is used.
CLSHIM_LOG=loud CLSHIM_CACHE_MAX_SIZE=12Q run_shim badcfg "$PROGS/multikernel"
run_plain plain "$PROGS/multikernel"
same_output plain badcfg "bad configuration values: app unaffected"
[ "$(count 'CLSHIM_LOG=loud is not valid' "$TMP/badcfg.err")" = 1 ] || fail "bad CLSHIM_LOG not reported once"
[ "$(count 'CLSHIM_CACHE_MAX_SIZE=12Q is not valid' "$TMP/badcfg.err")" = 1 ] || fail "bad size not reported once"
ok "bad values reported once each, with the knob's name"

# Loading the shim into a process that never calls OpenCL does nothing.
LD_PRELOAD=$SHIM CLSHIM_LOG=debug /bin/true 2>"$TMP/true.err"
[ ! -s "$TMP/true.err" ] || fail "the shim printed something in a process without OpenCL"
ok "silent in processes that never call OpenCL"
# At load the shim reads its configuration (the environment and clshim.conf,
# README.md: "Using it") and does nothing else: no other file, no thread, no
# socket until the first OpenCL call.
if command -v strace >/dev/null; then
    strace -f -qq -o "$TMP/true.strace" -e trace=openat,open,clone,clone3,socket -E LD_PRELOAD="$SHIM" /bin/true
    # A sanitizer's runtime (make check-sanitize) reads /proc/self/* at
    # start, in every process it is loaded into: its files, not the shim's.
    runtime='^$'
    [ -n "${CLSHIM_SANITIZED:-}" ] && runtime='^[0-9]+ +(open|openat)\(.*"/proc/self/[a-z]*"'
    grep -vE '^[0-9]+ +(open|openat)\(.*("[^"]*\.so[.0-9]*"|"/etc/ld\.so\.cache"|"/usr/lib/locale/[^"]*"|/clshim/clshim\.conf")' \
        "$TMP/true.strace" | grep -vE "$runtime" | grep -E '^[0-9]+ +(open|openat|clone|clone3|socket)\(' >"$TMP/true.extra" || true
    [ ! -s "$TMP/true.extra" ] || { cat "$TMP/true.extra" >&2; fail "at load the shim did more than read its configuration"; }
    grep -q 'clshim/clshim\.conf' "$TMP/true.strace" || fail "at load the shim did not look for clshim.conf"
    ok "at load: the configuration read, no other file, no thread, no socket"
fi

# clinfo: identical output, but for the cl_clshim_kernel_fusion clshim
# lists (docs/fusion.md).
if command -v clinfo >/dev/null; then
    source "$CLSHIM_ROOT/tests/compat/lib.sh"
    run_plain plain clinfo
    run_shim shim clinfo
    compat_clinfo_without_ext "$TMP/shim.out" "$TMP/shimnoext.out" || fail "clinfo: cl_clshim_kernel_fusion not listed"
    cp "$TMP/shim.rc" "$TMP/shimnoext.rc"
    same_output plain shimnoext "clinfo: identical output but for cl_clshim_kernel_fusion"
fi
finish
