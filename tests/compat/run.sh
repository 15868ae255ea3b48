#!/bin/bash
# run.sh — make compat: real OpenCL programs nobody here wrote, run without
# clshim, with clshim on an empty cache (cold) and again on the filled cache
# (warm), compared:
#   pyopencl  PyOpenCL's own test suite (Debian python3-pyopencl, tests from
#             the matching sdist), pytest: the same outcome for every test;
#   clinfo    identical output (clinfo, clinfo --raw), exit codes included,
#             but for the cl_clshim_kernel_fusion clshim lists;
#   clpeak    --kernel-latency and one compute test: identical output apart
#             from the measurements, and those within noise.
# PyOpenCL's suite also runs "armed": a recording run (warm, with
# launch_trace.py) lists every kernel launched, plan_from_trace.py makes a
# fusion plan naming every one of them, and the suite runs again under that
# plan: every outcome must equal the run without clshim.
# Installs its Debian packages when missing (root or sudo) and fetches the
# sdist once into BUILD/compat. Prints a table (also in BUILD/compat/results.md)
# and exits non-zero on any difference.
#   tests/compat/run.sh BUILD [--only pyopencl|clinfo|clpeak]...
# Environment:
#   COMPAT_PYOPENCL_TESTS  test files (default: every test_*.py of the sdist)
#   COMPAT_PYOPENCL_ARMED  0: leave out the armed mode (default 1)
#   COMPAT_CLPEAK_COMPUTE  the compute test (default --compute-sp)
#   COMPAT_CLPEAK_TOL      min/max ratio measurements must reach (default 0.5)
#   COMPAT_CLPEAK_ROUNDS   rounds, retried only while a measurement differs (3)
#   COMPAT_SDIST           a local pyopencl-2022.3.1.tar.gz (offline machines)
#   COMPAT_KEEP=1          keep the runs' outputs (BUILD/compat/runs)
set -u
BUILD=${1:?usage: tests/compat/run.sh BUILD [--only CLIENT]...}; shift
ONLY=""
while [ $# -gt 0 ]; do
    case "$1" in
        --only) ONLY="$ONLY $2"; shift ;;
        *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "$ROOT" && cd "$BUILD" && pwd) || exit 2
SHIM=$BUILD/libclshim.so
[ -f "$SHIM" ] || { echo "compat: $SHIM missing (make BUILD=... all)" >&2; exit 2; }
source "$ROOT/tests/compat/lib.sh"

WORK=$BUILD/compat
RUNS=$WORK/runs
rm -rf "$RUNS" "$WORK"/*.md "$WORK"/*-values.txt; mkdir -p "$RUNS"
COMPAT_TMP=$(mktemp -d /tmp/clshim-compat.XXXXXX)
trap 'rm -rf "$COMPAT_TMP"' EXIT
failed=""
rows=()
fusion_rows=()

want() { [ -z "$ONLY" ] || [[ " $ONLY " == *" $1 "* ]]; }
note_fail() { failed="$failed $1"; echo "FAIL $1: $2"; }
wall() { cat "$1/wall"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (a > 0 ? b / a : 0) }'; }
hm() { local c; c=$(compat_shim_counts "$1"); echo "${c% *} hits, ${c#* } misses"; }

compat_install_packages || exit 1

# --- PyOpenCL's test suite -----------------------------------------------
if want pyopencl; then
    compat_pyopencl_tests "$WORK" || exit 1
    cache=$COMPAT_TMP/cache-pyopencl
    for mode in plain cold warm; do
        echo "compat: pyopencl ${files[*]}: $mode run"
        compat_pytest "$mode" "$RUNS/pyopencl-$mode" "$cache" "$TDIR" "${files[@]}"
        echo "    $(cat "$RUNS/pyopencl-$mode/summary") in $(wall "$RUNS/pyopencl-$mode") s"
    done
    P=$RUNS/pyopencl-plain
    [ "$(cat "$P/rc")" = 0 ] || echo "compat: note: the suite fails without clshim too (exit $(cat "$P/rc"))"
    for mode in cold warm; do
        d=$RUNS/pyopencl-$mode
        why=$(compat_same_outcomes "$P" "$d") || note_fail "pyopencl-$mode" "outcomes differ from the run without clshim: $why"
        compat_shim_silent "$d" || note_fail "pyopencl-$mode" "clshim wrote to the client's output"
    done
    read -r h m <<<"$(compat_shim_counts "$RUNS/pyopencl-cold")"
    [ "$m" -gt 0 ] || note_fail pyopencl-cold "clshim saw no build (not loaded?)"
    read -r h m <<<"$(compat_shim_counts "$RUNS/pyopencl-warm")"
    [ "$h" -gt 0 ] || note_fail pyopencl-warm "no cache hit on the warm run"
    rows+=("| PyOpenCL ${PYOPENCL_VERSION} (${#files[@]} files) | $(cat "$P/summary") | $(cat "$RUNS/pyopencl-cold/summary") | $(cat "$RUNS/pyopencl-warm/summary") | $(wall "$P") s | $(wall "$RUNS/pyopencl-cold") s ($(hm "$RUNS/pyopencl-cold")) | $(wall "$RUNS/pyopencl-warm") s ($(hm "$RUNS/pyopencl-warm")) | $(ratio "$(wall "$P")" "$(wall "$RUNS/pyopencl-warm")") |")
    # Armed: a plan naming every kernel the suite launches (docs/compat.md).
    if [ "${COMPAT_PYOPENCL_ARMED:-1}" != 0 ]; then
        R=$RUNS/pyopencl-record A=$RUNS/pyopencl-armed plan=$WORK/pyopencl.plan
        echo "compat: pyopencl ${files[*]}: recording the kernel launches (warm)"
        COMPAT_RUN_ENV=(PYTHONPATH="$COMPAT_DIR${PYTHONPATH:+:$PYTHONPATH}" COMPAT_LAUNCH_TRACE="$COMPAT_TMP/launches.txt")
        compat_pytest warm "$R" "$cache" "$TDIR" -p launch_trace "${files[@]}"
        COMPAT_RUN_ENV=()
        why=$(compat_same_outcomes "$P" "$R") || note_fail pyopencl-record "the recording run's outcomes differ: $why"
        if read -r nkernels nseqs < <("$COMPAT_PYTHON" "$COMPAT_DIR/plan_from_trace.py" "$COMPAT_TMP/launches.txt" "$plan") &&
           [ "$nseqs" -gt 0 ]; then
            echo "    $nkernels kernels launched, plan: $nseqs sequences ($plan)"
            echo "compat: pyopencl ${files[*]}: armed run"
            COMPAT_RUN_ENV=(CLSHIM_FUSION_PLAN="$plan")
            compat_pytest armed "$A" "$cache" "$TDIR" "${files[@]}"
            COMPAT_RUN_ENV=()
            echo "    $(cat "$A/summary") in $(wall "$A") s"
            why=$(compat_same_outcomes "$P" "$A") || note_fail pyopencl-armed "outcomes differ from the run without clshim: $why"
            compat_shim_silent "$A" || note_fail pyopencl-armed "clshim wrote to the client's output"
            grep -q -E "clshim: fusion plan: $nseqs sequences?$" "$A/clshim.log" ||
                note_fail pyopencl-armed "clshim did not load the plan: $(grep -m1 'fusion plan' "$A/clshim.log")"
            ! grep -q "fusion: internal error" "$A/clshim.log" ||
                note_fail pyopencl-armed "$(grep -m1 'fusion: internal error' "$A/clshim.log")"
            read -r fl rl ul xl <<<"$(compat_fusion_counts "$A")"
            [ "$fl" -gt 0 ] || note_fail pyopencl-armed "nothing fused"
            kinds=$(grep -c 'clshim: fused .* into one launch' "$A/clshim.log" || true)
            refusedk=$(grep -c 'clshim: fusion of .* refused' "$A/clshim.log" || true)
            echo "    $fl fused launches ($kinds kinds) replaced $rl launches; $ul held kernels submitted unfused; $xl fusions refused"
            fusion_rows+=("| PyOpenCL ${PYOPENCL_VERSION} (${#files[@]} files) | $nkernels kernels, $nseqs sequences | $(cat "$P/summary") | $(cat "$A/summary") | $fl ($kinds kinds), replacing $rl launches | $ul | $xl ($refusedk kinds) | $(wall "$P") s | $(wall "$R") s | $(wall "$A") s |")
        else
            note_fail pyopencl-record "no kernel launch recorded (launch_trace.py not loaded?)"
        fi
    fi
    # Per-file figures when several files ran: which ones are build-bound.
    if [ "${#files[@]}" -gt 1 ]; then
        "$COMPAT_PYTHON" - "$RUNS" >"$WORK/pyopencl-files.md" <<'PY'
import sys, xml.etree.ElementTree as ET
runs = sys.argv[1]
t = {}
for mode in ("plain", "cold", "warm"):
    for c in ET.parse("%s/pyopencl-%s/junit.xml" % (runs, mode)).getroot().iter("testcase"):
        f = c.get("classname", "").split(".")[0] + ".py"
        t.setdefault(f, {}).setdefault(mode, 0.0)
        t[f][mode] += float(c.get("time", "0"))
print("| file | without clshim | cold | warm | warm / without |")
print("| --- | --- | --- | --- | --- |")
for f in sorted(t):
    p, c, w = (t[f].get(m, 0.0) for m in ("plain", "cold", "warm"))
    print("| %s | %.1f s | %.1f s | %.1f s | %.2f |" % (f, p, c, w, w / p if p else 0))
PY
    fi
fi

# --- clinfo -------------------------------------------------------------------
if want clinfo; then
    res=()
    for args in "" "--raw"; do
        tag=clinfo${args:+-raw}
        cache=$COMPAT_TMP/cache-$tag  # clinfo builds one small kernel: cold is a miss
        for mode in plain cold warm; do
            # shellcheck disable=SC2086
            compat_run "$mode" "$RUNS/$tag-$mode" "$cache" "$COMPAT_TMP" clinfo $args
        done
        P=$RUNS/$tag-plain
        [ "$(cat "$P/rc")" = 0 ] && [ -s "$P/stdout" ] || note_fail "$tag" "clinfo fails without clshim"
        for mode in cold warm; do
            d=$RUNS/$tag-$mode
            # identical but for the cl_clshim_kernel_fusion clshim lists (lib.sh)
            if compat_clinfo_without_ext "$d/stdout" "$d/stdout.noext" && cmp -s "$P/stdout" "$d/stdout.noext" &&
                cmp -s "$P/stderr" "$d/stderr" && cmp -s "$P/rc" "$d/rc"; then
                res+=("identical")
            else
                res+=("DIFFERENT"); note_fail "$tag-$mode" "output differs:"
                diff "$P/stdout" "$d/stdout" | head -n 10; diff "$P/stderr" "$d/stderr" | head -n 5
            fi
        done
    done
    lines=$(wc -l <"$RUNS/clinfo-plain/stdout")
    rows+=("| clinfo, clinfo --raw | exit 0, $lines lines | ${res[0]}, ${res[2]} ($(hm "$RUNS/clinfo-cold")) | ${res[1]}, ${res[3]} ($(hm "$RUNS/clinfo-warm")) | $(wall "$RUNS/clinfo-plain") s | $(wall "$RUNS/clinfo-cold") s | $(wall "$RUNS/clinfo-warm") s | $(ratio "$(wall "$RUNS/clinfo-plain")" "$(wall "$RUNS/clinfo-warm")") |")
fi

# --- clpeak -------------------------------------------------------------------
if want clpeak; then
    tol=${COMPAT_CLPEAK_TOL:-0.5}
    for test in --kernel-latency "${COMPAT_CLPEAK_COMPUTE:---compute-sp}"; do
        tag=clpeak${test}
        cache=$COMPAT_TMP/cache-$tag
        plain=(); shim=(); verdict=""
        for round in $(seq 1 "${COMPAT_CLPEAK_ROUNDS:-3}"); do
            modes="plain cold warm"; [ "$round" -gt 1 ] && modes="plain warm"
            for mode in $modes; do
                d=$RUNS/$tag-$mode; [ "$round" -gt 1 ] && d=$RUNS/$tag-$mode-$round
                echo "compat: clpeak $test: $mode run (round $round)"
                compat_run "$mode" "$d" "$cache" "$COMPAT_TMP" clpeak "$test"
                if [ "$(cat "$d/rc")" != 0 ]; then note_fail "$tag-$mode" "clpeak exited $(cat "$d/rc")"; fi
                [ "$mode" = plain ] && plain+=("$d/stdout") || shim+=("$d/stdout")
                [ "$mode" = plain ] || compat_shim_silent "$d" || note_fail "$tag-$mode" "clshim wrote to the client's output"
            done
            if verdict=$("$COMPAT_PYTHON" "$COMPAT_DIR/clpeak_cmp.py" "$tol" "${plain[@]}" -- "${shim[@]}"); then
                break
            fi
            echo "compat: clpeak $test: outside noise after round $round, retrying"
        done
        echo "$verdict" | sed 's/^/    /'
        echo "$verdict" | grep -q -E '^(DIFF|DIFFERENT)' && note_fail "$tag" "results differ beyond noise (tolerance $tol)"
        summ=$(echo "$verdict" | awk '/^(ok|DIFF) / { $1 = ""; sub(/^ +/, ""); print }' | sed -E 's/ +/ /g' | paste -sd ';' -)
        v=$(echo "$verdict" | grep -c -E '^(DIFF|DIFFERENT)' || true)
        rows+=("| clpeak $test | exit $(cat "$RUNS/$tag-plain/rc") | exit $(cat "$RUNS/$tag-cold/rc") ($(hm "$RUNS/$tag-cold")) | exit $(cat "$RUNS/$tag-warm/rc") ($(hm "$RUNS/$tag-warm")); $([ "$v" = 0 ] && echo "same within noise" || echo "DIFFERENT") | $(wall "$RUNS/$tag-plain") s | $(wall "$RUNS/$tag-cold") s | $(wall "$RUNS/$tag-warm") s | $(ratio "$(wall "$RUNS/$tag-plain")" "$(wall "$RUNS/$tag-warm")") |")
        echo "$summ" >"$WORK/$tag-values.txt"
    done
fi

# --- the table ------------------------------------------------------------------
{
    echo "| client | without clshim | with clshim, cold | with clshim, warm | wall without | wall cold | wall warm | warm / without |"
    echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
    printf '%s\n' "${rows[@]}"
    if [ "${#fusion_rows[@]}" -gt 0 ]; then
        echo
        echo "Armed: a fusion plan naming every kernel launched (fused launches and refusals: clshim's fusion summary):"
        echo
        echo "| client | plan | without clshim | armed | fused launches | held, submitted unfused | fusions refused | wall without | wall recording (warm) | wall armed |"
        echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
        printf '%s\n' "${fusion_rows[@]}"
    fi
    echo
    echo "$(date -u +%Y-%m-%d) on $(clinfo --raw 2>/dev/null | awk -F'  +' '/CL_DEVICE_NAME/ { print $NF; exit }'), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
    [ -f "$WORK/pyopencl-files.md" ] && { echo; echo "PyOpenCL, test time per file (pytest's own timing):"; echo; cat "$WORK/pyopencl-files.md"; }
    for f in "$WORK"/clpeak*-values.txt; do
        [ -f "$f" ] && { echo; echo "$(basename "$f" -values.txt) best values (without / with clshim): $(cat "$f")"; }
    done
} >"$WORK/results.md"
echo; cat "$WORK/results.md"; echo
[ "${COMPAT_KEEP:-0}" = 1 ] || { [ -z "$failed" ] && rm -rf "$RUNS"; }
if [ -n "$failed" ]; then
    echo "compat: FAILED:$failed (runs kept in $RUNS)"
    exit 1
fi
echo "compat: all clients behave the same with clshim"
