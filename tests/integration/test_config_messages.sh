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

# The shim reads the config file at load, before the application's main: a
# FIFO there made every application wait for a writer, a device or a huge
# file had it read forever, a binary file gave a line per piece of it. Now
# only a regular file of at most 1 MiB is read, anything else ignored with
# one line that says what to do, and the run is the plain run. timeout
# bounds the application only (env, not timeout, loads the shim).
FC=$PROGS/fusion_chain
run_ref chain "$FC" --mode chain
under_conf() { # TAG: fusion_chain under the shim with $conf as it is now
    set +e
    timeout 20 env LD_PRELOAD="$SHIM" "$FC" --mode chain >"$TMP/$1.out" 2>"$TMP/$1.err"
    echo $? >"$TMP/$1.rc"
    set -e
}
one_config_line() { # TAG WHAT: exactly one clshim: line, the one about the config file; sets $line
    [ "$(count '^clshim: ' "$TMP/$1.err")" = 1 ] || { cat "$TMP/$1.err" >&2; fail "$2: not exactly one clshim: line"; }
    line=$(grep '^clshim: ' "$TMP/$1.err")
    same_output chain "$1" "$2: the plain run's results and exit code"
}
check_refused() { # TAG WHAT SAYS
    under_conf "$1"
    one_config_line "$1" "$2"
    [ "$line" = "clshim: config file $conf $3" ] || fail "$2: the line is: $line"
}
fix="ignored: make it a regular file of CLSHIM_NAME=value lines, or remove it"
mkfifo "$conf"
check_refused fifo "a FIFO as the config file" "is not a regular file (a FIFO); $fix"
rm "$conf"
ln -s /dev/zero "$conf"
check_refused zero "/dev/zero as the config file" "is not a regular file (a character device); $fix"
rm "$conf"
truncate -s 50M "$conf"
check_refused huge "a 50 MiB config file" "is 52428800 bytes, more than the 1 MiB a config file may have; \
ignored: keep only CLSHIM_NAME=value lines in it, or remove it"
rm "$conf"
# A binary file: one line, however many pieces of it are no setting; the
# first piece quoted, escaped and cut.
elf='"\x7fELF\x02' cut='..." is not a CLSHIM_NAME=value setting'
one_bad="clshim: $conf:1: $elf" many_bad="clshim: config file $conf: "
head -c 4096 /bin/ls >"$conf"
under_conf garbage
one_config_line garbage "4 KiB of /bin/ls as the config file"
[[ "$line" == "$one_bad"*"$cut; ignored" || "$line" == "$many_bad"[1-9]*" lines ignored; the first, line 1: $elf"*"$cut" ]] ||
    fail "4 KiB of /bin/ls: the line is: $line"
head -c 65536 /bin/ls >"$conf"
under_conf garbage64
one_config_line garbage64 "64 KiB of /bin/ls as the config file"
[[ "$line" == "$many_bad"[1-9]*" lines ignored; the first, line 1: $elf"*"$cut" ]] ||
    fail "64 KiB of /bin/ls: not one summary line: $line"
rm "$conf"
ok "a config file that is a FIFO, a device, huge or binary: one line each, the plain results"
finish
