/* fusion_const — kernel chains with scalar arguments of several types, for
 * the `const` fusion option (constant propagation), and a 2-D kernel
 * followed by a 1-D one over the same elements. Plain OpenCL (knows nothing
 * of clshim). After each iteration it prints one line per buffer, "IT NAME
 * HASH" (FNV-1a of the buffer's bytes: exact bit patterns), so a test sees
 * which values every iteration's launch used.
 *   fusion_const --mode M [--iterations N] [--n N] [--values same|alternate|new] [--ext 1]
 * Modes:
 *   chain    c1 c2 c3: in -> t1 -> t2 -> out; scalars: float a, float b,
 *            int k, uchar m, float4 v, long l, and a float that is 0.1f
 *            (not exactly representable: bakes must keep its bits)
 *   dims     d2 (2-D, 64 x n/64, row-major: t1[y * 64 + x]) then d1 (1-D, n):
 *            in -> t1 -> out
 *   transposed  d2t (the same range, column-major: t1[x * n/64 + y]) then d1
 *   dims-local  d2 and d1 with local sizes (64 x 1 and 64)
 * --values: same (every iteration the same scalars), alternate (two sets,
 * even and odd iterations), new (a new set every iteration).
 * --ext 1: each chain runs between clStartFusionCLSHIM and
 * clCompleteFusionCLSHIM with CL_FUSION_CONST_CLSHIM (when the extension is
 * there; without clshim the chain simply runs).
 */
#include <stdint.h>

#define CL_TARGET_OPENCL_VERSION 300
#include "CL/clshim_ext.h"
#include "common.h"

static const char *source =
    "__kernel void c1(__global const float *in, __global float *t1, float a, float b, int k) {\n"
    "    size_t i = get_global_id(0); t1[i] = in[i] * a + b * (float)k; }\n"
    "__kernel void c2(__global const float *t1, __global float *t2, uchar m, float4 v, float tenth) {\n"
    "    size_t i = get_global_id(0); t2[i] = (t1[i] + v.x) * v.y - v.z / v.w + (float)m * tenth; }\n"
    "__kernel void c3(__global const float *t2, __global float *out, long l, float a) {\n"
    "    size_t i = get_global_id(0); out[i] = t2[i] * a + (float)(l % 1000); }\n"
    "__kernel void d2(__global const float *in, __global float *t1, float s) {\n"
    "    size_t i = get_global_id(1) * get_global_size(0) + get_global_id(0); t1[i] = in[i] * s; }\n"
    "__kernel void d1(__global const float *t1, __global float *out, float s) {\n"
    "    size_t i = get_global_id(0); out[i] = t1[i] + s; }\n"
    "__kernel void d2t(__global const float *in, __global float *t1, float s) {\n"
    "    size_t i = get_global_id(0) * get_global_size(1) + get_global_id(1); t1[i] = in[i] * s; }\n";

enum { IN, T1, T2, OUT, NBUF };
static const char *const buf_name[NBUF] = {"in", "t1", "t2", "out"};

static const char *const kernel_name[] = {"c1", "c2", "c3", "d2", "d1", "d2t"};
#define NKERNELS (sizeof kernel_name / sizeof kernel_name[0])
static cl_kernel kernels[NKERNELS]; /* kept until the end: releasing one ends fusion's hold */
static cl_mem bufs[NBUF];

static cl_kernel kernel(const char *name)
{
    for (size_t i = 0; i < NKERNELS; i++)
        if (!strcmp(kernel_name[i], name)) return kernels[i];
    exit(2);
}

static void set_mem(cl_kernel k, cl_uint at, int buf) { CHECK(clSetKernelArg(k, at, sizeof(cl_mem), &bufs[buf])); }


int main(int argc, char **argv)
{
    const char *mode = "chain", *values = "same";
    int iterations = 2, ext = 0;
    size_t n = 4096;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--mode")) mode = argv[i + 1];
        else if (!strcmp(argv[i], "--iterations")) iterations = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--n")) n = (size_t)strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--values")) values = argv[i + 1];
        else if (!strcmp(argv[i], "--ext")) ext = atoi(argv[i + 1]);
    }
    cl_platform_id platform;
    first_device(&platform);
    clStartFusionCLSHIM_fn start_fusion = NULL;
    clCompleteFusionCLSHIM_fn complete_fusion = NULL;
    if (ext) fusion_ext_lookup(platform, &start_fusion, &complete_fusion);
    cl_device_id dev;
    cl_context ctx;
    cl_command_queue q;
    cl_int err;
    first_context_queue(&dev, &ctx, &q);
    cl_program prog = clCreateProgramWithSource(ctx, 1, &source, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(prog, 1, &dev, "", NULL, NULL));
    for (size_t i = 0; i < NKERNELS; i++) {
        kernels[i] = clCreateKernel(prog, kernel_name[i], &err);
        CHECK(err);
    }
    float *host = calloc(n, sizeof *host);
    for (int b = 0; b < NBUF; b++) {
        for (size_t i = 0; i < n; i++) host[i] = b == IN ? (float)i * 0.37f - 11.0f : 0.0f;
        bufs[b] = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, n * sizeof *host, host, &err);
        CHECK(err);
    }
    for (int it = 0; it < iterations; it++) {
        int set = !strcmp(values, "alternate") ? it % 2 : !strcmp(values, "new") ? it : 0;
        float a = 1.25f + 0.1f * (float)set, b = -0.0f - (float)set, tenth = 0.1f;
        cl_int k = 3 - 7 * set;
        cl_uchar m = (cl_uchar)(200 + set);
        cl_float4 v = {{0.5f + (float)set, 1.0f / 3.0f, 1e-3f * (float)(set + 1), 7.0f}};
        cl_long l = 123456789012345ll * (set + 1);
        if (start_fusion && complete_fusion) CHECK(start_fusion(q));
        if (!strcmp(mode, "chain")) {
            cl_kernel c1 = kernel("c1"), c2 = kernel("c2"), c3 = kernel("c3");
            set_mem(c1, 0, IN), set_mem(c1, 1, T1);
            CHECK(clSetKernelArg(c1, 2, sizeof a, &a));
            CHECK(clSetKernelArg(c1, 3, sizeof b, &b));
            CHECK(clSetKernelArg(c1, 4, sizeof k, &k));
            CHECK(clEnqueueNDRangeKernel(q, c1, 1, NULL, &n, NULL, 0, NULL, NULL));
            set_mem(c2, 0, T1), set_mem(c2, 1, T2);
            CHECK(clSetKernelArg(c2, 2, sizeof m, &m));
            CHECK(clSetKernelArg(c2, 3, sizeof v, &v));
            CHECK(clSetKernelArg(c2, 4, sizeof tenth, &tenth));
            CHECK(clEnqueueNDRangeKernel(q, c2, 1, NULL, &n, NULL, 0, NULL, NULL));
            set_mem(c3, 0, T2), set_mem(c3, 1, OUT);
            CHECK(clSetKernelArg(c3, 2, sizeof l, &l));
            CHECK(clSetKernelArg(c3, 3, sizeof a, &a));
            CHECK(clEnqueueNDRangeKernel(q, c3, 1, NULL, &n, NULL, 0, NULL, NULL));
        } else if (!strcmp(mode, "dims") || !strcmp(mode, "transposed") || !strcmp(mode, "dims-local")) {
            cl_kernel d2 = kernel(strcmp(mode, "transposed") ? "d2" : "d2t"), d1 = kernel("d1");
            int local = !strcmp(mode, "dims-local");
            size_t gws2[2] = {64, n / 64}, lws2[2] = {64, 1}, lws1 = 64;
            set_mem(d2, 0, IN), set_mem(d2, 1, T1);
            CHECK(clSetKernelArg(d2, 2, sizeof a, &a));
            CHECK(clEnqueueNDRangeKernel(q, d2, 2, NULL, gws2, local ? lws2 : NULL, 0, NULL, NULL));
            set_mem(d1, 0, T1), set_mem(d1, 1, OUT);
            CHECK(clSetKernelArg(d1, 2, sizeof b, &b));
            CHECK(clEnqueueNDRangeKernel(q, d1, 1, NULL, &n, local ? &lws1 : NULL, 0, NULL, NULL));
        } else {
            fprintf(stderr, "unknown mode %s\n", mode);
            return 2;
        }
        if (start_fusion && complete_fusion) {
            cl_fusion_properties_clshim props[] = {CL_FUSION_CONST_CLSHIM, 1, 0};
            CHECK(complete_fusion(q, props, NULL));
        }
        for (int buf = 0; buf < NBUF; buf++) {
            CHECK(clEnqueueReadBuffer(q, bufs[buf], CL_TRUE, 0, n * sizeof *host, host, 0, NULL, NULL));
            printf("%d %s %016llx\n", it, buf_name[buf],
                   (unsigned long long)fnv((const unsigned char *)host, n * sizeof *host));
        }
    }
    for (int b = 0; b < NBUF; b++) clReleaseMemObject(bufs[b]);
    free(host);
    for (size_t i = 0; i < NKERNELS; i++) clReleaseKernel(kernels[i]);
    clReleaseProgram(prog);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
    return 0;
}
