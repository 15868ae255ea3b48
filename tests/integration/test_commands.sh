#!/bin/bash
# The one command table (tools/cmdtable.h): --help, each command's help, the
# man page and docs/commands.md come from it and agree with it; every command
# and option that scripts/clshim, clshim-tool and `clshim cache` dispatch has a
# row, and every row's command answers --help.
source "$(dirname "$0")/lib.sh"
CLSHIM=$CLSHIM_BUILD/clshim
TOOL=$CLSHIM_BUILD/clshim-tool
ROOT=$CLSHIM_ROOT

"$TOOL" help --man >"$TMP/man"
cmp -s "$TMP/man" "$ROOT/docs/clshim.1" || { diff "$TMP/man" "$ROOT/docs/clshim.1" | head >&2
    fail "docs/clshim.1 differs from the command table: run make docs"; }
"$TOOL" help --docs >"$TMP/docs"
cmp -s "$TMP/docs" "$ROOT/docs/commands.md" || { diff "$TMP/docs" "$ROOT/docs/commands.md" | head >&2
    fail "docs/commands.md differs from the command table: run make docs"; }
ok "the man page and docs/commands.md are what the table generates"

"$TOOL" help --list >"$TMP/list"
# A group ("plan") has rows under it ("plan suggest").
has() { grep -qxF -- "$1" "$TMP/list" || grep -q "^$1 [a-z]" "$TMP/list" || fail "$2 dispatches '$1', which has no row in tools/cmdtable.h"; }
# scripts/clshim: the commands of its last `case "$cmd"` and run's options.
awk '/^case "\$cmd" in/ { on = 1; next } on && /^esac/ { on = 0 }
     on && /^    [^ ].*\)/ { sub(/\).*/, ""); gsub(/^ +/, ""); n = split($0, w, "|"); for (i = 1; i <= n; i++) print w[i] }' \
    "$ROOT/scripts/clshim" >"$TMP/script-cmds"
[ "$(wc -l <"$TMP/script-cmds")" -ge 8 ] || fail "found too few commands in scripts/clshim"
while read -r c; do
    case "$c" in -h|--help|-V|version|'""'|'*') continue ;; esac # spellings of help and --version; the error
    has "$c" scripts/clshim
done <"$TMP/script-cmds"
has "plan suggest" scripts/clshim
awk '/^    run\)/ { on = 1 } on && /^        \[ \$# -gt 0 \]/ { on = 0 }
     on && /^ +--[a-z]+[=*]*\)/ { sub(/^ +/, ""); sub(/[=*]*\).*/, ""); print }' "$ROOT/scripts/clshim" |
    sort -u >"$TMP/run-opts"
[ "$(wc -l <"$TMP/run-opts")" -ge 4 ] || fail "found too few run options in scripts/clshim"
while read -r o; do has "run $o" "clshim run"; done <"$TMP/run-opts"
# clshim-tool's commands (capture-helper, capture-one and llvm-child are the shim's own, not a user's).
awk '/^int main/, 0' "$ROOT/tools/clshim-tool.c" | grep -o 'strcmp(argv\[1\], "[^"]*")' | sed 's/.*"\(.*\)")/\1/' | grep -v '^capture-helper$' | grep -v '^capture-one$' | grep -v '^llvm-child$' |
    while read -r c; do has "$c" clshim-tool; done
# `clshim cache`'s subcommands.
grep -o 'strcmp(cmd, "[^"]*")' "$ROOT/tools/cache_cmd.c" | sed 's/.*"\(.*\)")/\1/' | grep -v '^-' |
    while read -r c; do has "cache $c" "clshim cache"; done
ok "every command and run option dispatched has a row in the table"

grep -v ' -' "$TMP/list" | while read -r c; do
    case "$c" in --version) continue ;; esac
    # shellcheck disable=SC2086 # the command's words are separate arguments
    "$CLSHIM" $c --help >"$TMP/h.out" 2>"$TMP/h.err" || fail "clshim $c --help failed: $(cat "$TMP/h.err")"
    grep -q "^usage: clshim $c" "$TMP/h.out" || fail "clshim $c --help does not show its usage"
done
"$CLSHIM" help cache evict >"$TMP/h.out"
grep -q -- "--older-than" "$TMP/h.out" || fail "clshim help cache evict: no --older-than"
ok "every command of the table answers --help with its usage"

"$CLSHIM" --help >"$TMP/help"
for c in "cache wait" "cache keygen" "plan suggest" doctor fuse ptx; do
    grep -q "clshim $c" "$TMP/help" || fail "--help lacks clshim $c"
done
for w in "clshim doctor" "clshim plan suggest" "clshim fuse" "clshim ptx" "--mode" "--wait" CLSHIM_FUSION CLSHIM_REMOTE; do
    man -l "$ROOT/docs/clshim.1" 2>/dev/null | grep -q -- "$w" || fail "the man page lacks $w"
done
ok "--help and the man page name every command, run --mode/--wait, CLSHIM_FUSION, CLSHIM_REMOTE"

# The docs name only commands and knobs that exist: every `clshim CMD [SUB]`
# in README.md, docs/*.md and the records of docs/measurements/*.md is a row
# (SUB must be one where CMD has subcommands), and every CLSHIM_ name is a
# knob, or one of the few other names that exist elsewhere (checked there).
docs=("$ROOT/README.md" "$ROOT/HACKING.md" "$ROOT"/docs/*.md "$ROOT"/docs/measurements/*.md)
grep -ohE '`clshim [a-z][a-z-]*( [a-z][a-z-]*)?' "${docs[@]}" | sed 's/^`clshim //' | sort -u >"$TMP/doc-cmds"
[ "$(wc -l <"$TMP/doc-cmds")" -ge 10 ] || fail "found too few commands in the docs"
while read -r cmd sub; do
    grep -qxF -- "$cmd" "$TMP/list" || grep -q "^$cmd [a-z]" "$TMP/list" || fail "the docs name clshim $cmd, which does not exist"
    if [ -n "$sub" ] && grep -q "^$cmd [a-z]" "$TMP/list"; then
        grep -qxF -- "$cmd $sub" "$TMP/list" || fail "the docs name clshim $cmd $sub, which does not exist"
    fi
done <"$TMP/doc-cmds"
"$TOOL" config | awk '{ print $1 }' | grep '^CLSHIM_' >"$TMP/knobs"
grep -ohE 'CLSHIM_[A-Z0-9_]*[A-Z0-9]' "${docs[@]}" | sort -u | grep -vxFf "$TMP/knobs" | while read -r name; do
    case "$name" in
        CLSHIM_NAME) ;; # the placeholder in CLSHIM_NAME=value
        CLSHIM_KERNEL_FUSION_EXTENSION_NAME) grep -q "$name" "$ROOT/include/CL/clshim_ext.h" || fail "$name is gone" ;;
        CLSHIM_LONG|CLSHIM_SANITIZED|CLSHIM_TEST_JOBS) # the test suite's own
            grep -rqw "$name" "$ROOT/tests/run-all.sh" "$ROOT/Makefile" "$ROOT/tests/integration/lib.sh" \
                "$ROOT/tests/reliability" || fail "$name is named in the docs but the test suite has no such name" ;;
        CLSHIM_ASSERT|CLSHIM_ASSERT_HELD|CLSHIM_ASSERT_NOT_HELD|CLSHIM_ASSERT_FATAL) # macros (HACKING.md)
            grep -qw "$name" "$ROOT/common/check.h" || fail "$name is named in the docs but common/check.h has no such name" ;;
        *) fail "the docs name $name, which is no knob (common/knobs.h)" ;;
    esac
done
ok "every clshim command and CLSHIM_ knob the docs name exists"

# A mistake is said in one line (not the usage) with the exit status of a
# usage error, 2: a misspelt command, option or value of a closed list with
# the closest one of the table.
said() { # RC LINE CMD...: CMD exits RC, prints nothing and says LINE on stderr
    local rc=$1 line=$2; shift 2
    local what="clshim ${*:2}"
    run_plain said "$@"
    [ "$(cat "$TMP/said.rc")" = "$rc" ] || fail "$what: exit status $(cat "$TMP/said.rc"), not $rc"
    [ "$(cat "$TMP/said.err")" = "$line" ] || fail "$what: said '$(cat "$TMP/said.err")', not '$line'"
    [ ! -s "$TMP/said.out" ] || fail "$what: printed '$(head -3 "$TMP/said.out")'"
}
said 2 "clshim: unknown command 'cach'; did you mean 'cache'?" "$CLSHIM" cach stats
said 2 "clshim: unknown command 'frobnicate' (clshim --help lists them)" "$CLSHIM" frobnicate
said 2 "clshim: unknown option '--verison'; did you mean '--version'?" "$CLSHIM" --verison
said 2 "clshim cache: unknown command 'stat'; did you mean 'stats'?" "$CLSHIM" cache stat
said 2 "clshim cache: evict: unknown option '--older-then'; did you mean '--older-than'?" \
    "$CLSHIM" cache evict --older-then 1d
said 2 "clshim cache: list: unknown --sort value 'hit'; did you mean 'hits'?" "$CLSHIM" cache list --sort=hit
said 2 "clshim cache: list: unknown --sort value 'x' (size, age, hits or last-use)" "$CLSHIM" cache list --sort=x
said 2 "clshim cache: list: --sort needs a value" "$CLSHIM" cache list --sort
said 2 "clshim cache: remote: unknown command 'pign'; did you mean 'ping'?" "$CLSHIM" cache remote pign
said 2 "clshim cache: export: unknown option '--sing'; did you mean '--sign'?" "$CLSHIM" cache export --sing k f
said 2 "clshim: run: unknown option '--mdoe'; did you mean '--mode'?" "$CLSHIM" run --mdoe preload -- true
said 2 "clshim: plan: unknown command 'sugest'; did you mean 'suggest'?" "$CLSHIM" plan sugest -- true
said 2 "clshim: config: unknown option '--doc'; did you mean '--docs'?" "$CLSHIM" config --doc
said 2 "clshim fuse: unknown --emit value 'ptxx'; did you mean 'ptx'?" "$CLSHIM" fuse --plan a+b --emit=ptxx f.cl
said 2 "clshim ptx: unknown option '--libdevic'; did you mean '--libdevice'?" "$CLSHIM" ptx --libdevic d f.cl
said 2 "clshim: no command 'cache stat'; did you mean 'cache stats'?" "$CLSHIM" help cache stat
ok "a misspelt command, option or value: one line with the closest one, exit 2"

# --help after a subcommand's arguments, and -V, as everywhere else.
run_plain remote-help "$CLSHIM" cache remote ping --help
[ "$(cat "$TMP/remote-help.rc")" = 0 ] || fail "clshim cache remote ping --help: exit $(cat "$TMP/remote-help.rc")"
grep -q "^usage: clshim cache remote ping|stats" "$TMP/remote-help.out" ||
    fail "clshim cache remote ping --help: no usage: $(cat "$TMP/remote-help.err")"
"$CLSHIM" --version >"$TMP/version-long"
"$CLSHIM" -V >"$TMP/version-short" || fail "clshim -V failed"
cmp -s "$TMP/version-long" "$TMP/version-short" || fail "clshim -V printed '$(cat "$TMP/version-short")'"
ok "clshim cache remote ping --help prints its usage; clshim -V is --version"

# A command that cannot be run: one line of clshim's, the shell's status
# (127 not found, 126 not runnable), none of the wrapper's own lines.
said 127 "clshim: run: /nonexistent: No such file or directory" "$CLSHIM" run -- /nonexistent
said 127 "clshim: run: /nonexistent: No such file or directory" "$CLSHIM" run --wait --mode=auto -- /nonexistent
said 127 "clshim: run: no-such-command-here: command not found" "$CLSHIM" run -- no-such-command-here
said 126 "clshim: run: $TMP: Is a directory" "$CLSHIM" run -- "$TMP"
printf '#!/no/such/interpreter -x\n' >"$TMP/script" && chmod +x "$TMP/script"
said 127 "clshim: run: $TMP/script: /no/such/interpreter: bad interpreter: No such file or directory" \
    "$CLSHIM" run -- "$TMP/script"
touch "$TMP/not-executable"
said 126 "clshim: run: $TMP/not-executable: Permission denied" "$CLSHIM" run -- "$TMP/not-executable"
ok "clshim run of a command that cannot be run: one line, exit 127 or 126"

# A bad --mode lists every mode, and each of them runs.
modes="preload, loader, layer, auto, preload+loader, preload+layer, loader+layer or preload+loader+layer"
said 2 "clshim: run: unknown mode 'prelod'; did you mean 'preload'? ($modes)" "$CLSHIM" run --mode=prelod -- true
said 2 "clshim: run: unknown mode '' ($modes)" "$CLSHIM" run --mode= -- true
said 2 "clshim: run: unknown mode 'preload+'; did you mean 'preload'? ($modes)" "$CLSHIM" run --mode=preload+ -- true
for m in ${modes//,/} layer+preload; do
    [ "$m" = or ] && continue
    "$CLSHIM" run --mode="$m" -- true || fail "clshim run --mode=$m, a mode it lists, fails"
done
ok "a bad --mode lists the modes and their combinations, each of which runs"

# The script as it is in the source tree (not made by make).
CLSHIM_LIBDIR=$CLSHIM_BUILD "$ROOT/scripts/clshim" --version >"$TMP/version"
grep -qx "clshim [0-9][0-9.]*" "$TMP/version" || fail "scripts/clshim --version printed '$(cat "$TMP/version")'"
ok "scripts/clshim --version from a source tree prints the version"
finish
