/* chain4.cl — a K = 4 elementwise chain (the last step a sqrt) for
 * tests/compat/nvidia_route_a.sh: s0..s3 as an app would launch them, and
 * handreg4, the same chain written by hand as one kernel with the
 * intermediates in registers. Parameter names chain (s0 writes b1, s1 reads
 * it), which is how `clshim fuse` matches arguments offline. */
__kernel void s0(__global const float *b0, __global float *b1, float a0, float c0) { size_t i = get_global_id(0); b1[i] = b0[i] * a0 + c0; }
__kernel void s1(__global const float *b1, __global float *b2, float a1, float c1) { size_t i = get_global_id(0); b2[i] = b1[i] * a1 + c1; }
__kernel void s2(__global const float *b2, __global float *b3, float a2, float c2) { size_t i = get_global_id(0); b3[i] = b2[i] * a2 + c2; }
__kernel void s3(__global const float *b3, __global float *b4, float a3, float c3) { size_t i = get_global_id(0); b4[i] = sqrt(b3[i]) * a3 + c3; }
__kernel void handreg4(__global const float *b0, __global float *b1, __global float *b2, __global float *b3,
                       __global float *b4, float a0, float c0, float a1, float c1, float a2, float c2, float a3, float c3)
{
    size_t i = get_global_id(0);
    float v = b0[i] * a0 + c0;
    v = v * a1 + c1;
    v = v * a2 + c2;
    b4[i] = sqrt(v) * a3 + c3;
}
