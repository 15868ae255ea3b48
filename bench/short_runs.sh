#!/bin/bash
# short_runs.sh — automatic fusion at every run length (issue 47: never
# slower than plain, whatever the run length).
#
#   bench/short_runs.sh BUILD [--quick] [--reps R] [--chains "30 300 3000"] [--n FLOATS] [--sync chain|end]
#
# bench_short's 4-kernel chain over 1 Mi floats (default), C chains per
# process, each a fresh process, three ways round-robin per rep:
#   plain      no shim;
#   auto-cold  LD_PRELOAD, CLSHIM_FUSION=auto, an empty clshim cache: the
#              fused program is made during the run;
#   auto-warm  the same with the cache earlier auto runs filled (the
#              fused program is a hit; the history says how long the
#              last run of this length was);
#   plan       LD_PRELOAD, CLSHIM_FUSE=s0+s1+s2+s3, the cache warm: what
#              fusing from the first chain gives.
# Every run has an empty driver cache of its own (POCL_CACHE_DIR and
# CUDA_CACHE_PATH), as a fresh process on a fresh runner has. The figure is
# the time per chain of the run's chains (the program's own build is
# before the span), medians of R reps; auto/plain and plan/plain as speed
# ratios (>1: faster than plain). Every run's result must equal the plain
# run's (bit for bit). Appends rows to BENCH_CSV when set. --gpu: nothing
# changes but the caption (OCL_ICD_VENDORS picks the driver).
set -euo pipefail
BUILD=$(cd "${1:?usage: bench/short_runs.sh BUILD [--quick] [--reps R] [--chains LIST] [--n N] [--sync S]}" && pwd)
shift
REPS=5 CHAINS="30 300 3000" N=1048576 SYNC=chain
while [ $# -gt 0 ]; do
    case $1 in
    --quick) REPS=2 CHAINS="30 300" ;;
    --reps) REPS=$2; shift ;;
    --chains) CHAINS=$2; shift ;;
    --n) N=$2; shift ;;
    --sync) SYNC=$2; shift ;;
    --gpu) ;;
    *) echo "short_runs.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
BS=$BUILD/bench/bench_short
SHIM=$BUILD/libclshim.so
R=$(mktemp -d "${TMPDIR:-/tmp}/clshim-short.XXXXXX")
trap 'rm -rf "$R"' EXIT
export XDG_CACHE_HOME=$R/xdg HOME=$R/home
mkdir -p "$XDG_CACHE_HOME" "$HOME"
fresh() { mktemp -d "$R/drv.XXXXXX"; }

# run TAG CHAINS [VAR=VALUE...]: one process; "US HASH" on stdout. A run
# under the shim leaves a capture helper storing after it (PoCL): waited
# for, untimed, so that no run shares the machine with the one before.
run() {
    local tag=$1 c=$2 d v cache=""; shift 2
    d=$(fresh)
    for v in "$@"; do case $v in CLSHIM_CACHE_DIR=*) cache=${v#CLSHIM_CACHE_DIR=} ;; esac; done
    env POCL_CACHE_DIR="$d" CUDA_CACHE_PATH="$d" "$@" "$BS" --chains "$c" --n "$N" --sync "$SYNC" \
        >"$R/$tag.out" 2>"$R/$tag.err" || { echo "short_runs.sh: $tag failed: $(tail -3 "$R/$tag.err")" >&2; return 1; }
    [ -z "$cache" ] || CLSHIM_CACHE_DIR=$cache "$BUILD/clshim-tool" cache wait >/dev/null 2>&1 || true
    sed -n 's/^result per_chain_us=\([0-9.]*\) .*hash=\([0-9a-f]*\)$/\1 \2/p' "$R/$tag.out"
    rm -rf "$d"
}

med() { # values... -> "median min max n"
    printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
                                                   printf "%.2f %.2f %.2f %d\n", m, v[1], v[NR], NR }'
}

failed=0
echo "short_runs: bench_short's 4-kernel chain over $N floats, per chain (sync: $SYNC), $REPS reps, round-robin;"
echo "  each run a fresh process with an empty driver cache"
printf '  %7s %-10s %10s %10s %10s %9s\n' chains way median min max vs-plain
for c in $CHAINS; do
    warm=$R/warm-$c
    # The warm cache: one auto run long enough to make the fused program,
    # then two runs of this length, as a user's earlier runs of the same
    # program: they load it and leave the run-length history
    # (CLSHIM_FUSION_HISTORY) what a later run of this length decides by.
    run prime-$c 300 LD_PRELOAD="$SHIM" CLSHIM_FUSION=auto CLSHIM_CACHE_DIR="$warm" >/dev/null || failed=1
    for p in 1 2; do
        run prime-$c-$p "$c" LD_PRELOAD="$SHIM" CLSHIM_FUSION=auto CLSHIM_CACHE_DIR="$warm" >/dev/null || failed=1
    done
    declare -A v=()
    want=""
    for ((i = 0; i < REPS; i++)); do
        for way in plain auto-cold auto-warm plan; do
            case $way in
            plain) e=() ;;
            auto-cold) e=(LD_PRELOAD="$SHIM" CLSHIM_FUSION=auto CLSHIM_CACHE_DIR="$R/cold-$c-$i") ;;
            auto-warm) cp -a "$warm" "$R/w-$c-$i"; e=(LD_PRELOAD="$SHIM" CLSHIM_FUSION=auto CLSHIM_CACHE_DIR="$R/w-$c-$i") ;;
            plan) cp -a "$warm" "$R/p-$c-$i"; e=(LD_PRELOAD="$SHIM" CLSHIM_FUSE=s0+s1+s2+s3 CLSHIM_CACHE_DIR="$R/p-$c-$i") ;;
            esac
            read -r us h <<<"$(run "$way-$c-$i" "$c" "${e[@]}")" || { failed=1; continue; }
            [ -n "$want" ] || want=$h
            [ "$h" = "$want" ] || { echo "short_runs.sh: $way, $c chains, rep $i: result $h, plain $want" >&2; failed=1; }
            v[$way]="${v[$way]:-} $us"
            rm -rf "$R/cold-$c-$i" "$R/w-$c-$i" "$R/p-$c-$i"
        done
    done
    read -r pm _ _ _ <<<"$(med ${v[plain]})"
    for way in plain auto-cold auto-warm plan; do
        # shellcheck disable=SC2086 # a list of numbers
        read -r m lo hi k <<<"$(med ${v[$way]})"
        ratio=$(awk -v p="$pm" -v m="$m" 'BEGIN { printf "%.2fx", p / m }')
        printf '  %7s %-10s %7s us %7s us %7s us %9s\n' "$c" "$way" "$m" "$lo" "$hi" "$ratio"
        [ -n "${BENCH_CSV:-}" ] && echo "short_runs,chains=$c;n=$N;sync=$SYNC,$way,per_chain,us,$m,$lo,$hi,$k" >>"$BENCH_CSV"
    done
    unset v
done
[ $failed = 0 ] && echo "  results: every run's result equals the plain run's"
exit $failed
