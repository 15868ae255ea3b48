/* Kernels for the SPIR-V tests: local memory and barriers, vector types, a
 * struct argument and double. Contraction off: the source and SPIR-V paths
 * must agree bit for bit. */
#pragma OPENCL FP_CONTRACT OFF
#pragma OPENCL EXTENSION cl_khr_fp64 : enable

typedef struct { float scale; int shift; } params_t;

__kernel void block_sum(__global const float *in, __global float *out, __local float *tmp) {
    size_t l = get_local_id(0), n = get_local_size(0);
    tmp[l] = in[get_global_id(0)];
    for (size_t s = n / 2; s > 0; s /= 2) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (l < s) tmp[l] += tmp[l + s];
    }
    if (l == 0) out[get_group_id(0)] = tmp[0];
}

__kernel void vec4(__global const float4 *in, __global float4 *out) {
    size_t i = get_global_id(0);
    float4 v = in[i];
    out[i] = v * (float4)(1.0f, 2.0f, 3.0f, 4.0f) + v.wzyx;
}

__kernel void with_struct(__global float *y, params_t p) {
    size_t i = get_global_id(0);
    y[i] = y[i] * p.scale + (float)((int)i >> p.shift);
}

__kernel void dbl(__global const double *in, __global double *out) {
    size_t i = get_global_id(0);
    out[i] = sqrt(in[i]) * 1.5 + in[i] / 3.0;
}
