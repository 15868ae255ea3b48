#!/bin/bash
# prev (01cdb79) against new: an empty clshim cache each run, 30 chains, PoCL, shuffled
#   NEW=BUILD PREV=OLDBUILD [N=FLOATS] [REPS=R] short-runs-2026-12-07-pocl-capture.sh
NEW=${NEW:?the build to measure} PREV=${PREV:?the build to compare with}; W=${TMPDIR:-/tmp}/clshim-fc3; rm -rf $W; mkdir -p $W/pc
export XDG_CACHE_HOME=$W/xdg HOME=$W
N=${N:-65536}
one() { local tag=$1 B=$2; shift 2; echo "$tag $(env POCL_CACHE_DIR=$W/pc "$@" $NEW/bench/bench_short --chains 30 --n $N 2>/dev/null | tr '\n' ' ')" >> $W/a.txt; }
cold() { local tag=$1 B=$2; shift 2; X=$(mktemp -d $W/cold.XXXX); one $tag $B LD_PRELOAD=$B/libclshim.so CLSHIM_CACHE_DIR=$X "$@"; CLSHIM_CACHE_DIR=$X $B/clshim-tool cache wait >/dev/null 2>&1; rm -rf $X; }
one warm $NEW
for i in $(seq ${REPS:-11}); do
 for f in $(printf '%s\n' plain offp offn autop auton | shuf); do
  case $f in
  plain) one plain $NEW ;;
  offp) cold off-cold-prev $PREV CLSHIM_FUSION=off ;;
  offn) cold off-cold-new $NEW CLSHIM_FUSION=off ;;
  autop) cold auto-cold-prev $PREV CLSHIM_FUSION=auto ;;
  auton) cold auto-cold-new $NEW CLSHIM_FUSION=auto ;;
  esac
 done
done
python3 - $W/a.txt <<'PY'
import sys, statistics as st, collections
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split(); kv = dict(x.split('=',1) for x in f[1:] if '=' in x)
    if 'per_chain_us' in kv: d[f[0]].append(kv)
b = st.median(float(r['per_chain_us']) for r in d['plain'])
for tag in sorted(d):
    rows = d[tag]; m = lambda k: st.median(float(r[k]) for r in rows if k in r)
    print(f"{tag:15} n={len(rows)} per_chain={m('per_chain_us'):8.2f} x_plain={b/m('per_chain_us'):.3f} first={m('first_us'):8.1f} second={m('second_us'):7.1f} rest={m('rest_median_us'):7.2f} finish0={m('finish_us'):7.1f} hashes={len(set(r['hash'] for r in rows))}")
PY
