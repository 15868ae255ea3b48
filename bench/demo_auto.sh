#!/bin/bash
# demo_auto.sh BUILD [ROUNDS] [N] [ITERATIONS] [UNTIMED] — the bundled demo
# (examples/pipeline) under automatic fusion against its shipped plan
# (issue 33 item 7: auto, with no plan, must come within 1.1x of the plan
# per iteration). Three ways, interleaved (plain, plan, auto, plain, ...;
# ROUNDS processes each, default 5), every process with fresh caches: the
# shim with fusion off, CLSHIM_FUSION_PLAN=examples/pipeline.plan, and
# CLSHIM_FUSION=auto. Each runs ITERATIONS iterations (default 60) of N
# floats (default 1 Mi) and times those after the first UNTIMED (default
# 20: automatic fusion learns the chain, tries the five kernels, then the
# window, and builds it, in the first few). Prints the median ms per
# iteration each way, plan/auto (>= 0.91 is within 1.1x) and plain/auto,
# what auto fused, and whether every result was the plain one.
set -eu
BUILD=$(cd "${1:-build}" && pwd)
ROUNDS=${2:-5} N=${3:-1048576} ITERATIONS=${4:-60} UNTIMED=${5:-20}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/clshim-demoauto.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for _ in $(seq "$ROUNDS"); do
    for way in plain plan auto; do
        case $way in
        plain) set -- CLSHIM_FUSION=off ;;
        plan) set -- CLSHIM_FUSION_PLAN="$ROOT/examples/pipeline.plan" ;;
        auto) set -- CLSHIM_FUSION=auto ;;
        esac
        run=$(mktemp -d "$TMP/run.XXXXXX") # no capture helper: nothing writes there after the process
        env "$@" CLSHIM_LOG=info CLSHIM_CAPTURE_PROCESS=0 CLSHIM_CACHE_DIR="$run/c" POCL_CACHE_DIR="$run/p" \
            LD_PRELOAD="$BUILD/libclshim.so" "$BUILD/examples/pipeline" "$N" "$ITERATIONS" "$UNTIMED" \
            >>"$TMP/$way.out" 2>"$TMP/err"
        rm -rf "$run"
        sed -n 's/.* \([0-9.]*\) ms per iteration after .*/\1/p' "$TMP/err" >>"$TMP/$way.ms"
        [ "$way" = auto ] && grep -o 'fused [a-z0-9+]* into one launch' "$TMP/err" | sort -u >>"$TMP/fused"
    done
done
p=$(median <"$TMP/plain.ms") l=$(median <"$TMP/plan.ms") a=$(median <"$TMP/auto.ms")
echo "| N | plain (ms/iteration) | plan | auto | plan/auto | plain/auto |"
echo "|---|---|---|---|---|---|"
awk -v n="$N" -v p="$p" -v l="$l" -v a="$a" 'BEGIN { printf "| %d | %.3f | %.3f | %.3f | %.2f | %.2f |\n", n, p, l, a, l / a, p / a }'
echo "auto fused: $(sort -u "$TMP/fused" | sed 's/ into one launch//; s/^fused //' | tr '\n' ' ')"
[ "$(sort -u "$TMP"/*.out | wc -l)" = 1 ] && echo "results: identical" || echo "results: DIFFER"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
