#!/bin/bash
# The benchmark suite's plumbing (make bench runs the benchmarks themselves;
# make check-long runs make bench QUICK=1): a benchmark's BENCH_CSV rows,
# bench/report.py's tables and ratios from known figures, and the rewrite of
# the generated part of docs/benchmarks.md (on a copy), nothing else of it.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3

# 1. A real benchmark appends well-formed rows, and only the parent does.
export BENCH_CSV=$TMP/store.csv
"$CLSHIM_BUILD/bench/bench_store" --quick --entries 1000 --dir "$TMP" >"$TMP/store.out" 2>&1 ||
    { cat "$TMP/store.out"; fail "bench_store failed"; }
unset BENCH_CSV
[ "$(grep -c '^store,entries=1000,' "$TMP/store.csv")" = 5 ] || { cat "$TMP/store.csv"; fail "bench_store: expected 5 rows"; }
awk -F, 'NF != 9 || $6 !~ /^[0-9.e+-]+$/ || $6 + 0 < $7 + 0 || $6 + 0 > $8 + 0 { bad = 1 } END { exit bad }' \
    "$TMP/store.csv" || { cat "$TMP/store.csv"; fail "bench_store: a row is not bench,case,variant,metric,unit,median<=..."; }
ok "bench_store appends 5 well-formed rows (median within min..max)"

# 2. The report from known figures.
cat >"$TMP/in.csv" <<'EOF'
ttfr,program=mixed,cold,ttfr,ms,1800,1700,1900,7
ttfr,program=mixed,clshim-warm,ttfr,ms,36,30,40,7
ttfr,program=mixed,clshim-cold,ttfr,ms,1980,1900,2100,7
ci,program=mixed;processes=8,plain-empty,wall,ms,8000,7900,8100,5
ci,program=mixed;processes=8,plain-again,wall,ms,900,800,1000,5
ci,program=mixed;processes=8,clshim-empty,wall,ms,2400,2300,2500,5
ci,program=mixed;processes=8,clshim-again,wall,ms,400,390,410,5
fusion,k=4;n=1048576;mode=latency;shape=pointwise,unfused,chain,ms,0.6,0.5,0.7,100
fusion,k=4;n=1048576;mode=latency;shape=pointwise,fused,chain,ms,0.3,0.29,0.4,100
fusion,k=4;n=1048576;mode=latency;shape=pointwise,hand,chain,ms,0.25,0.2,0.3,100
fusion,k=4;n=1048576;mode=latency;shape=pointwise,internal,chain,ms,0.15,0.14,0.2,100
fusion,k=4;n=1048576;mode=latency;shape=pointwise,hand-internal,chain,ms,0.12,0.1,0.13,100
fusion,k=4;n=1048576;mode=latency;shape=pointwise,auto,chain,ms,0.32,0.3,0.45,100
clients,client=demo-app,plain,wall,ms,2000,1900,2100,5
clients,client=demo-app,clshim-warm,wall,ms,200,190,210,5
EOF
printf 'date: 2026-01-01 00:00 UTC\ncommand: make bench\nquick: 0\nmachine: test\n' >"$TMP/meta.txt"
"$PY" "$CLSHIM_ROOT/bench/report.py" "$TMP/in.csv" "$TMP/meta.txt" "$TMP/out" >/dev/null || fail "report.py failed"
R=$TMP/out/report.md
grep -q '^| mixed | clshim-warm | 36.0 (30.0–40.0) | 50.00x | 0.02 |$' "$R" || { cat "$R"; fail "ttfr row"; }
grep -q '^| mixed | clshim-cold | 1980 (1900–2100) | 0.91x | 1.10 |$' "$R" || fail "ttfr clshim-cold row"
grep -q '20.0x faster with clshim' "$R" && grep -q 'takes 0.30x the plain one' "$R" || fail "CI ratios"
grep -q '^| 4 | 1 Mi | 0.6000 (0.5000–0.7000) | 0.3000 (0.2900–0.4000) | 0.2500 (0.2000–0.3000) | 2.00x | 2.40x | 1.20 |$' "$R" ||
    { grep '^| 4 ' "$R"; fail "fusion row"; }
grep -q '^| 4 | 1 Mi | 0.6000 (0.5000–0.7000) | 0.1500 (0.1400–0.2000) | 0.1200 (0.1000–0.1300) | 4.00x | 5.00x | 1.25 |$' "$R" ||
    { grep '^| 4 ' "$R"; fail "internalised fusion row"; }
grep -q '^| 4 | 1 Mi | 0.6000 (0.5000–0.7000) | 0.3200 (0.3000–0.4500) | 0.3000 (0.2900–0.4000) | 1.88x | 2.00x | 1.07 |$' "$R" ||
    { grep '^| 4 ' "$R"; fail "automatic fusion row"; }
grep -q '^| demo-app | clshim-warm | 200 (190–210) | 0.10 |$' "$R" || fail "clients row"
ok "report.py: tables and side-by-side ratios from known medians"
if "$PY" -c 'import matplotlib' 2>/dev/null; then
    for p in ttfr ci clients fusion; do [ -s "$TMP/out/bench-$p.png" ] || fail "plot bench-$p.png missing"; done
    ok "report.py: four plots (matplotlib present)"
else
    grep -q 'matplotlib missing: no plots' "$R" || fail "no matplotlib, and the report does not say so"
    ok "report.py: without matplotlib the report says there are no plots"
fi

# 2b. Every time-to-first-result mode is defined beside its table ("limit"
# too); clshim-warm-dc is listed when the CSV has it; the GPU section says
# why clshim's cache alone is slower than NVIDIA's there, with the figures.
grep -q 'clshim-warm-dc' "$R" && fail "clshim-warm-dc listed though the CSV has none"
{ cat "$TMP/in.csv"; echo 'ttfr,program=mixed,driver-warm,ttfr,ms,5.6,5,6,7'; echo 'ttfr,program=mixed,limit,ttfr,ms,35,30,40,7'; } >"$TMP/gpu.csv"
"$PY" "$CLSHIM_ROOT/bench/report.py" "$TMP/gpu.csv" "$TMP/meta.txt" "$TMP/gpu" --section gpu >/dev/null || fail "report.py --section gpu failed"
grep -q '^- \*\*limit\*\*: no clshim: the app itself loads the best binary' "$TMP/gpu/report.md" || fail "limit not defined"
grep -q 'Reading these figures.*(mixed program: 36.0 ms against 5.60 ms).*predates the clshim-warm-dc mode' \
    "$TMP/gpu/report.md" || { cat "$TMP/gpu/report.md"; fail "GPU caption without clshim-warm-dc"; }
echo 'ttfr,program=mixed,clshim-warm-dc,ttfr,ms,4.5,4.2,5,7' >>"$TMP/gpu.csv"
"$PY" "$CLSHIM_ROOT/bench/report.py" "$TMP/gpu.csv" "$TMP/meta.txt" "$TMP/gpu" --section gpu >/dev/null || fail "report.py --section gpu failed"
grep -q '^| mixed | clshim-warm-dc | 4.50 (4.20–5.00) | 400.00x | 0.00 |$' "$TMP/gpu/report.md" &&
    grep -q '^- \*\*clshim-warm-dc\*\*: ' "$TMP/gpu/report.md" &&
    grep -q 'that is clshim-warm-dc here: 4.50 ms' "$TMP/gpu/report.md" || { cat "$TMP/gpu/report.md"; fail "clshim-warm-dc"; }
ok "report.py: the modes defined, clshim-warm-dc when measured, the GPU caption"

# 3. --docs rewrites only what lies between the markers.
cp "$CLSHIM_ROOT/docs/benchmarks.md" "$TMP/page.md"
"$PY" "$CLSHIM_ROOT/bench/report.py" "$TMP/in.csv" "$TMP/meta.txt" "$TMP/out2" --docs "$TMP/page.md" >/dev/null ||
    fail "report.py --docs failed (markers missing in docs/benchmarks.md?)"
strip() { sed '/^<!-- BEGIN GENERATED/,/^<!-- END GENERATED/d' "$1"; }
cmp -s <(strip "$CLSHIM_ROOT/docs/benchmarks.md") <(strip "$TMP/page.md") || fail "--docs changed text outside the markers"
grep -q '^| mixed | clshim-warm | 36.0' "$TMP/page.md" || fail "--docs did not write the report"
grep -q '](img/bench-' "$TMP/page.md" || grep -q 'matplotlib missing' "$TMP/page.md" || fail "--docs: plot links"
ok "report.py --docs: the generated section replaced, the rest of the page untouched"

# 4. A CSV with no rows is an error, not an empty report.
: >"$TMP/empty.csv"
if "$PY" "$CLSHIM_ROOT/bench/report.py" "$TMP/empty.csv" "$TMP/meta.txt" "$TMP/out3" 2>/dev/null; then
    fail "report.py accepted an empty CSV"
fi
ok "report.py refuses an empty CSV"
finish
