#!/bin/bash
# run-all: alone (weighs each run's delay against the remote timeout)
# The remote tier on an HTTP object store (CLSHIM_REMOTE=http://..., libcurl):
# against a small store written for the test (http_store.py, on 127.0.0.1,
# stopping by itself), a runner with an empty cache hits what another pushed
# (one object per entry, PUT then GET), with identical results and no
# compile; the bearer token from CLSHIM_REMOTE_PASSWORD_FILE is sent and
# never logged; a wrong token changes no result; `clshim cache remote
# ping|stats|rm` work; a read-only client never PUTs; a value that is not
# signed is refused with CLSHIM_REMOTE_TRUST; and a silent, a trickling and
# a garbage-answering server each cost at most 2 x the timeout, never a
# result, and are counted.
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info
MK=$PROGS/multikernel
TOOL=$CLSHIM_BUILD/clshim-tool
STORE=$CLSHIM_ROOT/tests/integration/http_store.py
T=400 # ms: large beside the noise of one run on a shared machine

SERVERS=""
stop_servers() { local p; for p in $SERVERS; do kill "$p" 2>/dev/null || true; done; }
trap stop_servers EXIT
# serve MODE TAG [TOKEN]: a store on 127.0.0.1 (URL in $URL, its request log
# $TMP/TAG.port.log), gone after 120 s at most.
serve() {
    timeout 120 python3 "$STORE" "$1" "$TMP/$2.port" 120 "${3:-}" &
    SERVERS="$SERVERS $!"
    for _ in $(seq 100); do [ -s "$TMP/$2.port" ] && break; sleep 0.05; done
    [ -s "$TMP/$2.port" ] || fail "http_store $1 did not start"
    URL=http://127.0.0.1:$(cat "$TMP/$2.port")/ci
}

fresh_pocl; run_plain ref "$MK"

TOKEN=tok-$RANDOM$RANDOM-secret
echo "$TOKEN" >"$TMP/token"
serve store st "$TOKEN"
export CLSHIM_REMOTE=$URL CLSHIM_REMOTE_PASSWORD_FILE=$TMP/token CLSHIM_REMOTE_TIMEOUT=2000
LOG=$TMP/st.port.log

# Machine A (its own cache dir) compiles and pushes.
fresh_pocl; run_shim a env CLSHIM_CACHE_DIR="$TMP/cache-a" "$MK"
same_output ref a "machine A: same results as without clshim"
[ "$(count 'miss ' "$TMP/a.err")" = 1 ] || fail "machine A: expected one miss"
[ "$(grep -c '^PUT /ci/clshim/[0-9a-f]\{32\} auth=Bearer '"$TOKEN"'$' "$LOG")" = 1 ] ||
    fail "machine A: expected one PUT with the token: $(cat "$LOG")"
key=$(sed -n 's|^PUT /ci/clshim/\([0-9a-f]\{32\}\) .*|\1|p' "$LOG")
ok "machine A: compiled, pushed one object with the bearer token"

# Machine B (another, empty cache dir) compiles nothing.
remote_hit_run b "$MK"
grep -q "GET /ci/clshim/$key auth=Bearer $TOKEN" "$LOG" || fail "machine B: no GET of the object"
ok "machine B: a remote hit, no compile"
grep -q -- "$TOKEN" "$TMP/a.err" "$TMP/b.err" && fail "the token was logged"
"$TOOL" config | grep -q -- "$TOKEN" && fail "clshim config shows the token"
ok "the token is never logged"

"$TOOL" cache remote ping | grep -q 'PONG' || fail "remote ping"
"$TOOL" cache remote stats >"$TMP/rs.out" || fail "remote stats: $(cat "$TMP/rs.out")"
grep -q '(HTTP: answers)' "$TMP/rs.out" || fail "remote stats: $(cat "$TMP/rs.out")"
ok "clshim cache remote ping and stats"

# A wrong token: refused, counted, same results (a compile).
echo wrong >"$TMP/wrong"
fresh_pocl; run_shim wr env CLSHIM_REMOTE_PASSWORD_FILE="$TMP/wrong" CLSHIM_CACHE_DIR="$TMP/cache-wr" "$MK"
same_output ref wr "wrong token: same results"
[ "$(count 'miss ' "$TMP/wr.err")" = 1 ] || fail "wrong token: expected a compile"
grep -q 'HTTP status 401' "$TMP/wr.err" || fail "wrong token: not reported: $(grep clshim "$TMP/wr.err")"
"$TOOL" cache --dir "$TMP/cache-wr" stats --json | grep -q '"remote_refused": 1,' || fail "wrong token: not counted"
ok "wrong token: refused once, counted, same results"

# Trusted writers: unsigned values are ignored with CLSHIM_REMOTE_TRUST.
"$TOOL" cache keygen "$TMP/builder" >/dev/null || fail "keygen"
fresh_pocl; run_shim un env CLSHIM_REMOTE_TRUST="$TMP/builder.pub" CLSHIM_CACHE_DIR="$TMP/cache-un" "$MK"
same_output ref un "trust, unsigned value: same results"
[ "$(count 'miss ' "$TMP/un.err")" = 1 ] && [ "$(count 'ignored: untrusted' "$TMP/un.err")" = 1 ] ||
    fail "trust: an unsigned value was taken"
# Signed by the builder in namespace "signed", then taken by a trusting reader.
fresh_pocl; run_shim sa env CLSHIM_REMOTE_NAMESPACE=signed CLSHIM_REMOTE_SIGN_KEY="$TMP/builder" \
    CLSHIM_CACHE_DIR="$TMP/cache-sa" "$MK"
fresh_pocl; run_shim sb env CLSHIM_REMOTE_NAMESPACE=signed CLSHIM_REMOTE_TRUST="$TMP/builder.pub" \
    CLSHIM_CACHE_DIR="$TMP/cache-sb" "$MK"
same_output ref sb "trust, signed value: same results"
[ "$(count 'hit .*(remote)' "$TMP/sb.err")" = 1 ] || fail "trust: the signed value was not taken"
ok "signed values: unsigned ignored, the trusted builder's taken"

# A read-only client never writes.
puts=$(grep -c '^PUT ' "$LOG")
fresh_pocl; run_shim ro env CLSHIM_REMOTE_READONLY=1 CLSHIM_REMOTE_NAMESPACE=ro CLSHIM_CACHE_DIR="$TMP/cache-ro" "$MK"
same_output ref ro "read-only client: same results"
[ "$(grep -c '^PUT ' "$LOG")" = "$puts" ] || fail "a read-only client wrote"
ok "read-only client: never PUTs"

# `clshim cache remote rm` deletes the object: the next machine compiles.
"$TOOL" cache remote rm "${key:0:8}" >"$TMP/rm8.out" 2>&1 && fail "remote rm of a short prefix succeeded"
grep -q 'give all 32 digits' "$TMP/rm8.out" || fail "remote rm of a short prefix: $(cat "$TMP/rm8.out")"
"$TOOL" cache remote rm "$key" >"$TMP/rm.out" 2>&1 || fail "remote rm: $(cat "$TMP/rm.out")"
grep -q "^DELETE /ci/clshim/$key " "$LOG" || fail "remote rm sent no DELETE"
fresh_pocl; run_shim c env CLSHIM_CACHE_DIR="$TMP/cache-c" "$MK"
[ "$(count 'miss ' "$TMP/c.err")" = 1 ] || fail "after remote rm: expected a compile"
ok "clshim cache remote rm"
unset CLSHIM_REMOTE CLSHIM_REMOTE_PASSWORD_FILE CLSHIM_REMOTE_TIMEOUT

# Hostile servers: each costs at most 2 x the timeout, never a result.
remote_base_ms "$MK"
base=$BASE_MS
check() { # MODE KIND
    serve "$1" "$1"
    local t extra
    t=$(ms run_shim "$1" env POCL_CACHE_DIR="$TMP/pocl-warm" CLSHIM_REMOTE="$URL" CLSHIM_REMOTE_TIMEOUT=$T \
        CLSHIM_CACHE_DIR="$TMP/cache-$1" "$MK")
    extra=$((t - base))
    echo "$1: $t ms, +$extra ms over no remote tier (timeout $T ms, bound $((2 * T)) ms)"
    same_output ref "$1" "$1 server: same results as without clshim"
    [ "$extra" -le $((2 * T)) ] || fail "$1 server: the run took $extra ms longer; more than 2 x the timeout"
    [ "$(count 'remote tier off' "$TMP/$1.err")" = 1 ] || fail "$1 server: expected one breaker line"
    "$TOOL" cache --dir "$TMP/cache-$1" stats --json >"$TMP/$1.json"
    grep -q "\"remote_$2\": 1," "$TMP/$1.json" || fail "$1 server: not counted as $2: $(cat "$TMP/$1.json")"
    ok "$1 server: +$extra ms (<= 2 x $T ms), same results, counted as $2"
}
check silent timeouts
check trickle timeouts
check garbage garbage
# Nobody listening at all.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
t=$(ms run_shim dead env POCL_CACHE_DIR="$TMP/pocl-warm" CLSHIM_REMOTE="http://127.0.0.1:$port/ci" \
    CLSHIM_REMOTE_TIMEOUT=$T CLSHIM_CACHE_DIR="$TMP/cache-dead" "$MK")
same_output ref dead "dead server: same results"
[ $((t - base)) -le $((2 * T)) ] || fail "dead server: $((t - base)) ms longer"
"$TOOL" cache --dir "$TMP/cache-dead" stats --json | grep -q '"remote_lost": 1,' || fail "dead server: not counted"
ok "dead server: +$((t - base)) ms, same results, counted as lost"

# HTTPS (CLSHIM_REMOTE_CA): the server's certificate is always verified. One
# from a CA the client was not given is refused before any request (same
# results, a compile, reported); with the CA's file the tier works; a CA
# file that cannot be read turns the tier off with one line.
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$TMP/tls.key" -out "$TMP/tls.pem" -days 1 \
    -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 2>/dev/null || fail "openssl made no certificate"
HTTP_STORE_TLS=$TMP/tls.pem:$TMP/tls.key serve store tls
HTTPS=https://${URL#http://}
tls_run() { # TAG [VAR=VALUE...]
    local tag=$1
    shift
    fresh_pocl
    run_shim "$tag" env CLSHIM_REMOTE="$HTTPS" CLSHIM_REMOTE_PASSWORD_FILE= CLSHIM_REMOTE_TIMEOUT=2000 \
        CLSHIM_CACHE_DIR="$TMP/cache-$tag" "$@" "$MK"
    same_output ref "$tag" "https, $tag: same results"
}
tls_run tls_untrusted
[ "$(count 'miss ' "$TMP/tls_untrusted.err")" = 1 ] || fail "https, CA not given: expected a compile"
grep -qi 'certificate' "$TMP/tls_untrusted.err" || fail "https, CA not given: no word of the certificate: $(grep clshim "$TMP/tls_untrusted.err")"
[ ! -s "$TMP/tls.port.log" ] || fail "https, CA not given: a request reached the store: $(cat "$TMP/tls.port.log")"
ok "https: a certificate from a CA not given is refused before any request"
tls_run tls_a CLSHIM_REMOTE_CA="$TMP/tls.pem"
[ "$(grep -c '^PUT /ci/clshim/' "$TMP/tls.port.log")" = 1 ] || fail "https, CA given: expected one PUT"
tls_run tls_b CLSHIM_REMOTE_CA="$TMP/tls.pem"
[ "$(count 'miss ' "$TMP/tls_b.err")" = 0 ] && [ "$(count 'hit .*(remote)' "$TMP/tls_b.err")" = 1 ] ||
    fail "https, CA given: expected a remote hit and no compile"
ok "https with CLSHIM_REMOTE_CA: pushed by one runner, a remote hit for the next"
tls_run tls_noca CLSHIM_REMOTE_CA="$TMP/no-such-ca.pem"
[ "$(count "CLSHIM_REMOTE_CA=$TMP/no-such-ca.pem: cannot be read" "$TMP/tls_noca.err")" = 1 ] ||
    fail "https, CA file missing: expected one line naming it"
ok "https: a CA file that cannot be read is said once; the tier is off"
finish
