#!/bin/bash
# The clshim command: run (LD_PRELOAD kept, --stats, --log), config (values
# and sources), --version/--help, errors; and make install.
source "$(dirname "$0")/lib.sh"
CLSHIM=$CLSHIM_BUILD/clshim
MK=$PROGS/multikernel

run_plain plain "$MK"
fresh_pocl; "$CLSHIM" run -- "$MK" >"$TMP/run.out" 2>"$TMP/run.err"; echo $? >"$TMP/run.rc"
same_output plain run "clshim run: same output and exit code"

# An existing LD_PRELOAD is kept (a harmless library: libm).
libm=$(ldconfig -p | awk '/libm\.so\.6 .*x86-64/ && !found {print $NF; found = 1}')
LD_PRELOAD=$libm "$CLSHIM" run -- bash -c 'echo "$LD_PRELOAD"' >"$TMP/preload.out"
grep -q "libclshim.so" "$TMP/preload.out" || fail "clshim run did not preload the shim"
grep -q "$libm" "$TMP/preload.out" || fail "clshim run dropped the existing LD_PRELOAD"
ok "clshim run keeps an existing LD_PRELOAD"

fresh_pocl; "$CLSHIM" run --stats -- "$MK" >/dev/null 2>"$TMP/stats.err"
grep -q "clshim: summary: .* hits" "$TMP/stats.err" || fail "--stats printed no summary"
fresh_pocl; "$CLSHIM" run --log info -- "$MK" >/dev/null 2>"$TMP/log.err"
grep -q "clshim: hit " "$TMP/log.err" || fail "--log info printed no build line"
# An application whose own binary cache serves every build: --stats says
# so instead of printing nothing.
"$PROGS/appcache" save "$TMP/app.bin" >/dev/null
fresh_pocl; "$CLSHIM" run --stats -- "$PROGS/appcache" load "$TMP/app.bin" >"$TMP/app.out" 2>"$TMP/app.err"
grep -qx "2 4 6 8" "$TMP/app.out" || fail "appcache load: wrong result $(cat "$TMP/app.out")"
grep -q "^clshim: summary: no build went through clshim's cache: 1 program built from the application's own binaries" \
    "$TMP/app.err" || fail "--stats with only the application's binaries: $(cat "$TMP/app.err")"
ok "clshim run --stats and --log"

CLSHIM_CACHE_MAX_AGE=7 "$CLSHIM" config >"$TMP/config.out"
grep -q "CLSHIM_CACHE_MAX_AGE *= 7 *(environment)" "$TMP/config.out" || fail "config: environment source"
grep -q "CLSHIM_LOG *= warn *(default)" "$TMP/config.out" || fail "config: default source"
mkdir -p "$XDG_CONFIG_HOME/clshim"
echo "CLSHIM_CACHE_MAX_SIZE=2G" >"$XDG_CONFIG_HOME/clshim/clshim.conf"
"$CLSHIM" config >"$TMP/config2.out"
grep -q "CLSHIM_CACHE_MAX_SIZE *= 2147483648 *(config file)" "$TMP/config2.out" || fail "config: file source"
rm "$XDG_CONFIG_HOME/clshim/clshim.conf"
ok "clshim config shows each value and its source"

# Captured first: with pipefail, grep -q leaving early could fail the writer (SIGPIPE).
"$CLSHIM" --version >"$TMP/version.out"
grep -q "^clshim [0-9]" "$TMP/version.out" || fail "--version"
"$CLSHIM" --help >"$TMP/help.out"
grep -q "clshim run" "$TMP/help.out" || fail "--help"
set +e
"$CLSHIM" frobnicate >/dev/null 2>&1; rc=$?
"$CLSHIM" run >/dev/null 2>&1; rc2=$?
set -e
[ "$rc" = 2 ] && [ "$rc2" = 2 ] || fail "usage errors must exit 2 ($rc, $rc2)"
ok "--version, --help, usage errors"

# make install into a private prefix, then use the installed wrapper.
# Under check-sanitize the build's objects carry the sanitizer: link alike.
san=""
case "${CLSHIM_SANITIZED:-}" in address) san="SAN=address,undefined OPT=-O1" ;; thread) san="SAN=thread OPT=-O1" ;; esac
make -s -C "$CLSHIM_ROOT" BUILD="$CLSHIM_BUILD" $san install PREFIX="$TMP/prefix" >/dev/null
for f in bin/clshim lib/clshim/libclshim.so lib/clshim/libclshim-llvm.so lib/clshim/clshim-tool \
         include/CL/clshim_ext.h lib/pkgconfig/clshim.pc share/man/man1/clshim.1 \
         share/doc/clshim/README.md share/doc/clshim/docs/commands.md share/doc/clshim/docs/config.md; do
    [ -e "$TMP/prefix/$f" ] || fail "make install did not install $f"
done
fresh_pocl; "$TMP/prefix/bin/clshim" run -- "$MK" >"$TMP/inst.out" 2>"$TMP/inst.err"; echo $? >"$TMP/inst.rc"
same_output plain inst "the installed clshim runs programs"
PKG_CONFIG_PATH=$TMP/prefix/lib/pkgconfig pkg-config --cflags clshim >"$TMP/pc.out"
grep -q "$TMP/prefix/include" "$TMP/pc.out" ||
    fail "pkg-config file"
ok "make install: library, wrapper, tool, header, pkg-config, man page, docs"

# The installed header compiles silently (no "CL_TARGET_OPENCL_VERSION is
# not defined" in users' builds), with gcc and clang.
printf '#include <CL/clshim_ext.h>\nint main(void) { clCompleteFusionCLSHIM_fn f = 0; return f != 0; }\n' >"$TMP/ext.c"
for c in cc clang-15; do
    command -v "$c" >/dev/null || fail "$c is not installed (scripts/install-deps.sh installs it)"
    "$c" $(cat "$TMP/pc.out") -Wall -Wextra -c "$TMP/ext.c" -o "$TMP/ext.o" 2>"$TMP/ext.err" ||
        fail "$c cannot compile a program including clshim_ext.h: $(cat "$TMP/ext.err")"
    [ ! -s "$TMP/ext.err" ] || fail "$c prints messages for clshim_ext.h: $(head -3 "$TMP/ext.err")"
done
ok "include/CL/clshim_ext.h compiles silently with gcc and clang"
finish
