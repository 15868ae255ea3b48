#!/bin/bash
# warm_ttfr.sh — time to first result after a driver change, with and
# without `clshim cache warm` (issue 46).
#
#   bench/warm_ttfr.sh BUILD [--quick] [--program small|mixed|large]
#
# The program is bench_ttfr's (default mixed: fifteen kernels), its span as
# bench_ttfr measures it (create + build + kernels + first run + clFinish,
# inside the process). A driver change is PoCL's pthread device giving way
# to its basic device (another key identity, as after an upgrade): a clshim
# cache filled by one run on pthread is copied afresh for each run, and
# each rep runs, round-robin, every run with an empty PoCL cache:
#   plain       no shim, on basic: the driver compiles;
#   no-warm     LD_PRELOAD, the pthread cache: every key misses, compile;
#   warm        LD_PRELOAD, the pthread cache after `clshim cache warm` for
#               basic (its own time is the row warm-cmd, wall): a hit, of a
#               binary without the code PoCL generates at a kernel's first
#               enqueue (no kernel ran when warm built it), so that run
#               generates it and has the entry captured again;
#   warm-next   the run after it on the same cache (the capture stored):
#               what every later run costs.
# Every run's checksum must equal the plain run's; a warm run must hit and
# not miss, a no-warm run miss. Appends rows to BENCH_CSV when set.
set -euo pipefail
BUILD=$(cd "${1:?usage: bench/warm_ttfr.sh BUILD [--quick] [--program P]}" && pwd)
shift
REPS=5
PROGRAM=mixed
while [ $# -gt 0 ]; do
    case $1 in
    --quick) REPS=2 ;;
    --program) PROGRAM=${2:?--program needs a name}; shift ;;
    *) echo "warm_ttfr.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
TTFR=$BUILD/bench/bench_ttfr
CLSHIM=$BUILD/clshim
SHIM=$BUILD/libclshim.so
R=$(mktemp -d "${TMPDIR:-/tmp}/clshim-warm-ttfr.XXXXXX")
trap 'rm -rf "$R"' EXIT
export XDG_CACHE_HOME=$R/xdg HOME=$R/home
mkdir -p "$XDG_CACHE_HOME" "$HOME"
fresh() { mktemp -d "$R/pocl.XXXXXX"; } # a PoCL cache never used before
# child TAG DEVICE [ENV...]: one run of the program; its ttfr in ms on stdout.
child() {
    local tag=$1 dev=$2; shift 2
    sync
    env POCL_DEVICES="$dev" POCL_CACHE_DIR="$(fresh)" "$@" "$TTFR" --child source --file "$R/unused" \
        --program "$PROGRAM" >"$R/$tag.out" 2>"$R/$tag.err" || {
        echo "warm_ttfr.sh: the $tag run failed: $(tail -3 "$R/$tag.err")" >&2; return 1; }
    sed -n 's/^result ttfr_us=\([0-9.]*\) .*checksum=\([0-9a-f]*\).*/\1 \2/p' "$R/$tag.out"
}
summary() { sed -n 's/^clshim: summary: \([0-9]*\) hits.*, \([0-9]*\) misses.*/\1 \2/p' "$R/$1.err"; }

# The cache a pthread run leaves (its capture stored: cache wait).
read -r _ want <<<"$(child ref basic)"
child prime pthread LD_PRELOAD="$SHIM" CLSHIM_CACHE_DIR="$R/pthread-cache" >/dev/null
CLSHIM_CACHE_DIR=$R/pthread-cache "$CLSHIM" cache wait >/dev/null 2>&1

declare -A vals=()
failed=0
for ((i = 0; i < REPS; i++)); do
    for way in plain no-warm warm; do
        c=$R/cache-$way-$i
        env=()
        if [ "$way" != plain ]; then
            cp -a "$R/pthread-cache" "$c"
            env=(LD_PRELOAD="$SHIM" CLSHIM_CACHE_DIR="$c" CLSHIM_STATS=1)
        fi
        if [ "$way" = warm ]; then
            t0=$(date +%s%N)
            CLSHIM_CACHE_DIR=$c POCL_DEVICES=basic POCL_CACHE_DIR=$(fresh) "$CLSHIM" cache warm 2>"$R/warm-$i.err" ||
                { echo "warm_ttfr.sh: cache warm failed: $(cat "$R/warm-$i.err")" >&2; failed=1; }
            vals[warm-cmd]="${vals[warm-cmd]:-} $((($(date +%s%N) - t0) / 1000))"
        fi
        read -r us sum <<<"$(child "$way-$i" basic "${env[@]}")" || { failed=1; continue; }
        if [ "$way" = warm ]; then
            CLSHIM_CACHE_DIR=$c "$CLSHIM" cache wait >/dev/null 2>&1 || { echo "warm_ttfr.sh: cache wait failed" >&2; failed=1; }
            read -r next nsum <<<"$(child "warm-next-$i" basic "${env[@]}")" || { failed=1; continue; }
            [ "$nsum" = "$want" ] || { echo "warm_ttfr.sh: warm-next run $i: checksum $nsum" >&2; failed=1; }
            vals[warm-next]="${vals[warm-next]:-} $next"
        fi
        [ "$sum" = "$want" ] || { echo "warm_ttfr.sh: $way run $i: checksum $sum, plain $want" >&2; failed=1; }
        vals[$way]="${vals[$way]:-} $us"
        if [ "$way" != plain ]; then
            read -r hits misses <<<"$(summary "$way-$i")"
            if [ "$way" = warm ] && { [ "${hits:-0}" -lt 1 ] || [ "${misses:-1}" != 0 ]; }; then
                echo "warm_ttfr.sh: warm run $i: ${hits:-?} hits, ${misses:-?} misses" >&2; failed=1
            elif [ "$way" = no-warm ] && [ "${misses:-0}" -lt 1 ]; then
                echo "warm_ttfr.sh: no-warm run $i did not miss" >&2; failed=1
            fi
        fi
        rm -rf "$c"
    done
done

echo "warm_ttfr: time to first result of the $PROGRAM program after a driver change (PoCL pthread -> basic),"
echo "  each run a fresh process with an empty PoCL cache; $REPS reps, round-robin"
printf '  %-9s %10s %10s %10s  %s\n' way median min max what
declare -A med=()
for way in plain no-warm warm warm-next warm-cmd; do
    # shellcheck disable=SC2086 # a list of microseconds
    read -r m lo hi k <<<"$(printf '%s\n' ${vals[$way]:-} | sort -g |
        awk '{ v[NR] = $1 / 1000 } END { if (!NR) exit; m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
                                         printf "%.1f %.1f %.1f %d\n", m, v[1], v[NR], NR }')"
    [ -n "${m:-}" ] || continue
    med[$way]=$m
    case $way in
    plain) what="no shim: the driver compiles" ;;
    no-warm) what="clshim, the cache of the old device: every key misses" ;;
    warm) what="clshim, the same cache after cache warm: a hit (PoCL generates the first-use code)" ;;
    warm-next) what="clshim, the run after (the entry captured again with that code)" ;;
    warm-cmd) what="clshim cache warm itself (wall), before the run" ;;
    esac
    printf '  %-9s %7s ms %7s ms %7s ms  %s\n' "$way" "$m" "$lo" "$hi" "$what"
    metric=ttfr; [ "$way" = warm-cmd ] && metric=wall
    [ -n "${BENCH_CSV:-}" ] && echo "warm_ttfr,program=$PROGRAM,$way,$metric,ms,$m,$lo,$hi,$k" >>"$BENCH_CSV"
done
[ -n "${med[warm]:-}" ] && [ -n "${med[no-warm]:-}" ] &&
    awk -v a="${med[no-warm]}" -v b="${med[warm]}" 'BEGIN { printf "  no-warm / warm = %.2fx\n", a / b }'
[ $failed = 0 ] && echo "  results: every run's checksum equals the plain run's; warm runs hit, no-warm runs missed"
exit $failed
