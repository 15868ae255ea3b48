/* builtins.cl — one kernel per float built-in, for tests/compat/nvidia_builtins.sh:
 * o[i] = F(a[i], b[i], c[i]) with every value passed as its bits, so one host
 * program runs them all and compares NVIDIA's own compile with route (a)'s PTX
 * bit for bit. Kernel names: f_* give a float, i_* an int; the name is the
 * built-in (an operator is spelled out). */
#define K(name, type, expr)                                                                   \
    __kernel void name(__global uint *o, __global const uint *A, __global const uint *B,      \
                       __global const uint *C)                                                \
    {                                                                                         \
        size_t i = get_global_id(0) - get_global_offset(0);                                  \
        float a = as_float(A[i]), b = as_float(B[i]), c = as_float(C[i]);                   \
        int ia = as_int(A[i]);                                                               \
        (void)a; (void)b; (void)c; (void)ia;                                                  \
        o[i] = as_uint((type)(expr));                                                         \
    }
#define F(name, expr) K(f_##name, float, expr)
#define I(name, expr) K(i_##name, int, expr)

F(add, a + b)
F(sub, a - b)
F(mul, a * b)
F(div, a / b)
F(recip, 1.0f / a)
F(contract, a * b + c)
F(sqrt, sqrt(a))
F(rsqrt, rsqrt(a))
F(fma, fma(a, b, c))
F(mad, mad(a, b, c))
F(exp, exp(a))
F(exp2, exp2(a))
F(exp10, exp10(a))
F(expm1, expm1(a))
F(log, log(a))
F(log2, log2(a))
F(log10, log10(a))
F(log1p, log1p(a))
F(sin, sin(a))
F(cos, cos(a))
F(tan, tan(a))
F(asin, asin(a))
F(acos, acos(a))
F(atan, atan(a))
F(atan2, atan2(a, b))
F(sinh, sinh(a))
F(cosh, cosh(a))
F(tanh, tanh(a))
F(pow, pow(a, b))
F(powr, powr(a, b))
F(pown, pown(a, (int)b))
F(cbrt, cbrt(a))
F(hypot, hypot(a, b))
F(fmod, fmod(a, b))
F(native_sqrt, native_sqrt(a))
F(native_rsqrt, native_rsqrt(a))
F(native_recip, native_recip(a))
F(native_divide, native_divide(a, b))
F(native_exp, native_exp(a))
F(native_exp2, native_exp2(a))
F(native_exp10, native_exp10(a))
F(native_log, native_log(a))
F(native_log2, native_log2(a))
F(native_log10, native_log10(a))
F(native_sin, native_sin(a))
F(native_cos, native_cos(a))
F(native_tan, native_tan(a))
F(native_powr, native_powr(a, b))
F(half_sqrt, half_sqrt(a))
F(half_rsqrt, half_rsqrt(a))
F(half_recip, half_recip(a))
F(half_divide, half_divide(a, b))
F(half_exp, half_exp(a))
F(half_exp2, half_exp2(a))
F(half_log, half_log(a))
F(half_log2, half_log2(a))
F(half_sin, half_sin(a))
F(half_cos, half_cos(a))
F(half_tan, half_tan(a))
F(half_powr, half_powr(a, b))
F(fabs, fabs(a))
F(floor, floor(a))
F(ceil, ceil(a))
F(trunc, trunc(a))
F(round, round(a))
F(rint, rint(a))
F(fmin, fmin(a, b))
F(fmax, fmax(a, b))
F(min, min(a, b))
F(max, max(a, b))
F(clamp, clamp(a, b, c))
F(copysign, copysign(a, b))
F(mix, mix(a, b, c))
F(sign, sign(a))
F(convert_float, convert_float(ia))
F(convert_float_rtz, convert_float_rtz(ia))
I(convert_int, convert_int(a))
I(convert_int_rte, convert_int_rte(a))
I(convert_int_sat, convert_int_sat(a))
I(convert_uint, (int)convert_uint(a))

/* work-item functions, launched with a global offset and a local size */
__kernel void w_workitem(__global uint *o, __global const uint *A, __global const uint *B, __global const uint *C)
{
    size_t i = get_global_id(0) - get_global_offset(0);
    o[i] = (uint)get_global_id(0) ^ ((uint)get_global_size(0) << 3) ^ ((uint)get_local_id(0) << 7) ^
           ((uint)get_group_id(0) << 11) ^ ((uint)get_num_groups(0) << 17) ^ ((uint)get_local_size(0) << 23) ^
           (uint)get_global_offset(0);
}
