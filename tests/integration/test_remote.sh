#!/bin/bash
# run-all: alone (times builds against a hung server)
# The remote tier (CLSHIM_REMOTE) against a real redis-server on a unix
# socket in the test's temp dir (and once on 127.0.0.1): a runner with an
# empty cache hits what another pushed, with identical results and no
# compile; runners started together compile once; a server that stops or
# hangs costs one timeout at most and changes no result; a corrupt value is
# ignored; a read-only client writes nothing; the password is never shown.
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info
MK=$PROGS/multikernel
TOOL=$CLSHIM_BUILD/clshim-tool
start_redis
export CLSHIM_REMOTE=$REDIS_URL
# A 2 s deadline for every lookup but those that test deadlines (they set
# their own): a sanitizer build on a loaded machine misses the default
# 50 ms, and a lookup that times out counts as a timeout, not as what the
# check looks for.
export CLSHIM_REMOTE_TIMEOUT=2000
R() { "${REDIS_CLI[@]}" "$@"; }

fresh_pocl; run_plain ref "$MK"

# Runner A (its own cache dir) compiles and pushes.
fresh_pocl; run_shim a env CLSHIM_CACHE_DIR="$TMP/cache-a" "$MK"
same_output ref a "runner A: same results as without clshim"
[ "$(count 'miss ' "$TMP/a.err")" = 1 ] || fail "runner A: expected one miss"
[ "$(R --scan --pattern 'clshim:e:*' | wc -l)" = 1 ] || fail "runner A: expected one entry on the server"
[ "$(R --scan --pattern 'clshim:c:*' | wc -l)" = 0 ] || fail "runner A: its build claim was not released"
ok "runner A: compiled, pushed, claim released"

# Runner B (another, empty cache dir) hits remotely: nothing compiled.
fresh_pocl; run_shim b env CLSHIM_CACHE_DIR="$TMP/cache-b" "$MK"
same_output ref b "runner B: same results"
[ "$(count 'miss ' "$TMP/b.err")" = 0 ] || fail "runner B: compiled although the server had it"
[ "$(count 'hit .*(remote)' "$TMP/b.err")" = 1 ] || fail "runner B: expected a remote hit"
"$TOOL" cache --dir "$TMP/cache-b" stats --json >"$TMP/b.json"
grep -q '"remote_hits": 1, "remote_misses": 0, "remote_errors": 0' "$TMP/b.json" || fail "runner B: stats: $(cat "$TMP/b.json")"
"$TOOL" cache --dir "$TMP/cache-b" stats | grep -q '^Remote hits  *1$' || fail "runner B: stats text lacks remote hits"
ok "runner B: remote hit, no compile, counted in clshim cache stats"

fresh_pocl; run_shim b2 env CLSHIM_REMOTE= CLSHIM_CACHE_DIR="$TMP/cache-b" "$MK"
[ "$(count 'hit .*(disk)' "$TMP/b2.err")" = 1 ] || fail "runner B: the remote hit was not stored locally"
ok "a remote hit is stored in the local cache"

"$TOOL" cache remote ping | grep -q 'PONG' || fail "remote ping"
"$TOOL" cache remote stats --json >"$TMP/rs.json"
grep -q '"entries": 1,' "$TMP/rs.json" && grep -q '"hits": 1, "misses": 1, "pushes": 1' "$TMP/rs.json" ||
    fail "remote stats: $(cat "$TMP/rs.json")"
ok "clshim cache remote ping and stats"

# Four runners started together, each with empty caches: one compiles.
pids=""
for i in 1 2 3 4; do
    mkdir -p "$TMP/pocl-r$i"
    (POCL_CACHE_DIR=$TMP/pocl-r$i CLSHIM_CACHE_DIR=$TMP/cache-r$i CLSHIM_REMOTE_NAMESPACE=four \
        CLSHIM_REMOTE_EXPIRE=2 LD_PRELOAD=$SHIM \
        "$MK" >"$TMP/r$i.out" 2>"$TMP/r$i.err"; echo $? >"$TMP/r$i.rc") &
    pids="$pids $!"
done
wait $pids
misses=0; remote_hits=0
for i in 1 2 3 4; do
    cmp -s "$TMP/ref.out" "$TMP/r$i.out" && [ "$(cat "$TMP/r$i.rc")" = "$(cat "$TMP/ref.rc")" ] ||
        fail "runner $i of 4: results differ"
    misses=$((misses + $(count 'miss ' "$TMP/r$i.err")))
    remote_hits=$((remote_hits + $(count 'hit .*(remote)' "$TMP/r$i.err")))
done
[ $misses = 1 ] && [ $remote_hits = 3 ] || fail "4 runners together: $misses compiles, $remote_hits remote hits"
ok "4 runners started together: one compile, three remote hits, same results"
ttl=$(R ttl "$(R --scan --pattern 'four:e:*')")
[ "$ttl" -gt 172000 ] && [ "$ttl" -le 172800 ] || fail "CLSHIM_REMOTE_EXPIRE=2: the entry's TTL is $ttl s"
ok "CLSHIM_REMOTE_EXPIRE: entries expire after the given days"

# A corrupt remote value is ignored (and counted), then replaced.
key=$(R --scan --pattern 'clshim:e:*')
R setrange "$key" 300 "corrupt" >/dev/null
fresh_pocl; run_shim c env CLSHIM_CACHE_DIR="$TMP/cache-c" "$MK"
same_output ref c "corrupt remote value: same results"
[ "$(count 'miss ' "$TMP/c.err")" = 1 ] || fail "corrupt remote value: expected a compile"
"$TOOL" cache --dir "$TMP/cache-c" stats --json | grep -q '"remote_corrupt": 1' || fail "corrupt value not counted"
fresh_pocl; run_shim d env CLSHIM_CACHE_DIR="$TMP/cache-d" "$MK"
[ "$(count 'hit .*(remote)' "$TMP/d.err")" = 1 ] || fail "corrupt remote value: not replaced by the rebuild"
ok "corrupt remote value: ignored, counted, replaced"

# clCompileProgram + clLinkProgram use the remote tier as builds do: a
# runner with an empty cache compiles and links nothing.
CL=$PROGS/compilelink
fresh_pocl; run_plain clref "$CL"
fresh_pocl; run_shim cla env CLSHIM_REMOTE_NAMESPACE=cl CLSHIM_CACHE_DIR="$TMP/cache-cla" "$CL"
same_output clref cla "compile+link, first runner: same results"
[ "$(count 'miss ' "$TMP/cla.err")" = 3 ] || fail "compile+link, first runner: expected 3 misses"
[ "$(R --scan --pattern 'cl:e:*' | wc -l)" = 3 ] || fail "compile+link: expected 2 objects and 1 program pushed"
fresh_pocl; run_shim clb env CLSHIM_REMOTE_NAMESPACE=cl CLSHIM_CACHE_DIR="$TMP/cache-clb" "$CL"
same_output clref clb "compile+link, second runner: same results"
[ "$(count 'hit .*(remote, compiled object)' "$TMP/clb.err")" = 2 ] || fail "compile: objects not remote hits"
[ "$(count 'hit .*(remote, linked program)' "$TMP/clb.err")" = 1 ] || fail "link: not a remote hit"
[ "$(count 'miss ' "$TMP/clb.err")" = 0 ] || fail "compile+link, second runner: compiled or linked"
ok "compile and link: a runner with an empty cache hits remotely, compiles nothing"

# A binary moved under another key (each record resealed around another
# record's binary, every checksum valid) is refused on a remote fetch as on
# a local lookup: the binding ties a binary to its full key.
keys=($(R --scan --pattern 'cl:e:*'))
for k in "${keys[@]}"; do R --raw get "$k" | head -c -1 >"$TMP/${k##*:}.rec"; done
for i in "${!keys[@]}"; do
    a=${keys[$i]}; b=${keys[$(((i + 1) % ${#keys[@]}))]}
    "$CLSHIM_BUILD/tests/rel/rel_forge" swap-files "$TMP/${a##*:}.rec" "$TMP/${b##*:}.rec" "$TMP/swapped.rec" ||
        fail "rel_forge swap-files"
    R -x set "$a" <"$TMP/swapped.rec" >/dev/null
done
fresh_pocl; run_shim clsw env CLSHIM_REMOTE_NAMESPACE=cl CLSHIM_CACHE_DIR="$TMP/cache-clsw" "$CL"
same_output clref clsw "swapped remote binaries: same results"
[ "$(count 'hit ' "$TMP/clsw.err")" = 0 ] || fail "swapped remote binaries: one was served"
[ "$(count 'miss ' "$TMP/clsw.err")" = 3 ] || fail "swapped remote binaries: expected 3 compiles"
"$TOOL" cache --dir "$TMP/cache-clsw" stats --json | grep -q '"remote_corrupt": 3' ||
    fail "swapped remote binaries not counted: $("$TOOL" cache --dir "$TMP/cache-clsw" stats --json)"
ok "binaries moved under other keys on the server: refused, counted, rebuilt"

# Derived (fused) programs too: the second runner builds no fused kernel.
FC=$PROGS/fusion_chain
PLAN="offset+scale+square;blend+offset+square"
fresh_pocl; run_plain fref "$FC" --mode chain
fresh_pocl; run_shim fa env CLSHIM_FUSE="$PLAN" CLSHIM_REMOTE_NAMESPACE=fu CLSHIM_CACHE_DIR="$TMP/cache-fa" "$FC" --mode chain
fresh_pocl; run_shim fb env CLSHIM_FUSE="$PLAN" CLSHIM_REMOTE_NAMESPACE=fu CLSHIM_CACHE_DIR="$TMP/cache-fb" "$FC" --mode chain
same_output fref fa "fusion, first runner: same results"
same_output fref fb "fusion, second runner: same results"
[ "$(count 'building the fused kernel' "$TMP/fa.err")" = 1 ] || fail "fusion, first runner: fused kernel not built"
[ "$(count 'hit derived program .* (remote)' "$TMP/fb.err")" = 1 ] || fail "fusion: the fused program was not a remote hit"
[ "$(count 'building the fused kernel\|miss ' "$TMP/fb.err")" = 0 ] || fail "fusion, second runner: built something"
ok "derived (fused) programs: the second runner takes the fused program from the remote tier"

# A read-only client never writes: no push, no claim, no statistics.
writes() { R info commandstats | grep -E '^cmdstat_(set|setrange|del|unlink|eval|evalsha|hincrby|expire|flushall|flushdb):' || true; }
before=$(writes); keys_before=$(R dbsize)
fresh_pocl; run_shim ro1 env CLSHIM_REMOTE_READONLY=1 CLSHIM_REMOTE_NAMESPACE=ro CLSHIM_CACHE_DIR="$TMP/cache-ro1" "$MK"
fresh_pocl; run_shim ro2 env CLSHIM_REMOTE_READONLY=1 CLSHIM_CACHE_DIR="$TMP/cache-ro2" "$MK"
same_output ref ro1 "read-only client, miss: same results"
same_output ref ro2 "read-only client, hit: same results"
[ "$(count 'miss ' "$TMP/ro1.err")" = 1 ] && [ "$(count 'hit .*(remote)' "$TMP/ro2.err")" = 1 ] ||
    fail "read-only clients: expected a miss and a remote hit"
[ "$(writes)" = "$before" ] || { diff <(echo "$before") <(writes) >&2; fail "a read-only client wrote"; }
[ "$(R dbsize)" = "$keys_before" ] || fail "a read-only client added keys"
ok "read-only client: reads, never writes"

# The server hangs (SIGSTOP) before a run: one timeout, once, then the
# breaker; results unchanged. PoCL's own cache is warm, so the build is
# short and the timing comparison meaningful.
mkdir -p "$TMP/pocl-warm"
run_shim prime env POCL_CACHE_DIR="$TMP/pocl-warm" CLSHIM_REMOTE= CLSHIM_CACHE_DIR="$TMP/cache-prime" "$MK"
elapsed() { local t0 t1; t0=$(date +%s%N); "$@"; t1=$(date +%s%N); echo $(((t1 - t0) / 1000000)) >"$TMP/ms"; }
elapsed run_shim nore env POCL_CACHE_DIR="$TMP/pocl-warm" CLSHIM_REMOTE= CLSHIM_CACHE_DIR="$TMP/cache-nore" "$MK"
base_ms=$(cat "$TMP/ms")
kill -STOP "$REDIS_PID"
elapsed run_shim hung env POCL_CACHE_DIR="$TMP/pocl-warm" CLSHIM_REMOTE_TIMEOUT=1500 CLSHIM_CACHE_DIR="$TMP/cache-hung" "$MK"
hung_ms=$(cat "$TMP/ms")
kill -CONT "$REDIS_PID"
same_output ref hung "hung server: same results"
[ "$(count 'remote tier off' "$TMP/hung.err")" = 1 ] || fail "hung server: expected one breaker line"
grep -q 'timed out' "$TMP/hung.err" || fail "hung server: the timeout was not what stopped it"
extra=$((hung_ms - base_ms))
echo "hung server: $hung_ms ms vs $base_ms ms without a remote tier (timeout 1500 ms)"
[ $extra -lt 3000 ] || fail "hung server: $extra ms slower; more than one timeout"
ok "hung server: one timeout (+$extra ms), one log line, same results"

# The server is stopped in the middle of a run (after the lookup, during
# the compile): the push fails, once, and nothing else changes.
fresh_pocl
(CLSHIM_LOG=debug CLSHIM_REMOTE_NAMESPACE=mid CLSHIM_REMOTE_TIMEOUT=200 CLSHIM_CACHE_DIR=$TMP/cache-mid \
    LD_PRELOAD=$SHIM "$MK" >"$TMP/mid.out" 2>"$TMP/mid.err"; echo $? >"$TMP/mid.rc") &
mid=$!
for _ in $(seq 400); do grep -q 'lookup ' "$TMP/mid.err" && break; sleep 0.025; done
grep -q 'lookup ' "$TMP/mid.err" || fail "mid-run: the runner never looked up"
kill -KILL "$REDIS_PID"
wait $mid
same_output ref mid "server killed mid-run: same results"
[ "$(count 'miss ' "$TMP/mid.err")" = 1 ] || fail "mid-run: expected one compile"
[ "$(count 'remote tier off' "$TMP/mid.err")" = 1 ] || fail "mid-run: expected one breaker line"
ok "server killed mid-run: same results, one log line"

fresh_pocl; run_shim gone env CLSHIM_CACHE_DIR="$TMP/cache-gone" "$MK"
same_output ref gone "server gone: same results"
[ "$(count 'remote tier off' "$TMP/gone.err")" = 1 ] || fail "server gone: expected one breaker line"
ok "server gone: one log line, same results"

# A password (on 127.0.0.1) from the URL or a file, never shown.
start_redis tcp --requirepass 's3cret-pw'
url=${REDIS_URL/redis:\/\//redis://:s3cret-pw@}
fresh_pocl; run_shim pw env CLSHIM_LOG=debug CLSHIM_REMOTE="$url" CLSHIM_CACHE_DIR="$TMP/cache-pw" "$MK"
same_output ref pw "password in the URL: same results"
[ "$(R -a s3cret-pw --no-auth-warning --scan --pattern 'clshim:e:*' | wc -l)" = 1 ] || fail "password in URL: no push"
CLSHIM_REMOTE=$url "$TOOL" config >"$TMP/config.txt"
CLSHIM_REMOTE=$url "$TOOL" cache remote ping >"$TMP/ping.txt"
grep -q PONG "$TMP/ping.txt" || fail "ping with the password in the URL"
echo 's3cret-pw' >"$TMP/pwfile"
CLSHIM_REMOTE=$REDIS_URL CLSHIM_REMOTE_PASSWORD_FILE=$TMP/pwfile "$TOOL" cache remote ping | grep -q PONG ||
    fail "ping with a password file"
fresh_pocl; run_shim badpw env CLSHIM_REMOTE="${url/s3cret-pw/wrong}" CLSHIM_CACHE_DIR="$TMP/cache-badpw" "$MK"
same_output ref badpw "wrong password: same results"
grep -q 'authentication refused' "$TMP/badpw.err" || fail "wrong password: not reported"
! grep -q 's3cret-pw' "$TMP/pw.err" "$TMP/config.txt" "$TMP/ping.txt" "$TMP/badpw.err" || fail "the password was shown"
ok "password from the URL or a file, never logged or printed"
finish
