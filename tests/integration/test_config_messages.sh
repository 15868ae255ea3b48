#!/bin/bash
# Configuration faults as a user meets them: a bad value is reported once
# per application run, not once per process that loads clshim (the
# driver's linker children, the capture helper, `clshim run --wait`'s
# helpers); a misspelt name is reported once with the closest knob; a bad
# line of the config file is named by file and line, and `clshim config`
# says the value in effect is not the one written.
source "$(dirname "$0")/lib.sh"
CLSHIM=$CLSHIM_BUILD/clshim
MK=$PROGS/multikernel

run_plain plain "$MK"
fresh_pocl
CLSHIM_CACHE_MAX_SIZE=banana CLSHIM_FUSON=auto "$CLSHIM" run --wait -- "$MK" >"$TMP/run.out" 2>"$TMP/run.err"
echo $? >"$TMP/run.rc"
same_output plain run "a run with a bad value and a misspelt name gives the same results"
[ "$(count 'CLSHIM_CACHE_MAX_SIZE=banana is not valid' "$TMP/run.err")" = 1 ] ||
    { cat "$TMP/run.err" >&2; fail "the bad value was not reported exactly once"; }
grep -q 'using the default "1G"' "$TMP/run.err" || fail "the report does not say what is used instead"
[ "$(count 'CLSHIM_FUSON is not a clshim knob; ignored (did you mean CLSHIM_FUSION?)' "$TMP/run.err")" = 1 ] ||
    { cat "$TMP/run.err" >&2; fail "the misspelt name was not reported exactly once, with the knob"; }
ok "clshim run --wait: each fault reported once, with the closest knob"

fresh_pocl
CLSHIM_CACHE_MAX_SIZE=banana CLSHIM_LOG_FILE=$TMP/log run_shim shim "$MK"
[ "$(count 'banana' "$TMP/log")" = 1 ] || { cat "$TMP/log" >&2; fail "under LD_PRELOAD: not reported once"; }
ok "under LD_PRELOAD with a log file: reported once"

mkdir -p "$XDG_CONFIG_HOME/clshim"
conf=$XDG_CONFIG_HOME/clshim/clshim.conf
printf '# mine\nCLSHIM_CACHE_MAX_SIZE=2G\nCLSHIM_LOG=loud\n' >"$conf"
"$CLSHIM" config >"$TMP/config.out" 2>"$TMP/config.err"
grep -qF "$conf:3: CLSHIM_LOG=loud is not valid (accepts error, warn, info or debug); using the default \"warn\"" \
    "$TMP/config.err" || { cat "$TMP/config.err" >&2; fail "clshim config: no file and line for a bad value"; }
grep -q 'CLSHIM_LOG  *= warn  *(default; line 3 of the config file is not valid)' "$TMP/config.out" ||
    fail "clshim config shows a bad file value as a plain default"
CLSHIM_CACHE_MAX_SIZE=pear "$CLSHIM" config >"$TMP/config2.out" 2>"$TMP/config2.err"
grep -q 'CLSHIM_CACHE_MAX_SIZE=pear is not valid .*using "2147483648" from the config file' "$TMP/config2.err" ||
    fail "an environment fault over a file value does not say the file's value is used"
grep -q 'CLSHIM_CACHE_MAX_SIZE *= 2147483648 *(config file; the environment.s value is not valid)' \
    "$TMP/config2.out" || fail "clshim config hides the environment's bad value"
rm "$conf"
ok "the config file's bad lines are named by file and line; clshim config shows what is in effect"
finish
