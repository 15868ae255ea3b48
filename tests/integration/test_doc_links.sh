#!/bin/bash
# The docs' links resolve: every relative markdown link in README.md,
# docs/*.md and docs/measurements/*.md names a file (or folder) that exists,
# and a link to a heading of a markdown file (FILE.md#anchor, or #anchor in
# the same file) names a heading it has, spelt as GitHub makes its anchors.
# Also: every file under docs/measurements/ is linked from some page, so no
# record lies there that no guide points to.
source "$(dirname "$0")/lib.sh"
ROOT=$CLSHIM_ROOT

# GitHub's anchor of a heading: lower case, spaces to '-', everything but
# letters, digits, '-' and '_' dropped (accented letters kept).
anchors() { # FILE -> its anchors, one a line
    awk '/^```/ { code = !code; next } !code && /^#+ / { sub(/^#+ /, ""); print }' "$1" |
        /usr/bin/python3 -c '
import re, sys
seen = {}
for h in sys.stdin.read().splitlines():
    a = re.sub(r"[^\w\- ]", "", h.strip().lower().replace("`", "")).replace(" ", "-")
    n = seen.get(a, 0)
    seen[a] = n + 1
    print(a if n == 0 else "%s-%d" % (a, n))'
}

pages=("$ROOT/README.md" "$ROOT/HACKING.md" "$ROOT"/docs/*.md "$ROOT"/docs/measurements/*.md)
links=0
: >"$TMP/targets"
for page in "${pages[@]}"; do
    dir=$(dirname "$page")
    # [text](target) outside code blocks and code spans; images too.
    awk '/^```/ { code = !code; next } !code { gsub(/`[^`]*`/, ""); print }' "$page" |
        grep -oE '\]\([^)[:space:]]+\)' | sed 's/^](//; s/)$//' >"$TMP/links" || true
    while read -r target; do
        case "$target" in http://*|https://*|mailto:*) continue ;; esac
        links=$((links + 1))
        file=${target%%#*}
        anchor=
        [ "$file" != "$target" ] && anchor=${target#*#}
        path=$page
        if [ -n "$file" ]; then
            path=$dir/$file
            [ -e "$path" ] || fail "${page#"$ROOT"/} links to $target: no such file"
            realpath -m "$path" >>"$TMP/targets"
        fi
        if [ -n "$anchor" ]; then
            case "$path" in *.md) ;; *) continue ;; esac
            anchors "$path" >"$TMP/anchors"
            grep -qxF -- "$anchor" "$TMP/anchors" ||
                fail "${page#"$ROOT"/} links to $target: ${path#"$ROOT"/} has no heading with that anchor"
        fi
    done <"$TMP/links"
done
[ "$links" -ge 50 ] || fail "found only $links relative links: the scan is broken"
ok "all $links relative links of README.md and docs/ resolve, anchors too"

# A folder linked through a file in it (make-bench/meta.txt) links the folder.
for f in "$ROOT"/docs/measurements/*; do
    f=$(realpath -m "$f")
    grep -qxF "$f" "$TMP/targets" || grep -q "^$f/" "$TMP/targets" ||
        fail "docs/measurements/$(basename "$f") is linked from no page of the docs"
done
ok "every record in docs/measurements/ is linked from the docs"
finish
