#!/bin/bash
# device run 19: dev18's families (no shim, the shim disabled, fusion off/auto with an empty and a warm clshim cache) in a shuffled order each round, 25 rounds, with the first chain in parts: the resolution of a 30-chain comparison on NVIDIA.
# each auto family has its own clshim cache (imported fused program), warmed by two 30-chain runs; default log level in timed runs.
set -u
C=$(cd "$(dirname "$0")" && pwd)
OUT=${1:?}; mkdir -p "$OUT"
T0=$(date +%s); el() { echo "== $1 at $(( $(date +%s) - T0 )) s" | tee -a $OUT/times.txt; }
W=/tmp/w; rm -rf $W; mkdir -p $W/icd $W/home
echo /usr/local/nvidia/lib64/libnvidia-opencl.so.1 > $W/icd/nv.icd
export OCL_ICD_VENDORS=$W/icd LD_LIBRARY_PATH=$C/lib HOME=$W/home XDG_CACHE_HOME=$W/xdg
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
nproc; uptime; cat $C/REVISION
S=$C/libclshim.so BS=$C/bench/bench_short
one() { # file tag chains cudadir(- = fresh) env... -- args
  local f=$1 tag=$2 c=$3 cu=$4; shift 4; local d
  if [ "$cu" = - ]; then d=$(mktemp -d $W/d.XXXX); else d=$W/$cu; mkdir -p $d; fi
  local args=(); while [ $# -gt 0 ] && [ "$1" != -- ]; do args+=("$1"); shift; done; shift
  local t0 r t1; t0=$(date +%s%N)
  r=$(env CUDA_CACHE_PATH=$d "${args[@]}" CLSHIM_STATS=1 $BS --chains $c "$@" 2>$W/e | tr '\n' ' ')
  t1=$(date +%s%N)
  echo "$c $tag $r wall_ms=$(( (t1 - t0) / 1000000 )) fl=$(grep -o '[0-9]* fused launches' $W/e | head -1 | cut -d' ' -f1)" >> $OUT/$f
  echo "## $c $tag" >> $OUT/err.txt; grep -v "^clshim: *\(hits\|misses\|stored\|compile\|cache\)" $W/e | head -12 >> $OUT/err.txt
  [ "$cu" = - ] && rm -rf $d
}
summ() { python3 - $OUT/a.txt > $OUT/summary.txt <<'PY'
import sys, statistics as st, collections
d = collections.defaultdict(list)
for fn in sys.argv[1:]:
    for line in open(fn):
        f = line.split()
        kv = dict(x.split('=', 1) for x in f[2:] if '=' in x)
        if 'per_chain_us' in kv: d[(int(f[0]), f[1])].append(kv)
base = {}
for (c, tag), rows in sorted(d.items()):
    if tag in ('plain', 'plain-dw'): base[(c, tag)] = st.median(float(r['per_chain_us']) for r in rows)
for (c, tag), rows in sorted(d.items()):
    m = lambda k: st.median(float(r[k]) for r in rows if k in r)
    pc = m('per_chain_us'); b = base.get((c, 'plain-dw' if tag.endswith('-dw') else 'plain'), pc)
    print(f"{c:5} {tag:16} n={len(rows):2} per_chain={pc:7.2f} x_plain={b/pc:5.3f} min={min(float(r['per_chain_us']) for r in rows):7.2f} max={max(float(r['per_chain_us']) for r in rows):7.2f} first={m('first_us'):8.1f} second={m('second_us'):6.1f} rest={m('rest_median_us'):6.2f} fs=[{' '.join(f'{k[:-3]}={m(k):.1f}' for k in ('l0_us','l1_us','l2_us','l3_us','finish_us'))}] wall_ms={m('wall_ms'):6.0f} fl={[r.get('fl','') for r in rows]} hashes={len(set(r['hash'] for r in rows))}")
PY
}
el start
for fam in offw aw; do mkdir -p $W/c-$fam; done
one w.txt warmup 30 cu-plain --
one w.txt warmup-offw 30 cu-offw LD_PRELOAD=$S CLSHIM_FUSION=off CLSHIM_CACHE_DIR=$W/c-offw --
for k in 1 2; do one w.txt warmup-aw 30 cu-aw LD_PRELOAD=$S CLSHIM_FUSION=auto CLSHIM_CACHE_DIR=$W/c-aw --; done
fam() {
  case $1 in
  plain) one a.txt plain-dw 30 cu-plain -- ;;
  plain2) one a.txt plain2-dw 30 cu-plain -- ;;
  disable) one a.txt disable-dw 30 cu-plain LD_PRELOAD=$S CLSHIM_DISABLE=1 -- ;;
  offc) X=$(mktemp -d $W/cold.XXXX); one a.txt off-cold-dw 30 cu-cold LD_PRELOAD=$S CLSHIM_FUSION=off CLSHIM_CACHE_DIR=$X --
        CLSHIM_CACHE_DIR=$X timeout 60 $C/clshim-tool cache wait >/dev/null 2>&1; rm -rf $X ;;
  offw) one a.txt off-warm-dw 30 cu-offw LD_PRELOAD=$S CLSHIM_FUSION=off CLSHIM_CACHE_DIR=$W/c-offw -- ;;
  autoc) X=$(mktemp -d $W/cold.XXXX); one a.txt auto-cold-dw 30 cu-cold LD_PRELOAD=$S CLSHIM_FUSION=auto CLSHIM_CACHE_DIR=$X --
        CLSHIM_CACHE_DIR=$X timeout 60 $C/clshim-tool cache wait >/dev/null 2>&1; rm -rf $X ;;
  autow) one a.txt auto-warm-dw 30 cu-aw LD_PRELOAD=$S CLSHIM_FUSION=auto CLSHIM_CACHE_DIR=$W/c-aw -- ;;
  esac
}
for i in $(seq 25); do
  for f in $(printf '%s\n' plain plain2 disable offc offw autoc autow | shuf); do fam $f; done
  [ $((i % 5)) = 0 ] && { summ; el "round $i"; }
done
summ; cat $OUT/summary.txt
el end
