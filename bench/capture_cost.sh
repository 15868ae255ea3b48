#!/bin/bash
# capture_cost.sh — what a capture costs beside the build it stores, and
# what the runs after it cost, for programs most of whose kernels never run
# (issue 44): N kernels, the application runs one.
#   bench/capture_cost.sh BUILD [N...]        (default: 201 2001)
# Per N, side by side in one run, each with private caches:
#   plain cold, plain warm (PoCL's own cache kept): the application's wall
#     time;
#   clshim cold: wall time, its build CPU (the miss line), the capture's CPU
#     (the helper's debug line) and what became of it (`cache wait`);
#   clshim warm, right after: wall time (PoCL's cache kept, as a user has it).
# Prints one table; BUILD may be an older build to compare (its capture
# lines may lack the figures: "-").
set -u
BUILD=$(cd "${1:?usage: capture_cost.sh BUILD [N...]}" && pwd)
shift
[ $# -gt 0 ] || set -- 201 2001
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
SF=$BUILD/tests/progs/srcfile
TOOL=$BUILD/clshim-tool
export CLSHIM_CAPTURE_PROCESS=1
now() { date +%s.%N; }
secs() { python3 -c "print(f'{$2 - $1:.2f}')"; }

printf '%-7s %11s %11s %11s %13s %13s %-12s %11s %13s\n' kernels plain-cold plain-warm clshim-cold \
    "build-CPU" "capture-CPU" capture clshim-warm warm/plain
for n in "$@"; do
    python3 - "$T/p$n.cl" "$n" <<'PY'
import sys
body = '__kernel void k%d(__global float *y) { size_t i = get_global_id(0); float v = y[i]; ' \
       'for (int j = 0; j < %d; j++) v = v * 1.0001f + (float)j; y[i] = v; }\n'
n = int(sys.argv[2])
open(sys.argv[1], 'w').write(''.join(body % (k, k % 7 + 1) for k in range(n)).replace('void k0(', 'void k('))
PY
    export POCL_CACHE_DIR=$T/pocl-plain$n
    t0=$(now); "$SF" "$T/p$n.cl" >/dev/null 2>&1; t1=$(now); "$SF" "$T/p$n.cl" >/dev/null 2>&1; t2=$(now)
    pc=$(secs "$t0" "$t1") pw=$(secs "$t1" "$t2")
    export POCL_CACHE_DIR=$T/pocl-shim$n CLSHIM_CACHE_DIR=$T/cache$n
    t0=$(now)
    CLSHIM_LOG=debug CLSHIM_LOG_FILE=$T/log$n LD_PRELOAD=$BUILD/libclshim.so "$SF" "$T/p$n.cl" >/dev/null 2>&1
    t1=$(now)
    "$TOOL" cache wait --timeout 600 >/dev/null 2>"$T/wait$n"
    t2=$(now)
    LD_PRELOAD=$BUILD/libclshim.so "$SF" "$T/p$n.cl" >/dev/null 2>&1
    t3=$(now)
    sc=$(secs "$t0" "$t1") sw=$(secs "$t2" "$t3")
    build=$(grep -o 'ms ([0-9.]* ms CPU)' "$T/log$n" | head -1 | sed 's/ms (\([0-9.]*\) ms CPU)/\1/')
    cap=$(grep -o "capture's process used [0-9.]* s" "$T/log$n" | head -1 | awk '{ print $4 }')
    what=$(grep -o 'over_cost\|[0-9]* capture[s]* stored' "$T/wait$n" | head -1)
    printf '%-7s %10ss %10ss %10ss %12ss %12ss %-12s %10ss %12sx\n' "$n" "$pc" "$pw" "$sc" \
        "$(python3 -c "print(f'{${build:-0} / 1000:.2f}')")" "${cap:--}" "${what:-?}" "$sw" \
        "$(python3 -c "print(f'{$sw / $pw:.2f}')")"
done
