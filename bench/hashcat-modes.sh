#!/bin/bash
# hashcat-modes.sh — hashcat through clshim in the modes for a program that
# dlopens OpenCL, each warm run from a directory it has not used before.
#
#   bench/hashcat-modes.sh BUILD
#
# Needs Debian's `hashcat`. Runs, in private HOME/XDG/PoCL/clshim
# directories: plain cold, plain warm (hashcat's own kernel cache), loader
# cold in dirA, then loader warm from dirB and dirC, layer warm from dirD,
# preload+loader warm from dirE, on the one clshim cache; hashcat's cache
# emptied before every run but plain warm, PoCL's before every run. Prints
# one line a run (wall seconds, hits, misses) and the warm run's clshim lines.
set -u
B=${1:-}
[ -n "$B" ] && [ -x "$B/clshim" ] || { echo "usage: bench/hashcat-modes.sh BUILD" >&2; exit 2; }
B=$(cd "$B" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
command -v hashcat >/dev/null || { echo "hashcat-modes.sh: needs hashcat (apt-get install hashcat)" >&2; exit 2; }
R=$(mktemp -d)
trap 'rm -rf "$R"' EXIT
export HOME=$R/home XDG_CACHE_HOME=$R/home/.cache XDG_DATA_HOME=$R/home/.local/share XDG_CONFIG_HOME=$R/home/.config CLSHIM_CACHE_DIR=$R/clshim
mkdir -p $HOME
one() { # tag dir keep mode
  local tag=$1 d=$R/$2 keep=$3 mode=$4
  mkdir -p $d; cd $d
  echo -n 9876543 | md5sum | cut -d' ' -f1 >hash.txt
  [ $keep = keep ] || rm -rf "$XDG_CACHE_HOME/hashcat/kernels" "$XDG_DATA_HOME/hashcat/kernels"
  export POCL_CACHE_DIR=$R/pocl-$tag; rm -rf $POCL_CACHE_DIR
  local HC=(hashcat -m 0 -a 3 --potfile-disable --force -D 1 --quiet hash.txt '?d?d?d?d?d?d?d')
  local t0=$(date +%s.%N)
  if [ $mode = plain ]; then "${HC[@]}" >$R/$tag.out 2>$R/$tag.err; else $B/clshim run --mode=$mode --wait --log info -- "${HC[@]}" >$R/$tag.out 2>$R/$tag.err; fi
  local rc=$?; local t1=$(date +%s.%N)
  local h=$(grep -c '^clshim: hit ' $R/$tag.err) m=$(grep -c '^clshim: miss ' $R/$tag.err)
  printf '%-22s exit %d, %5.1f s, %d hits, %d misses, cracked: %s\n' "$tag" $rc $(awk -v a=$t0 -v b=$t1 'BEGIN{print b-a}') $h $m "$(grep -c ':9876543$' $R/$tag.out)"
}
echo "# hashcat $(hashcat --version) under clshim, $(date -u '+%Y-%m-%d %H:%M') UTC, this machine (PoCL 3.1, $(nproc) cores), code $(cd "$ROOT" && git rev-parse --short HEAD)"
echo "# hashcat -m 0 -a 3 --potfile-disable --force -D 1 --quiet hash.txt '?d?d?d?d?d?d?d'; PoCL's cache emptied before each run;"
echo "# hashcat's own kernel cache emptied before each run but plain-warm; clshim runs: clshim run --mode=M --wait --log info"
one plain-cold p drop plain
one plain-warm p keep plain
one loader-cold-dirA A drop loader
one loader-warm-dirB B drop loader
one loader-warm-dirC C drop loader
one layer-warm-dirD D drop layer
one preload+loader-warm-dirE E drop preload+loader
echo "--- the warm run's log (dirB)"
grep '^clshim:' $R/loader-warm-dirB.err
for t in loader-cold-dirA loader-warm-dirB loader-warm-dirC layer-warm-dirD preload+loader-warm-dirE; do cmp -s $R/plain-cold.out $R/$t.out || echo "OUTPUT DIFFERS: $t"; done
