#!/bin/bash
# run-all: alone (starts an S3 server and weighs a dead one against the timeout)
# The remote tier on S3 (CLSHIM_REMOTE=s3://BUCKET/PREFIX with
# CLSHIM_REMOTE_ENDPOINT, requests signed with AWS SigV4 by libcurl):
# against moto's S3 server (PyPI `moto[server]`, installed by
# scripts/install-deps.sh) on 127.0.0.1, stopping by itself, a second
# machine with an empty cache compiles nothing and gets the same results;
# the requests are signed; a read-only client writes nothing; `clshim
# cache remote ping|stats|rm` work; a dead endpoint costs at most 2 x the
# timeout and no result.
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info
MK=$PROGS/multikernel
TOOL=$CLSHIM_BUILD/clshim-tool
T=400
MOTO_PY=$CLSHIM_ROOT/.deps/moto/bin/python # scripts/install-deps.sh made it
"$MOTO_PY" -c 'import moto.server, boto3' 2>/dev/null || fail "moto[server] is not installed in .deps/moto: run scripts/install-deps.sh"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
timeout 150 "$MOTO_PY" -m moto.server -H 127.0.0.1 -p "$port" >"$TMP/moto.log" 2>&1 &
MOTO=$!
trap 'kill $MOTO 2>/dev/null || true' EXIT
export AWS_ACCESS_KEY_ID=AKIDCLSHIMTEST AWS_SECRET_ACCESS_KEY=clshim-secret-$RANDOM$RANDOM AWS_REGION=us-east-1
export CLSHIM_REMOTE_ENDPOINT=http://127.0.0.1:$port CLSHIM_REMOTE=s3://ci-cache/clshim CLSHIM_REMOTE_TIMEOUT=3000
s3() { # python statements with `s3`, a boto3 client on the server
    "$MOTO_PY" -c "import boto3; s3 = boto3.client('s3', endpoint_url='$CLSHIM_REMOTE_ENDPOINT', region_name='us-east-1'); $1"
}
for _ in $(seq 100); do s3 'pass' 2>/dev/null && s3 "s3.list_buckets()" 2>/dev/null && break; sleep 0.1; done
s3 "s3.create_bucket(Bucket='ci-cache')" || fail "cannot create the bucket on moto"
objects() { s3 "print('\n'.join(o['Key'] for o in s3.list_objects_v2(Bucket='ci-cache').get('Contents', [])))"; }

fresh_pocl; run_plain ref "$MK"

"$TOOL" cache remote ping | grep -q PONG || fail "remote ping"
CLSHIM_REMOTE=s3://no-such-bucket/x "$TOOL" cache remote ping >/dev/null 2>&1 && fail "ping of a missing bucket succeeded"
ok "clshim cache remote ping: the bucket answers, a missing one does not"

# Machine A compiles and pushes one object.
fresh_pocl; run_shim a env CLSHIM_CACHE_DIR="$TMP/cache-a" "$MK"
same_output ref a "machine A: same results as without clshim"
[ "$(count 'miss ' "$TMP/a.err")" = 1 ] || fail "machine A: expected one miss"
objects >"$TMP/objs"
[ "$(grep -c '^clshim/clshim/[0-9a-f]\{32\}$' "$TMP/objs")" = 1 ] || fail "machine A: objects: $(cat "$TMP/objs")"
key=$(sed 's|.*/||' "$TMP/objs")
grep -q 'PUT /ci-cache/clshim/clshim/' "$TMP/moto.log" || fail "no PUT in moto's log"
ok "machine A: compiled, pushed one object"

# Machine B compiles nothing.
fresh_pocl; run_shim b env CLSHIM_CACHE_DIR="$TMP/cache-b" "$MK"
same_output ref b "machine B: same results"
[ "$(count 'miss ' "$TMP/b.err")" = 0 ] && [ "$(count 'hit .*(remote)' "$TMP/b.err")" = 1 ] ||
    fail "machine B: expected a remote hit and no compile"
grep -q -- "$AWS_SECRET_ACCESS_KEY" "$TMP/a.err" "$TMP/b.err" && fail "the secret was logged"
ok "machine B: a remote hit, no compile; the secret never logged"

# The requests are signed with libcurl's SigV4 (moto accepts unsigned ones
# too): one ping against http_store.py, which logs the Authorization header.
timeout 60 python3 "$CLSHIM_ROOT/tests/integration/http_store.py" store "$TMP/rec.port" 60 &
for _ in $(seq 100); do [ -s "$TMP/rec.port" ] && break; sleep 0.05; done
CLSHIM_REMOTE_ENDPOINT=http://127.0.0.1:$(cat "$TMP/rec.port") "$TOOL" cache remote ping >/dev/null 2>&1 || true
grep -q "^HEAD /ci-cache auth=AWS4-HMAC-SHA256 Credential=$AWS_ACCESS_KEY_ID/[0-9]\{8\}/us-east-1/s3/aws4_request" \
    "$TMP/rec.port.log" || fail "the request was not signed: $(cat "$TMP/rec.port.log")"
ok "requests are signed (AWS SigV4, us-east-1, s3)"

"$TOOL" cache remote stats >"$TMP/rs.out" 2>&1
grep -q '(S3: answers)' "$TMP/rs.out" || fail "remote stats: $(cat "$TMP/rs.out")"
ok "clshim cache remote stats"

# A read-only client writes nothing.
before=$(objects | wc -l)
fresh_pocl; run_shim ro env CLSHIM_REMOTE_READONLY=1 CLSHIM_REMOTE_NAMESPACE=ro CLSHIM_CACHE_DIR="$TMP/cache-ro" "$MK"
same_output ref ro "read-only client: same results"
[ "$(objects | wc -l)" = "$before" ] || fail "a read-only client wrote"
ok "read-only client: writes nothing"

# rm deletes the object.
"$TOOL" cache remote rm "$key" >"$TMP/rm.out" 2>&1 || fail "remote rm: $(cat "$TMP/rm.out")"
[ "$(objects | grep -c "$key")" = 0 ] || fail "remote rm: the object is still there"
ok "clshim cache remote rm"

# Wrong credentials are refused by a real S3; moto does not check them, so
# a dead endpoint stands for the failing store here.
remote_base_ms "$MK"
base=$BASE_MS
dead=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
t=$(ms run_shim dead env POCL_CACHE_DIR="$TMP/pocl-warm" CLSHIM_REMOTE_ENDPOINT="http://127.0.0.1:$dead" \
    CLSHIM_REMOTE_TIMEOUT=$T CLSHIM_CACHE_DIR="$TMP/cache-dead" "$MK")
same_output ref dead "dead endpoint: same results"
[ $((t - base)) -le $((2 * T)) ] || fail "dead endpoint: $((t - base)) ms longer than without a remote tier"
ok "dead endpoint: +$((t - base)) ms (<= 2 x $T ms), same results"
finish
