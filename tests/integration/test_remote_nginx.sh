#!/bin/bash
# The remote tier on a stock nginx WebDAV server (Debian's nginx, a store
# nobody here wrote), started by the test on 127.0.0.1 and a free port with
# a private config, prefix, pid file and logs in $TMP, and stopped when the
# test exits: `clshim cache remote ping` and `stats` answer (nginx refuses a
# HEAD of the prefix, a directory it does not list: the ping HEADs an
# object name, 404 is a round trip); a cold run through the capture helper
# pushes once `clshim cache wait` returns, with basic auth from the URL that
# is never shown; a runner with an empty cache hits it; `remote rm`
# deletes it. A push nginx refuses (create_full_put_path off, the directory
# missing: PUT 500) is one line, through `cache wait` from the helper or in
# the application's own log, with the status and what to change, counted
# (Remote pushes refused), and turns nothing else off; creating the
# directory is the other cure.
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info CLSHIM_REMOTE_TIMEOUT=2000
MK=$PROGS/multikernel
TOOL=$CLSHIM_BUILD/clshim-tool
NGINX=$(command -v nginx || echo /usr/sbin/nginx) # /usr/sbin: not on every user's PATH
[ -x "$NGINX" ] || fail "no nginx: scripts/install-deps.sh installs it"

N=$TMP/nginx
mkdir -p "$N/www/ci" "$N/www/flat" "$N/temp"
PASS=pw-$RANDOM$RANDOM-secret
echo "ci:$(openssl passwd -apr1 "$PASS")" >"$N/htpasswd"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# Workers run as the user the test runs as (root drops to www-data, which
# cannot enter $TMP); as any other user nginx ignores the line.
cat >"$N/nginx.conf" <<EOF
daemon off;
worker_processes 1;
user $(id -un) $(id -gn);
pid $N/nginx.pid;
error_log $N/error.log info;
events { worker_connections 64; }
http {
    access_log $N/access.log;
    client_body_temp_path $N/temp;
    proxy_temp_path $N/temp;
    fastcgi_temp_path $N/temp;
    uwsgi_temp_path $N/temp;
    scgi_temp_path $N/temp;
    server {
        listen 127.0.0.1:$PORT;
        root $N/www;
        # What docs/cache.md asks of nginx: PUT and DELETE, directories
        # created, bodies up to CLSHIM_REMOTE_MAX_VALUE.
        location /ci/ {
            auth_basic clshim;
            auth_basic_user_file $N/htpasswd;
            dav_methods PUT DELETE;
            create_full_put_path on;
            client_max_body_size 64m;
        }
        # Without create_full_put_path: a PUT into a missing directory is 500.
        location /flat/ {
            dav_methods PUT DELETE;
            client_max_body_size 64m;
        }
    }
}
EOF
NGINX_PID=""
stop_nginx() { # timeout passes the TERM on to nginx's master, which stops its worker
    [ -z "$NGINX_PID" ] && return
    kill "$NGINX_PID" 2>/dev/null || true
    wait "$NGINX_PID" 2>/dev/null || true
    if [ -s "$N/nginx.pid" ]; then kill "$(cat "$N/nginx.pid")" 2>/dev/null || true; fi
}
trap stop_nginx EXIT
timeout 300 "$NGINX" -p "$N" -c "$N/nginx.conf" -e "$N/error.log" >"$N/stdout" 2>&1 &
NGINX_PID=$!
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.05; done
(exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null || fail "nginx did not start: $(cat "$N/stdout" "$N/error.log")"
LOG=$N/access.log
# nginx writes a request's access-log line after it has answered: a client
# that exits on the answer can be faster than the line. in_log PATTERN [N]:
# the log has PATTERN (N lines of it), waiting up to 5 s.
in_log() {
    local i
    for i in $(seq 100); do
        if [ -n "${2:-}" ]; then [ "$(grep -c -- "$1" "$LOG")" = "$2" ] && return 0
        else grep -q -- "$1" "$LOG" && return 0; fi
        sleep 0.05
    done
    return 1
}
URL=http://ci:$PASS@127.0.0.1:$PORT/ci
export CLSHIM_REMOTE=$URL

fresh_pocl; run_plain ref "$MK"

# ping and stats: the prefix is a directory nginx lists to nobody (403).
"$TOOL" cache remote ping >"$TMP/ping.out" 2>&1 || fail "remote ping: $(cat "$TMP/ping.out")"
grep -q "^http://ci:\*\*\*@127.0.0.1:$PORT/ci: PONG" "$TMP/ping.out" || fail "remote ping: $(cat "$TMP/ping.out")"
in_log "\"HEAD /ci/clshim/0\{32\} HTTP/1.1\" 404 " || fail "remote ping: not a HEAD of an object: $(cat "$LOG")"
"$TOOL" cache remote stats >"$TMP/rs.out" 2>&1 || fail "remote stats: $(cat "$TMP/rs.out")"
grep -q '(HTTP: answers)' "$TMP/rs.out" || fail "remote stats: $(cat "$TMP/rs.out")"
CLSHIM_REMOTE=http://ci:wrong@127.0.0.1:$PORT/ci "$TOOL" cache remote ping >"$TMP/ping-wrong.out" 2>&1 &&
    fail "remote ping with a wrong password succeeded"
grep -q 'HTTP status 401' "$TMP/ping-wrong.out" || fail "remote ping, wrong password: $(cat "$TMP/ping-wrong.out")"
ok "remote ping and stats answer on nginx; a wrong password fails the ping (401)"

# A query follows every object's path, and its values are never shown.
TOKEN=tok-$RANDOM$RANDOM
CLSHIM_REMOTE="$URL?token=$TOKEN" "$TOOL" cache remote ping >"$TMP/ping-q.out" 2>&1 || fail "ping with a query: $(cat "$TMP/ping-q.out")"
in_log "\"HEAD /ci/clshim/0\{32\}?token=$TOKEN HTTP/1.1\" 404 " || fail "ping with a query: $(tail -1 "$LOG")"
grep -q -- "$TOKEN" "$TMP/ping-q.out" && fail "remote ping shows the query's token"
CLSHIM_REMOTE="$URL?token=$TOKEN" CLSHIM_REMOTE_ENDPOINT="https://key:$PASS@minio.internal/x?X-Amz-Signature=$TOKEN" \
    "$TOOL" config >"$TMP/config.out"
grep -q -e "$PASS" -e "$TOKEN" "$TMP/config.out" && fail "clshim config shows a credential: $(grep REMOTE "$TMP/config.out")"
grep -q "^CLSHIM_REMOTE  *= http://ci:\*\*\*@127.0.0.1:$PORT/ci?token=\*\*\* " "$TMP/config.out" &&
    grep -q "^CLSHIM_REMOTE_ENDPOINT  *= https://key:\*\*\*@minio.internal/x?X-Amz-Signature=\*\*\* " "$TMP/config.out" ||
    fail "clshim config: $(grep REMOTE "$TMP/config.out")"
ok "clshim config redacts CLSHIM_REMOTE's and CLSHIM_REMOTE_ENDPOINT's password and query"

# Machine A: a cold run through the capture helper; once `cache wait`
# returns, the object is on nginx.
fresh_pocl; run_shim a env CLSHIM_CACHE_DIR="$TMP/cache-a" CLSHIM_CAPTURE_PROCESS=1 "$MK"
same_output ref a "machine A: same results as without clshim"
[ "$(count 'miss ' "$TMP/a.err")" = 1 ] || fail "machine A: expected one miss"
CLSHIM_CACHE_DIR=$TMP/cache-a "$TOOL" cache wait 2>"$TMP/a-wait.err" || fail "machine A: cache wait: $(cat "$TMP/a-wait.err")"
in_log '"PUT /ci/clshim/[0-9a-f]\{32\} HTTP/1.1" 201 ' 1 ||
    fail "machine A: expected one PUT answered 201 by the time cache wait returned: $(cat "$LOG")"
key=$(sed -n 's|.*"PUT /ci/clshim/\([0-9a-f]\{32\}\) .*|\1|p' "$LOG")
[ -s "$N/www/ci/clshim/$key" ] || fail "machine A: no object $key in nginx's root"
"$TOOL" cache --dir "$TMP/cache-a" stats --json | grep -q '"remote_pushes": 1,' || fail "machine A: the push is not counted"
ok "machine A: compiled, pushed one object to nginx before cache wait returned, counted"

# Machine B: a fresh local cache, a remote hit.
remote_hit_run b "$MK"
in_log "\"GET /ci/clshim/$key HTTP/1.1\" 200 " || fail "machine B: no GET of the object answered 200"
grep -q -- "$PASS" "$TMP/a.err" "$TMP/b.err" "$TMP/a-wait.err" "$TMP/ping.out" "$TMP/rs.out" &&
    fail "the password was shown"
ok "machine B: a remote hit from nginx, no compile; the password never shown"

# remote rm: a DELETE; the next machine compiles.
"$TOOL" cache remote rm "$key" >"$TMP/rm.out" 2>&1 || fail "remote rm: $(cat "$TMP/rm.out")"
in_log "\"DELETE /ci/clshim/$key HTTP/1.1\" 204 " || fail "remote rm: no DELETE answered 204"
[ ! -e "$N/www/ci/clshim/$key" ] || fail "remote rm: the object is still in nginx's root"
"$TOOL" cache remote rm "$key" >"$TMP/rm2.out" 2>&1 && fail "remote rm of a deleted object succeeded"
grep -q 'no entry' "$TMP/rm2.out" || fail "remote rm of a deleted object: $(cat "$TMP/rm2.out")"
fresh_pocl; run_shim c env CLSHIM_CACHE_DIR="$TMP/cache-c" "$MK"
same_output ref c "after remote rm: same results"
[ "$(count 'miss ' "$TMP/c.err")" = 1 ] || fail "after remote rm: expected a compile"
ok "remote rm deletes the object on nginx; the next machine compiles"

# A push nginx refuses (/flat: no create_full_put_path, no directory
# clshim/): one line with the status and the cure, counted, and nothing
# else turned off. Through the capture helper: `cache wait` says it.
export CLSHIM_REMOTE=http://127.0.0.1:$PORT/flat
refused_once() { # TAG FILE-WITH-THE-LINE PUTS-REFUSED-SO-FAR
    local tag=$1 where=$2 all
    same_output ref "$tag" "$tag: same results"
    in_log "\"PUT /flat/clshim/[0-9a-f]\{32\} HTTP/1.1\" 500 " "$3" ||
        fail "$tag: expected nginx to answer a PUT with 500"
    all=$(cat "$TMP/$tag.err" "$TMP/$tag-wait.err")
    [ "$(grep -c 'refused a push' <<<"$all")" = 1 ] || fail "$tag: expected one line of the refusal: $all"
    grep -q "^clshim: remote cache http://127.0.0.1:$PORT/flat refused a push: HTTP status 500 to PUT; the directory /flat/clshim/ may be missing (nginx: enable create_full_put_path, or create the directories)" \
        "$TMP/$where" || fail "$tag: not said in $where: $all"
    grep -q 'remote tier off' <<<"$all" && fail "$tag: a refused push turned the tier off: $all"
    "$TOOL" cache --dir "$TMP/cache-$tag" stats --json >"$TMP/$tag.json"
    grep -q '"remote_refused": 1,' "$TMP/$tag.json" && grep -q '"remote_pushes_refused": 1,' "$TMP/$tag.json" &&
        grep -q '"remote_lost": 0,' "$TMP/$tag.json" || fail "$tag: not counted as a refused push: $(cat "$TMP/$tag.json")"
    "$TOOL" cache --dir "$TMP/cache-$tag" stats | grep -q '^Remote pushes refused  *1 ' || fail "$tag: not in cache stats"
    echo "$tag: $(grep 'refused a push' <<<"$all")"
}
fresh_pocl; run_shim refused_helper env CLSHIM_CACHE_DIR="$TMP/cache-refused_helper" CLSHIM_CAPTURE_PROCESS=1 "$MK"
CLSHIM_CACHE_DIR=$TMP/cache-refused_helper "$TOOL" cache wait 2>"$TMP/refused_helper-wait.err" ||
    fail "refused push: cache wait failed: $(cat "$TMP/refused_helper-wait.err")"
refused_once refused_helper refused_helper-wait.err 1
ok "a push nginx refuses, from the capture helper: one line from cache wait, counted, the tier stays on"
# Captured in the application: its own log says it, once.
fresh_pocl; run_shim refused_app env CLSHIM_CACHE_DIR="$TMP/cache-refused_app" CLSHIM_CAPTURE_PROCESS=0 "$MK"
: >"$TMP/refused_app-wait.err"
refused_once refused_app refused_app.err 2
ok "a push nginx refuses, from the application: one line in its log, counted"

# The other cure: the directory exists, and the same location takes the push.
mkdir "$N/www/flat/clshim"
fresh_pocl; run_shim flat env CLSHIM_CACHE_DIR="$TMP/cache-flat" "$MK"
same_output ref flat "directory created: same results"
in_log '"PUT /flat/clshim/[0-9a-f]\{32\} HTTP/1.1" 201 ' || fail "directory created: the PUT still fails"
grep -q 'refused a push' "$TMP/flat.err" && fail "directory created: a refusal was said"
ok "with the directory created, nginx takes the push without create_full_put_path"
finish
