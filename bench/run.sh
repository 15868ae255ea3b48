#!/bin/bash
# run.sh — clshim's benchmark suite: `make bench` (and `make bench QUICK=1`).
#
#   bench/run.sh BUILD [--quick] [--no-docs] [--with-tuner]
#   bench/run.sh DIR --gpu       (on the GPU machine; DIR from bench/gpu-pack.sh)
#
# Builds nothing (make bench built BUILD first). Runs every benchmark; each
# appends its figures to one CSV (BENCH_CSV: bench,case,variant,metric,unit,
# median,min,max,n), every figure a median of runs interleaved with the
# runs it is compared with (A B A B ...), min and max beside it:
#   bench_ttfr --program small|mixed|large  time to first result: cold, PoCL's
#                                  cache warm, clshim cold, clshim warm, the limit
#   bench_ttfr --ci N              the CI scenario: N processes on an empty shared
#                                  cache, then N more on what they left
#   bench_tuner                    (--with-tuner only: ~6 minutes alone) a tuner's
#                                  100 variants built and run once each:
#                                  whole-process time cold, clshim cold, clshim warm
#   clients.sh                     real clients (PyOpenCL, the demo app) cold and warm
#   short_runs.sh                  automatic fusion at 30, 300, 3,000 chains: plain,
#                                  auto (empty and warm cache), the plan
#   warm_ttfr.sh                   time to first result after a driver change (PoCL
#                                  pthread -> basic), without and with `cache warm`
#   bench_il                       SPIR-V time to first result
#   bench_passthrough              cost per intercepted call and at load
#   bench_fusion                   fusion speed-up vs N for K = 2, 4, 8 (stored
#                                  intermediates) against a hand-written kernel
#   bench_store --entries N        the store at 10^3..10^5 entries
#   bench_remote                   (full runs only) time to first result with a
#                                  remote (Redis) hit vs a local hit vs cold
#   elwise_join.sh                 (--gpu only) three elementwise kernels, each
#                                  its own program, plain vs CLSHIM_FUSION=auto
# Then bench/report.py writes BUILD/bench-report/{results.csv,meta.txt,
# report.md,*.png}; a full run also rewrites the generated part of
# docs/benchmarks.md and docs/img/bench-*.png and keeps the CSV and meta.txt
# in docs/measurements/make-bench/ (--no-docs: none of this). --quick runs
# fewer repetitions and sizes (under 2 minutes on 2 quiet cores): a check
# that everything runs and gives right results, not figures to quote.
# --gpu runs the benchmarks that mean something on NVIDIA's driver (time to
# first result, the CI scenario, the demo app, elwise_join.sh) and writes only the CSV and
# meta.txt: the GPU machine has no matplotlib, so the report is made back
# here (bench/report.py ... --section gpu; docs/benchmarks.md, "The GPU
# section", says how).
# Exits non-zero when a benchmark failed to run or found wrong results, never
# because a target was missed. Private temp directories keep the user's
# caches untouched.
set -u

BUILD=${1:-}
if [ -z "$BUILD" ] || [ ! -d "$BUILD" ]; then
    echo "usage: bench/run.sh BUILD [--quick] [--no-docs]" >&2
    exit 2
fi
shift
QUICK=
DOCS=1
TUNER=0
GPU=0
for a in "$@"; do
    case $a in
    --quick) QUICK=--quick; DOCS=0 ;;
    --no-docs) DOCS=0 ;;
    --with-tuner) TUNER=1 ;;
    --gpu) GPU=1; DOCS=0 ;;
    *) echo "bench/run.sh: unknown option $a" >&2; exit 2 ;;
    esac
done
BUILD=$(cd "$BUILD" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$BUILD/bench-report
rm -rf "$OUT" && mkdir -p "$OUT"
export BENCH_CSV=$OUT/results.csv
: >"$BENCH_CSV"

# Nothing here may read or write the user's caches.
TMP=$(mktemp -d "${TMPDIR:-/tmp}/clshim-bench.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export TMPDIR=$TMP XDG_CACHE_HOME=$TMP/xdg-cache XDG_CONFIG_HOME=$TMP/xdg-config
export POCL_CACHE_DIR=$TMP/pocl CLSHIM_CACHE_DIR=$TMP/clshim
mkdir -p "$XDG_CACHE_HOME" "$XDG_CONFIG_HOME" "$POCL_CACHE_DIR"

platform=$(clinfo -l 2>/dev/null | sed -n 's/^Platform #0: //p' | head -1)
device=$(clinfo -l 2>/dev/null | sed -n 's/^ *`-- Device #0: //p' | head -1)
if [ "$GPU" = 1 ]; then
    platform="NVIDIA CUDA (OpenCL)"
    device=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/, /, driver /')
fi
{
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "command: $([ "$GPU" = 1 ] && echo 'bench/run.sh DIR --gpu' || echo "make bench${QUICK:+ QUICK=1}")"
    echo "quick: $([ -n "$QUICK" ] && echo 1 || echo 0)"
    echo "machine: $(nproc) cores ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), $(free -g | awk '/^Mem:/ { print $2 }') GiB"
    echo "driver: $platform, $device"
    rev=$(cat "$BUILD/REVISION" 2>/dev/null || git -C "$ROOT" describe --always --dirty 2>/dev/null || echo '?')
    if [ "$GPU" = 1 ]; then echo "versions: clshim $rev"
    else echo "versions: PoCL $(dpkg-query -W -f='${Version}' pocl-opencl-icd 2>/dev/null), LLVM $(llvm-config-15 --version 2>/dev/null), clshim $rev"; fi
    echo "load_before: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$OUT/meta.txt"
echo "clshim benchmarks: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $platform${QUICK:+, quick}"
echo

failed=()
ran=0
run() { # name command...
    local name=$1
    shift
    local t0=$SECONDS
    "$@"
    local rc=$?
    ran=$((ran + 1))
    echo "  ($name: $((SECONDS - t0)) s)"
    echo
    [ $rc -eq 0 ] || failed+=("$name (exit $rc)")
}
bench() { # binary args...
    local bin=$BUILD/bench/$1
    shift
    if [ ! -x "$bin" ]; then
        echo "bench/run.sh: $bin is missing (run make BUILD=... all first)" >&2
        failed+=("$(basename "$bin") (missing)")
        return
    fi
    run "$(basename "$bin") $*" "$bin" "$@"
}

SHIM=(--shim "$BUILD/libclshim.so")
if [ "$GPU" = 1 ]; then
    for p in small mixed large; do bench bench_ttfr "${SHIM[@]}" --program $p --reps 7; done
    bench bench_ttfr "${SHIM[@]}" --program mixed --ci 8 --reps 5
    run clients "$ROOT/bench/clients.sh" "$BUILD" --quick
    run elwise_join "$ROOT/bench/elwise_join.sh" "$BUILD" --gpu
    run short_runs "$ROOT/bench/short_runs.sh" "$BUILD" --reps 5
elif [ -n "$QUICK" ]; then
    bench bench_ttfr "${SHIM[@]}" --program small --reps 2
    bench bench_ttfr "${SHIM[@]}" --program mixed --reps 3
    bench bench_ttfr "${SHIM[@]}" --program small --ci 4 --reps 1
    run clients "$ROOT/bench/clients.sh" "$BUILD" --quick
    run warm_ttfr "$ROOT/bench/warm_ttfr.sh" "$BUILD" --quick
    run short_runs "$ROOT/bench/short_runs.sh" "$BUILD" --quick
    bench bench_il "${SHIM[@]}" --quick
    bench bench_passthrough "${SHIM[@]}" --quick
    bench bench_fusion --k 4 --n 65536
    bench bench_fusion --k 4 --n 1048576 --mode latency
    bench bench_store --quick --entries 1000 --dir "$TMP"
else
    for p in small mixed; do bench bench_ttfr "${SHIM[@]}" --program $p --reps 7; done
    bench bench_ttfr "${SHIM[@]}" --program large --reps 5
    bench bench_ttfr "${SHIM[@]}" --program mixed --ci 8 --reps 5
    [ "$TUNER" = 1 ] && bench bench_tuner "${SHIM[@]}" --reps 5 # ~6 min alone: opt-in
    run clients "$ROOT/bench/clients.sh" "$BUILD"
    run warm_ttfr "$ROOT/bench/warm_ttfr.sh" "$BUILD"
    run short_runs "$ROOT/bench/short_runs.sh" "$BUILD" --reps 5
    bench bench_il "${SHIM[@]}"
    bench bench_passthrough "${SHIM[@]}"
    bench bench_fusion
    bench bench_fusion --shape grid --k 4 --mode latency
    for n in 1000 10000 100000; do bench bench_store --entries $n --dir "$TMP"; done
    bench bench_remote "${SHIM[@]}"
fi
echo "load_after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/meta.txt"

docs=()
[ "$DOCS" = 1 ] && docs=(--docs "$ROOT/docs/benchmarks.md")
[ "$GPU" = 1 ] || /usr/bin/python3 "$ROOT/bench/report.py" "$BENCH_CSV" "$OUT/meta.txt" "$OUT" "${docs[@]}" ||
    failed+=("report.py")
# The published figures' raw CSV stays beside them, so the report can be made again
# (bench/report.py docs/measurements/make-bench/results.csv ... --docs docs/benchmarks.md).
[ "$DOCS" = 1 ] && mkdir -p "$ROOT/docs/measurements/make-bench" &&
    cp "$BENCH_CSV" "$OUT/meta.txt" "$ROOT/docs/measurements/make-bench/"

if [ ${#failed[@]} -gt 0 ]; then
    echo "bench/run.sh: ${#failed[@]} benchmark(s) failed: ${failed[*]}"
    exit 1
fi
echo "bench/run.sh: $ran benchmarks ran; $([ "$GPU" = 1 ] && echo "CSV in $OUT" || echo "report in $OUT/report.md")"
