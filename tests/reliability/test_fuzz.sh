#!/bin/bash
# Bad input, fuzzed: every libFuzzer target in tests/fuzz/ (entry decoding,
# key material from source, fusion plans, configuration, the SPIR-V scan and
# the translator path). First every saved input is replayed as a regression
# test (tests/fuzz/corpus/<target>/ seeds and tests/fuzz/regress/<target>/,
# the crashes found so far); then each target fuzzes for a while from its
# seeds: 6 s each in `make check`, 5 minutes each with CLSHIM_LONG=1. The
# translator target runs a bounded number of inputs (each forks the
# translator). A crash, leak, sanitizer report or failed property fails the
# test; the input is kept under $TEST_TMP and named in the output: copy it
# to tests/fuzz/regress/<target>/ with the fix.
source "$CLSHIM_ROOT/tests/integration/lib.sh"

FZ_BUILD=${CLSHIM_FUZZ_BUILD:-$CLSHIM_BUILD-fuzz}
# The fuzz build is separate (clang-15, -fsanitize=fuzzer); bring it up to
# date (a no-op after `make check`, which builds it).
make -s -C "$CLSHIM_ROOT" BUILD="$CLSHIM_BUILD" FUZZ_BUILD="$FZ_BUILD" fuzz >"$TMP/make.log" 2>&1 ||
    { tail -20 "$TMP/make.log" >&2; fail "cannot build the fuzz targets"; }
FZ=$FZ_BUILD/fuzz
SECS=${CLSHIM_FUZZ_SECONDS:-6}
TRANSLATE_RUNS=${CLSHIM_FUZZ_TRANSLATE_RUNS:-150}
if [ "${CLSHIM_LONG:-0}" = 1 ]; then SECS=${CLSHIM_FUZZ_SECONDS:-300}; TRANSLATE_RUNS=${CLSHIM_FUZZ_TRANSLATE_RUNS:-3000}; fi
export CLSHIM_LLVM_LIB=$FZ_BUILD/libclshim-llvm.so # built alike (clang, ASan)
# The translator child's bounds (memory: the 2G default): a module it loops
# on is rejected well before libFuzzer's -timeout below calls it a hang.
export CLSHIM_TRANSLATE_TIMEOUT=10
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1}
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
total=0
targets=0

for f in "$FZ"/fuzz_*; do
    t=$(basename "$f")
    seeds=$CLSHIM_ROOT/tests/fuzz/corpus/$t
    regress=$CLSHIM_ROOT/tests/fuzz/regress/$t
    [ -d "$seeds" ] && [ -n "$(ls -A "$seeds")" ] || fail "$t: no seed corpus in $seeds"
    targets=$((targets + 1))
    opts=()
    # The translator target loads LLVM (which keeps allocations until exit).
    [ "$t" = fuzz_spirv_translate ] && opts+=(-detect_leaks=0)

    # 1. Every saved input, once.
    inputs=("$seeds"/*)
    [ -d "$regress" ] && [ -n "$(ls -A "$regress")" ] && inputs+=("$regress"/*)
    "$f" "${opts[@]}" "${inputs[@]}" >"$TMP/$t.replay.log" 2>&1 ||
        { tail -30 "$TMP/$t.replay.log" >&2; fail "$t: a saved input fails"; }
    ok "$t: ${#inputs[@]} saved inputs replayed"

    # 2. Fuzz from the seeds (new inputs go to a private corpus).
    mkdir -p "$TMP/corpus/$t" "$TMP/artifacts/$t"
    if [ "$t" = fuzz_spirv_translate ]; then limit=(-runs="$TRANSLATE_RUNS"); else limit=(-max_total_time="$SECS"); fi
    set +e
    "$f" "${opts[@]}" "${limit[@]}" -timeout=30 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
        -artifact_prefix="$TMP/artifacts/$t/" "$TMP/corpus/$t" "$seeds" >"$TMP/$t.log" 2>&1
    rc=$?
    set -e
    if [ $rc -ne 0 ]; then
        tail -40 "$TMP/$t.log" >&2
        fail "$t: fuzzing found a failure; input kept in $TMP/artifacts/$t/ ($(ls "$TMP/artifacts/$t" | head -3 | tr '\n' ' '))"
    fi
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$TMP/$t.log" | tail -1)
    [ -n "$runs" ] && [ "$runs" -gt 0 ] || { tail -20 "$TMP/$t.log" >&2; fail "$t: no executions reported"; }
    cov=$(grep -o 'cov: [0-9]*' "$TMP/$t.log" | tail -1)
    total=$((total + runs))
    ok "$t: $runs executions, no failure ($cov)"
done
[ "$targets" -ge 6 ] || fail "expected at least 6 fuzz targets, found $targets"
echo "fuzz executions in total: $total"
finish
