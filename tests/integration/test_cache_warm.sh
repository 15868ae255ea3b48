#!/bin/bash
# `clshim cache warm` (issue 46): programs stored for one device (PoCL's
# pthread device) are built for another (PoCL's basic device: another key
# identity, as after a driver upgrade), so that the first run there hits
# every program and computes as the plain driver does: a program built from
# source with a header, and a compile (with an embedded header) + link. A
# program whose header changed since it was stored is skipped and named,
# never built; --json says the same; a second warm finds all warm; --push
# puts what is warm on the remote tier (redis-server, unix socket), where a
# runner with an empty cache hits it; usage errors are one line.
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info CLSHIM_CAPTURE_PROCESS=1 # the capture helper, as users have it
SF=$PROGS/srcfile
CL=$PROGS/compilelink
CLSHIM=$CLSHIM_BUILD/clshim
cd "$TMP" # headers are keyed by the paths the programs name: run warm here too
mkdir -p inc
printf '#include "params.h"\n__kernel void k(__global float *y) { size_t i = get_global_id(0); y[i] = V * (float)(i %% 7); }\n' >k.cl
printf '#include "other.h"\n__kernel void k(__global float *y) { size_t i = get_global_id(0); y[i] = W + (float)i; }\n' >k2.cl
echo '#define V 3.0f' >inc/params.h
echo '#define W 1.0f' >inc/other.h

# What the plain driver computes on the basic device.
export POCL_DEVICES=basic
run_ref ref-k "$SF" k.cl --options -Iinc
run_ref ref-cl "$CL"

# Stored for the pthread device.
for prog in "k:$SF k.cl --options -Iinc" "k2:$SF k2.cl --options -Iinc" "cl:$CL"; do
    tag=${prog%%:*}
    fresh_pocl; run_shim "p-$tag" env POCL_DEVICES=pthread ${prog#*:}
    [ "$(cat "$TMP/p-$tag.rc")" = 0 ] || fail "pthread $tag: $(tail -3 "$TMP/p-$tag.err")"
done
"$CLSHIM" cache wait >/dev/null 2>&1 || fail "cache wait after the pthread runs"
[ "$("$CLSHIM" cache list --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" = 5 ] ||
    fail "expected 5 entries (2 sources, 2 compiles, 1 link): $("$CLSHIM" cache list)"
ok "stored for the pthread device: 2 sources, 2 compiles and a link"

# A header changes after its program was stored: that program is not warmed.
echo '#define W 2.0f' >inc/other.h

fresh_pocl
set +e; "$CLSHIM" cache warm --json >"$TMP/warm.json" 2>"$TMP/warm.err"; rc=$?; set -e
[ $rc = 0 ] || fail "cache warm: exit $rc: $(cat "$TMP/warm.err")"
python3 - "$TMP/warm.json" <<'EOF' || fail "cache warm --json: $(cat "$TMP/warm.json")"
import json, sys
d = json.load(open(sys.argv[1]))
assert (d["warmed"], d["already"], d["skipped"], d["failed"]) == (4, 0, 1, 0), d
assert d["skipped_by"] == {"inputs changed": 1}, d
assert len(d["devices"]) == 1 and d["devices"][0].startswith("basic"), d
kinds = sorted(p["kind"] for p in d["programs"] if p["outcome"] == "warmed")
assert kinds == ["compile", "compile", "link", "source"], kinds
[skipped] = [p for p in d["programs"] if p["outcome"] == "skipped"]
assert skipped["kind"] == "source" and "inc/other.h" in skipped["reason"], skipped
assert all(p["stored_for"].startswith("pthread") for p in d["programs"]), d
EOF
grep -q "^clshim: cache warm: 4 warmed, 0 already warm, 1 skipped (1 inputs changed), 0 failed, in [0-9.]* s$" \
    "$TMP/warm.err" || fail "cache warm: no summary line: $(cat "$TMP/warm.err")"
ok "cache warm for the basic device: 4 warmed, the program whose header changed skipped (--json and the summary)"

size_of() { "$CLSHIM" cache list --json | python3 -c 'import json,sys; print(sum(e["binary_size"] for e in json.load(sys.stdin) if e["origin"] == "source" and e["device"].startswith("basic")))'; }
before=$(size_of)

# The first run on the basic device: every program a hit, results as plain.
fresh_pocl; run_shim b-k "$SF" k.cl --options -Iinc
fresh_pocl; run_shim b-cl "$CL"
same_output ref-k b-k "source program after warm: same results as the plain driver"
same_output ref-cl b-cl "compile + link after warm: same results as the plain driver"
for tag in b-k b-cl; do
    [ "$(count 'miss ' "$TMP/$tag.err")" = 0 ] || fail "$tag: a miss after warm: $(grep 'miss ' "$TMP/$tag.err")"
done
[ "$(count "hit .* on 'basic" "$TMP/b-k.err")" = 1 ] || fail "b-k: expected one hit: $(grep 'hit ' "$TMP/b-k.err")"
[ "$(count "hit .* on 'basic" "$TMP/b-cl.err")" = 3 ] || fail "b-cl: expected 3 hits: $(grep 'hit ' "$TMP/b-cl.err")"
ok "after warm the basic device's first runs hit every program (1 + 3) and compute as plain"

# The warmed source entry lacks the code PoCL generates at a kernel's first
# enqueue (no kernel ran when warm built it): the first hit has it captured
# again, after which a run with an empty PoCL cache no longer generates it.
grep -q "hit [0-9a-f]\{16\} was built before any run (clshim cache warm): captured again after its first use" "$TMP/b-k.err" ||
    fail "b-k: the hit of a warmed entry was not captured again: $(grep 'hit \|capture' "$TMP/b-k.err")"
"$CLSHIM" cache wait >/dev/null 2>&1 || fail "cache wait after the first hit"
after=$(size_of)
[ "$after" -gt "$before" ] || fail "the warmed entry was not replaced by one with the first-use code ($before -> $after bytes)"
fresh_pocl; run_shim b-k-next "$SF" k.cl --options -Iinc
same_output ref-k b-k-next "the run after: same results"
grep -q "built before any run" "$TMP/b-k-next.err" && fail "b-k-next: the entry is still provisional"
[ "$(count 'miss ' "$TMP/b-k-next.err")" = 0 ] || fail "b-k-next: a miss"
ok "the first hit of the warmed entry has it captured again with the first-use code ($before -> $after bytes); the next run hits it"

# The skipped program misses and builds as it is now, as without warm.
fresh_pocl; run_shim b-k2 "$SF" k2.cl --options -Iinc
[ "$(count 'miss ' "$TMP/b-k2.err")" = 1 ] || fail "b-k2: expected one miss (its header changed)"
grep -q "^clshim: cache warm: skipped [0-9a-f]\{16\} (source, stored for pthread.*) for basic.*: inputs changed since it was stored: header inc/other.h" \
    "$TMP/warm.err" || fail "cache warm: no line naming the skipped program and its header: $(cat "$TMP/warm.err")"
ok "the skipped program is named with the header that changed, and misses"

# Again: everything warm already; a text run.
fresh_pocl
"$CLSHIM" cache warm 2>"$TMP/warm2.err" || fail "second warm: $(cat "$TMP/warm2.err")"
grep -q "^clshim: cache warm: 0 warmed, 4 already warm, 1 skipped (1 inputs changed), 0 failed" "$TMP/warm2.err" ||
    fail "second warm: $(cat "$TMP/warm2.err")"
ok "a second warm builds nothing: 4 already warm"

# Usage errors: one line each.
set +e
"$CLSHIM" cache warm --device no-such-device >/dev/null 2>"$TMP/u1.err"; r1=$?
env -u CLSHIM_REMOTE "$CLSHIM" cache warm --push >/dev/null 2>"$TMP/u2.err"; r2=$?
"$CLSHIM" cache warm --jobs 0 >/dev/null 2>"$TMP/u3.err"; r3=$?
set -e
[ $r1 = 1 ] && [ "$(wc -l <"$TMP/u1.err")" = 1 ] && grep -q "no device named like 'no-such-device' here (there are 'basic" "$TMP/u1.err" ||
    fail "--device no-such-device: exit $r1: $(cat "$TMP/u1.err")"
[ $r2 = 2 ] && [ "$(wc -l <"$TMP/u2.err")" = 1 ] && grep -q -- "--push needs a remote tier" "$TMP/u2.err" ||
    fail "--push without a remote: exit $r2: $(cat "$TMP/u2.err")"
[ $r3 = 2 ] && [ "$(wc -l <"$TMP/u3.err")" = 1 ] || fail "--jobs 0: exit $r3: $(cat "$TMP/u3.err")"
ok "usage errors: an unknown device lists the devices; --push without CLSHIM_REMOTE; --jobs 0"

# --push: what is warm goes to the remote tier; a runner with an empty
# cache hits it there. --dir names the cache.
start_redis
fresh_pocl
CLSHIM_REMOTE=$REDIS_URL "$CLSHIM" cache --dir "$CLSHIM_CACHE_DIR" warm --push 2>"$TMP/push.err" ||
    fail "warm --push: $(cat "$TMP/push.err")"
grep -q "0 warmed, 4 already warm" "$TMP/push.err" || fail "warm --push: $(cat "$TMP/push.err")"
fresh_pocl; run_shim r-k env CLSHIM_REMOTE="$REDIS_URL" CLSHIM_CACHE_DIR="$TMP/cache-runner" "$SF" k.cl --options -Iinc
same_output ref-k r-k "a runner with an empty cache: same results"
[ "$(count 'miss ' "$TMP/r-k.err")" = 0 ] && [ "$(count 'hit .*(remote)' "$TMP/r-k.err")" = 1 ] ||
    fail "runner: expected one remote hit, no miss: $(grep 'hit \|miss ' "$TMP/r-k.err")"
ok "warm --push: a runner with an empty cache hits the warmed program on the remote tier"

# Sealed end to end: a signing builder warms (CLSHIM_SIGN_KEY); a reader
# that trusts only that key (CLSHIM_TRUST, no key of its own) hits the
# warmed entry and does not try to replace it (it could not: one line lost
# at every run); the signer's run replaces it, sealed.
"$CLSHIM" cache keygen "$TMP/ci-1" >/dev/null || fail "keygen"
export CLSHIM_CACHE_DIR=$TMP/cache-sealed
fresh_pocl; run_shim s-p env POCL_DEVICES=pthread CLSHIM_SIGN_KEY="$TMP/ci-1" "$SF" k.cl --options -Iinc
"$CLSHIM" cache wait >/dev/null 2>&1 || fail "sealed: cache wait after the pthread run"
fresh_pocl
CLSHIM_SIGN_KEY=$TMP/ci-1 "$CLSHIM" cache warm 2>"$TMP/s-warm.err" || fail "sealed: warm: $(cat "$TMP/s-warm.err")"
grep -q "1 warmed" "$TMP/s-warm.err" || fail "sealed: warm: $(cat "$TMP/s-warm.err")"
fresh_pocl; run_shim s-reader env CLSHIM_TRUST="$TMP/ci-1.pub" "$SF" k.cl --options -Iinc
same_output ref-k s-reader "sealed: a trusting reader's results as plain"
[ "$(count "hit .* on 'basic" "$TMP/s-reader.err")" = 1 ] && [ "$(count 'miss ' "$TMP/s-reader.err")" = 0 ] ||
    fail "sealed: the trusting reader did not hit the warmed entry: $(grep 'hit \|miss ' "$TMP/s-reader.err")"
grep -q "built before any run" "$TMP/s-reader.err" && fail "sealed: a reader that cannot seal tried to replace the entry"
"$CLSHIM" cache wait >"$TMP/s-wait.out" 2>&1 || fail "sealed: a capture was lost: $(cat "$TMP/s-wait.out")"
"$CLSHIM" cache verify --trust "$TMP/ci-1.pub" | grep -q "0 bad or not sealed by a trusted key" ||
    fail "sealed: verify --trust: $("$CLSHIM" cache verify --trust "$TMP/ci-1.pub")"
ok "sealed: a signing builder warms, a reader trusting its key hits and replaces nothing, every entry sealed"
finish
