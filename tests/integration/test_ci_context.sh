#!/bin/bash
# Untrusted CI contexts read only (issue 46): a GitHub Actions run for a
# pull request, or a GitLab pipeline on an unprotected ref or for a merge
# request from another project, never pushes to the remote tier and never
# signs, even when given a trusted job's configuration (remote, signing
# key); one line says why; CLSHIM_CI_CONTEXT=trusted|untrusted overrides.
# Simulated with the CI's own variables, against a real redis-server.
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info
MK=$PROGS/multikernel
TOOL=$CLSHIM_BUILD/clshim-tool
start_redis
export CLSHIM_REMOTE=$REDIS_URL CLSHIM_REMOTE_TIMEOUT=2000
R() { "${REDIS_CLI[@]}" "$@"; }
"$TOOL" cache keygen "$TMP/ci" >/dev/null || fail "keygen"
export CLSHIM_REMOTE_SIGN_KEY=$TMP/ci
# The CI variables of the machine running this test are not the case's.
unset GITHUB_ACTIONS GITHUB_EVENT_NAME GITLAB_CI CI_COMMIT_REF_PROTECTED CI_MERGE_REQUEST_SOURCE_PROJECT_ID \
    CI_PROJECT_ID CLSHIM_CI_CONTEXT

fresh_pocl; run_plain ref "$MK"
LINE='an untrusted CI context, so the remote tier is read only and nothing is signed'

# case TAG EXPECT(pushes|none) VAR=VALUE...: a cold run on a cache of its
# own and a namespace of its own; EXPECT says whether the server got a value.
case_run() {
    local tag=$1 expect=$2; shift 2
    run_shim "$tag" env "$@" CLSHIM_REMOTE_NAMESPACE="$tag" CLSHIM_CACHE_DIR="$TMP/cache-$tag" "$MK"
    same_output ref "$tag" "$tag: same results"
    [ "$(count '^clshim: miss ' "$TMP/$tag.err")" = 1 ] || fail "$tag: not one miss"
    local n; n=$(R --scan --pattern "$tag:e:*" | wc -l)
    if [ "$expect" = pushes ]; then
        [ "$n" = 1 ] || fail "$tag: $n values on the server, want the build pushed"
        [ "$(R --raw getrange "$(R --scan --pattern "$tag:e:*")" 0 7)" = CLSHIMV1 ] || fail "$tag: pushed unsigned"
        [ "$(count "$LINE" "$TMP/$tag.err")" = 0 ] || fail "$tag: a trusted context said it is untrusted"
    else
        [ "$n" = 0 ] || fail "$tag: an untrusted context pushed $n values"
        [ "$(count "$LINE" "$TMP/$tag.err")" = 1 ] || { cat "$TMP/$tag.err" >&2; fail "$tag: not one line saying why"; }
    fi
}

case_run gh-push-branch pushes GITHUB_ACTIONS=true GITHUB_EVENT_NAME=push
ok "GitHub Actions push event: pushes, signed"
case_run gh-pr none GITHUB_ACTIONS=true GITHUB_EVENT_NAME=pull_request
grep -q "^clshim: a GitHub Actions run for a pull request (pull_request event): $LINE" "$TMP/gh-pr.err" ||
    fail "gh-pr: the line does not say which context"
ok "GitHub Actions pull_request: reads only, one line says why"
case_run gh-prt none GITHUB_ACTIONS=true GITHUB_EVENT_NAME=pull_request_target
ok "GitHub Actions pull_request_target: reads only"
case_run gh-pr-trusted pushes GITHUB_ACTIONS=true GITHUB_EVENT_NAME=pull_request CLSHIM_CI_CONTEXT=trusted
ok "CLSHIM_CI_CONTEXT=trusted overrides the pull request's context"

case_run gl-protected pushes GITLAB_CI=true CI_COMMIT_REF_PROTECTED=true CI_PROJECT_ID=7
ok "GitLab pipeline on a protected ref: pushes, signed"
case_run gl-unprotected none GITLAB_CI=true CI_COMMIT_REF_PROTECTED=false CI_PROJECT_ID=7
ok "GitLab pipeline on an unprotected ref: reads only"
case_run gl-fork-mr none GITLAB_CI=true CI_COMMIT_REF_PROTECTED=true CI_PROJECT_ID=7 \
    CI_MERGE_REQUEST_SOURCE_PROJECT_ID=9
ok "GitLab merge request from another project: reads only"

case_run plain-untrusted none CLSHIM_CI_CONTEXT=untrusted
ok "CLSHIM_CI_CONTEXT=untrusted outside CI: reads only"

# Reads still work: an untrusted job hits what a trusted one pushed.
run_shim gh-pr-reader env GITHUB_ACTIONS=true GITHUB_EVENT_NAME=pull_request CLSHIM_REMOTE_NAMESPACE=gh-push-branch \
    CLSHIM_REMOTE_TRUST="$TMP/ci.pub" CLSHIM_CACHE_DIR="$TMP/cache-reader" "$MK"
same_output ref gh-pr-reader "untrusted reader: same results"
[ "$(count 'hit .*(remote)' "$TMP/gh-pr-reader.err")" = 1 ] || fail "untrusted reader: no remote hit"
ok "an untrusted context still takes trusted values from the remote tier"

# A bad value is refused like any other.
run_shim bad env CLSHIM_CI_CONTEXT=sometimes CLSHIM_REMOTE_NAMESPACE=bad CLSHIM_CACHE_DIR="$TMP/cache-bad" "$MK"
same_output ref bad "CLSHIM_CI_CONTEXT=sometimes: same results"
grep -q 'CLSHIM_CI_CONTEXT.*auto, trusted or untrusted' "$TMP/bad.err" || fail "bad value: no line naming the choices"
ok "CLSHIM_CI_CONTEXT=sometimes: one line naming the choices, auto used"
finish
