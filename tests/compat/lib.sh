# shellcheck shell=bash
# lib.sh — helpers shared by tests/compat/run.sh (make compat) and
# tests/integration/test_compat_quick.sh (make check); sourced, never run.
#
# A "run" is one execution of a real OpenCL client in one of three modes:
#   plain  without clshim;
#   cold   LD_PRELOAD=libclshim.so with an empty CLSHIM_CACHE_DIR;
#   warm   the same again, on the cache the cold run filled.
# Every run gets its own EMPTY POCL_CACHE_DIR (PoCL's kernel cache would
# otherwise hide the builds), a private HOME and XDG_* dirs, and none of the
# caller's CLSHIM_*, PYOPENCL_* or LD_PRELOAD settings. OCL_ICD_VENDORS is
# kept, so the same scripts run against another driver. A run leaves in its
# directory: stdout, stderr, rc, wall (seconds) and, with clshim, clshim.log
# (CLSHIM_LOG=info written to CLSHIM_LOG_FILE, so the client's own output
# holds nothing of clshim's). Settings in the array COMPAT_RUN_ENV
# (VAR=value words) are added last, in every mode: make compat's armed mode
# passes its fusion plan that way. PYOPENCL_NO_CACHE=1 is set in every run
# unless COMPAT_PYOPENCL_OWN_CACHE is set (then PyOpenCL's cache is on, and
# cold: each run has its own XDG_CACHE_HOME).
#
# Needs: COMPAT_TMP (scratch dir), SHIM (absolute path of libclshim.so).
# Safe under set -euo pipefail: helpers report through their return codes.

COMPAT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/compat/pins
source "$COMPAT_DIR/pins"
# Debian's interpreter: python3-pyopencl lives in its dist-packages, and a
# python3 earlier on PATH (pyenv, venv) would not see it.
COMPAT_PYTHON=${COMPAT_PYTHON:-/usr/bin/python3}
[ -n "${COMPAT_RUN_ENV+set}" ] || COMPAT_RUN_ENV=()

compat_missing_packages() { # packages... -> those not installed, on stdout
    local p missing=""
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
    done
    echo "${missing# }"
}

# Installs the compat-only Debian packages when missing (idempotent; root or
# password-less sudo). Returns non-zero with a message when it cannot.
compat_install_packages() {
    local missing sudo=""
    # shellcheck disable=SC2086 # a list of names
    missing=$(compat_missing_packages $COMPAT_PACKAGES)
    [ -z "$missing" ] && return 0
    echo "compat: installing missing packages: $missing"
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo=sudo
        else echo "compat: not root and no password-less sudo; run: apt-get install $missing" >&2; return 1; fi
    fi
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive $sudo apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
}

# The installed PyOpenCL must be the release whose tests we run, imported
# from Debian's dist-packages.
compat_check_pyopencl() {
    local got
    got=$(cd / && "$COMPAT_PYTHON" -c 'import pyopencl, pytest; print(pyopencl.VERSION_TEXT, pyopencl.__file__)' 2>&1) ||
        { echo "compat: cannot import pyopencl and pytest with $COMPAT_PYTHON: $got" >&2; return 1; }
    case "$got" in
        "$PYOPENCL_VERSION /usr/lib/python3/dist-packages/pyopencl/"*) return 0 ;;
    esac
    echo "compat: expected Debian's pyopencl $PYOPENCL_VERSION, got: $got" >&2
    return 1
}

# Puts the sdist's test/ directory at $1/test (fetched once, checked against
# the pinned SHA-256; COMPAT_SDIST=FILE uses a local copy instead).
compat_fetch_tests() { # destdir
    local dest=$1 tarball
    [ -f "$dest/test/test_wrapper.py" ] && [ -f "$dest/.verified" ] && return 0
    mkdir -p "$dest"
    tarball=${COMPAT_SDIST:-$dest/$PYOPENCL_SDIST}
    if [ ! -f "$tarball" ]; then
        echo "compat: fetching $PYOPENCL_SDIST from PyPI"
        "$COMPAT_PYTHON" - "$PYOPENCL_SDIST_URL" "$tarball.part" <<'PY' || { rm -f "$tarball.part"; return 1; }
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=120) as r, open(sys.argv[2], "wb") as f:
    f.write(r.read())
PY
        mv "$tarball.part" "$tarball"
    fi
    echo "$PYOPENCL_SDIST_SHA256  $tarball" | sha256sum -c --quiet - ||
        { echo "compat: $tarball does not match the pinned SHA-256" >&2; rm -f "$tarball"; return 1; }
    rm -rf "$dest/test"
    tar -xzf "$tarball" -C "$dest" --strip-components=1 "pyopencl-$PYOPENCL_VERSION/test" || return 1
    touch "$dest/.verified"
}

# compat_pyopencl_tests WORK: checks Debian's pyopencl, puts the sdist's
# tests in WORK/pyopencl; sets TDIR (their directory) and the array `files`
# (COMPAT_PYOPENCL_TESTS, else every test_*.py there).
compat_pyopencl_tests() {
    compat_check_pyopencl || return 1
    compat_fetch_tests "$1/pyopencl" || return 1
    TDIR=$1/pyopencl/test
    if [ -n "${COMPAT_PYOPENCL_TESTS:-}" ]; then
        read -r -a files <<<"$COMPAT_PYOPENCL_TESTS"
    else
        files=(); local f; for f in "$TDIR"/test_*.py; do files+=("$(basename "$f")"); done
    fi
}

# compat_run MODE OUTDIR CACHEDIR WORKDIR CMD... — one run (see the top).
compat_run() {
    local mode=$1 out=$2 cache=$3 cwd=$4; shift 4
    local v t0 t1 rc priv
    rm -rf "$out"; mkdir -p "$out"
    priv=$(mktemp -d "$COMPAT_TMP/run.XXXXXX")
    mkdir -p "$priv/pocl" "$priv/home" "$priv/xdg-cache" "$priv/xdg-config"
    local -a e=(env)
    for v in $(compgen -e); do
        case $v in CLSHIM_*|PYOPENCL_*|LD_PRELOAD|POCL_CACHE_DIR) e+=(-u "$v") ;; esac
    done
    e+=(POCL_CACHE_DIR="$priv/pocl" HOME="$priv/home"
        XDG_CACHE_HOME="$priv/xdg-cache" XDG_CONFIG_HOME="$priv/xdg-config")
    # PyOpenCL's own cache stays off unless asked for (it is cold in every
    # run then: XDG_CACHE_HOME is the run's own, as on a fresh CI runner).
    [ -n "${COMPAT_PYOPENCL_OWN_CACHE:-}" ] || e+=(PYOPENCL_NO_CACHE=1)
    if [ "$mode" != plain ]; then
        mkdir -p "$cache"
        e+=(LD_PRELOAD="$SHIM" CLSHIM_CACHE_DIR="$cache" CLSHIM_LOG=info CLSHIM_LOG_FILE="$out/clshim.log")
    fi
    e+=("${COMPAT_RUN_ENV[@]}")
    t0=$EPOCHREALTIME
    rc=0
    (cd "$cwd" && exec timeout -k 10 "${COMPAT_RUN_TIMEOUT:-1800}" "${e[@]}" "$@") >"$out/stdout" 2>"$out/stderr" || rc=$?
    t1=$EPOCHREALTIME
    echo "$rc" >"$out/rc"
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f\n", b - a }' >"$out/wall"
    # The capture helper stores after the client exited (and writes into
    # its PoCL cache): waited for, untimed, as a CI job does before saving.
    if [ "$mode" != plain ]; then
        "$(dirname "$SHIM")/clshim-tool" cache --dir "$cache" wait >/dev/null ||
            echo "clshim cache wait failed" >>"$out/clshim.log"
    fi
    rm -rf "$priv"
    return 0
}

# Sums the "summary:" lines clshim wrote at each process exit: "HITS MISSES".
# clinfo under clshim lists cl_clshim_kernel_fusion (issue 36) in the
# platform's and each device's extensions, with and without versions, at the
# end of each list: fails unless it is there (4 times at least: a platform
# and a device, two formats), then writes the output without those additions,
# which must be the plain output.
compat_clinfo_without_ext() { # clinfo-output-file result-file
    [ "$(grep -c 'cl_clshim_kernel_fusion' "$1")" -ge 4 ] || return 1
    sed -e 's/ cl_clshim_kernel_fusion\(:0x400000\)\{0,1\}$//' \
        -e '/^ *cl_clshim_kernel_fusion  *0x400000 (1\.0\.0)$/d' "$1" >"$2"
}

compat_shim_counts() { # outdir
    local log=$1/clshim.log
    [ -f "$log" ] || { echo "0 0"; return; }
    awk '/clshim: summary:/ { for (i = 1; i <= NF; i++) { if ($i ~ /^hits/) h += $(i-1); if ($i ~ /^misses/) m += $(i-1) } }
         END { printf "%d %d\n", h, m }' "$log"
}

# A clshim line in a client's own output at the default log level means the
# shim is not silent (the runs log to a file, so nothing may reach stderr).
compat_shim_silent() { # outdir
    ! grep -q '^clshim: ' "$1/stdout" "$1/stderr"
}

# PyOpenCL's suite: pytest over FILES in the sdist's test dir.
compat_pytest() { # MODE OUTDIR CACHEDIR TESTDIR FILES...
    local mode=$1 out=$2 cache=$3 tdir=$4; shift 4
    compat_run "$mode" "$out" "$cache" "$tdir" "$COMPAT_PYTHON" -m pytest -p no:cacheprovider -q -rfE \
        -o junit_family=xunit2 --junitxml="$out/junit.xml" "$@"
    "$COMPAT_PYTHON" "$COMPAT_DIR/outcomes.py" "$out/junit.xml" >"$out/outcomes" 2>>"$out/stderr" || true
    # pytest's own closing line, e.g. "41 passed, 1 skipped, 2 xfailed, 4 warnings in 8.64s"
    grep -E '^(=+ )?[0-9]+ (passed|failed|skipped|error|xfailed|deselected)' "$out/stdout" | tail -n 1 |
        sed -E 's/^=+ //; s/ =+$//; s/, [0-9]+ warnings?//; s/ in [0-9.]+s.*$//' >"$out/summary" || true
}

# Same outcomes test by test (and the same exit code) as the reference run.
compat_same_outcomes() { # refdir outdir
    cmp -s "$1/rc" "$2/rc" || { echo "exit code $(cat "$1/rc") without clshim, $(cat "$2/rc") with"; return 1; }
    [ -s "$1/outcomes" ] || { echo "no test outcomes recorded without clshim"; return 1; }
    cmp -s "$1/outcomes" "$2/outcomes" ||
        { diff "$1/outcomes" "$2/outcomes" | grep '^[<>]' | head -n 20; return 1; }
}

# Sums the "fusion summary:" lines clshim wrote at each process exit (armed
# runs): "FUSED REPLACED UNFUSED REFUSED" — fused launches, the kernel
# launches they replaced, held kernels submitted unfused, fusions refused.
compat_fusion_counts() { # outdir
    local log=$1/clshim.log
    [ -f "$log" ] || { echo "0 0 0 0"; return; }
    awk '/clshim: fusion summary:/ { for (i = 1; i <= NF; i++) {
            if ($i == "fused" && $(i+1) ~ /^launches/) f += $(i-1)
            if ($i == "replaced") r += $(i+1)
            if ($i == "held") u += $(i-1)
            if ($i ~ /^fusions/) x += $(i-1) } }
         END { printf "%d %d %d %d\n", f, r, u, x }' "$log"
}
