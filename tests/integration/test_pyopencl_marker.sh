#!/bin/bash
# PyOpenCL's cache-defeating marker (issue 45, cache/quirks.h): with its own
# cache on (its default) and cold, as on a fresh home or CI runner, PyOpenCL
# appends "__constant int pyopencl_defeat_cache_<uuid4> = 0;" to each source
# it builds, a new name at every build, so that no driver cache can serve
# it. Before, that made every such build a miss in clshim's cache and a new
# entry. clshim keys and builds the source in its neutral form (zeros for
# the random part): a second run, PyOpenCL's cache cold again, hits every
# program and stores nothing, and prints what the plain driver prints: the
# results, the app's own source with its own marker, the kernels and their
# arguments, a build log that names the app's own marker, and a build that
# fails because of its marker fails with the driver's words. The same
# through the capture helper, which builds the keyed text again.
source "$(dirname "$0")/lib.sh"
: "${XDG_CACHE_HOME:?run through tests/run-all.sh (PyOpenCL keeps its cache under XDG_CACHE_HOME)}"
PY=${COMPAT_PYTHON:-/usr/bin/python3}
P=$CLSHIM_ROOT/tests/integration/progs/pyopencl_marker.py
TOOL=$CLSHIM_BUILD/clshim-tool
"$PY" -c 'import pyopencl, numpy' || fail "python3-pyopencl is missing (make check installs it)"
unset PYOPENCL_NO_CACHE
export CLSHIM_LOG=info
RECOGNISED="clshim: PyOpenCL's cache-defeating marker recognised: "
# PyOpenCL's own cache, cold for every run (platformdirs: $XDG_CACHE_HOME/pyopencl).
cold_pyopencl() { rm -rf "$XDG_CACHE_HOME/pyopencl"; }
summary() { grep -o "[0-9]* $1" "$TMP/$2.err" | tail -1 | cut -d' ' -f1; } # field tag
entries() { "$TOOL" cache stats --json | python3 -c "import json,sys; print(json.load(sys.stdin)['entries'])"; }
said_once() { # tag
    [ "$(count "$RECOGNISED" "$TMP/$1.err")" = 1 ] || { cat "$TMP/$1.err" >&2; fail "$1: the marker was not said once"; }
}

# 1. The plain driver: PyOpenCL appended its marker to every program and the
#    compiler's warning about it names the program's own marker.
cold_pyopencl; run_ref ref "$PY" "$P"
[ "$(cat "$TMP/ref.rc")" = 0 ] || { cat "$TMP/ref.err" >&2; fail "the plain run failed"; }
[ -d "$XDG_CACHE_HOME/pyopencl" ] || fail "PyOpenCL's own cache was off: its marker was never appended"
[ "$(count 'source: marker appended' "$TMP/ref.out")" = 2 ] || fail "PyOpenCL did not append its marker"
grep -q "warned log: .*'pyopencl_defeat_cache_<own>'" "$TMP/ref.out" || fail "the plain log does not name the marker"
ok "plain: PyOpenCL appends its marker to each build; the compiler's warning names it"

# 2. Under clshim, PyOpenCL's cache cold in both runs: the cold run stores
#    each program, the warm run hits every one, nothing new is stored, and
#    both print what the plain run printed (the hit's log the app's own name).
cold_pyopencl; fresh_pocl; run_shim cold "$PY" "$P"
same_output ref cold "cold run: the plain run's results, queries and logs"
said_once cold
N=$(summary misses cold)
[ "$N" -ge 4 ] && [ "$(summary stored cold)" = "$N" ] || { cat "$TMP/cold.err" >&2; fail "cold run: not every miss stored"; }
E=$(entries)
cold_pyopencl; fresh_pocl; run_shim warm "$PY" "$P"
same_output ref warm "warm run, PyOpenCL's cache cold again: the plain run's results, queries and logs"
said_once warm
[ "$(summary hits warm)" = "$N" ] && [ "$(summary misses warm)" = 0 ] ||
    { grep summary "$TMP/warm.err" >&2; fail "warm run: not $N hits and no miss (PyOpenCL's marker defeated the cache)"; }
[ "$(entries)" = "$E" ] || fail "warm run: the cache grew from $E to $(entries) entries"
"$TOOL" cache verify >/dev/null || fail "cache verify found bad entries"
ok "warm run: $N hits of $N, no miss, still $E entries; the marker said once a run"

# 3. The capture helper builds the keyed text again (the request's source):
#    stored under the neutral key, a hit in the next run.
export CLSHIM_CACHE_DIR=$TMP/helper-cache
cold_pyopencl; fresh_pocl; CLSHIM_CAPTURE_PROCESS=1 run_shim hcold "$PY" "$P"
same_output ref hcold "helper, cold run: the plain run's results, queries and logs"
"$TOOL" cache wait --timeout 300 || fail "clshim cache wait: the helper did not finish"
grep -q "summary: .* 0 stored, $N handed to the capture helper," "$TMP/hcold.err" ||
    { grep summary "$TMP/hcold.err" >&2; fail "helper, cold run: not $N captures handed to the helper"; }
cold_pyopencl; fresh_pocl; CLSHIM_CAPTURE_PROCESS=1 run_shim hwarm "$PY" "$P"
same_output ref hwarm "helper, warm run: the plain run's results, queries and logs"
[ "$(summary hits hwarm)" = "$N" ] && [ "$(summary misses hwarm)" = 0 ] ||
    { grep summary "$TMP/hwarm.err" >&2; fail "helper, warm run: not $N hits and no miss"; }
"$TOOL" cache verify >/dev/null || fail "cache verify found bad entries (helper)"
ok "capture helper: the neutral text's binaries stored; $N hits in the next run"

# 4. A build that fails because of the marker (a pragma makes the warning
#    about it an error) fails under clshim too, and the driver's error names
#    the app's own marker, not the neutral one.
cold_pyopencl; run_ref fref "$PY" "$P" fail
grep -q "fail: code -11 .*pyopencl_defeat_cache_<other>" "$TMP/fref.out" || fail "the plain build did not fail on its marker"
cold_pyopencl; fresh_pocl; run_shim fail "$PY" "$P" fail
same_output fref fail "a build failing on its marker: the plain driver's error and log"
finish
