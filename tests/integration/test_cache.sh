#!/bin/bash
# The persistent cache on a real program under LD_PRELOAD: a second run is a
# hit with identical results; every input change is a miss; a corrupted
# entry is detected and rebuilt; threads and processes building the same
# program at once compile it once.
source "$(dirname "$0")/lib.sh"
export CLSHIM_LOG=info
MK=$PROGS/multikernel

fresh_pocl; run_plain ref "$MK"
fresh_pocl; run_shim cold "$MK"
same_output ref cold "cold run: same results as without clshim"
[ "$(count 'miss ' "$TMP/cold.err")" = 1 ] || fail "cold run: expected one miss"
[ "$(count 'stored [0-9a-f]\{16\}:' "$TMP/cold.err")" = 1 ] || fail "cold run: expected the binary to be stored"
ok "cold run: one miss, stored"

fresh_pocl; run_shim warm "$MK"
same_output ref warm "warm run: same results"
[ "$(count 'hit .*(disk)' "$TMP/warm.err")" = 1 ] || fail "warm run: expected a disk hit"
[ "$(count 'miss ' "$TMP/warm.err")" = 0 ] || fail "warm run: unexpected miss"
ok "warm run: hit from disk, nothing compiled"

# A repeated build in one process is served from memory.
fresh_pocl; run_shim loop "$MK" --iterations 3
[ "$(count 'hit .*(memory' "$TMP/loop.err")" = 2 ] || fail "loop: expected 2 memory hits"
ok "same program built again in one process: memory hits"

# Every input that changes the binary changes the key.
fresh_pocl; run_plain ref5 "$MK" --scale 5
fresh_pocl; run_shim def "$MK" --scale 5
same_output ref5 def "changed define: results of the new define"
[ "$(count 'miss ' "$TMP/def.err")" = 1 ] || fail "changed define: expected a miss"
ok "changed define: miss"

fresh_pocl; run_shim opt "$MK" --options -cl-fast-relaxed-math
[ "$(count 'miss ' "$TMP/opt.err")" = 1 ] || fail "changed option: expected a miss"
ok "changed option: miss"

mkdir -p "$TMP/inc"
echo '#define OFFSET 1.0f' >"$TMP/inc/mk_header.h"
fresh_pocl; run_plain refh1 "$MK" --include "$TMP/inc"
fresh_pocl; run_shim h1 "$MK" --include "$TMP/inc"
same_output refh1 h1 "with a header: same results"
fresh_pocl; run_shim h1b "$MK" --include "$TMP/inc"
[ "$(count 'hit ' "$TMP/h1b.err")" = 1 ] || fail "same header: expected a hit"
echo '#define OFFSET 2.0f' >"$TMP/inc/mk_header.h"
fresh_pocl; run_plain refh2 "$MK" --include "$TMP/inc"
fresh_pocl; run_shim h2 "$MK" --include "$TMP/inc"
same_output refh2 h2 "changed header: results of the new header"
[ "$(count 'miss ' "$TMP/h2.err")" = 1 ] || fail "changed header: expected a miss (a stale header's binary was served)"
ok "changed included header: miss, never a stale binary"

# A corrupted entry: flip bytes inside every stored value with mdb_dump/mdb_load.
mdb_dump -s entries "$CLSHIM_CACHE_DIR" >"$TMP/dump.txt"
python3 - "$TMP/dump.txt" <<'PY'
import sys
path = sys.argv[1]
lines = open(path).read().split("\n")
out, in_data, is_value = [], False, False
for line in lines:
    if line == "HEADER=END":
        in_data = True; out.append(line); continue
    if in_data and line.startswith(" ") and line != "DATA=END":
        if is_value and len(line) > 400:
            mid = len(line) // 2 & ~1
            b = int(line[mid:mid + 2], 16) ^ 0x5a
            line = line[:mid] + "%02x" % b + line[mid + 2:]
        is_value = not is_value
    out.append(line)
open(path, "w").write("\n".join(out))
PY
mdb_load -s entries -f "$TMP/dump.txt" "$CLSHIM_CACHE_DIR"
fresh_pocl; run_shim corrupt "$MK"
same_output ref corrupt "corrupted entry: correct results"
grep -q "corrupt" "$TMP/corrupt.err" || fail "corrupted entry: not reported"
[ "$(count 'miss ' "$TMP/corrupt.err")" = 1 ] || fail "corrupted entry: expected a rebuild"
fresh_pocl; run_shim repaired "$MK"
[ "$(count 'hit ' "$TMP/repaired.err")" = 1 ] || fail "corrupted entry: not repaired"
ok "corrupted entry: detected, rebuilt, repaired"

# 8 threads building the same program at once: one compile.
rm -rf "$CLSHIM_CACHE_DIR"; fresh_pocl
run_plain ref8 "$MK" --threads 8
run_shim t8 "$MK" --threads 8
same_output ref8 t8 "8 threads: same results"
[ "$(count 'miss ' "$TMP/t8.err")" = 1 ] || fail "8 threads: expected exactly one compile, got $(count 'miss ' "$TMP/t8.err")"
[ "$(count 'hit ' "$TMP/t8.err")" = 7 ] || fail "8 threads: expected 7 hits"
ok "8 threads building the same program: one compile"

# 4 processes started together on an empty cache: one compile.
rm -rf "$CLSHIM_CACHE_DIR"; fresh_pocl
for i in 1 2 3 4; do
    (LD_PRELOAD=$SHIM POCL_CACHE_DIR="$TMP/pocl$i" "$MK" >"$TMP/p$i.out" 2>"$TMP/p$i.err") &
done
wait
compiles=0
for i in 1 2 3 4; do
    cmp -s "$TMP/ref.out" "$TMP/p$i.out" || fail "process $i: results differ"
    compiles=$((compiles + $(count 'miss ' "$TMP/p$i.err")))
done
[ "$compiles" = 1 ] || fail "4 processes: expected one compile, got $compiles"
ok "4 processes started together on an empty cache: one compile"

# clCompileProgram (with an embedded header) + clLinkProgram.
CL=$PROGS/compilelink
fresh_pocl; run_plain clref "$CL"
fresh_pocl; run_shim clcold "$CL"
same_output clref clcold "compile+link, cold: same results"
[ "$(count 'miss ' "$TMP/clcold.err")" = 3 ] || fail "compile+link cold: expected 2 compile misses and 1 link miss"
fresh_pocl; run_shim clwarm "$CL"
same_output clref clwarm "compile+link, warm: same results"
[ "$(count 'hit .*compiled object' "$TMP/clwarm.err")" = 2 ] || fail "compile+link warm: compiled objects not hits"
[ "$(count 'hit .*linked program' "$TMP/clwarm.err")" = 1 ] || fail "compile+link warm: link not a hit"
[ "$(count 'miss ' "$TMP/clwarm.err")" = 0 ] || fail "compile+link warm: unexpected miss"
ok "compile+link: second run compiles and links nothing"
fresh_pocl; run_plain clref3 "$CL" 3.0f
fresh_pocl; run_shim cl3 "$CL" 3.0f
same_output clref3 cl3 "compile+link, one input changed: its results"
[ "$(count 'miss ' "$TMP/cl3.err")" = 2 ] || fail "compile+link: a changed input must miss its compile and the link"
ok "compile+link: a changed input misses its compile and the link only"

# A program that never releases anything: stored at its first sync point
# after a kernel ran (never at exit), and the exit is clean.
NR=$PROGS/norelease
fresh_pocl; run_plain nrref "$NR"
fresh_pocl; run_shim nr1 "$NR"
same_output nrref nr1 "no releases, cold: same results, clean exit"
[ "$(count 'stored [0-9a-f]\{16\}:' "$TMP/nr1.err")" = 1 ] || fail "no releases: the binary was not stored at the sync point"
fresh_pocl; run_shim nr2 "$NR"
same_output nrref nr2 "no releases, warm: same results"
[ "$(count 'hit ' "$TMP/nr2.err")" = 1 ] || fail "no releases: expected a hit"
ok "a program that never releases: stored after its first use, clean exit, then a hit"

# Several devices in one clBuildProgram (PoCL exposes two with POCL_DEVICES).
export POCL_DEVICES="pthread pthread"
fresh_pocl; run_plain tdref "$PROGS/twodevices"
grep -q "^2 devices" "$TMP/tdref.out" || fail "PoCL did not expose two devices"
fresh_pocl; run_shim td1 "$PROGS/twodevices"
same_output tdref td1 "two devices, cold: same results"
[ "$(count 'miss ' "$TMP/td1.err")" = 2 ] || fail "two devices: expected a miss per device"
fresh_pocl; run_shim td2 "$PROGS/twodevices"
same_output tdref td2 "two devices, warm: same results"
[ "$(count 'hit ' "$TMP/td2.err")" = 2 ] || fail "two devices: expected a hit per device"
unset POCL_DEVICES
ok "one clBuildProgram for two devices: a key per device, both hit"

# CLSHIM_CACHE=0: caching off, app unaffected.
CLSHIM_CACHE=0 run_shim off "$MK"
same_output ref off "CLSHIM_CACHE=0: same results"
[ "$(count 'hit \|miss ' "$TMP/off.err")" = 0 ] || fail "CLSHIM_CACHE=0 still caches"
ok "CLSHIM_CACHE=0: nothing cached"
finish
