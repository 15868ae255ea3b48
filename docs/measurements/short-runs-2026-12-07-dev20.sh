#!/bin/bash
# device run 20: an empty clshim cache with the binary read at build (CLSHIM_CAPTURE=auto on NVIDIA) against read later (CLSHIM_CAPTURE=release: at idle, release or exit), beside plain and plain reading its binary after the build (--read-binary); shuffled, 25 rounds; then whether the next run hits.
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
one w.txt warmup 30 cu-plain --
cold() { # tag capture-policy fusion
  X=$(mktemp -d $W/cold.XXXX); one a.txt $1 30 cu-cold LD_PRELOAD=$S CLSHIM_FUSION=$3 CLSHIM_CAPTURE=$2 CLSHIM_CACHE_DIR=$X --
  CLSHIM_CACHE_DIR=$X timeout 60 $C/clshim-tool cache wait >/dev/null 2>&1
  env CUDA_CACHE_PATH=$W/cu-cold LD_PRELOAD=$S CLSHIM_FUSION=$3 CLSHIM_CACHE_DIR=$X CLSHIM_STATS=1 $BS --chains 3 2>&1 | grep -o "summary: [0-9]* hits" | sed "s/^/$1 next run: /" >> $OUT/next.txt
  rm -rf $X
}
fam() {
  case $1 in
  plain) one a.txt plain-dw 30 cu-plain -- ;;
  plainrb) one a.txt plain-rb-dw 30 cu-plain-rb -- --read-binary ;;
  offc) cold off-cold-dw auto off ;;
  offr) cold off-release-dw release off ;;
  autor) cold auto-release-dw release auto ;;
  esac
}
for i in $(seq 25); do
  for f in $(printf '%s\n' plain plainrb offc offr autor | shuf); do fam $f; done
  [ $((i % 5)) = 0 ] && { summ; el "round $i"; }
done
summ; cat $OUT/summary.txt; sort $OUT/next.txt | uniq -c
el end
