#!/bin/bash
# An older OpenCL loader: a copy of ocl-icd's libOpenCL.so.1 whose OpenCL
# 2.1+ entry points are renamed away (same length, so the ELF stays valid and
# their lookups simply fail). Under clshim, programs run as without it; a
# function the loader lacks fails with CL_INVALID_OPERATION and one line,
# never a crash.
source "$(dirname "$0")/lib.sh"
real=$(ldconfig -p | awk '/libOpenCL\.so\.1 .*x86-64/ && !found {print $NF; found = 1}')
mkdir -p "$TMP/old"
python3 - "$(readlink -f "$real")" "$TMP/old/libOpenCL.so.1" <<'PY'
import sys
data = bytearray(open(sys.argv[1], "rb").read())
gone = ["clCreateProgramWithIL", "clCloneKernel", "clSetProgramSpecializationConstant",
        "clSetProgramReleaseCallback", "clGetKernelSubGroupInfo", "clGetHostTimer",
        "clGetDeviceAndHostTimer", "clSetDefaultDeviceCommandQueue", "clEnqueueSVMMigrateMem"]
for name in gone:
    old = b"\0" + name.encode() + b"\0"
    n = data.count(old)
    assert n >= 1, name
    data = data.replace(old, b"\0x" + name[1:].encode() + b"\0")
open(sys.argv[2], "wb").write(bytes(data))
PY
export LD_LIBRARY_PATH=$TMP/old
run_plain plain "$PROGS/missing_symbols"
grep -q "build ok" "$TMP/plain.out" || fail "the program does not run on the old loader"
grep -q "clCreateProgramWithIL" "$TMP/plain.out" && fail "the old loader still has clCreateProgramWithIL"
ok "the old loader lacks the 2.1+ functions; the program runs on it"

CLSHIM_LOG=info run_shim shim "$PROGS/missing_symbols"
[ "$(cat "$TMP/shim.rc")" = 0 ] || { cat "$TMP/shim.err" >&2; fail "the program failed under clshim"; }
grep -q "build ok" "$TMP/shim.out" || fail "the build failed under clshim"
grep -q "clCloneKernel: -59" "$TMP/shim.out" || fail "a missing clCloneKernel must fail with CL_INVALID_OPERATION"
[ "$(count 'has no clCloneKernel' "$TMP/shim.err")" = 1 ] || fail "the missing symbol is not logged once"
ok "a function the loader lacks: CL_INVALID_OPERATION and one line, no crash"
# clshim serves IL itself on PoCL (SPIR), so it needs no loader support:
# the (deliberately malformed) module gets the shim's CL_INVALID_VALUE.
grep -q "clCreateProgramWithIL: -30" "$TMP/shim.out" || fail "IL on the old loader: expected clshim's own CL_INVALID_VALUE"
ok "IL works without the loader's clCreateProgramWithIL (malformed module: CL_INVALID_VALUE)"

fresh_pocl; run_plain mkplain "$PROGS/multikernel" --threads 2
fresh_pocl; CLSHIM_LOG=info run_shim mk1 "$PROGS/multikernel" --threads 2
same_output mkplain mk1 "a whole program on the old loader: same output under clshim"
fresh_pocl; CLSHIM_LOG=info run_shim mk2 "$PROGS/multikernel" --threads 2
grep -q "hit " "$TMP/mk2.err" || fail "the cache does not work on the old loader"
ok "the cache works on the old loader"
finish
