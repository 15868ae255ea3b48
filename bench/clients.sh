#!/bin/bash
# clients.sh — real clients' wall time, cold and warm, side by side.
#
#   bench/clients.sh BUILD [--quick]
#
# Each client runs REPS times in each of three ways, round-robin (plain,
# clshim-cold, clshim-warm, plain, ...), every run with an empty PoCL cache
# (tests/compat/lib.sh's compat_run: private HOME, XDG_* and POCL_CACHE_DIR):
#   plain        no shim: the driver compiles everything;
#   clshim-cold  LD_PRELOAD, an empty clshim cache: the first run under clshim;
#   clshim-warm  LD_PRELOAD, the cache a cold run filled.
# Clients: the PyOpenCL program of make check (tests/compat/pyopencl_smoke.py:
# generated elementwise, reduction and scan kernels) and the demo app
# (examples/pipeline); --quick: the demo app only, 3 reps. Every run's output must equal the plain run's, and a
# warm run must compile nothing; otherwise it exits 1. Appends rows to
# BENCH_CSV (bench,case,variant,metric,unit,median,min,max,n) when set.
set -euo pipefail
BUILD=$(cd "${1:?usage: bench/clients.sh BUILD [--quick]}" && pwd)
REPS=5
CLIENTS="pyopencl demo-app"
[ "${2:-}" = --quick ] && { REPS=3; CLIENTS=demo-app; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SHIM=$BUILD/libclshim.so
COMPAT_TMP=$(mktemp -d "${TMPDIR:-/tmp}/clshim-clients.XXXXXX")
trap 'rm -rf "$COMPAT_TMP"' EXIT
source "$ROOT/tests/compat/lib.sh"

declare -A CLIENT_CMD=(
    [pyopencl]="$COMPAT_PYTHON $ROOT/tests/compat/pyopencl_smoke.py"
    [demo-app]="$BUILD/examples/pipeline"
)
failed=0
echo "clients: wall time of real OpenCL clients, each run with an empty driver cache and a private HOME; $REPS reps, round-robin"
printf '  %-10s %-12s %10s %10s %10s\n' client way median min max
for client in $CLIENTS; do
    read -r -a cmd <<<"${CLIENT_CMD[$client]}"
    R=$COMPAT_TMP/$client
    cache=$R/warm-cache
    compat_run clshim-cold "$R/prime" "$cache" "$COMPAT_TMP" "${cmd[@]}" # fills the warm cache
    declare -A walls=()
    for ((i = 0; i < REPS; i++)); do
        for way in plain clshim-cold clshim-warm; do
            c=$cache
            [ "$way" = clshim-cold ] && { c=$R/cold-cache; rm -rf "$c"; }
            compat_run "$way" "$R/$way.$i" "$c" "$COMPAT_TMP" "${cmd[@]}"
            walls[$way]="${walls[$way]:-} $(cat "$R/$way.$i/wall")"
            if [ "$(cat "$R/$way.$i/rc")" != 0 ] || ! cmp -s "$R/plain.0/stdout" "$R/$way.$i/stdout"; then
                echo "clients: $client ($way, run $i): exit $(cat "$R/$way.$i/rc") or output differs from the plain run" >&2
                tail -5 "$R/$way.$i/stderr" >&2
                failed=1
            fi
            if [ "$way" = clshim-warm ]; then
                read -r hits misses <<<"$(compat_shim_counts "$R/$way.$i")"
                [ "$hits" -gt 0 ] && [ "$misses" = 0 ] ||
                    { echo "clients: $client warm run $i compiled ($hits hits, $misses misses)" >&2; failed=1; }
            fi
        done
    done
    for way in plain clshim-cold clshim-warm; do
        # shellcheck disable=SC2086 # a list of seconds
        read -r med lo hi n <<<"$(printf '%s\n' ${walls[$way]} | sort -g |
            awk '{ v[NR] = $1 * 1000 } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
                                             printf "%.1f %.1f %.1f %d\n", m, v[1], v[NR], NR }')"
        printf '  %-10s %-12s %7s ms %7s ms %7s ms\n' "$client" "$way" "$med" "$lo" "$hi"
        [ -n "${BENCH_CSV:-}" ] && echo "clients,client=$client,$way,wall,ms,$med,$lo,$hi,$n" >>"$BENCH_CSV"
    done
    unset walls
done
[ $failed = 0 ] && echo "  results: every run's output equals the plain run's; warm runs compiled nothing"
exit $failed
