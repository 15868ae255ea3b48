#!/bin/bash
# The drivers' own caches kept inside clshim's (cache/driver_caches.h): with
# CLSHIM_DRIVER_CACHES=1, and by default (auto) where CLSHIM_CACHE_DIR names
# the cache directory (a CI job's kept directory), PoCL's kcache (and
# NVIDIA's ComputeCache, by CUDA_CACHE_PATH) goes to <cache dir>/driver/,
# unless the user set the variable; `clshim cache export/import
# --with-driver-caches` carries it.
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info
FC=$PROGS/fusion_chain
CLSHIM=$CLSHIM_BUILD/clshim
C1=$TMP/c1
C2=$TMP/c2
# Files of a kcache; PoCL 3.1 leaves a tempfile_* behind at each run whatever
# it compiles, so those are not counted.
files() { find "$1" -type f ! -name 'tempfile_*' 2>/dev/null | wc -l; }

# 1. By default, with CLSHIM_CACHE_DIR named and the variables unset: both
#    point into the cache directory, and PoCL writes its kcache there
#    (the line naming them is a debug line by default, info with 1).
run_shim on env -u POCL_CACHE_DIR -u CUDA_CACHE_PATH -u CLSHIM_DRIVER_CACHES CLSHIM_CACHE_DIR="$C1" CLSHIM_LOG=debug \
    "$FC" --mode chain
[ "$(cat "$TMP/on.rc")" = 0 ] || fail "knob on: exit code $(cat "$TMP/on.rc")"
set_line() { grep "^clshim: driver caches: " "$1" || true; } # the one line naming what was set
set_line "$TMP/on.err" | grep -q " POCL_CACHE_DIR=$C1/driver/pocl" || fail "knob on: POCL_CACHE_DIR not set"
set_line "$TMP/on.err" | grep -q " CUDA_CACHE_PATH=$C1/driver/nvidia" || fail "knob on: CUDA_CACHE_PATH not set"
[ "$(set_line "$TMP/on.err" | wc -l)" = 1 ] || fail "knob on: not one line naming the variables"
[ "$(files "$C1/driver/pocl")" -gt 0 ] || fail "knob on: PoCL wrote nothing into $C1/driver/pocl"
[ "$(stat -c %a "$C1/driver")" = 700 ] || fail "knob on: $C1/driver is not private"
fresh_pocl; run_plain ref "$FC" --mode chain
same_output ref on "knob on: same results"
ok "a named cache directory keeps PoCL's kcache by default (CLSHIM_DRIVER_CACHES=auto)"

# 2. A variable the user set stands; without the knob nothing changes.
fresh_pocl
run_shim user env -u CUDA_CACHE_PATH CLSHIM_CACHE_DIR="$TMP/c3" CLSHIM_DRIVER_CACHES=1 "$FC" --mode chain
set_line "$TMP/user.err" | grep -q "POCL_CACHE_DIR=" && fail "user's POCL_CACHE_DIR overridden"
[ "$(files "$TMP/c3/driver/pocl")" = 0 ] || fail "user's POCL_CACHE_DIR: PoCL wrote into clshim's directory"
[ "$(files "$POCL_CACHE_DIR")" -gt 0 ] || fail "user's POCL_CACHE_DIR: PoCL did not use it"
ok "a variable the user set is kept"

# 2b. auto stands aside for the default cache directory (the drivers' own
#     caches persist beside it in the same home), a read-only cache and 0;
#     1 applies to the default directory too. (The shim is preloaded after
#     env's -u: preloaded into env itself, it would act on env's own
#     environment, which the program inherits.)
run_plain dflt env -u POCL_CACHE_DIR -u CUDA_CACHE_PATH -u CLSHIM_CACHE_DIR LD_PRELOAD="$SHIM" "$FC" --mode chain
[ "$(count 'driver caches' "$TMP/dflt.err")" = 0 ] || fail "default cache directory: variables set"
[ -d "$XDG_CACHE_HOME/clshim" ] && [ ! -e "$XDG_CACHE_HOME/clshim/driver" ] ||
    fail "default cache directory: a driver directory was made (or no cache)"
run_plain off env -u POCL_CACHE_DIR -u CUDA_CACHE_PATH CLSHIM_CACHE_DIR="$TMP/c4" CLSHIM_DRIVER_CACHES=0 LD_PRELOAD="$SHIM" "$FC" --mode chain
[ "$(count 'driver caches' "$TMP/off.err")" = 0 ] || fail "knob 0: variables set"
[ ! -e "$TMP/c4/driver" ] || fail "knob 0: a driver directory was made"
cp -a "$C1" "$TMP/c5"
rm -rf "$TMP/c5/driver"
run_plain ro env -u POCL_CACHE_DIR -u CUDA_CACHE_PATH CLSHIM_CACHE_DIR="$TMP/c5" CLSHIM_CACHE_READONLY=1 LD_PRELOAD="$SHIM" "$FC" --mode chain
[ "$(count 'driver caches' "$TMP/ro.err")" = 0 ] || fail "read-only cache: variables set"
[ ! -e "$TMP/c5/driver" ] || fail "read-only cache: a driver directory was made"
run_plain one env -u POCL_CACHE_DIR -u CUDA_CACHE_PATH -u CLSHIM_CACHE_DIR CLSHIM_DRIVER_CACHES=1 LD_PRELOAD="$SHIM" "$FC" --mode chain
set_line "$TMP/one.err" | grep -q " POCL_CACHE_DIR=$XDG_CACHE_HOME/clshim/driver/pocl" ||
    fail "knob 1: the default cache directory did not get PoCL's kcache"
fresh_pocl; run_plain ref2 "$FC" --mode chain
for t in dflt off ro one; do same_output ref2 $t "$t: same results"; done
ok "auto stands aside for the default directory, a read-only cache and 0; 1 applies everywhere"

# 2c. A cache directory another user could swap (below an open parent, or a
#     symbolic link) never gets them, even with 1: they would choose the
#     code the drivers load. 1 says so in one line.
mkdir -p "$TMP/open"; chmod 0777 "$TMP/open"
run_plain openp env -u POCL_CACHE_DIR -u CUDA_CACHE_PATH CLSHIM_CACHE_DIR="$TMP/open/c" CLSHIM_DRIVER_CACHES=1 \
    LD_PRELOAD="$SHIM" "$FC" --mode chain
[ ! -e "$TMP/open/c" ] || fail "open parent: a directory was made below it"
[ "$(count "driver caches: $TMP/open/c, or a directory on its way, is not private" "$TMP/openp.err")" = 1 ] ||
    fail "open parent: not one line saying why"
mkdir -p "$TMP/real"; chmod 700 "$TMP/real"; ln -s "$TMP/real" "$TMP/link"
run_plain linkc env -u POCL_CACHE_DIR -u CUDA_CACHE_PATH CLSHIM_CACHE_DIR="$TMP/link" LD_PRELOAD="$SHIM" "$FC" --mode chain
[ ! -e "$TMP/real/driver" ] || fail "a cache directory that is a symbolic link got the driver caches"
for t in openp linkc; do same_output ref2 $t "$t: same results"; done
ok "not below an open parent nor through a symbolic link, even with 1"

# 3. export/import --with-driver-caches: a fresh cache directory gets clshim's
#    entries and PoCL's kcache; a run on it compiles nothing in PoCL. (A
#    second run first: a clshim hit loads a PoCL binary, which PoCL keeps in
#    its kcache under its own key, once.)
run_shim second env -u POCL_CACHE_DIR -u CUDA_CACHE_PATH CLSHIM_CACHE_DIR="$C1" "$FC" --mode chain
same_output ref second "second run: same results"
"$CLSHIM" cache --dir "$C1" export --with-driver-caches "$TMP/x.export" >"$TMP/export.txt"
[ -s "$TMP/x.export.drivers.tar.gz" ] || fail "export: no driver archive"
grep -q "Exported the driver caches" "$TMP/export.txt" || fail "export: no line about the driver caches"
"$CLSHIM" cache --dir "$C2" import --with-driver-caches "$TMP/x.export" >"$TMP/import.txt"
grep -q "Imported the driver caches" "$TMP/import.txt" || fail "import: no line about the driver caches"
diff -r "$C1/driver" "$C2/driver" >/dev/null || fail "import: the driver caches differ from the exported ones"
before=$(files "$C2/driver/pocl")
run_shim imported env -u POCL_CACHE_DIR -u CUDA_CACHE_PATH CLSHIM_CACHE_DIR="$C2" "$FC" --mode chain
same_output ref imported "imported: same results"
grep -q "hit " "$TMP/imported.err" || fail "imported: no clshim cache hit"
[ "$(files "$C2/driver/pocl")" = "$before" ] || fail "imported: PoCL compiled again ($before files before, $(files "$C2/driver/pocl") after)"
ok "export/import --with-driver-caches: clshim's entries and PoCL's kcache, nothing compiled again"

# 4. Not with standard output/input, nor with signing (the archive is unsigned).
set +e
"$CLSHIM" cache --dir "$C1" export --with-driver-caches - >/dev/null 2>&1; rc1=$?
"$CLSHIM" cache --dir "$C1" import --with-driver-caches --trust "$TMP/none.pub" "$TMP/x.export" >/dev/null 2>&1; rc2=$?
set -e
[ "$rc1" = 2 ] && [ "$rc2" = 2 ] || fail "--with-driver-caches with '-' or --trust: exit codes $rc1 $rc2, expected 2"
ok "--with-driver-caches refuses standard output and signatures"

finish
