#!/bin/bash
# The fusion extension as an application probes it (issue 36):
# cl_clshim_kernel_fusion in CL_PLATFORM_EXTENSIONS and CL_DEVICE_EXTENSIONS
# under clshim only (absent without it and under CLSHIM_DISABLE), with the
# size protocol kept (the program checks sizes and the one-byte-short
# error); clQueryFusionCLSHIM through Start, an early end, Complete and
# Cancel; one warning per queue for Complete/Cancel without Start.
source "$(dirname "$0")/lib.sh"
P=$PROGS/fusion_query
expect() { grep -qx -- "$2" "$TMP/$1.out" || { cat "$TMP/$1.out" "$TMP/$1.err" >&2; fail "$1: no line '$2'"; }; }

run_plain plain "$P"
[ "$(cat "$TMP/plain.rc")" = 0 ] || { cat "$TMP/plain.err" >&2; fail "plain: a query broke the protocol"; }
expect plain "platform: cl_clshim_kernel_fusion absent"
expect plain "device: cl_clshim_kernel_fusion absent"
expect plain "extension API: absent"
CLSHIM_DISABLE=1 run_shim disabled "$P"
same_output plain disabled "CLSHIM_DISABLE=1: the plain answers, no extension"

run_shim shim "$P"
[ "$(cat "$TMP/shim.rc")" = 0 ] || { cat "$TMP/shim.err" >&2; fail "shim: a query broke the protocol"; }
expect shim "platform: cl_clshim_kernel_fusion listed"
expect shim "device: cl_clshim_kernel_fusion listed"
for what in platform device; do
    expect shim "$(grep "^$what: one byte short" "$TMP/plain.out")"
done
ok "cl_clshim_kernel_fusion listed under clshim; sizes and a short buffer answered as the driver does"

expect shim "query a NULL queue: -36"
expect shim "query into NULL: -30"
expect shim "before Start: in fusion mode 0"
expect shim "after Start: in fusion mode 1"
expect shim "Start again: -59"
expect shim "after a second Start: in fusion mode 1"
expect shim "after clFinish, nothing held: in fusion mode 1"
expect shim "after clFinish, a kernel held: in fusion mode 0"
expect shim "the held kernel ran: 2"
expect shim "after Complete: in fusion mode 0"
expect shim "after Start, Cancel: in fusion mode 0"
expect shim "out-of-order queue after Start: in fusion mode 0"
ok "clQueryFusionCLSHIM follows fusion mode"

warn='^clshim: clCompleteFusionCLSHIM on a queue not in fusion mode\|^clshim: clCancelFusionCLSHIM on a queue not in fusion mode'
[ "$(grep -c "$warn" "$TMP/shim.err")" = 2 ] || { cat "$TMP/shim.err" >&2; fail "not one warning per queue"; }
[ "$(count '^clshim: clCancelFusionCLSHIM on a queue not in fusion mode (no clStartFusionCLSHIM before it)' \
    "$TMP/shim.err")" = 1 ] || fail "the in-order queue's first call without Start was not the one reported"
ok "Complete or Cancel without Start: one warning line per queue"
finish
