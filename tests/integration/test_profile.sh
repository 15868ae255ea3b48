#!/bin/bash
# `clshim run --profile` (issue 47): on a real program under the shim, the
# kernels' table has exact launch counts and plausible device times, the
# fused sequences' table what a plan fused (and, under automatic fusion, the
# measured gain), the builds' table a miss then hits; --json and --trace
# (Chrome trace) say the same; and nothing the program sees changes: its
# queues' properties, its properties array and its events' profiling
# answers are the plain driver's (it made two queues without profiling).
source "$(dirname "$0")/lib.sh"
PA=$PROGS/profile_app
CLSHIM=$CLSHIM_BUILD/clshim

fresh_pocl; run_plain ref "$PA"
grep -q "^q1 properties=0x0$" "$TMP/ref.out" && grep -q "^q1 event profiling: -7$" "$TMP/ref.out" ||
    fail "the plain run is not what the test expects: $(cat "$TMP/ref.out")"

# prof TAG ITERATIONS [VAR=VALUE...]: profile_app under clshim run --profile.
prof() {
    local tag=$1 it=$2; shift 2
    fresh_pocl
    set +e
    env "$@" "$CLSHIM" run --profile --json "$TMP/$tag.json" --trace "$TMP/$tag.trace" -- "$PA" "$it" \
        >"$TMP/$tag.out" 2>"$TMP/$tag.err"
    echo $? >"$TMP/$tag.rc"
    set -e
    [ "$(cat "$TMP/$tag.rc")" = 0 ] || fail "$tag: exit $(cat "$TMP/$tag.rc"): $(tail -5 "$TMP/$tag.err")"
}

t0=$(date +%s%N)
prof plan 12 CLSHIM_FUSE=c0+c1
wall_ms=$((($(date +%s%N) - t0) / 1000000))
same_output ref plan "profiled with a plan: the program's output (queue properties, profiling answers, results) is the plain run's"
for h in "Kernels (device time, ms)" "Fused sequences" "Builds: 0 hits"; do
    grep -qF "$h" "$TMP/plan.err" || fail "plan: the report has no '$h': $(cat "$TMP/plan.err")"
done
python3 - "$TMP/plan.json" "$TMP/plan.trace" "$wall_ms" <<'EOF' || fail "plan: the profile is wrong: $(cat "$TMP/plan.json")"
import json, sys
d = json.load(open(sys.argv[1]))
wall = float(sys.argv[3])
k = {x["name"]: x for x in d["kernels"]}
assert {n: x["launches"] for n, x in k.items()} == {"a": 7, "b": 5, "c0": 12, "c1": 12}, k
for x in k.values():
    assert x["timed"] == x["launches"], x
    assert 0 < x["min_ms"] <= x["mean_ms"] <= x["max_ms"], x
    assert abs(x["mean_ms"] * x["timed"] - x["total_ms"]) < 1e-3, x
assert sum(x["total_ms"] for x in k.values()) < wall, (wall, k)
[f] = d["fused"]
assert f["sequence"] == "c0+c1" and f["launches"] == 12 and f["replaced"] == 24 and f["device_ms"] > 0, f
# each fused launch's time is its kernels' shares
assert abs(f["device_ms"] - k["c0"]["total_ms"] - k["c1"]["total_ms"]) < 1e-3, (f, k)
outcomes = sorted((b["kind"], b["outcome"]) for b in d["builds"])
assert outcomes == [("fusion", "miss"), ("source", "miss")], outcomes
t = json.load(open(sys.argv[2]))
xs = [e for e in t["traceEvents"] if e["ph"] == "X"]
cats = {}
for e in xs:
    cats[e["cat"]] = cats.get(e["cat"], 0) + 1
    assert e["dur"] >= 0 and e["ts"] >= 0, e
assert cats == {"kernel": 36, "fused": 12, "build": 2}, cats
# an in-order queue's launches one after another
for tid in {e["tid"] for e in xs if e["cat"] == "kernel"}:
    row = sorted((e["ts"], e["dur"]) for e in xs if e["cat"] == "kernel" and e["tid"] == tid)
    for (t1, d1), (t2, _) in zip(row, row[1:]):
        assert t2 >= t1 + d1 - 0.002, (tid, t1, d1, t2)
EOF
ok "a plan's run profiled: launch counts exact (7, 5, 12, 12), times plausible, 12 fused launches replacing 24, 2 misses; --json, --trace and the table agree"

# Again, on the cache the first run filled: the builds are hits.
prof again 12 CLSHIM_FUSE=c0+c1
same_output ref again "the second profiled run: the plain run's output"
python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
o = sorted((b["kind"], b["outcome"]) for b in d["builds"])
assert ("source", "hit (disk)") in o and all(x[1].startswith("hit") for x in o), o
' "$TMP/again.json" || fail "again: $(cat "$TMP/again.json")"
grep -q "^Builds: [1-9][0-9]* hits\? (" "$TMP/again.err" || fail "again: $(grep Builds "$TMP/again.err")"
ok "the second run's builds are hits in the builds' table"

# Automatic fusion, long enough for its speed measurement: the gain is reported.
prof auto 80 CLSHIM_FUSION=auto
same_output ref auto "profiled under automatic fusion: the plain run's output (c0 c1 read what a and b left)"
python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
k = {x["name"]: x["launches"] for x in d["kernels"]}
assert k["c0"] == 80 and k["c1"] == 80, k
[f] = [x for x in d["fused"] if x["sequence"] == "c0+c1"]
assert 0 < f["launches"] < 80 and f["replaced"] == 2 * f["launches"], f
assert f["gain"] and f["unfused_ms"] > 0 and f["fused_ms"] > 0, f
' "$TMP/auto.json" || fail "auto: $(cat "$TMP/auto.json")"
ok "automatic fusion profiled: every launch counted (80 each), fused launches and the measured gain reported"

# The command's exit status is kept; a command with no OpenCL says so.
set +e
"$CLSHIM" run --profile -- sh -c 'exit 3' 2>"$TMP/none.err"; rc=$?
set -e
[ $rc = 3 ] || fail "clshim run --profile changed the exit status: $rc"
grep -q "clshim profile: no process of the command made an OpenCL call through clshim" "$TMP/none.err" ||
    fail "no OpenCL: $(cat "$TMP/none.err")"
ok "the command's exit status is kept; a command without OpenCL is said in one line"
finish
