#!/bin/bash
# run-all: alone (weighs a load's time against a compile's)
# A hit never costs more than the compile it replaces (issue 30): a binary
# whose first hit takes more CPU time than its compile did is recorded as
# such, `clshim cache show` says so, and later runs let the driver compile
# it (no hit, the plain run's results). The slow load is made deterministic
# by clfault (CLFAULT_SLOW_LOAD_MS: clCreateProgramWithBinary burns CPU).
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info
SF=$PROGS/srcfile
TOOL=$CLSHIM_BUILD/clshim-tool
FAULT=$TMP/libclfault.so
cc -shared -fPIC -O1 -Wall -Werror -o "$FAULT" "$CLSHIM_ROOT/tests/reliability/faultlib/clfault.c" || fail "cannot build clfault"
echo '__kernel void k(__global float *y) { size_t i = get_global_id(0); y[i] = 3.0f * (float)(i % 5); }' >"$TMP/k.cl"
fresh_pocl; run_plain ref "$SF" "$TMP/k.cl"
[ "$(cat "$TMP/ref.rc")" = 0 ] || fail "plain run"

# 1. Cold, then a normal warm run: a hit, cheaper than the compile.
fresh_pocl; run_shim cold "$SF" "$TMP/k.cl"
same_output ref cold "cold run: plain results"
fresh_pocl; run_shim warm "$SF" "$TMP/k.cl"
same_output ref warm "warm run: plain results"
grep -q 'clshim: hit ' "$TMP/warm.err" || fail "warm run: no hit"
grep -q 'more than its compile' "$TMP/warm.err" && fail "a normal hit was taken for a slow one"
key=$(sed -n 's/.*clshim: hit \([0-9a-f]*\) .*/\1/p' "$TMP/warm.err" | head -1)
compile_ms=$(sed -n 's/.* instead of \([0-9.]*\) ms of compile CPU time/\1/p' "$TMP/warm.err" | head -1)
ok "a hit that loads faster than its compile (${compile_ms} ms) stays a hit"

# 2. A load that costs more CPU than the compile: recorded at this hit.
slow_ms=$(python3 -c "print(int(float('$compile_ms') * 2) + 200)")
fresh_pocl; LD_PRELOAD="$SHIM $FAULT" CLFAULT_SLOW_LOAD_MS=$slow_ms run_plain slow "$SF" "$TMP/k.cl"
same_output ref slow "slow-loading hit: plain results"
grep -q "loaded in .* ms of CPU time, more than its compile" "$TMP/slow.err" ||
    { cat "$TMP/slow.err" >&2; fail "the slow hit was not recorded"; }
"$TOOL" cache show "$key" >"$TMP/show.out" || fail "cache show $key"
grep -q "^Load cost .*more than its compile .*the driver compiles it" "$TMP/show.out" ||
    { cat "$TMP/show.out" >&2; fail "cache show does not state the load cost"; }
ok "a hit slower than its compile is recorded, and cache show says so"

# 3. From then on the driver compiles it: no hit, no store, plain results.
fresh_pocl; run_shim after "$SF" "$TMP/k.cl"
same_output ref after "after the slow hit: plain results"
grep -q "compiling $key: loading it cost" "$TMP/after.err" || { cat "$TMP/after.err" >&2; fail "no line says why it compiles"; }
[ "$(count 'clshim: hit ' "$TMP/after.err")" = 0 ] || fail "the slow entry was still loaded"
grep -q "summary: .*1 compiled as loading is slower" "$TMP/after.err" || fail "the summary does not count it"
ok "later runs compile it, and say why"
finish
