#!/bin/bash
# Route (a): SPIR modules (clshim's IR of OpenCL C, the SPIR-V translator's
# output, fused modules) as PTX for NVIDIA's driver, checked structurally
# here: where the CUDA toolkit is installed (it is no Debian package: a clean
# Debian root has none), its ptxas must assemble every output for sm_90 and
# its libdevice supplies CUDA's math functions; without ptxas each output's
# PTX header and structure are checked instead, and without libdevice the
# functions it would supply must be refused. Everywhere, the kernels, their
# parameters' state spaces and the work-item registers must be NVIDIA's (as
# its own compiler writes them). The GPU comparison is
# tests/compat/nvidia_builtins.sh.
source "$(dirname "$0")/lib.sh"
PTXAS=${PTXAS:-$(command -v ptxas || echo "${CUDA_HOME:-/usr/local/cuda}/bin/ptxas")}
LIBDEVICE=${CUDA_HOME:-/usr/local/cuda}/nvvm/libdevice/libdevice.10.bc
if [ -x "$PTXAS" ]; then HAVE_PTXAS=1; else HAVE_PTXAS=0; fi
if [ -r "$LIBDEVICE" ]; then HAVE_LIBDEVICE=1; else HAVE_LIBDEVICE=0; fi
echo "test_ptx: ptxas $([ $HAVE_PTXAS = 1 ] && echo "$PTXAS" || echo "not installed: structure checked, not assembled");" \
     "libdevice $([ $HAVE_LIBDEVICE = 1 ] && echo "$LIBDEVICE" || echo "not installed: its functions must be refused")"
CLSHIM=$CLSHIM_BUILD/clshim
DATA=$CLSHIM_ROOT/tests/integration/data
assemble() { # FILE WHAT
    if [ $HAVE_PTXAS = 1 ]; then
        "$PTXAS" -arch=sm_90 "$1" -o "$TMP/out.cubin" 2>"$TMP/ptxas.err" ||
            fail "$2: ptxas rejects it: $(head -3 "$TMP/ptxas.err")"
        return
    fi
    grep -q '^\.version [0-9]' "$1" && grep -q '^\.target sm_' "$1" && grep -q '^\.address_size 64' "$1" ||
        fail "$2: no PTX header (.version, .target, .address_size 64)"
    [ "$(tr -cd '{' <"$1" | wc -c)" = "$(tr -cd '}' <"$1" | wc -c)" ] || fail "$2: unbalanced braces in its PTX"
    grep -q '^\(\.visible \)\?\.entry ' "$1" || fail "$2: no kernel entry"
}
params() { # FILE KERNEL: the kernel's parameter lines, one per line, names dropped
    awk -v k="$2" '$0 ~ "^.entry " k "\\(" { on = 1; next } on && /^\)/ { exit } on { sub(/[ \t]+[A-Za-z_0-9]+_param_[0-9]+,?$/, ""); gsub(/^[ \t]+/, ""); print }' "$1"
}

# 1. SPIR-V integration programs: translated, retargeted, assembled.
for f in features spec; do
    clang-15 -x cl -target spir64 -cl-std=CL1.2 -emit-llvm -c -Xclang -no-opaque-pointers \
        "$DATA/$f.cl" -o "$TMP/$f.bc"
    llvm-spirv-15 "$TMP/$f.bc" -o "$TMP/$f.spv"
done
"$CLSHIM" ptx --sm 90 --builtins=vendor-differs-ok -o "$TMP/features.ptx" "$TMP/features.spv" 2>"$TMP/features.err" ||
    fail "features.spv: $(cat "$TMP/features.err")"
assemble "$TMP/features.ptx" features.spv
grep -q '^\.target sm_86, texmode_independent$' "$TMP/features.ptx" || fail "features: not OpenCL-style PTX for sm_86"
[ "$(grep -c '^\.entry ' "$TMP/features.ptx")" = 4 ] || fail "features: expected 4 kernels"
[ "$(params "$TMP/features.ptx" block_sum | tr '\n' '|')" = \
  ".param .u64 .ptr .global .align 4|.param .u64 .ptr .global .align 4|.param .u64 .ptr .shared .align 4|" ] ||
    fail "block_sum: parameters $(params "$TMP/features.ptx" block_sum | tr '\n' '|')"
[ "$(params "$TMP/features.ptx" with_struct | tr '\n' '|')" = ".param .u64 .ptr .global .align 4|.param .align 4 .b8 with_struct_param_1[8]|" ] ||
    fail "with_struct: a struct by value: $(params "$TMP/features.ptx" with_struct | tr '\n' '|')"
grep -q 'bar.sync' "$TMP/features.ptx" || fail "block_sum: its barrier is gone"
grep -q '_Z4sqrtd' "$TMP/features.err" || fail "features: sqrt(double) was not named as differing"
ok "SPIR-V features.spv: 4 kernels, __local as .ptr .shared, a struct by value, assembled by ptxas"
"$CLSHIM" ptx --sm 90 -o "$TMP/spec.ptx" "$TMP/spec.spv"
assemble "$TMP/spec.ptx" spec.spv
grep -q '^\.entry spec(' "$TMP/spec.ptx" && grep -q '^\.entry spec_add(' "$TMP/spec.ptx" || fail "spec: kernels missing"
grep -q 'add.s32.*42;\|, 42;' "$TMP/spec.ptx" || fail "spec: the constant's default 42 is not in the code"
ok "SPIR-V spec.spv: both kernels, the specialisation constant's default applied, assembled"

# 2. The fusion test programs: every kernel of the program, and a fused chain.
"$PROGS/fusion_source" --print-source >"$TMP/fs.cl"
"$CLSHIM" ptx --builtins=vendor-differs-ok -o "$TMP/fs.ptx" "$TMP/fs.cl" 2>/dev/null || fail "fusion_source: no PTX"
assemble "$TMP/fs.ptx" fusion_source
for k in e1 e2 e3 e4 up root; do grep -q "^\.entry $k(" "$TMP/fs.ptx" || fail "fusion_source: kernel $k missing"; done
# NVIDIA's work-item convention: the global offset from %envreg3, the number of groups from %envreg6.
grep -q 'mov.u32 %r[0-9]*, %envreg3;' "$TMP/fs.ptx" || fail "get_global_id ignores the global offset"
ok "fusion_source: every kernel, get_global_id with NVIDIA's global offset, assembled"
"$CLSHIM" fuse --plan "e1+e2+e3+e4" --emit=ptx "$TMP/fs.cl" >"$TMP/f4.ptx" 2>"$TMP/f4.err" || fail "fuse --emit=ptx: $(cat "$TMP/f4.err")"
assemble "$TMP/f4.ptx" "fused e1..e4"
[ "$(grep -c '^\.entry ' "$TMP/f4.ptx")" = 1 ] || fail "fused: expected the fused kernel alone"
[ "$(params "$TMP/f4.ptx" clshim_fused | tr '\n' '|')" = \
  ".param .u64 .ptr .global .align 4|.param .u64 .ptr .global .align 4|.param .u64 .ptr .global .align 4|.param .u64 .ptr .global .align 4|.param .f32|.param .u64 .ptr .global .align 4|" ] ||
    fail "fused: parameters $(params "$TMP/f4.ptx" clshim_fused | tr '\n' '|')"
[ ! -s "$TMP/f4.err" ] || fail "fused: unexpected messages: $(cat "$TMP/f4.err")"
ok "clshim fuse --emit=ptx: one fused kernel with the 6 parameters of route (b), assembled"
"$PROGS/fusion_chain" --print-source >"$TMP/fc.cl" 2>/dev/null && {
    "$CLSHIM" fuse --plan "offset+scale+square" --emit=ptx "$TMP/fc.cl" >"$TMP/f3.ptx" 2>/dev/null || fail "fusion_chain: no fused PTX"
    assemble "$TMP/f3.ptx" "fused offset+scale+square"
    ok "fusion_chain: offset+scale+square fused to PTX, assembled"
}

# 3. Built-ins: what is matched to NVIDIA's (tests/compat/nvidia_builtins.sh)
# builds and is lowered as NVIDIA lowers it; anything else is refused unless
# opted in; the options select the mode.
kernel() { # NAME EXPR: a one-line kernel file $TMP/NAME.cl
    printf '__kernel void k(__global float *x, __global float4 *v) { size_t i = get_global_id(0); float a = x[i], b = x[i + 1]; (void)b; x[i] = %s; }\n' "$2" >"$TMP/$1.cl"
}
lowered() { # NAME OPTIONS PATTERN: builds unopted, assembles, shows PATTERN
    "$CLSHIM" ptx --options "$2" -o "$TMP/$1.ptx" "$TMP/$1.cl" 2>"$TMP/$1.err" || fail "$1 ($2): $(cat "$TMP/$1.err")"
    assemble "$TMP/$1.ptx" "$1"
    grep -q -- "$3" "$TMP/$1.ptx" || fail "$1 ($2): no '$3' in its PTX"
}
refused() { # NAME OPTIONS BUILTINS: refused, naming BUILTINS, no PTX
    set +e
    "$CLSHIM" ptx --options "$2" "$TMP/$1.cl" >"$TMP/$1.ptx" 2>"$TMP/$1.err"; local rc=$?
    set -e
    [ "$rc" = 1 ] || fail "$1 ($2): expected a refusal (exit 1), got $rc"
    grep -qx "clshim ptx: refused: built-ins whose results differ from NVIDIA's compile: $3" "$TMP/$1.err" ||
        fail "$1 ($2): refusal reason: $(cat "$TMP/$1.err")"
    [ ! -s "$TMP/$1.ptx" ] || fail "$1 ($2): PTX printed although refused"
}
kernel div 'a / b'; lowered div "" 'div.full.f32'
lowered div "-cl-denorms-are-zero" 'div.full.ftz.f32'
lowered div "-cl-fast-relaxed-math" 'div.approx.ftz.f32'
kernel recip '1.0f / a'; lowered recip "" 'rcp.approx.f32'
kernel sqrt 'sqrt(a)'; lowered sqrt "-cl-denorms-are-zero" 'sqrt.approx.f32'
kernel rsqrt 'rsqrt(a)'; lowered rsqrt "-cl-denorms-are-zero" 'rsqrt.approx.ftz.f32'
kernel fma 'fma(a, b, a)'; lowered fma "-cl-fast-relaxed-math" 'fma.rn.f32'
kernel nexp 'native_exp(a)'; lowered nexp "" 'ex2.approx.f32'
kernel fexp 'exp(a)'; lowered fexp "-cl-fast-relaxed-math" 'ex2.approx.ftz.f32'
ok "matched built-ins lowered as NVIDIA does: / div.full (.ftz, approx when fast), 1/x rcp.approx, sqrt/rsqrt/native_exp approx, fma never flushed"
kernel pow 'pow(a, b)'; refused pow "" _Z3powff
kernel expm1 'expm1(a)'; refused expm1 "" _Z5expm1f
if [ $HAVE_LIBDEVICE = 1 ]; then lowered expm1 "-cl-denorms-are-zero" 'ex2.approx.ftz.f32'
else refused expm1 "-cl-denorms-are-zero" _Z5expm1f; fi
kernel powr 'powr(a, b)'; refused powr "" _Z4powrff
lowered powr "-cl-fast-relaxed-math" 'lg2.approx.f32'
kernel vdiv '(v[i] = v[i] / v[i + 1]).x'; refused vdiv "" "fdiv <N x float> (1)"
kernel vsqrt '(v[i] = sqrt(v[i])).x'; refused vsqrt "" "_Z4sqrtDv4_f"
ok "unmatched built-ins refused by name, per mode: pow; expm1 and powr only where they differ; vector / and vector sqrt"
kernel exp 'exp(a)'
[ $HAVE_LIBDEVICE = 1 ] && lowered exp "" 'fma.rm.f32'
    set +e
    "$CLSHIM" ptx --libdevice "" "$TMP/exp.cl" >/dev/null 2>"$TMP/exp-nolib.err"; rc=$?
    set -e
    [ "$rc" = 1 ] && grep -q "refused: .*_Z3expf" "$TMP/exp-nolib.err" || fail "exp without libdevice: not refused (rc $rc)"
    ok "exp: CUDA's code from libdevice$([ $HAVE_LIBDEVICE = 1 ] || echo " (not installed here)"); without libdevice it is refused"
"$CLSHIM" ptx --builtins=vendor-differs-ok "$TMP/pow.cl" >"$TMP/pow.ptx" 2>"$TMP/pow.err" || fail "pow: the opt-in did not build it"
assemble "$TMP/pow.ptx" "pow with the opt-in"
grep -q "1 built-ins whose results differ from NVIDIA's compile: _Z3powff" "$TMP/pow.err" || fail "pow: the opt-in did not name it"
printf '__kernel void k(__global float *x) { x[0] = undefined_thing; }\n' >"$TMP/bad.cl"
set +e
"$CLSHIM" ptx "$TMP/bad.cl" >/dev/null 2>"$TMP/bad.err"; rc=$?
set -e
[ "$rc" = 1 ] && grep -q "does not compile" "$TMP/bad.err" || fail "bad source: rc $rc, $(cat "$TMP/bad.err")"
ok "opt-in --builtins=vendor-differs-ok builds and names the differing built-in; a bad source is reported"
finish
